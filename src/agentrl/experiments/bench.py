"""``agentrl bench``: rollout, cache and SFT-step throughput, side by side with a Hugging Face peer.

How things are timed: the items of one comparison are interleaved (one warm-up call each, then
``repeats`` rounds in alternating order, ABBA) and every ratio is the median of its per-round pair
ratios, with its spread (min, max, quartiles, every pair) in ``res['ratios'][key]``; the top-level
ratio keys hold that median as a float. Absolute figures (seconds, episodes/s, tokens/s) are the
median seconds of the same timed calls (``experiments/timing.py``).

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
    conversation, its own cache, none kept across turns): episodes/s of ours / theirs (``experiments/hf_loop.py``);
    ``*_fresh``: the same on the untrained GPT-2, whose episodes run to the turn limit.
(g) How far from the physical limit: this machine's fp32 GEMM peak (a square ``torch.mm`` at the
    bench's thread count; the size, from ``gemm_sizes``, that ran fastest in a short probe) interleaved
    with one TinyAgent SFT step (as in (e)) and one cached sampling step (batch = the rollout's
    episodes, cached length = the SFT episodes' mean length: sample a token per row, feed it through
    ``forward_cached``). Their GFLOP/s count matmul FLOPs analytically (``FLOP_FORMULAS`` in
    ``experiments/flops.py``), and ``*_peak_fraction`` is the median per-round GFLOP/s / GEMM GFLOP/s.

This file holds the workloads (a)-(e) and ``run``, which assembles the result dict; the table is drawn by
``experiments/bench_render.py``. ``transformers`` is optional (``pip install -e '.[bench]'``); without it
the peer rows are skipped.
"""
from __future__ import annotations

import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

from ..envs.bugfix import BugFixEnv
from ..model import TinyAgent
from ..envs.bugfix import scripted_policy
from ..recipes.sft import sft_train
from ..render import OWNER, collate
from ..rollout import rollout_batch, sample_next, scripted_rollout
from ..envs.bugfix import make_tasks
from ..tokenizer import build_tokenizer
from .bench_render import render
from .flops import bench_efficiency, computed_forward_flops, tiny_sft_step
from .timing import METHOD, check_repeats, loadavg, machine_info, pair_ratio, timed_interleaved, train_step_fn

PEER_MISSING = ("transformers is not installed: skipping the Hugging Face peer rows "
                "(install it with: pip install -e '.[bench]')")
_POLICY = OWNER['policy']


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


# --- setup ----------------------------------------------------------------------------------------

def build_models(n_tasks: int | None = None, weak_steps: int = 150, sft_steps: int = 60, log=_stderr):
    """Tokenizer, train tasks, weak-play trajectories, a fresh TinyAgent and an oracle-SFT one (section 15.2)."""
    tok = build_tokenizer(make_tasks('all'))
    train = make_tasks('train')[:n_tasks]
    weak_play = [scripted_rollout(scripted_policy(kind, seed=s), BugFixEnv(), t, tok)
                 for kind in ['blind', 'random'] for s in range(4) for t in train]
    demos = [scripted_rollout(scripted_policy('oracle'), BugFixEnv(), t, tok) for t in train]
    torch.manual_seed(0)
    fresh = TinyAgent(tok.vocab_size)
    torch.manual_seed(0)
    weak = TinyAgent(tok.vocab_size)
    t0 = time.perf_counter()
    sft_train(weak, weak_play, tok, steps=weak_steps, seed=0)
    sft = copy.deepcopy(weak)
    sft_train(sft, demos, tok, steps=sft_steps, seed=0)
    log(f'setup: weak base {weak_steps} steps + oracle SFT {sft_steps} steps in {time.perf_counter() - t0:.1f} s')
    return {'tok': tok, 'train': train, 'weak_play': weak_play, 'fresh': fresh, 'sft': sft}


# --- (a)-(c) rollouts -----------------------------------------------------------------------------

def _rollout(model, tasks, tok, seed, use_cache=True):
    envs = [BugFixEnv() for _ in tasks]
    return rollout_batch(model, envs, tasks, tok, temperature=1.0,
                         generator=torch.Generator().manual_seed(seed), use_cache=use_cache)


def bench_rollout(model, tasks, tok, repeats: int, seed: int = 0, no_cache: bool = False) -> dict:
    """Rollout throughput, one teacher-forced forward over the result and optionally the no-cache path,
    interleaved in one session (forward, rollout, no-cache; reversed every other round)."""
    ids = collate(_rollout(model, tasks, tok, seed), tok.pad_id)['ids']  # the forward's input: this seed's trajectories

    def forward():
        with torch.no_grad():
            return model(ids)

    fns = {'forward': forward, 'rollout': lambda: _rollout(model, tasks, tok, seed)}
    if no_cache:
        fns['no_cache'] = lambda: _rollout(model, tasks, tok, seed, use_cache=False)
    s = timed_interleaved(fns, repeats)
    trajs = s['out']['rollout']
    sec, fwd = s['median']['rollout'], s['median']['forward']
    n_tok = sum(len(t) for t in trajs)
    n_pol = sum(int((t.owner == _POLICY).sum()) for t in trajs)
    n_prompt = [int((t.turn == 0).sum()) for t in trajs]
    fwd_flops = computed_forward_flops(model, ids)
    ratios = {'rollout_vs_forward': pair_ratio(s, 'rollout', 'forward')}
    out = {'episodes': len(trajs), 'seconds': sec, 'seconds_all': s['seconds']['rollout'],
           'episodes_per_s': len(trajs) / sec, 'tokens': n_tok, 'tokens_per_s': n_tok / sec,
           'policy_tokens': n_pol, 'policy_tokens_per_s': n_pol / sec,
           'mean_policy_tokens': n_pol / len(trajs), 'mean_prompt_tokens': sum(n_prompt) / len(trajs),
           'mean_tokens': n_tok / len(trajs), 'mean_turns': sum(int(t.turn.max()) for t in trajs) / len(trajs),
           'pass_rate': sum(t.reward for t in trajs) / len(trajs),
           'forward_shape': list(ids.shape), 'forward_seconds': fwd, 'forward_seconds_all': s['seconds']['forward'],
           'forward_flops': fwd_flops['flops'], 'forward_computed_tokens': fwd_flops['computed_tokens'],
           'forward_gflops': fwd_flops['flops'] / fwd / 1e9,
           'rollout_vs_forward': ratios['rollout_vs_forward']['median'], 'order': s['order']}
    if no_cache:
        nc_sec, nc_trajs = s['median']['no_cache'], s['out']['no_cache']
        same = len(nc_trajs) == len(trajs) and all(torch.equal(a.ids, b.ids) for a, b in zip(trajs, nc_trajs))
        if not same:
            _stderr('WARNING: use_cache=False gave different trajectories than the cached rollout')
        ratios['kv_cache_speedup'] = pair_ratio(s, 'no_cache', 'rollout')
        out.update({'no_cache_seconds': nc_sec, 'no_cache_seconds_all': s['seconds']['no_cache'],
                    'no_cache_episodes_per_s': len(nc_trajs) / nc_sec,
                    'no_cache_tokens_per_s': sum(len(t) for t in nc_trajs) / nc_sec,
                    'no_cache_identical': bool(same), 'kv_cache_speedup': ratios['kv_cache_speedup']['median']})
    out['ratios'] = ratios
    out['trajectories'] = trajs
    return out


# --- (d) sampling against the peer's generate -------------------------------------------------------

def hf_model(model, tok, attn: str = 'sdpa'):
    """A randomly initialised GPT2LMHeadModel of the same width, depth, heads and vocabulary (nothing downloaded).

    Dropout is off (TinyAgent has none), so the SFT step compares the same work. GPT2 differs from
    TinyAgent in its details (learned absolute positions, tied head, tanh GELU, no QK-norm or rotary).
    """
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
    transformers.logging.set_verbosity_error()  # no padding advice: the loss masks pads, attention is causal
    c = model.config
    cfg = GPT2Config(vocab_size=c.vocab_size, n_embd=c.d_model, n_layer=c.n_layers, n_head=c.n_heads,
                     n_positions=max(512, c.block_size), bos_token_id=tok.bos_id, eos_token_id=tok.stop_id,
                     pad_token_id=tok.pad_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout, like ours
    torch.manual_seed(0)
    try:
        return GPT2LMHeadModel._from_config(cfg, attn_implementation=attn)
    except (TypeError, AttributeError):  # older transformers
        cfg._attn_implementation = attn
        return GPT2LMHeadModel(cfg)


def _hf_generate_fn(model, tok, prompt_ids: torch.Tensor, new_tokens: int, attn: str):
    """GPT2 ``generate`` (sampling, KV cache) of ``new_tokens`` tokens per row after ``prompt_ids``."""
    hf = hf_model(model, tok, attn).eval()

    def gen():
        torch.manual_seed(0)
        with torch.no_grad():
            out = hf.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=True,
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=True,
                              pad_token_id=tok.pad_id, top_k=0, top_p=1.0, temperature=1.0)
        assert out.shape == (prompt_ids.shape[0], prompt_ids.shape[1] + new_tokens), out.shape
        return out
    return gen


@torch.no_grad()
def _sample_same_shape(model, prompt_ids, new_tokens, seed=0, temperature=1.0):
    """rollout_batch's sampling loop without the env: prefill ``prompt_ids`` then sample ``new_tokens`` per row."""
    B, L = prompt_ids.shape
    gen = torch.Generator().manual_seed(seed)
    cache = model.new_cache(B)
    logits = model.forward_cached(prompt_ids, torch.full((B,), L), cache)  # (B, V)
    one = torch.ones(B, dtype=torch.long)
    out = []
    for i in range(new_tokens):
        t = sample_next(logits, temperature, gen)[0][:, None]  # (B, 1), as rollout_batch draws
        out.append(t)
        if i < new_tokens - 1:
            logits = model.forward_cached(t, one, cache)
    return torch.cat(out, dim=1)


def _around(peers: list, ours: list) -> list:
    """Session order: the first peer item, then ours, then the other peer items (ours next to a peer item
    in every round, whichever way the round runs)."""
    return peers[:1] + ours + peers[1:]


def bench_sampling(model, tasks, tok, prompt_ids: torch.Tensor, new_tokens: int, repeats: int,
                   attns=('sdpa', 'eager'), seed: int = 0) -> dict:
    """One interleaved session: GPT2 ``generate`` per attention, our rollout, our same-shape sampling.

    -> ``{'hf_generate', 'ours_same_shape', 'rollout', 'ratios', 'by_attn'}``; the ratios are against the
    attention whose median time is lower (``by_attn`` holds every attention's ratios)."""
    B = prompt_ids.shape[0]
    model.eval()
    peers = {f'generate_{a}': _hf_generate_fn(model, tok, prompt_ids, new_tokens, a) for a in attns}
    ours = {'rollout': lambda: _rollout(model, tasks, tok, seed),
            'same_shape': lambda: _sample_same_shape(model, prompt_ids, new_tokens)}
    fns = {**peers, **ours}
    s = timed_interleaved({k: fns[k] for k in _around(list(peers), list(ours))}, repeats)
    n_gen = B * new_tokens
    trajs = s['out']['rollout']
    n_pol = sum(int((t.owner == _POLICY).sum()) for t in trajs)
    n_same = s['out']['same_shape'].numel()
    by_attn = {a: {'seconds': s['median'][f'generate_{a}'],
                   'sampling_vs_hf': pair_ratio(s, f'generate_{a}', 'rollout', n_pol / n_gen),
                   'sampling_vs_hf_same_shape': pair_ratio(s, f'generate_{a}', 'same_shape', n_same / n_gen)}
               for a in attns}
    best = min(attns, key=lambda a: by_attn[a]['seconds'])
    sec = s['median'][f'generate_{best}']
    hf_gen = {'attn': best, 'seconds': sec, 'seconds_all': s['seconds'][f'generate_{best}'], 'batch': B,
              'prompt_tokens': prompt_ids.shape[1], 'new_tokens': new_tokens, 'generated_tokens': n_gen,
              'generated_tokens_per_s': n_gen / sec, 'by_attn': {a: by_attn[a]['seconds'] for a in attns}}
    same_sec, roll_sec = s['median']['same_shape'], s['median']['rollout']
    same = {'seconds': same_sec, 'seconds_all': s['seconds']['same_shape'], 'generated_tokens': n_same,
            'generated_tokens_per_s': n_same / same_sec}
    roll = {'seconds': roll_sec, 'seconds_all': s['seconds']['rollout'], 'episodes': len(trajs),
            'policy_tokens': n_pol, 'policy_tokens_per_s': n_pol / roll_sec}
    return {'hf_generate': hf_gen, 'ours_same_shape': same, 'rollout': roll, 'order': s['order'],
            'ratios': {k: by_attn[best][k] for k in ('sampling_vs_hf', 'sampling_vs_hf_same_shape')},
            'by_attn': by_attn}


# --- (e) SFT step ---------------------------------------------------------------------------------

def _masked_nll(logits, batch):
    """The sft_loss objective from logits: masked mean NLL of the next token over policy tokens."""
    ids, mask = batch['ids'], batch['action_mask']
    logits = logits[:, :-1]  # (B, T-1, V)
    B, T1, V = logits.shape
    logp = -F.cross_entropy(logits.reshape(B * T1, V), ids[:, 1:].reshape(B * T1), reduction='none').view(B, T1)
    return -(logp * mask).sum() / mask.sum()


def bench_sft_step(model, tok, batch, repeats: int, attns=('sdpa', 'eager'), peer: bool = True) -> dict:
    """TinyAgent's SFT step and (``peer``) the same masked NLL + backward + AdamW step on the same-size GPT2
    per attention, interleaved -> ``{'ours', 'hf' (or None), 'ratio' (or None), 'by_attn'}``: padded tokens/s."""
    n = batch['ids'].numel()
    peers = {}
    for a in (attns if peer else ()):
        hf = hf_model(model, tok, a)
        peers[f'gpt2_{a}'] = train_step_fn(hf, lambda hf=hf: _masked_nll(hf(batch['ids']).logits, batch))
    fns = {**peers, 'tinyagent': tiny_sft_step(model, batch)}
    s = timed_interleaved({k: fns[k] for k in _around(list(peers), ['tinyagent'])}, repeats)
    sec = s['median']['tinyagent']
    ours = {'seconds': sec, 'seconds_all': s['seconds']['tinyagent'], 'shape': list(batch['ids'].shape),
            'tokens_per_s': n / sec}
    if not peers:
        return {'ours': ours, 'hf': None, 'ratio': None, 'by_attn': None}
    by_attn = {a: {'seconds': s['median'][f'gpt2_{a}'], 'sft_step_vs_hf': pair_ratio(s, f'gpt2_{a}', 'tinyagent')}
               for a in attns}
    best = min(attns, key=lambda a: by_attn[a]['seconds'])
    hsec = s['median'][f'gpt2_{best}']
    hf_row = {'attn': best, 'seconds': hsec, 'seconds_all': s['seconds'][f'gpt2_{best}'],
              'shape': list(batch['ids'].shape), 'tokens_per_s': n / hsec,
              'by_attn': {a: by_attn[a]['seconds'] for a in attns}}
    return {'ours': ours, 'hf': hf_row, 'ratio': by_attn[best]['sft_step_vs_hf'], 'by_attn': by_attn,
            'order': s['order']}


# --- the whole benchmark --------------------------------------------------------------------------

def run(repeats: int = 5, threads: int = 2, n_tasks: int | None = None, episodes_per_task: int = 16,
        weak_steps: int = 150, sft_steps: int = 60, sft_batch: int = 32, peer: bool = True,
        peer_attns=('sdpa', 'eager'), gemm_sizes=(1024, 2048), log=_stderr) -> dict:
    """Run every measurement -> one dict (JSON-serialisable) with the headline ratios at the top level.

    ``threads`` sets ``torch.set_num_threads`` for the run (restored afterwards; 0 leaves it alone).
    ``repeats`` is the number of timed rounds per session (after one warm-up call of each item).
    The peer ratios are ``None`` when ``peer`` is false or transformers is missing.
    """
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run(repeats, threads or before, n_tasks, episodes_per_task, weak_steps, sft_steps, sft_batch, peer,
                    peer_attns, tuple(gemm_sizes), log)
    finally:
        torch.set_num_threads(before)


HEADLINE = ('rollout_vs_forward', 'kv_cache_speedup', 'sampling_vs_hf', 'sampling_vs_hf_same_shape', 'sft_step_vs_hf',
            'hf_engine_vs_generate_loop')


def _run(repeats, threads, n_tasks, episodes_per_task, weak_steps, sft_steps, sft_batch, peer, peer_attns,
         gemm_sizes, log):
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
    fresh = bench_rollout(setup['fresh'], tasks, tok, repeats, no_cache=True)
    log(f'rollouts: oracle-SFT TinyAgent, forward / cached / no-cache interleaved, {len(tasks)} episodes x (1 + {repeats}) each')
    sft = bench_rollout(setup['sft'], tasks, tok, repeats, no_cache=True)
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
                        'threads': threads},
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
        # (f) issue 13: the same HFPolicy GPT-2 through our lockstep engine vs one batched generate per turn
        from . import hf_loop
        loop = hf_loop.run(tok, train, setup['weak_play'], weak_steps, sft_steps, repeats, episodes_per_task, log)
        ratios['hf_engine_vs_generate_loop'] = loop['sft']['ratios']['hf_engine_vs_generate_loop']
        ratios['hf_engine_vs_generate_loop_fresh'] = loop['fresh']['ratios']['hf_engine_vs_generate_loop']
        res.update({'hf_engine': loop, 'hf_engine_vs_generate_loop': loop['sft']['ratio'],
                    'hf_engine_vs_generate_loop_fresh': loop['fresh']['ratio']})
    res['machine']['loadavg_1m_end'] = loadavg()
    res['total_seconds'] = time.perf_counter() - t_start
    return res


def main(args) -> int:
    import json
    kw = {'repeats': args.repeats, 'threads': args.threads}
    for name in ('n_tasks', 'episodes_per_task', 'weak_steps', 'sft_steps', 'sft_batch'):
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
