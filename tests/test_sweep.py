"""``agentrl sweep``: seed specs, the statistics, and tiny multi-seed sweeps end to end (local and ray).

The end-to-end sweep injects a fault into both of its seeds' first attempts (seed 0's worker is
SIGKILLed after section 15.2, seed 1's job raises there), so one 2-seed smoke sweep checks the
retry of a dead worker and of a raising job, resuming from the finished sections, the outputs,
and that the resumed per-seed results equal a direct, uninterrupted ``Chapter15`` run.
"""
import json
import shutil

import pytest

from agentrl.policies.tinyagent import TinyAgentConfig

from agentrl.cli import build_parser, main
from agentrl.envs.bugfix.tasks import FAMILIES
from agentrl.experiments.chapter15.chapter import Chapter15
from agentrl.experiments.chapter15.config import Ch15Config
from agentrl.experiments.sweeps import stats as S
from agentrl.experiments.sweeps import sweep
from agentrl.experiments.sweeps.backends import FAULT_ENV


# --- aggregation over seeds (the statistics themselves: test_stats.py)

def test_hold_rates():
    from agentrl.experiments.chapter15.findings import Finding
    band = lambda name, ok, fig: Finding('band', name, '15.1', name, '', ok, fig, 'x')  # noqa: E731
    rows = S.aggregate_findings({0: [band('a', True, '1'), band('b', False, '2'), band('c', None, 'n/a: why')],
                                 1: [band('a', True, '3'), band('b', True, '4'), band('c', None, 'n/a: why')],
                                 2: [band('a', False, '5'), band('b', True, '6'), band('c', None, 'n/a: why')]})
    assert rows['a']['hold_rate'] == pytest.approx(2 / 3) and rows['a']['held'] == 2 and rows['a']['n'] == 3
    assert rows['b']['per_seed']['0'] == {'holds': False, 'figure': '2'} and rows['b']['chapter'] == 'x'
    assert rows['c']['hold_rate'] is None and rows['c']['n'] == 0 and rows['c']['why'] == 'n/a: why'


def test_aggregate_flattens_and_splits_partial_figures():
    per_seed = {0: {'15.3': {'cosine': 0.9, 'grad_gap': None, 'hist_rft': [[0, 0.1, 0.2], [15, 0.5, 0.3]],
                             'first_kept': [['edit a', 3]], 'rounds': [{'solved': ['x', 'y'], 'kept': 4, 'rate': 0.5,
                                                                        'first_actions': {'edit a': 3}}]}},
                1: {'15.3': {'cosine': 0.8, 'grad_gap': 1e-9, 'hist_rft': [[0, 0.3, 0.2], [15, 0.7, 0.5]],
                             'first_kept': [['read', 1]], 'rounds': [{'solved': ['x'], 'kept': 2, 'rate': 0.25,
                                                                        'first_actions': {'read': 1}}]}}}
    full, partial = S.aggregate(per_seed)
    assert full['15.3/cosine']['mean'] == pytest.approx(0.85) and full['15.3/cosine']['values'] == [0.9, 0.8]
    assert full['15.3/hist_rft/1/1']['mean'] == pytest.approx(0.6) and full['15.3/hist_rft/1/0']['stderr'] == 0
    assert full['15.3/rounds/0/n_solved']['values'] == [2, 1]
    assert partial['15.3/grad_gap']['seeds'] == [1] and partial['15.3/grad_gap']['partial']
    assert not any('first_kept' in k or 'first_actions' in k for k in {**full, **partial})


# --- seed specs

@pytest.mark.parametrize('spec, seeds', [('0-9', list(range(10))), ('0,3,5', [0, 3, 5]), ('0-3,7,10-11', [0, 1, 2, 3, 7, 10, 11]),
                                         ('4', [4]), ('5,1-2,2', [1, 2, 5]), (' 1, 2 ', [1, 2])])
def test_parse_seeds(spec, seeds):
    assert sweep.parse_seeds(spec) == seeds


@pytest.mark.parametrize('spec', ['', 'a', '1-', '-1', '3-1', '1,,2', '1.5', '0-3;5'])
def test_bad_seed_specs_are_argparse_errors(spec, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(['sweep', '--seeds', spec])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert '--seeds' in err and "'0-9'" in err and "'0,3,5'" in err


# --- sweeps end to end (smoke budget)

FAULTS = {'0': {'mode': 'kill', 'after': '15.2'}, '1': {'mode': 'raise', 'after': '15.2'}}


def sections(folder):
    return json.loads((folder / 'results.json').read_text())['sections']


@pytest.fixture(scope='module')
def local_sweep(tmp_path_factory):
    """The faulty 2-seed sweep -> (exit status, its folder, the uninterrupted reference: the session's smoke run at seed 0,
    in one process on one torch thread, as the sweep's workers run)."""
    from test_html_report import smoke_report_dir
    out = tmp_path_factory.mktemp('sweep')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FAULT_ENV, json.dumps(FAULTS))
        rc = main(['sweep', '--seeds', '0-1', '--workers', '2', '--smoke', '--out', str(out), '--logdir', str(out / 'logs')])
    return rc, out, smoke_report_dir(tmp_path_factory)


def test_sweep_writes_outputs(local_sweep):
    rc, out, _ = local_sweep
    assert rc == 0
    for name in ['sweep.json', 'sweep.md', 'fig15_3_recipes_ci.png', 'seed0/results.json', 'seed1/transcript.txt',
                 'seed1/checkpoints/sft_rl.safetensors']:
        assert (out / name).is_file(), name
    assert (out / 'fig15_3_recipes_ci.png').stat().st_size > 10_000
    for seed in (0, 1):  # --logdir: every seed's recipe runs (seed 0 was killed after 15.2 and resumed)
        for run in ('sft_train/oracle', 'train_dpo/dpo', 'train_rl/rl_only', 'expert_iteration/public'):
            assert (out / 'logs' / run / f'seed{seed}' / 'metrics.jsonl').is_file(), (run, seed)
    sw = json.loads((out / 'sweep.json').read_text())
    assert sw['seeds'] == [0, 1] and sw['aggregated_seeds'] == [0, 1] and sw['n'] == 2 and sw['failed_seeds'] == []
    assert len(sw['findings']) == 30 and all(r['n'] == 2 for r in sw['findings'].values())
    for key in ['15.2/weak/train', '15.2/oracle_sft/entropy', '15.3/after_rft/held', '15.6/mismatch/reads',
                '15.5/curves/RL only/2/1', f'15.6/probe/SFT step {Ch15Config.smoke().cold_start_step}/signal', '15.1/loss_masked', '15.4/loss_values/1']:
        stat = sw['figures'][key]
        vals = [S.seed_figures(sections(out / f'seed{s}'))[key] for s in (0, 1)]
        assert stat['values'] == vals and stat['mean'] == pytest.approx(sum(vals) / 2)
        assert stat['ci95'][0] <= stat['mean'] <= stat['ci95'][1]
    md = (out / 'sweep.md').read_text()
    assert '## Findings, by hold rate' in md and '± ' in md and 'fig15_3_recipes_ci.png' in md
    assert sw['budget'] == 'smoke' and sw['config']['sft_steps'] == 4 and sw['config']['model']['qk_temperature'] == TinyAgentConfig(1).qk_temperature
    assert sw['overrides'] == {} and sw['provenance']['worker_torch_threads'] == 1 and 'git_commit' in sw['provenance']


def test_sweep_md_has_the_per_family_transfer_table(local_sweep):
    _, out, _ = local_sweep
    md = (out / 'sweep.md').read_text()
    start = md.index('Held-out pass per task group')
    lines = [line for line in md[start:].split('\n\n')[1].splitlines()]
    assert lines[0] == '|  | minmax | range | compare | zero | init |'
    assert [line.split(' | ')[0] for line in lines[2:]] == ['| seed 0', '| seed 1', '| mean ± CI', '| minimum over seeds']
    for s in (0, 1):  # each seed's row: its figures, the lowest in bold
        fam = sections(out / f'seed{s}')['15.2']['heldout_by_family']
        cells = lines[2 + s].strip('| ').split(' | ')[1:]
        low = min(fam.values()) if len(set(fam.values())) > 1 else None  # all equal: nothing to mark
        assert cells == [f'**{fam[f]:.2f}**' if fam[f] == low else f'{fam[f]:.2f}' for f in FAMILIES]


def test_sweep_md_has_the_rl_roads_table(local_sweep):
    """15.5 per seed: each RL recipe's final train / held-out pass and the share of its final train episodes that read first."""
    _, out, _ = local_sweep
    md = (out / 'sweep.md').read_text()
    start = md.index('share of its final train episodes')
    lines = md[start:].split('\n\n')[1].splitlines()
    assert lines[0] == '|  | SFT -> RL train | held | reads first | RL only train | held | reads first |'
    assert [line.split(' | ')[0] for line in lines[2:]] == ['| seed 0', '| seed 1', '| mean ± CI']
    for s in (0, 1):
        s5 = sections(out / f'seed{s}')['15.5']
        want = [v for r in ('SFT -> RL', 'RL only') for v in (*s5['curves'][r][-1][1:], s5['reads_first'][r])]
        assert lines[2 + s].strip('| ').split(' | ')[1:] == [f'{v:.2f}' for v in want]


def test_failed_attempts_are_retried_and_resume(local_sweep):
    _, out, _ = local_sweep
    sw = json.loads((out / 'sweep.json').read_text())
    r0, r1 = sw['runs']['0'], sw['runs']['1']
    assert r0['status'] == r1['status'] == 'ok' and r0['attempts'] == r1['attempts'] == 2
    assert r0['resumed_sections'] == r1['resumed_sections'] == 2  # 15.1 and 15.2 loaded, not rerun
    assert r0['torch_threads'] == r1['torch_threads'] == 1
    assert 'WorkerDied' in r0['errors'][0]['error']  # SIGKILLed worker
    assert 'InjectedFault' in r1['errors'][0]['error']  # raising job
    assert sorted((f['seed'], f['attempt']) for f in sw['failures']) == [(0, 1), (1, 1)]


def test_sweep_seed_equals_direct_run(local_sweep):
    """Seed 0's worker was SIGKILLed after 15.2 and its retry resumed: its sections are an uninterrupted run's."""
    _, out, direct = local_sweep
    assert sections(out / 'seed0') == sections(direct)


def test_eval_spread_recomputes_each_seeds_reported_figure(local_sweep, tmp_path, capsys):
    """scripts/eval_spread.py reloads each seed's checkpoints: its 'reported' column is the runs' own 15.5 figure."""
    from pathlib import Path

    from conftest import exit_code, script_main
    _, out, _ = local_sweep
    eval_spread = script_main('eval_spread')
    assert exit_code(eval_spread, [str(out), '--draws', '2', '--json', str(tmp_path / 's.json')]) == 0
    printed = capsys.readouterr().out
    assert 'per-draw SD' in printed and 'policy SD' in printed
    saved = json.loads((tmp_path / 's.json').read_text())
    curves = [sections(Path(run))['15.5']['curves'] for run in saved['runs']]
    for key, recipe, column in [('sft_rl/train', 'SFT -> RL', 1), ('sft_rl/held-out', 'SFT -> RL', 2),
                                ('rl_only/train', 'RL only', 1), ('rl_only/held-out', 'RL only', 2)]:
        assert saved['figures'][key]['reported'] == [c[recipe][-1][column] for c in curves], key
    assert exit_code(eval_spread, [str(out), '--checkpoints', 'sft']) == 2
    assert "unknown checkpoints ['sft']" in capsys.readouterr().err
    assert exit_code(eval_spread, [str(tmp_path)]) == 2
    assert 'need at least 2 runs' in capsys.readouterr().err


def test_seed_failing_twice_is_reported_and_resume_skips_done_seeds(local_sweep, tmp_path, monkeypatch):
    _, src, _ = local_sweep
    out = tmp_path / 'sweep'
    shutil.copytree(src, out)
    monkeypatch.setenv(FAULT_ENV, json.dumps({'2': {'mode': 'raise', 'after': 'start', 'attempts': 2}}))
    rc = main(['sweep', '--seeds', '0-2', '--workers', '2', '--smoke', '--resume', '--out', str(out)])
    assert rc == 1
    sw = json.loads((out / 'sweep.json').read_text())
    assert sw['runs']['0']['status'] == sw['runs']['1']['status'] == 'skipped'
    assert sw['runs']['2']['status'] == 'failed' and sw['runs']['2']['attempts'] == 2 and len(sw['runs']['2']['errors']) == 2
    assert sw['failed_seeds'] == [2] and sw['aggregated_seeds'] == [0, 1]
    before = json.loads((src / 'sweep.json').read_text())
    assert sw['figures'] == before['figures'] and sw['findings'] == before['findings']
    md = (out / 'sweep.md').read_text()
    assert 'failed: 2' in md
    assert 's wall for this invocation (seeds 0, 1 finished by an earlier one)' in md  # the wall time is this run's only


def test_ray_backend_gives_the_same_seeds(local_sweep, tmp_path):
    pytest.importorskip('ray', reason="ray is not installed (pip install -e '.[ray]')")
    _, local, _ = local_sweep
    rc = main(['sweep', '--seeds', '0-1', '--workers', '2', '--smoke', '--backend', 'ray', '--out', str(tmp_path)])
    assert rc == 0
    for s in (0, 1):
        assert sections(tmp_path / f'seed{s}') == sections(local / f'seed{s}')
    sw = json.loads((tmp_path / 'sweep.json').read_text())
    assert sw['backend'] == 'ray' and all(r['attempts'] == 1 and r['torch_threads'] == 1 for r in sw['runs'].values())
    assert sw['figures'] == json.loads((local / 'sweep.json').read_text())['figures']


def test_resume_into_another_config_is_refused_before_any_work(local_sweep, tmp_path, capsys):
    _, src, _ = local_sweep
    out = tmp_path / 'sweep'
    shutil.copytree(src, out)
    before = (out / 'seed0' / 'results.json').read_text()
    assert main(['sweep', '--seeds', '0-1', '--smoke', '--resume', '--set', 'sft_steps=3', '--out', str(out)]) == 2
    assert 'was written with another config: sft_steps (saved 4, now 3)' in capsys.readouterr().err
    assert (out / 'seed0' / 'results.json').read_text() == before and not (out / 'seed0' / 'results.json.tmp').exists()


def test_sweep_on_two_threads_equals_reproduce_on_two_threads(tmp_path):
    """--threads T runs every seed on T torch threads: the same figures as `reproduce --threads T` (another
    rounding than the default sweep's one thread), recorded in the provenance and in sweep.md."""
    from conftest import exit_code, least_args
    out, direct = tmp_path / 'sweep', tmp_path / 'direct'
    least = least_args()  # every setting at its least value: the figures mean nothing, their equality everything
    assert main(['sweep', '--seeds', '1', '--workers', '1', '--threads', '2', '--smoke', *least, '--out', str(out)]) == 0
    assert exit_code(main, ['reproduce', '--smoke', *least, '--seed', '1', '--threads', '2', '--jobs', '1', '--quiet',
                            '--out', str(direct)]) == 0
    assert sections(out / 'seed1') == sections(direct)
    saved = json.loads((out / 'seed1' / 'results.json').read_text())
    assert saved['provenance']['torch_threads'] == 2
    sw = json.loads((out / 'sweep.json').read_text())
    assert sw['provenance']['worker_torch_threads'] == 2 and sw['runs']['1']['torch_threads'] == 2
    assert '1 workers, 2 torch thread(s) each' in (out / 'sweep.md').read_text()


def test_resume_on_another_thread_count_is_refused(local_sweep, tmp_path, capsys):
    _, src, _ = local_sweep
    out = tmp_path / 'sweep'
    shutil.copytree(src, out)
    assert main(['sweep', '--seeds', '0-1', '--smoke', '--resume', '--threads', '2', '--out', str(out)]) == 2
    assert 'was written on 1 torch thread(s), not 2; resume with --threads 1' in capsys.readouterr().err


def test_bad_thread_count_is_refused(tmp_path, capsys):
    assert main(['sweep', '--seeds', '0', '--smoke', '--threads', '0', '--out', str(tmp_path)]) == 2
    assert '--threads must be at least 1' in capsys.readouterr().out
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match='threads must be a positive int'):
        sweep.run_sweep(tmp_path, [0], threads=0)


def test_a_sweep_on_a_folder_in_use_is_refused_at_once(tmp_path, capsys):
    import os

    from agentrl.experiments.lock import FolderLock
    with FolderLock(tmp_path):
        assert main(['sweep', '--seeds', '0', '--smoke', '--out', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (f'agentrl sweep: error: {tmp_path} is in use by another run (PID {os.getpid()}); wait for it to end, '
                   'or give another --out\n')
    assert not (tmp_path / 'seed0').exists()



def test_the_rl_sections_reinforce_is_the_chapters_sft_then_rl(local_sweep, tmp_path):
    """``sweep --rl``'s ``reinforce`` variant (``chapter15/rl_section.py``) is 15.5's SFT -> RL to the bit: its curve
    equals the uninterrupted chapter run's of the same seed after the cold start, with 15.2 taken from that run's
    folder (``adopt_15_2``, as a sweep's later variants take it) rather than trained again."""
    _, _, direct = local_sweep
    smoke = Ch15Config.smoke()
    run = Chapter15(tmp_path, seed=0, config=smoke, rl=True, log=lambda line: None)
    assert run.adopt_15_2(direct)
    rl = run.run()['rl']
    n_cold = smoke.cold_start_step // smoke.sft_every + 1
    assert rl['variant'] == 'reinforce' and [list(p) for p in rl['hist']] == \
        [list(p) for p in sections(direct)['15.5']['curves']['SFT -> RL'][n_cold - 1:]]
