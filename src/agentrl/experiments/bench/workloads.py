"""``agentrl bench``'s workloads (a)-(e) (see ``bench.py``): the models they run, rollouts, sampling against
GPT-2's ``generate``, and the SFT step against GPT-2's.

Each ``bench_*`` times its items in one interleaved session (``timing.timed_interleaved``) and returns
its figures with the per-round pair ratios (``timing.pair_ratio``); ``bench.run`` assembles them.
The peer (``hf_model``) is a randomly initialised ``GPT2LMHeadModel`` of the TinyAgent's shape.
"""
from __future__ import annotations

import copy
import sys
import time

import torch
import torch.nn.functional as F

from ..chapter15.env_registry import DEFAULT, get_env
from ...policies.tinyagent import TinyAgent
from ...recipes.sft import sft_train
from ...rendering.trajectory import OWNER, collate
from ...rollouts.engine import rollout_batch, sample_next, scripted_rollout
from .flops import computed_forward_flops, tiny_sft_step
from .timing import pair_ratio, timed_interleaved, train_step_fn

CHAPTER = get_env(DEFAULT)
"""The chapter's workload: the BugFix gym (its tasks, players and tokenizer)."""

_POLICY = OWNER['policy']


def log_stderr(msg: str) -> None:
    """Progress and warnings go to stderr (stdout may carry ``--json``)."""
    print(msg, file=sys.stderr, flush=True)


# --- setup ----------------------------------------------------------------------------------------

def build_models(n_tasks: int | None = None, weak_steps: int = 150, sft_steps: int = 60, log=log_stderr):
    """Tokenizer, train tasks, weak-play trajectories, a fresh TinyAgent and an oracle-SFT one (section 15.2)."""
    tok = CHAPTER.tokenizer()
    train = CHAPTER.tasks('train')[:n_tasks]
    weak_play = [scripted_rollout(CHAPTER.player(kind, seed=s), CHAPTER.make(), t, tok)
                 for kind in ['blind', 'random'] for s in range(4) for t in train]
    demos = [scripted_rollout(CHAPTER.player('oracle'), CHAPTER.make(), t, tok) for t in train]
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

def _rollout(model, tasks, tok, seed, use_cache=True, env_workers=1):
    envs = [CHAPTER.make() for _ in tasks]
    return rollout_batch(model, envs, tasks, tok, temperature=1.0,
                         generator=torch.Generator().manual_seed(seed), use_cache=use_cache, env_workers=env_workers)


def bench_rollout(model, tasks, tok, repeats: int, seed: int = 0, no_cache: bool = False, env_workers: int = 1) -> dict:
    """Rollout throughput, one teacher-forced forward over the result and optionally the no-cache path,
    interleaved in one session (forward, rollout, no-cache; reversed every other round). ``env_workers``: the
    rollouts' environment thread pool (1: stepped one after another)."""
    ids = collate(_rollout(model, tasks, tok, seed, env_workers=env_workers), tok.pad_id)['ids']  # the forward's input

    def forward():
        with torch.no_grad():
            return model(ids)

    fns = {'forward': forward, 'rollout': lambda: _rollout(model, tasks, tok, seed, env_workers=env_workers)}
    if no_cache:
        fns['no_cache'] = lambda: _rollout(model, tasks, tok, seed, use_cache=False, env_workers=env_workers)
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
            log_stderr('WARNING: use_cache=False gave different trajectories than the cached rollout')
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
