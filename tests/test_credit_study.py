"""docs/rewards.md quotes the recorded episode-vs-turn credit runs (docs/data/credit-*.json): the page equals them."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'scripts'))

import credit_study  # noqa: E402

RUNS = [ROOT / 'docs/data/credit-seeds-0-9.json', ROOT / 'docs/data/credit-seeds-10-19.json']
PAGE = (ROOT / 'docs/rewards.md').read_text()


def test_the_table_is_the_recorded_runs():
    rows = credit_study.table_rows(RUNS)
    assert len(rows) == 6
    for row in rows:
        assert row in PAGE, row


def test_the_quoted_figures_are_the_recorded_runs():
    s09, s1019 = (credit_study.summarize(__import__('json').loads(p.read_text())) for p in RUNS)
    for figure in (f"+{s09['turn']['minus_episode']['mean']:.3f} (seeds 0-9) and "
                   f"+{s1019['turn']['minus_episode']['mean']:.3f} (seeds 10-19)",
                   f"on 8 of 10 and on 9 of 10 seeds" if (s09['turn_gamma0.5']['higher'], s1019['turn_gamma0.5']['higher'])
                   == (8, 9) else 'MISMATCH',
                   f"(+{s1019['turn_gamma0.5']['minus_episode']['mean']:.3f} ± "
                   f"{s1019['turn_gamma0.5']['minus_episode']['ci95']:.3f})"):
        assert figure in PAGE, figure
    ahead = [credit_study.seeds_ahead(p, arm, 40) for arm in ('turn', 'turn_gamma0.5') for p in RUNS]
    assert re.search(rf'seeds \(0-9\) and {ahead[1]} of 10 \(10-19\); with `gamma=0.5` on {ahead[2]} of 10 and '
                     rf'{ahead[3]} of 10', PAGE) and f'on {ahead[0]} of 10\n  seeds (0-9)' in PAGE
