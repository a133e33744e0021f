"""Smoke test of ``agentrl bench`` at tiny sizes (the full benchmark is ``agentrl bench``)."""
import contextlib
import json
import math
import types

import pytest
import torch

import agentrl as arl
from agentrl.experiments.bench import bench, bench_render
from agentrl.experiments.bench.hf_loop import generate_loop_rollout
from agentrl.rendering.owners import OWNER
from agentrl.rendering.protocols import as_renderer
from test_rewards import CODES, Keypad

POLICY = OWNER['policy']
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


class _ScriptedGenerate(torch.nn.Module):
    """A model whose ``generate`` writes each episode's scripted calls (the episode told by its prompt, the turn by
    the stop tokens so far), padded as ``transformers`` pads a batch: what ``generate_loop_rollout`` drives."""

    def __init__(self, scripts, stop, pad):
        super().__init__()
        self.scripts, self.stop, self.pad = scripts, stop, pad  # scripts: prompt ids -> one list of ids per call

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            real = [i for i, m in zip(ids, mask) if m]
            calls = next(c for prompt, c in self.scripts.items() if tuple(real[:len(prompt)]) == prompt)
            new = calls[real.count(self.stop)][:max_new_tokens]
            rows.append(ids + new + [self.pad] * (max_new_tokens - len(new)))
        return torch.tensor(rows)


def test_generate_loop_scores_an_episode_by_its_return():
    """The plain ``generate`` loop takes its turns as the engine does: each episode's reward is its return (the sum of
    its steps' rewards), not the last step's, and its tokens, rewards and info are scripted play's."""
    renderer = as_renderer(arl.build_tokenizer(CODES))
    want = [arl.scripted_rollout(Keypad.scripted_policy(kind, 0), Keypad(), task, renderer)
            for kind, task in zip(('oracle', 'random', 'oracle', 'random'), CODES)]  # one episode per prompt
    scripts = {}
    for t in want:
        ids, owner, turn = t.ids.tolist(), t.owner.tolist(), t.turn.tolist()
        calls = [[i for i, o, k in zip(ids, owner, turn) if o == POLICY and k == n] for n in range(1, max(turn) + 1)]
        scripts[tuple(ids[:owner.index(POLICY)])] = calls
    policy = types.SimpleNamespace(model=_ScriptedGenerate(scripts, renderer.stop_id, renderer.pad_id),
                                   precision=types.SimpleNamespace(autocast=contextlib.nullcontext))
    got = generate_loop_rollout(policy, [Keypad() for _ in CODES], CODES, renderer)
    assert any(t.turn_rewards[-1] != t.reward for t in got)  # the return and the last step's reward differ
    for g, w in zip(got, want):
        assert torch.equal(g.ids, w.ids) and g.info == w.info
        assert g.turn_rewards == w.turn_rewards and g.reward == w.reward == sum(w.turn_rewards)
