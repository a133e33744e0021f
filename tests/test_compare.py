"""``agentrl compare`` and the grid sweep it reads: the statistics it tests with, and both end to end (smoke budget)."""
from __future__ import annotations

import json
import math
import shutil

import pytest

import agentrl as arl
from agentrl.experiments.chapter15.claims import CLAIMS

from agentrl.cli import main
from agentrl.experiments.sweeps import stats as S
from agentrl.experiments.sweeps.compare import key_figures


# --- Student's t and Welch's test on known values

def _t_pdf(x, df):
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) * (1 + x * x / df) ** (-(df + 1) / 2)


def test_t_cdf_matches_the_quantile_table_and_numeric_integration():
    for df in range(1, 31):  # the table sweep.py has always used: t_{0.975, df}
        assert S.t_cdf(S.t975(df), df) == pytest.approx(0.975, abs=2e-5)
        assert S.t_quantile(0.975, df) == pytest.approx(S.t975(df), abs=2e-4)
    for df, t in [(4.41, 1.732), (7.3, 0.4), (12.5, -2.1)]:  # non-integer df, as Welch's test has
        n, lo = 20000, -40.0  # Simpson's rule from far in the left tail
        h = (t - lo) / n
        area = h / 3 * sum((1 if i in (0, n) else 4 if i % 2 else 2) * _t_pdf(lo + i * h, df) for i in range(n + 1))
        assert S.t_cdf(t, df) == pytest.approx(area, abs=2e-4)
    assert S.t_cdf(0.0, 3.3) == pytest.approx(0.5) and S.t_quantile(0.025, 9) == pytest.approx(-2.2622, abs=2e-4)


def test_welch_known_values():
    w = S.welch([1, 2, 3, 4], [2, 4, 6, 8])
    # by hand: diff 2.5, se sqrt(5/12 + 20/12), t = sqrt(3), df = 4.4118 (Welch-Satterthwaite)
    assert w['diff'] == 2.5 and w['se'] == pytest.approx(math.sqrt(25 / 12)) and w['t'] == pytest.approx(math.sqrt(3))
    assert w['df'] == pytest.approx(4.411765, abs=1e-5) and w['p'] == pytest.approx(0.1516, abs=2e-4)
    q = S.t_quantile(0.975, w['df'])
    assert w['ci95'] == pytest.approx([2.5 - q * w['se'], 2.5 + q * w['se']])
    back = S.welch([2, 4, 6, 8], [1, 2, 3, 4])
    assert back['diff'] == -2.5 and back['p'] == pytest.approx(w['p'])
    assert S.welch([0.5], [0.7, 0.9])['p'] is None and S.welch([0.5], [0.7])['diff'] == pytest.approx(0.2)
    assert S.welch([1, 1], [1, 1])['p'] == 1.0 and S.welch([0, 0], [1, 1])['p'] == 0.0  # no spread on either side
    with pytest.raises(ValueError):
        S.welch([], [1])


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
