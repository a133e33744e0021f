"""``agentrl compare`` and the grid sweep it reads, both end to end (smoke budget); the statistics it tests with are
checked on known values in test_stats.py."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import agentrl as arl
from agentrl.experiments.chapter15.claims import CLAIMS

from agentrl.cli import main
from agentrl.experiments.sweeps.compare import key_figures


# --- a grid sweep, then compare (smoke budget: the figures mean nothing, the mechanics everything)

@pytest.fixture(scope='module')
def grid(tmp_path_factory):
    out = tmp_path_factory.mktemp('grid')
    rc = main(['sweep', '--smoke', '--seeds', '0-1', '--workers', '2', '--grid', 'model.qk_temperature=4,8', '--out', str(out)])
    return rc, out


def test_grid_sweep_runs_every_variant_over_the_same_seeds(grid):
    rc, out = grid
    assert rc == 0
    g = json.loads((out / 'grid.json').read_text())
    assert list(g['variants']) == ['model.qk_temperature=4', 'model.qk_temperature=8'] and g['seeds'] == [0, 1]
    for name, tau in [('model.qk_temperature=4', 4.0), ('model.qk_temperature=8', 8.0)]:
        assert g['variants'][name]['keys'] == {'model.qk_temperature': tau} and g['variants'][name]['n'] == 2
        sw = json.loads((out / name / 'sweep.json').read_text())
        assert sw['variant'] == name and sw['overrides'] == {'model.qk_temperature': tau} and sw['budget'] == 'smoke'
        for s in (0, 1):
            saved = json.loads((out / name / f'seed{s}' / 'results.json').read_text())
            assert saved['seed'] == s and saved['config']['model']['qk_temperature'] == tau
    assert (out / 'model.qk_temperature=4' / 'sweep.md').read_text().startswith('# Chapter 15 over 2 seeds: model.qk_temperature=4')


def test_compare_a_grid_prints_and_writes_table_and_figure(grid, capsys, monkeypatch):
    _, out = grid
    monkeypatch.setenv('COLUMNS', '250')  # a wide terminal: rich folds nothing
    assert main(['compare', str(out)]) == 0
    printed = capsys.readouterr().out
    assert 'Findings: hold rate' in printed and 'Key figures' in printed and 'oracle SFT held-out pass, family init' in printed
    result = json.loads((out / 'compare.json').read_text())
    assert [v['name'] for v in result['variants']] == ['model.qk_temperature=4', 'model.qk_temperature=8']
    assert result['settings'] == [['model.qk_temperature', [4.0, 8.0]]]
    bands = [r for r in result['findings'] if not r['finding'].startswith('claim: ')]
    assert len(bands) == 30 and len(result['findings']) == 30 + len(CLAIMS)  # BugFix's bands, then the chapter's claims
    assert len(result['figures']) == len(key_figures(arl.FAMILIES))
    fam = next(r for r in result['figures'] if r['figure'] == 'oracle SFT held-out pass, family minmax')
    for i, name in enumerate(['model.qk_temperature=4', 'model.qk_temperature=8']):  # the seeds' own figures
        assert fam['values'][i] == [json.loads((out / name / f'seed{s}' / 'results.json').read_text())
                                    ['sections']['15.2']['heldout_by_family']['minmax'] for s in (0, 1)]
    row = next(r for r in result['figures'] if r['figure'] == 'SFT -> RL: final held-out pass')
    assert row['vs_first'][0]['diff'] == pytest.approx(row['stats'][1]['mean'] - row['stats'][0]['mean'])
    md = (out / 'compare.md').read_text()
    assert md.startswith('# Comparison: model.qk_temperature=4 vs model.qk_temperature=8')
    assert '| model.qk_temperature | 4.0 | 8.0 |' in md and 'p (paired t, Holm)' in md and '![The four recipes per variant](compare.png)' in md
    assert (out / 'compare.png').stat().st_size > 20_000


def test_two_sweeps_that_share_seeds_are_paired_and_their_p_adjusted_by_holm(grid, tmp_path, capsys, monkeypatch):
    _, out = grid
    monkeypatch.setenv('COLUMNS', '250')
    a, b = out / 'model.qk_temperature=4', out / 'model.qk_temperature=8'
    assert main(['compare', str(a), str(b), '--out', str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / 'compare.json').read_text())
    tests = [r['vs_first'][0] for r in result['figures']]
    m = sum(t['p'] is not None for t in tests)
    assert result['comparisons']['figures'] == m > 0
    header = (f'model.qk_temperature=8 − model.qk_temperature=4: paired t-test on 2 shared seeds; p adjusted for {m} '
              'comparisons (Holm)')
    md = (tmp_path / 'compare.md').read_text()
    assert header in printed and header in md and 'p (paired t, Holm)' in md
    for row, t in zip(result['figures'], tests):  # each difference: the mean of the seeds' own paired differences
        at = [dict(zip(seeds, values)) for seeds, values in zip(row['seeds'], row['values'])]
        d = np.array([at[1][s] - at[0][s] for s in (0, 1)])
        assert t['test'] == 'paired t-test' and t['seeds'] == [0, 1] and t['diff'] == pytest.approx(d.mean())
        if t['p'] is not None:
            assert t['statistic'] == pytest.approx(d.mean() / (d.std(ddof=1) / np.sqrt(2))) and t['df'] == 1
            assert t['p'] <= t['p_holm'] <= 1
    first = min((t for t in tests if t['p'] is not None), key=lambda t: t['p'])
    assert first['p_holm'] == pytest.approx(min(1.0, m * first['p']))  # Holm's first step is Bonferroni's
    row = result['figures'][tests.index(first)]
    assert f"| {row['section']} | {row['figure']} |" in md and f"| {first['p_holm']:.3f} |" in md

    assert main(['compare', str(a), str(b), '--test', 'wilcoxon', '--out', str(tmp_path)]) == 0
    assert 'Wilcoxon signed-rank test on 2 shared seeds' in capsys.readouterr().out
    assert 'p (Wilcoxon, Holm)' in (tmp_path / 'compare.md').read_text()
    with pytest.raises(SystemExit):
        main(['compare', str(a), str(b), '--test', 'sign'])
    assert "argument --test: invalid choice: 'sign'" in capsys.readouterr().err


def test_sweeps_on_other_seeds_are_compared_by_welchs_test(grid, tmp_path, capsys):
    _, out = grid
    other = tmp_path / 'seeds-2-3'  # variant 8 as if it had run seeds 2 and 3
    shutil.copytree(out / 'model.qk_temperature=8', other)
    for old, new in ((0, 2), (1, 3)):
        (other / f'seed{old}').rename(other / f'seed{new}')
        saved = json.loads((other / f'seed{new}' / 'results.json').read_text())
        (other / f'seed{new}' / 'results.json').write_text(json.dumps({**saved, 'seed': new}))
    sweep = json.loads((other / 'sweep.json').read_text())
    (other / 'sweep.json').write_text(json.dumps({**sweep, 'seeds': [2, 3], 'aggregated_seeds': [2, 3]}))
    assert main(['compare', str(out / 'model.qk_temperature=4'), str(other), '--out', str(tmp_path / 'c')]) == 0
    md = (tmp_path / 'c' / 'compare.md').read_text()
    assert "seeds-2-3 − model.qk_temperature=4: Welch's t-test (the variants share fewer than two seeds)" in md
    assert 'p (Welch, Holm)' in md and 'paired' not in capsys.readouterr().out
    result = json.loads((tmp_path / 'c' / 'compare.json').read_text())
    assert {t['test'] for r in result['figures'] for t in r['vs_first']} == {"Welch's t-test"}


def test_compare_refuses_other_budgets_naming_them_unless_allowed(grid, tmp_path, capsys):
    _, out = grid
    a, b, c = tmp_path / 'a', tmp_path / 'b', tmp_path / 'c'
    shutil.copytree(out / 'model.qk_temperature=4' / 'seed0', a)
    shutil.copytree(out / 'model.qk_temperature=4' / 'seed1', b)
    saved = json.loads((b / 'results.json').read_text())
    saved['config'].update(sft_steps=60, rl_every=10)
    (b / 'results.json').write_text(json.dumps(saved))
    assert main(['compare', str(a), str(b), '--out', str(c)]) == 2
    err = capsys.readouterr().err
    assert 'different chapter budgets' in err and 'sft_steps (a 4, b 60)' in err and 'rl_every (a 1, b 10)' in err
    assert '--allow rl_every,sft_steps' in err and not (c / 'compare.md').exists()
    assert main(['compare', str(a), str(b), '--allow', 'sft_steps', '--out', str(c)]) == 2  # rl_every still differs
    assert main(['compare', str(a), str(b), '--allow', 'sft_stepz', '--out', str(c)]) == 2
    assert 'did you mean sft_steps' in capsys.readouterr().err
    assert main(['compare', str(a), str(b), '--allow', 'sft_steps,rl_every', '--out', str(c)]) == 0
    md = (c / 'compare.md').read_text()
    assert '| rl_every | 1 | 10 |' in md and '| sft_steps | 4 | 60 |' in md  # what differs is shown
