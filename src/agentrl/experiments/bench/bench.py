"""``agentrl bench``: rollout, cache and SFT-step throughput, side by side with a Hugging Face peer.

How things are timed: the items of one comparison are interleaved (one warm-up call each, then
``repeats`` rounds in alternating order, ABBA) and every ratio is the median of its per-round pair
ratios, with its spread (min, max, quartiles, every pair) in ``res['ratios'][key]``; the top-level
ratio keys hold that median as a float. Absolute figures (seconds, episodes/s, tokens/s) are the
median seconds of the same timed calls (``experiments/bench/timing.py``).

What is measured:

(a) ``rollout_batch`` over the 20 train tasks x 16 episodes (320, ``BugFixEnv()``, temperature 1,
    a seeded generator) from a fresh TinyAgent and from an oracle-SFT one (weak base on blind and
    random scripted play, 150 steps, then 60 steps on the 20 oracle demos, as in section 15.2):
    episodes/s, tokens/s (every token of the returned trajectories) and sampled (policy) tokens/s.
(b) ``rollout_vs_forward``: rollout seconds / seconds of ONE teacher-forced forward over the same
    trajectories (``model(collate(trajs, pad_id)['ids'])`` under ``no_grad``).
(c) ``kv_cache_speedup``: the same rollouts with ``use_cache=False`` (same model, same generator
    seed), no-cache seconds / cache seconds; the trajectories must be identical. (a)-(c) are one
    interleaved session per model (forward, rollout, no-cache). The headline figures of (b) and (c)
    are the SFT model's; ``*_fresh`` are the fresh model's (longer episodes).
(d) ``sampling_vs_hf``: our sampled policy tokens per second of rollout wall time (env and prefill
    work included) / tokens per second of ``GPT2LMHeadModel.generate`` at the same batch size,
    width, depth, heads and vocabulary (random init, nothing downloaded), generating M tokens per
    row after a prompt of our mean prompt length, M = our mean sampled tokens per episode.
    ``sampling_vs_hf_same_shape`` runs our model through the same workload (prefill, then M cached
    sampling steps, no env) to separate the model's speed from the rollout's extra work. One session:
    GPT2 with each attention implementation, our rollout, our same-shape sampling; the ratios are
    against the attention with the lower median time (each attention's ratios are kept too).
(e) ``sft_step_vs_hf``: padded tokens (B*T) per second of one masked-NLL AdamW step on 32 weak-play
    trajectories, TinyAgent (``sft_loss``) vs the same-size GPT2 (same loss from its logits).
(f) ``hf_engine_vs_generate_loop``: a GPT-2 ``HFPolicy`` of the same shape, trained as in (a), played on the
    same 320 episodes by ``rollout_batch`` (one key/value cache per episode, batched reply prefill) and by the
    plain ``transformers`` agent loop (each turn one batched, left-padded ``generate`` over every live
    conversation, its own cache, none kept across turns): episodes/s of ours / theirs (``experiments/bench/hf_loop.py``);
    ``*_fresh``: the same on the untrained GPT-2, whose episodes run to the turn limit.
(h) ``slow_env_serial_vs_pool``: a slow environment (``Waiting``: every ``reset`` and ``step`` sleeps 20 ms,
    3 calls per episode), 64 episodes of a fresh TinyAgent (``--slow-episodes``), stepped one after another and
    with ``env_workers=8`` (``--slow-workers``): serial seconds / pooled seconds, the trajectories identical
    (``experiments/bench/slow_env.py``). ``--env-workers N`` runs (a)-(c) with the pool too.
(g) How far from the physical limit: this machine's fp32 GEMM peak (a square ``torch.mm`` at the
    bench's thread count; the size, from ``gemm_sizes``, that ran fastest in a short probe) interleaved
    with one TinyAgent SFT step (as in (e)) and one cached sampling step (batch = the rollout's
    episodes, cached length = the SFT episodes' mean length: sample a token per row, feed it through
    ``forward_cached``). Their GFLOP/s count matmul FLOPs analytically (``FLOP_FORMULAS`` in
    ``experiments/bench/flops.py``), and ``*_peak_fraction`` is the median per-round GFLOP/s / GEMM GFLOP/s.

This file holds ``run``, which assembles the result dict, and ``main`` (the command); the workloads
(a)-(e) are in ``experiments/bench/workloads.py``, and the table is drawn by
``experiments/bench/bench_render.py``. ``transformers`` is optional (``pip install -e '.[bench]'``);
without it the peer rows are skipped.
"""
from __future__ import annotations

import os
import sys
import time

import torch

from ...rendering.trajectory import collate
from ...runtime.threads import torch_decides
from .bench_render import render
from .flops import bench_efficiency
from .slow_env import bench_slow_env
from .timing import METHOD, check_repeats, loadavg, machine_info
from .workloads import bench_rollout, bench_sampling, bench_sft_step, build_models, log_stderr

PEER_MISSING = ("transformers is not installed: skipping the Hugging Face peer rows "
                "(install it with: pip install -e '.[bench]')")


def have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


# --- the whole benchmark --------------------------------------------------------------------------

def run(repeats: int = 5, threads: int = 2, n_tasks: int | None = None, episodes_per_task: int = 16,
        weak_steps: int = 150, sft_steps: int = 60, sft_batch: int = 32, peer: bool = True,
        peer_attns=('sdpa', 'eager'), gemm_sizes=(1024, 2048), log=log_stderr, env_workers: int = 1,
        slow_episodes: int = 64, slow_workers: int = 8, slow_delay: float = 0.02) -> dict:
    """Run every measurement -> one dict (JSON-serialisable) with the headline ratios at the top level.

    ``threads`` sets ``torch.set_num_threads`` for the run (restored afterwards; 0 leaves it alone); the library's
    one thread for a small model (``agentrl.runtime.threads``) is off during the run, so ``threads`` is what is measured.
    ``repeats`` is the number of timed rounds per session (after one warm-up call of each item).
    The peer ratios are ``None`` when ``peer`` is false or transformers is missing.
    """
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with torch_decides():
            res = _run(repeats, threads or before, n_tasks, episodes_per_task, weak_steps, sft_steps, sft_batch, peer,
                       peer_attns, tuple(gemm_sizes), log, env_workers)
            if slow_episodes:
                log(f'slow environment: {slow_episodes} episodes x 3 calls, {slow_delay * 1000:.0f} ms a call, '
                    f'serial and {slow_workers} env workers interleaved')
                slow = bench_slow_env(slow_episodes, 3, slow_delay, slow_workers, min(repeats, 3))
                res['slow_env'], res['slow_env_serial_vs_pool'] = slow, slow['serial_vs_pool']
                res['ratios']['slow_env_serial_vs_pool'] = slow['ratio']
            return res
    finally:
        torch.set_num_threads(before)


HEADLINE = ('rollout_vs_forward', 'kv_cache_speedup', 'sampling_vs_hf', 'sampling_vs_hf_same_shape', 'sft_step_vs_hf',
            'hf_engine_vs_generate_loop', 'slow_env_serial_vs_pool')


def _run(repeats, threads, n_tasks, episodes_per_task, weak_steps, sft_steps, sft_batch, peer, peer_attns,
         gemm_sizes, log, env_workers=1):
    check_repeats(repeats)
    t_start = time.perf_counter()
    load = loadavg()
    if load is not None and load > 0.5:
        log(f'note: 1-minute load average is {load:.1f} on {os.cpu_count()} CPUs; other processes will make the '
            f'figures noisy (many small ops per rollout step make rollouts suffer most)')
    machine = machine_info(threads)
    setup = build_models(n_tasks, weak_steps, sft_steps, log)
    tok, train = setup['tok'], setup['train']
    tasks = [t for t in train for _ in range(episodes_per_task)]
    log(f'rollouts: fresh TinyAgent, forward / cached / no-cache interleaved, {len(tasks)} episodes x (1 + {repeats}) each')
    fresh = bench_rollout(setup['fresh'], tasks, tok, repeats, no_cache=True, env_workers=env_workers)
    log(f'rollouts: oracle-SFT TinyAgent, forward / cached / no-cache interleaved, {len(tasks)} episodes x (1 + {repeats}) each')
    sft = bench_rollout(setup['sft'], tasks, tok, repeats, no_cache=True, env_workers=env_workers)
    trajs = sft.pop('trajectories')
    fresh.pop('trajectories')
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(len(setup['weak_play']), (sft_batch,), generator=g).tolist()
    step_batch = collate([setup['weak_play'][i] for i in idx], tok.pad_id)
    use_peer = peer and have_transformers()
    log(f'SFT step: TinyAgent, batch {tuple(step_batch["ids"].shape)}'
        + (f', interleaved with GPT2 ({" and ".join(peer_attns)})' if use_peer else ''))
    steps = bench_sft_step(setup['sft'], tok, step_batch, repeats, peer_attns, peer=use_peer)
    cached_len = round(sft['mean_tokens'])
    log(f'GEMM peak (fp32 n x n, n in {gemm_sizes}), SFT step, cached sampling step (batch {len(tasks)}, '
        f'{cached_len} cached positions) interleaved')
    eff = bench_efficiency(setup['sft'], step_batch, len(tasks), cached_len, repeats, gemm_sizes)

    ratios = {'rollout_vs_forward': sft['ratios']['rollout_vs_forward'], 'kv_cache_speedup': sft['ratios']['kv_cache_speedup'],
              'rollout_vs_forward_fresh': fresh['ratios']['rollout_vs_forward'],
              'kv_cache_speedup_fresh': fresh['ratios']['kv_cache_speedup'], **eff['ratios']}
    res = {'rollout_vs_forward': sft['rollout_vs_forward'], 'kv_cache_speedup': sft['kv_cache_speedup'],
           'sampling_vs_hf': None, 'sft_step_vs_hf': None,
           'rollout_vs_forward_fresh': fresh['rollout_vs_forward'], 'kv_cache_speedup_fresh': fresh['kv_cache_speedup'],
           'sampling_vs_hf_same_shape': None, 'no_cache_identical': sft['no_cache_identical'] and fresh['no_cache_identical'],
           'episodes_per_s': sft['episodes_per_s'], 'tokens_per_s': sft['tokens_per_s'],
           'policy_tokens_per_s': sft['policy_tokens_per_s'],
           'gemm_peak_gflops': eff['gemm']['gflops'], 'sft_step_gflops': eff['sft_step']['gflops'],
           'sft_step_peak_fraction': eff['ratios']['sft_step_peak_fraction']['median'],
           'sampling_step_gflops': eff['sampling_step']['gflops'],
           'sampling_step_peak_fraction': eff['ratios']['sampling_step_peak_fraction']['median'],
           'method': METHOD, 'ratios': ratios,
           'rollout_fresh': fresh, 'rollout_sft': sft, 'sft_step': steps['ours'], 'efficiency': eff,
           'hf_generate': None, 'hf_sft_step': None, 'ours_same_shape': None, 'peer_skipped': None,
           'hf_sampling': None, 'hf_engine_vs_generate_loop': None, 'hf_engine_vs_generate_loop_fresh': None,
           'hf_engine': None,
           'settings': {'repeats': repeats, 'warmup_calls': 1, 'order': 'interleaved, reversed every other round (ABBA)',
                        'episodes': len(tasks), 'tasks': len(train),
                        'episodes_per_task': episodes_per_task, 'weak_steps': weak_steps, 'sft_steps': sft_steps,
                        'sft_batch': sft_batch, 'temperature': 1.0, 'gemm_sizes': list(gemm_sizes),
                        'threads': threads, 'env_workers': env_workers},
           'machine': machine}
    if peer and not use_peer:
        log(PEER_MISSING)
        res['peer_skipped'] = PEER_MISSING
    elif peer:
        M = max(1, round(sft['mean_policy_tokens']))
        L = max(1, round(sft['mean_prompt_tokens']))
        L = min(L, min(len(t) for t in trajs))
        prompt = torch.stack([t.ids[:L] for t in trajs])  # (B, L): the first L tokens of each of our episodes
        log(f'sampling: GPT2LMHeadModel.generate ({" and ".join(peer_attns)}), our rollout and our model on the same '
            f'shape (prefill {L}, then {M} cached sampling steps, batch {len(trajs)}) interleaved')
        samp = bench_sampling(setup['sft'], tasks, tok, prompt, M, repeats, peer_attns)
        ratios.update(samp['ratios'])
        ratios['sft_step_vs_hf'] = steps['ratio']
        res.update({'hf_generate': samp['hf_generate'], 'hf_sft_step': steps['hf'],
                    'ours_same_shape': samp['ours_same_shape'], 'hf_sampling': samp,
                    'sampling_vs_hf_same_shape': samp['ratios']['sampling_vs_hf_same_shape']['median'],
                    'sampling_vs_hf': samp['ratios']['sampling_vs_hf']['median'],
                    'sft_step_vs_hf': steps['ratio']['median']})
        # (f) the same HFPolicy GPT-2 through our lockstep engine vs one batched generate per turn
        from . import hf_loop
        loop = hf_loop.run(tok, train, setup['weak_play'], weak_steps, sft_steps, repeats, episodes_per_task, log)
        ratios['hf_engine_vs_generate_loop'] = loop['sft']['ratios']['hf_engine_vs_generate_loop']
        ratios['hf_engine_vs_generate_loop_fresh'] = loop['fresh']['ratios']['hf_engine_vs_generate_loop']
        res.update({'hf_engine': loop, 'hf_engine_vs_generate_loop': loop['sft']['ratio'],
                    'hf_engine_vs_generate_loop_fresh': loop['fresh']['ratio']})
    res['machine']['loadavg_1m_end'] = loadavg()
    res['total_seconds'] = time.perf_counter() - t_start
    return res


def main_pretrained(args) -> int:
    """``agentrl bench --policy SOURCE``: ``pretrained_bench.run`` at ``--threads`` (restored afterwards)."""
    import json
    from ...policies.pretrained import PretrainedError
    from . import pretrained_bench
    before = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    kw = {k: getattr(args, k) for k in ('episodes_per_task', 'sft_steps', 'sft_batch') if getattr(args, k, None)}
    try:
        res = pretrained_bench.run(args.policy, repeats=args.repeats, log=log_stderr, **kw)
    except PretrainedError as e:
        print(f'agentrl bench: error: {e}', file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(before)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2, default=float) + '\n')
    else:
        pretrained_bench.render(res)
    return 0


def main(args) -> int:
    import json
    if getattr(args, 'policy', None):
        return main_pretrained(args)
    kw = {'repeats': args.repeats, 'threads': args.threads}
    for name in ('n_tasks', 'episodes_per_task', 'weak_steps', 'sft_steps', 'sft_batch', 'env_workers', 'slow_episodes',
                 'slow_workers'):
        if getattr(args, name, None) is not None:
            kw[name] = getattr(args, name)
    if getattr(args, 'no_peer', False):
        kw['peer'] = False
    res = run(**kw)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2, default=float) + '\n')
    else:
        render(res)
    return 0
