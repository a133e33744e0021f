"""What ``agentrl compare`` shows: ``compare.md`` (``render``) and the terminal's tables (``print_terminal``).

Each table of differences (the findings' hold rates, the key figures) opens with its ``method`` line: which test
gave each variant's p (paired by seed, or Welch's where the variants share fewer than two seeds) and for how many
comparisons the table's p-values are adjusted (Holm). Cells are read from ``compare.compare``'s result.
"""
from __future__ import annotations

from ..chapter15.findings import interval
from ..chapter15.tables import fmt, rich_table, table


def _hold(stat) -> str:
    """A hold rate from the summary of its 0/1 outcomes: ``'9/10 (90%) [60%, 98%]'``, with its 95% Wilson interval."""
    if not stat:
        return '—'
    held = round(stat['mean'] * stat['n'])
    return f"{held}/{stat['n']} ({stat['mean']:.0%}) {interval(held, stat['n'])}"


def _diff(test, digits=2, pct=False) -> str:
    if not test:
        return '—'
    f = (lambda x: f'{x * 100:+.0f} pp') if pct else (lambda x: f'{x:+.{digits}f}')
    if not test.get('se'):  # one seed a side, or every seed agrees on both sides: no interval to give
        return f(test['diff'])
    lo, hi = test['ci95']
    if pct:  # a difference of two hold rates lies in [-100, +100] pp whatever a small-sample t interval says
        lo, hi = max(lo, -1.0), min(hi, 1.0)
    return f(test['diff']) + f' [{f(lo)}, {f(hi)}]'


def _p(test) -> str:
    """The Holm-adjusted p, in bold below 0.05; a dash where there is no test (fewer than two seeds a side, or
    nothing to test against: no spread)."""
    if not test or test['p'] is None:
        return '—'
    return f"**{test['p_holm']:.3f}**" if test['p_holm'] < 0.05 else f"{test['p_holm']:.3f}"


SHORT = {'paired t-test': 'paired t', 'Wilcoxon signed-rank test': 'Wilcoxon', "Welch's t-test": 'Welch'}
"""A test's name in a column heading."""


def _tests(rows, j) -> list:
    """The tests of the ``j``-th other variant against the baseline, over a table's rows."""
    return [r['vs_first'][j] for r in rows if r['vs_first'][j]]


def _columns(result, part: str) -> tuple:
    """The variants' names and the headings of a table's variant columns (``part``: 'findings' or 'figures'): each
    variant with its seed count, then per other variant its difference and the test whose adjusted p follows."""
    names = [v['name'] for v in result['variants']]
    base = names[0]
    head = [f"{n} (n={len(v['seeds'])})" for n, v in zip(names, result['variants'])]
    for j, n in enumerate(names[1:]):
        tests = ' / '.join(dict.fromkeys(SHORT[t['test']] for t in _tests(result[part], j))) or 'none'
        head += [f'{n} − {base} [95% CI]', f'p ({tests}, Holm)']
    return names, head


def method(result, part: str) -> str:
    """What a table's differences were tested with and how its p-values were adjusted, in words (its header line):
    e.g. 'B − A: paired t-test on 10 shared seeds; p adjusted for 24 comparisons (Holm)'."""
    names = [v['name'] for v in result['variants']]
    lines = []
    for j, name in enumerate(names[1:]):
        tests = _tests(result[part], j)
        pairs = [t['n'] for t in tests if t['seeds']]
        unpaired = len(tests) - len(pairs)
        label = next((t['test'] for t in tests if t['seeds']), '')
        if not tests:
            how = 'no test'
        elif not pairs:
            how = "Welch's t-test (the variants share fewer than two seeds)"
        else:
            how = f'{label} on {max(pairs)} shared seeds' + (f' (down to {min(pairs)} in rows some seeds lack)'
                                                               if min(pairs) < max(pairs) else '')
            if unpaired:
                how += f"; Welch's t-test on {unpaired} row{'s' * (unpaired > 1)} with fewer than two shared seeds"
        lines.append(f'{name} − {names[0]}: {how}')
    m = result['comparisons'][part]
    return '; '.join(lines) + (f'; p adjusted for {m} comparison{"s" * (m != 1)} (Holm), bold where the adjusted '
                               'p < 0.05' if m else '; no p-value (fewer than two seeds a side, or no spread)')


def finding_rows(result) -> list:
    rows = []
    for r in result['findings']:
        na = r.get('not_applicable') or [0] * len(r['stats'])
        cells = [_hold(s) if s or not k else 'n/a' for s, k in zip(r['stats'], na)]
        for t in r['vs_first']:
            cells += [_diff(t, pct=True), _p(t)]
        rows.append((r['finding'], *cells))
    return rows


def figure_rows(result) -> list:
    rows = []
    for r in result['figures']:
        digits = 3 if 'entropy' in r['figure'] or 'NLL' in r['figure'] else 2
        cells = [fmt(s, digits) + (f" [n={s['n']}]" if s and s['n'] < len(v['seeds']) else '')
                 for s, v in zip(r['stats'], result['variants'])]
        for t in r['vs_first']:
            cells += [_diff(t, digits), _p(t)]
        rows.append((r['section'], r['figure'], *cells))
    return rows


def opening(base: str, test: str) -> str:
    """``compare.md``'s first paragraph: what each cell shows, and which tests give the differences' p."""
    from .stats import TESTS
    other = next(k for k in TESTS if k != test)
    return (f'Baseline: **{base}**. Each figure: mean ± half-width of its 95% confidence interval over the seeds '
            '(t quantile × std / √n; the mean alone for one seed); each hold rate: the seeds it holds at of those '
            'that decide it, with its 95% Wilson interval. Each difference: the other variant minus the baseline '
            'with its 95% CI and two-sided p. Where two variants share seeds the difference is paired by seed, on '
            f'the seeds they share: the {TESTS[test]} on the per-seed differences (the {TESTS[other]}: '
            f"`--test {other}`), the interval the t interval of their mean; where they share fewer than two seeds, "
            "Welch's unequal-variance t-test. Each table's p-values are adjusted for the number of comparisons in it "
            "(Holm's step-down method; the intervals are not), and an adjusted p < 0.05 is in bold; none with fewer "
            'than two seeds a side, or where there is no spread to test against. Hold rates are tested as 0/1 '
            "outcomes per seed (their intervals cut at ±100 pp); n/a: a claim that applies at none of the variant's "
            'seeds (its environment lacks what it needs).')


def render(result: dict, settings: list, provenance: list, figure: str | None) -> str:
    """``compare.md``."""
    names = [v['name'] for v in result['variants']]
    md = [f"# Comparison: {' vs '.join(names)}", '',
          opening(names[0], result['test']), '',
          table(['variant', 'folder', 'seeds', 'settings changed'],
                [(v['name'], f"`{v['path']}`", ', '.join(map(str, v['seeds'])),
                  ', '.join(f'`{k}={x}`' for k, x in v['overrides'].items()) or '—') for v in result['variants']]), '']
    if settings:
        md += ['## Settings that differ', '', table(['key', *names], [(k, *('—' if x is None else x for x in vals)) for k, vals in settings]), '']
    md += ['## Findings: hold rate', '', method(result, 'findings') + '.', '',
           table(['finding (band)', *_columns(result, 'findings')[1]], finding_rows(result)), '',
           '## Key figures', '', method(result, 'figures') + '.', '',
           table(['section', 'figure', *_columns(result, 'figures')[1]], figure_rows(result)), '']
    if figure:
        md += [f'![The four recipes per variant]({figure})', '']
    if provenance:
        md += ['## Provenance where it differs', '', table(['record', *names], provenance), '']
    return '\n'.join(md)


def print_terminal(result, settings, provenance, console) -> None:
    names = [v['name'] for v in result['variants']]
    for title, part, cols, rows in [('Findings: hold rate', 'findings', ['finding (band)'], finding_rows(result)),
                                    ('Key figures (mean ± 95% CI over seeds)', 'figures', ['section', 'figure'],
                                     figure_rows(result))]:
        console.print(rich_table(title, [*cols, *_columns(result, part)[1]], rows, overflow='fold'))
        console.print(method(result, part), markup=False, highlight=False)
    if settings:
        console.print('settings that differ: ' + '; '.join(f"{k}: {', '.join(f'{n} {x}' for n, x in zip(names, vals))}"
                                                          for k, vals in settings), markup=False, highlight=False)
    if provenance:
        console.print('provenance differs: ' + '; '.join(f'{r[0]}: ' + ' vs '.join(r[1:]) for r in provenance),
                      markup=False, highlight=False)
