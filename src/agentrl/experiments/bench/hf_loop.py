"""Our lockstep engine vs a plain ``transformers`` agent loop, on the same ``HFPolicy`` GPT-2.

The plain loop is the strongest one ``transformers`` offers out of the box: each turn, every live
episode's conversation so far is left-padded into ONE batched ``model.generate`` call (sampling,
its own key/value cache, position ids from the attention mask), the sampled calls are cut at the
stop token and sent to the envs, and their replies are appended to the conversations. No cache is
kept across turns, so every turn re-reads every conversation from its first token.

Our engine (``rollout_batch``) keeps one key/value cache for the whole episode and prefills only the
new tool replies. ``bench_engine_vs_generate`` times both on the same policy and episodes, interleaved
(one warm-up each, then rounds of engine and loop, reversed every other round): ``hf_engine_vs_generate_loop``
is the median of the per-round episodes/s ratios. Both loops render through the same renderer (so their
trajectories are directly comparable).
"""
from __future__ import annotations

import time

import torch

from ..chapter15.env_registry import DEFAULT, get_env
from ...envs.play import EpisodeState
from ...rendering.protocols import as_renderer
from ...rendering.trajectory import Trajectory

CHAPTER = get_env(DEFAULT)
"""The chapter's workload: the BugFix gym (its tasks, players and tokenizer)."""


@torch.no_grad()
def generate_loop_rollout(policy, envs, tasks, tok, temperature: float = 1.0, seed: int = 0) -> list[Trajectory]:
    """Play one episode per (env, task) with ``policy.model.generate`` once per turn -> trajectories.

    Rendered through the same renderer as ``rollout_batch`` (our word-level layout for our tokenizer).
    Sampling uses torch's global generator, seeded with ``seed``; ``logprobs`` are not recorded (0). ``generate`` runs
    in the policy's precision (its autocast), as our engine does. Each turn is ``envs.play.EpisodeState.step``, as
    in our engine and scripted play: an episode's reward is its return, the sum of every step's reward."""
    renderer = as_renderer(tok)
    model = policy.model
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    envs, tasks = list(envs), list(tasks)
    B = len(envs)
    episodes = [renderer.new_episode(env) for env in envs]
    states = [EpisodeState(env, task) for env, task in zip(envs, tasks)]  # each turn is scripted play's own
    convs = [list(ep.prompt(state.episode.prompt)) for ep, state in zip(episodes, states)]
    results: list[Trajectory | None] = [None] * B
    live = list(range(B))
    stop, pad = renderer.stop_id, renderer.pad_id
    while live:
        limit = max(renderer.call_limit(envs[b]) for b in live)
        L = max(len(convs[b]) for b in live)
        ids = torch.full((len(live), L), pad, dtype=torch.long)
        mask = torch.zeros(len(live), L, dtype=torch.long)
        for i, b in enumerate(live):  # left padding: every row's last token is the last column
            n = len(convs[b])
            ids[i, L - n:] = torch.tensor(convs[b])
            mask[i, L - n:] = 1
        with policy.precision.autocast():  # an HFPolicy's precision, as our engine runs it
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature, top_k=0,
                                 top_p=1.0, max_new_tokens=limit, eos_token_id=stop, pad_token_id=pad, use_cache=True)
        new = out[:, L:].tolist()
        keep = []
        for i, b in enumerate(live):
            row = new[i][:renderer.call_limit(envs[b])]
            call = row[:row.index(stop) + 1] if stop in row else row  # up to its stop token
            episodes[b].call(call)
            obs = states[b].step(renderer.call_text(call))
            reply = episodes[b].reply(obs, final=states[b].done) if obs else []
            if states[b].done:
                results[b] = episodes[b].finish(states[b].episode)
            else:
                convs[b] += call + list(reply)
                keep.append(b)
        live = keep
    model.train(was_training)
    return results


def trained_gpt2(tok, weak_play, demos, weak_steps: int, sft_steps: int, log=print):
    """The benchmark's GPT-2 ``HFPolicy``: the TinyAgent's shape, then section 15.2's weak base and oracle SFT."""
    from ...policies.hf import make_policy
    from ...recipes.sft import sft_train
    torch.manual_seed(0)
    model = make_policy('gpt2', tok)
    t0 = time.perf_counter()
    sft_train(model, weak_play, tok, steps=weak_steps, seed=0)
    sft_train(model, demos, tok, steps=sft_steps, seed=0)
    log(f'setup: HFPolicy GPT-2, weak base {weak_steps} steps + oracle SFT {sft_steps} steps in '
        f'{time.perf_counter() - t0:.1f} s')
    return model


def bench_engine_vs_generate(model, tasks, tok, repeats: int, seed: int = 0) -> dict:
    """Episodes/s of ``rollout_batch`` and of ``generate_loop_rollout`` on the same policy and tasks, interleaved.

    One warm-up call of each, then ``repeats`` rounds (engine, loop; reversed every other round): the
    ratio is the median of the per-round pair ratios (``timing.timed_interleaved`` and ``timing.pair_ratio``)."""
    from ...rollouts.engine import rollout_batch
    from .timing import pair_ratio, timed_interleaved

    def ours():
        return rollout_batch(model, [CHAPTER.make() for _ in tasks], tasks, tok,
                             generator=torch.Generator().manual_seed(seed))

    def theirs():
        return generate_loop_rollout(model, [CHAPTER.make() for _ in tasks], tasks, tok, seed=seed)

    s = timed_interleaved({'engine': ours, 'generate_loop': theirs}, repeats)
    t_ours, t_gen = s['out']['engine'], s['out']['generate_loop']

    def stats(trajs, name):
        sec = s['median'][name]
        return {'seconds': sec, 'seconds_all': s['seconds'][name], 'episodes': len(trajs),
                'episodes_per_s': len(trajs) / sec, 'tokens_per_s': sum(len(t) for t in trajs) / sec,
                'pass_rate': sum(t.reward for t in trajs) / len(trajs),
                'mean_turns': sum(len(t.info['actions']) for t in trajs) / len(trajs),
                'mean_tokens': sum(len(t) for t in trajs) / len(trajs)}

    engine, loop = stats(t_ours, 'engine'), stats(t_gen, 'generate_loop')
    ratio = pair_ratio(s, 'generate_loop', 'engine', len(t_ours) / len(t_gen))  # episodes/s ours / theirs
    return {'engine': engine, 'generate_loop': loop, 'ratio': ratio['median'],
            'ratios': {'hf_engine_vs_generate_loop': ratio}, 'order': s['order'],
            'arch': model.arch, 'parameters': sum(p.numel() for p in model.parameters())}


def run(tok, train, weak_play, weak_steps: int, sft_steps: int, repeats: int, episodes_per_task: int,
        log=print) -> dict:
    """The benchmark's ``hf_engine_vs_generate_loop`` items: a fresh GPT-2 ``HFPolicy`` (episodes run to the turn
    limit) and one trained as ``workloads.build_models`` trains the TinyAgent (weak base, then oracle SFT: short
    episodes), each played on ``episodes_per_task`` episodes of every train task by both loops."""
    from ...policies.hf import make_policy
    from ...rollouts.engine import scripted_rollout
    tasks = [t for t in train for _ in range(episodes_per_task)]
    torch.manual_seed(0)
    fresh = make_policy('gpt2', tok)
    log(f'HFPolicy GPT-2 (fresh) on {len(tasks)} episodes: our lockstep engine vs one batched generate per turn, '
        f'interleaved, x (1 + {repeats}) each')
    out_fresh = bench_engine_vs_generate(fresh, tasks, tok, repeats)
    demos = [scripted_rollout(CHAPTER.player('oracle'), CHAPTER.make(), t, tok) for t in train]
    model = trained_gpt2(tok, weak_play, demos, weak_steps, sft_steps, log)
    log(f'HFPolicy GPT-2 (oracle SFT) on {len(tasks)} episodes: our lockstep engine vs one batched generate per '
        f'turn, interleaved, x (1 + {repeats}) each')
    out_sft = bench_engine_vs_generate(model, tasks, tok, repeats)
    return {'sft': out_sft, 'fresh': out_fresh}
