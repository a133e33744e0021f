"""``agentrl compare`` and the grid sweep it reads, both end to end (smoke budget); the statistics it tests with are
checked on known values in test_stats.py."""
from __future__ import annotations

import json
import shutil

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
    assert '| model.qk_temperature | 4.0 | 8.0 |' in md and 'p (Welch)' in md and '![The four recipes per variant](compare.png)' in md
    assert (out / 'compare.png').stat().st_size > 20_000


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
