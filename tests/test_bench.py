"""Smoke test of ``agentrl bench`` at tiny sizes (the full benchmark is ``agentrl bench``)."""
import json
import math

import pytest
import torch

from agentrl.experiments.bench import bench, bench_render

RATIOS = ('rollout_vs_forward', 'kv_cache_speedup', 'sampling_vs_hf', 'sft_step_vs_hf')
TINY = dict(repeats=2, threads=1, n_tasks=2, episodes_per_task=2, weak_steps=2, sft_steps=2, sft_batch=4,
            peer_attns=('sdpa',), gemm_sizes=(128, 256), slow_episodes=8, slow_delay=0.005, log=lambda msg: None)


def _positive(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.fixture(scope='module')
def result():
    threads = torch.get_num_threads()
    res = bench.run(peer=bench.have_transformers(), **TINY)
    assert torch.get_num_threads() == threads  # run() restores the thread count
    return res


def test_own_figures(result):
    assert _positive(result['rollout_vs_forward']) and _positive(result['kv_cache_speedup'])
    sft = result['rollout_sft']
    assert sft['episodes'] == 4 and sft['no_cache_identical'] is True
    for key in ('episodes_per_s', 'tokens_per_s', 'policy_tokens_per_s'):
        assert _positive(result[key]) and _positive(result['rollout_fresh'][key])
    assert 0 < sft['policy_tokens'] < sft['tokens']
    assert _positive(result['sft_step']['tokens_per_s'])
    assert result['machine']['torch'] == torch.__version__ and result['machine']['threads'] == 1
    slow = result['slow_env']  # the slow-environment workload: the pool gives the serial trajectories
    assert slow['episodes'] == 8 and slow['identical'] is True and _positive(result['slow_env_serial_vs_pool'])
    json.dumps(result)  # the --json output is this dict


def test_ratios_are_medians_of_interleaved_pairs(result):
    """Every headline ratio is the median of `repeats` per-round pair ratios, with its spread and method in the JSON."""
    keys = ['rollout_vs_forward', 'kv_cache_speedup', 'rollout_vs_forward_fresh', 'kv_cache_speedup_fresh',
            'sft_step_peak_fraction', 'sampling_step_peak_fraction']
    if result['hf_generate'] is not None:
        keys += ['sampling_vs_hf', 'sampling_vs_hf_same_shape', 'sft_step_vs_hf', 'hf_engine_vs_generate_loop',
                 'hf_engine_vs_generate_loop_fresh']
    assert 'interleaved' in result['method'] and result['settings']['repeats'] == TINY['repeats']
    for key in keys:
        r = result['ratios'][key]
        assert r['n'] == len(r['pairs']) == TINY['repeats'] and 'interleaved pair ratios' in r['method'], key
        assert r['min'] <= r['median'] <= r['max'] and r['median'] == result[key], key
    assert result['rollout_sft']['order'] == [['forward', 'rollout', 'no_cache'], ['no_cache', 'rollout', 'forward']]
    assert {'threads', 'loadavg_1m_start', 'loadavg_1m_end'} <= set(result['machine'])


def test_gflops_against_the_gemm_peak(result):
    for key in ('gemm_peak_gflops', 'sft_step_gflops', 'sampling_step_gflops', 'sft_step_peak_fraction',
                'sampling_step_peak_fraction'):
        assert _positive(result[key]), (key, result[key])
    eff = result['efficiency']
    assert eff['gemm']['n'] in TINY['gemm_sizes'] and eff['sampling_step']['batch'] == result['settings']['episodes']
    assert eff['sft_step']['flops'] == 3 * eff['sft_step']['forward_flops'] and 'sft_step' in eff['flop_formulas']


def test_peer_ratios(result):
    pytest.importorskip('transformers')
    for key in RATIOS:
        assert _positive(result[key]), (key, result[key])
    assert result['hf_generate']['attn'] == 'sdpa'
    assert result['hf_generate']['new_tokens'] == max(1, round(result['rollout_sft']['mean_policy_tokens']))


def test_without_transformers_the_peer_rows_are_skipped(monkeypatch):
    monkeypatch.setattr(bench, 'have_transformers', lambda: False)
    said = []
    res = bench.run(**{**TINY, 'n_tasks': 1, 'episodes_per_task': 1, 'weak_steps': 1, 'sft_steps': 1,
                       'slow_episodes': 0, 'log': said.append})
    assert res['sampling_vs_hf'] is None and res['sft_step_vs_hf'] is None
    assert "pip install -e '.[bench]'" in res['peer_skipped'] and res['peer_skipped'] in said
    assert _positive(res['kv_cache_speedup'])


def test_cli_json_prints_one_object(result, monkeypatch, capsys):
    from agentrl.cli import build_parser
    monkeypatch.setattr(bench, 'run', lambda **kw: result)
    args = build_parser().parse_args(['bench', '--json', '--repeats', '1', '--threads', '1'])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)  # nothing else on stdout
    assert all(key in out for key in RATIOS)


def test_table_renders(result):
    from rich.console import Console
    console = Console(record=True, width=160)
    bench_render.render(result, console)
    text = console.export_text()
    for key in ('rollout_vs_forward', 'kv_cache_speedup', 'sft_step_vs_hf' if result['hf_generate'] else 'SFT step'):
        assert key in text


def test_hf_engine_vs_generate_loop(result):
    """Issue 13: the same HFPolicy GPT-2 through our lockstep engine and through one generate call per turn."""
    pytest.importorskip('transformers')
    assert _positive(result['hf_engine_vs_generate_loop']) and _positive(result['hf_engine_vs_generate_loop_fresh'])
    for key in ('sft', 'fresh'):
        r = result['hf_engine'][key]
        assert r['arch'] == 'gpt2' and r['engine']['episodes'] == r['generate_loop']['episodes'] == 4
        assert r['engine']['mean_turns'] >= 1 and r['generate_loop']['mean_turns'] >= 1
