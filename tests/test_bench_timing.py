"""``agentrl bench``'s measuring tools: the interleaved pair timer and the analytic FLOP counts (fast, no benchmark run)."""
import statistics
import time

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from agentrl.experiments.bench import flops, timing
from agentrl.policies.tinyagent import TinyAgent
from agentrl.recipes.sft import sft_loss


def test_timed_pairs_alternate_and_measure_known_sleeps():
    calls = []

    def sleeper(name, seconds):
        def fn():
            calls.append(name)
            time.sleep(seconds)
            return name
        return fn

    session, ratio = timing.timed_pairs(sleeper('A', 0.03), sleeper('B', 0.015), repeats=4)
    assert calls == ['A', 'B'] + ['A', 'B', 'B', 'A'] * 2  # one warm-up each, then ABBA rounds
    assert session['order'] == [['A', 'B'], ['B', 'A'], ['A', 'B'], ['B', 'A']]
    assert ratio['n'] == len(ratio['pairs']) == 4 and len(session['seconds']['A']) == 4
    assert ratio['pairs'] == [a / b for a, b in zip(session['seconds']['A'], session['seconds']['B'])]
    assert 1.5 < ratio['median'] < 2.6, ratio  # sleeps overshoot a little on a loaded machine
    assert ratio['min'] <= ratio['q1'] <= ratio['median'] <= ratio['q3'] <= ratio['max']
    assert 'median of 4 interleaved pair ratios' in ratio['method']
    assert session['out'] == {'A': 'A', 'B': 'B'}


def test_timed_interleaved_reverses_every_other_round():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in 'XYZ'}
    session = timing.timed_interleaved(fns, repeats=3)
    assert calls == list('XYZ') + list('XYZ') + list('ZYX') + list('XYZ')
    assert session['names'] == list('XYZ') and session['repeats'] == 3
    assert all(len(s) == 3 for s in session['seconds'].values())
    assert session['median']['X'] == statistics.median(session['seconds']['X'])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            timing.timed_interleaved(fns, bad)


def test_pair_ratio_orientation_scale_and_spread():
    session = {'seconds': {'peer': [2.0, 4.0, 3.0, 8.0, 6.0], 'ours': [1.0, 1.0, 1.0, 2.0, 2.0]}}
    r = timing.pair_ratio(session, 'peer', 'ours', scale=0.5)  # rate ratio: (n_ours / n_peer) * t_peer / t_ours
    assert r['pairs'] == [1.0, 2.0, 1.5, 2.0, 1.5]
    assert (r['median'], r['min'], r['max'], r['q1'], r['q3']) == (1.5, 1.0, 2.0, 1.5, 2.0)
    assert r['iqr'] == 0.5 and r['n'] == 5 and (r['num'], r['den'], r['scale']) == ('peer', 'ours', 0.5)
    one = timing.pair_ratio({'seconds': {'a': [3.0], 'b': [2.0]}}, 'a', 'b')
    assert one['median'] == one['min'] == one['max'] == one['q1'] == one['q3'] == 1.5 and one['iqr'] == 0


def _counted(fn):
    """Matmul FLOPs torch counts for ``fn()`` on the math SDPA path (FlopCounterMode skips the CPU SDPA kernel)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


@pytest.fixture(scope='module')
def tiny():
    torch.manual_seed(0)
    return TinyAgent(50, d_model=32, n_layers=2, n_heads=4, block_size=400)


def test_forward_and_sft_step_flops_match_flop_counter(tiny):
    cfg = tiny.config
    ids = torch.randint(1, 50, (3, 12))
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    by_hand = 3 * 12 * (L * (3 * 2 * d * d + 2 * d * d + 2 * 2 * d * 4 * d + 2 * 2 * 12 * d) + 2 * d * V)
    assert flops.tiny_forward_flops(cfg, 3, 12) == by_hand == _counted(lambda: tiny(ids))
    batch = {'ids': ids, 'action_mask': torch.ones(3, 11)}
    step = flops.sft_step_flops(tiny, batch)
    assert step['flops'] == 3 * by_hand == _counted(lambda: sft_loss(tiny, batch).backward())
    assert step['computed_tokens'] == step['real_tokens'] == step['padded_tokens'] == 36
    tiny.zero_grad()


def test_flops_follow_the_length_buckets(tiny):
    ids = torch.randint(1, 50, (8, 300))
    ids[4:, 10:] = 0  # four long rows, four short ones: TinyAgent computes them in two buckets
    got = flops.computed_forward_flops(tiny, ids)
    assert got['real_tokens'] == 4 * 300 + 4 * 10 and got['padded_tokens'] == 2400
    assert got['computed_tokens'] == got['real_tokens']
    with torch.no_grad():
        assert got['flops'] == _counted(lambda: tiny(ids))
    assert got['flops'] < flops.tiny_forward_flops(tiny.config, 8, 300)


def test_cached_step_and_gemm_flops_match_flop_counter(tiny):
    cache = tiny.new_cache(3)
    with torch.no_grad():
        tiny.forward_cached(torch.randint(1, 50, (3, 9)), torch.full((3,), 9), cache)
        counted = _counted(lambda: tiny.forward_cached(torch.randint(1, 50, (3, 1)), torch.ones(3, dtype=torch.long),
                                                       cache))
    assert flops.cached_step_flops(tiny.config, 3, 10) == counted  # 9 cached + the new token
    a = torch.randn(64, 64)
    assert flops.gemm_flops(64) == _counted(lambda: a @ a)


def test_bench_efficiency_reports_gflops_and_peak_fractions(tiny):
    batch = {'ids': torch.randint(1, 50, (4, 16)), 'action_mask': torch.ones(4, 15)}
    eff = flops.bench_efficiency(tiny, batch, sample_batch=6, cached_len=20, repeats=2, gemm_sizes=(64, 128),
                                 steps_per_call=2)
    assert eff['gemm']['n'] in (64, 128) and set(eff['gemm']['probe_gflops']) == {64, 128}
    for key in ('gemm', 'sft_step', 'sampling_step'):
        assert eff[key]['gflops'] > 0
    sp = eff['sampling_step']
    assert sp['gflops'] == pytest.approx(sp['flops'] / sp['seconds'] / 1e9)
    for key in ('sft_step_peak_fraction', 'sampling_step_peak_fraction'):
        r = eff['ratios'][key]
        assert r['n'] == 2 and r['median'] > 0 and r['num'] == 'gemm'
