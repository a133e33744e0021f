"""``agentrl bench``'s physical-limit figures: analytic matmul FLOP counts (TinyAgent forward, SFT step,
cached sampling step, GEMM), the machine's fp32 GEMM peak probe, and ``bench_efficiency``, which times the
GEMM, one SFT step and one cached sampling step interleaved -> GFLOP/s and the fraction of the GEMM peak.

The counts are analytic (``FLOP_FORMULAS``): torch's ``FlopCounterMode`` does not count the CPU SDPA
kernel; it agrees with these counts on the math SDPA path (see the tests).
"""
from __future__ import annotations

import copy

import torch

from ...policies.tinyagent import length_buckets, lengths_from_padding
from ...recipes.sft import sft_loss
from ...rollouts.engine import sample_next
from .timing import pair_ratio, timed, timed_interleaved, train_step_fn

# --- FLOP counts (matmuls only, 2 FLOPs per multiply-add) -------------------------------------------

FLOP_FORMULAS = {
    'forward': 'sum over computed rows of T * (n_layers * (24 d^2 + 4 T d) + 2 d V), T = the width the row is '
               'computed at (TinyAgent buckets rows by length, so a row is computed at its bucket width): '
               'qkv 6 d^2 + out proj 2 d^2 + MLP 16 d^2 per token and layer, attention scores q.k 2 T d and '
               'values 2 T d per token and layer (the full T x T square, as a dense kernel and FlopCounterMode '
               'count it, not the causal half), LM head 2 d V per token',
    'sft_step': '3 x forward (backward = 2 x forward) over the tokens the length-bucketed forward computes; '
                'elementwise work (norms, softmax, GELU, loss, AdamW) not counted',
    'cached_sampling_step': 'B * (n_layers * (24 d^2 + 4 S d) + 2 d V): one new token per row, attention over '
                            'the S cached positions (the new one included)',
    'gemm': '2 n^3 for an n x n by n x n fp32 matmul',
}


def tiny_forward_flops(cfg, rows: int, width: int) -> int:
    """Matmul FLOPs of TinyAgent's plain forward over ``rows`` sequences of ``width`` tokens (``FLOP_FORMULAS``)."""
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    return rows * width * (L * (24 * d * d + 4 * width * d) + 2 * d * V)


def computed_forward_flops(model, ids: torch.Tensor, lengths=None) -> dict:
    """FLOPs of ``model(ids, lengths)`` as TinyAgent computes it (length buckets, or the plain forward when
    nothing is padded) -> ``{'flops', 'computed_tokens', 'real_tokens', 'padded_tokens'}``."""
    B, T = ids.shape
    lengths = lengths_from_padding(ids) if lengths is None else torch.as_tensor(lengths).long()
    cfg = model.config
    if not B or bool((lengths == T).all()):
        parts = [(B, T)]
    else:
        parts = [(len(rows), int(width)) for rows, width in length_buckets(lengths.clamp(min=1))]
    return {'flops': sum(tiny_forward_flops(cfg, r, w) for r, w in parts),
            'computed_tokens': sum(r * w for r, w in parts), 'real_tokens': int(lengths.sum()), 'padded_tokens': B * T}


def sft_step_flops(model, batch: dict) -> dict:
    """FLOPs of one ``sft_loss`` forward + backward (3 x the computed forward; ``FLOP_FORMULAS``)."""
    fwd = computed_forward_flops(model, batch['ids'], batch.get('lengths'))
    return {**fwd, 'forward_flops': fwd['flops'], 'flops': 3 * fwd['flops']}


def cached_step_flops(cfg, batch: int, cached_len: int) -> int:
    """FLOPs of one ``forward_cached`` step: one new token on each of ``batch`` rows, ``cached_len`` positions attended."""
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    return batch * (L * (24 * d * d + 4 * cached_len * d) + 2 * d * V)


def gemm_flops(n: int) -> int:
    return 2 * n ** 3


# --- the timed kernels and the efficiency measurement -----------------------------------------------

def tiny_sft_step(model, batch):
    """One sft_loss + backward + AdamW step on a copy of ``model`` (the copy trains, ``model`` does not)."""
    m = copy.deepcopy(model)
    return train_step_fn(m, lambda: sft_loss(m, batch))


def _gemm_fn(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a, b, c = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g), torch.empty(n, n)
    return lambda: torch.mm(a, b, out=c)


def gemm_probe(sizes, repeats: int = 3) -> dict:
    """GFLOP/s of an n x n fp32 ``torch.mm`` per size (median of ``repeats`` after one warm-up) -> {n: GFLOP/s}."""
    return {n: gemm_flops(n) / timed(_gemm_fn(n), repeats)[0] / 1e9 for n in sizes}


def _sampling_step_fn(model, batch: int, cached_len: int, steps: int, seed: int = 0):
    """``steps`` cached sampling steps at batch ``batch``, each attending over ``cached_len`` positions: the cache
    holds ``cached_len - 1`` positions and is rewound after every step, so every step does the same work."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    P = cached_len - 1
    cache = model.new_cache(batch, capacity=cached_len)
    with torch.no_grad():
        logits = model.forward_cached(torch.randint(model.vocab_size, (batch, P), generator=g),
                                      torch.full((batch,), P), cache)  # (B, V)
    start, one = cache.lengths, torch.ones(batch, dtype=torch.long)

    @torch.no_grad()
    def run_steps():
        for _ in range(steps):
            cache.lengths = start  # rewind: write and attend at the same positions again
            t = sample_next(logits, 1.0, g)[0][:, None]  # (B, 1)
            out = model.forward_cached(t, one, cache)
        return out
    return run_steps


def bench_efficiency(model, batch: dict, sample_batch: int, cached_len: int, repeats: int,
                     gemm_sizes=(1024, 2048), steps_per_call: int = 8) -> dict:
    """The GEMM peak, one TinyAgent SFT step and one cached sampling step, interleaved: GFLOP/s and the median
    per-round fraction of the GEMM's GFLOP/s (``FLOP_FORMULAS``)."""
    cfg = model.config
    cached_len = max(2, min(int(cached_len), cfg.block_size))
    probe = gemm_probe(gemm_sizes)
    n = max(probe, key=probe.get)
    f_gemm = gemm_flops(n)
    f_sft = sft_step_flops(model, batch)
    f_samp = cached_step_flops(cfg, sample_batch, cached_len)
    s = timed_interleaved({'sft_step': tiny_sft_step(model, batch), 'gemm': _gemm_fn(n),
                           'sampling_step': _sampling_step_fn(model, sample_batch, cached_len, steps_per_call)},
                          repeats)
    med = s['median']
    ratios = {'sft_step_peak_fraction': pair_ratio(s, 'gemm', 'sft_step', f_sft['flops'] / f_gemm),
              'sampling_step_peak_fraction': pair_ratio(s, 'gemm', 'sampling_step',
                                                        steps_per_call * f_samp / f_gemm)}
    return {'gemm': {'n': n, 'flops': f_gemm, 'probe_gflops': probe, 'seconds': med['gemm'],
                     'seconds_all': s['seconds']['gemm'], 'gflops': f_gemm / med['gemm'] / 1e9},
            'sft_step': {**f_sft, 'shape': list(batch['ids'].shape), 'seconds': med['sft_step'],
                         'seconds_all': s['seconds']['sft_step'], 'gflops': f_sft['flops'] / med['sft_step'] / 1e9},
            'sampling_step': {'batch': sample_batch, 'cached_len': cached_len, 'steps_per_call': steps_per_call,
                              'flops': f_samp, 'seconds': med['sampling_step'] / steps_per_call,
                              'seconds_all': [t / steps_per_call for t in s['seconds']['sampling_step']],
                              'gflops': steps_per_call * f_samp / med['sampling_step'] / 1e9},
            'ratios': ratios, 'order': s['order'], 'flop_formulas': FLOP_FORMULAS}
