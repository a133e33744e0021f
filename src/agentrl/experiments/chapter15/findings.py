"""A finding: a band, a claim or an exercise's answer, with its verdict on one run, and the tables that show them.

The chapter's findings are checked three ways: its bands (``bands.py``, docs/bands.md) on a run's transcript, its
claims (``claims.py``, docs/claims.md) on a run's figures, and each exercise's answers (``exercises/answers.py``)
on the exercise's figures. Each is a rule stated before any run, and each check gives the same thing: a verdict
(it holds, it does not, or the run cannot decide it) with what the run measured, in words. That is a ``Finding``.

One renderer shows them all: ``table`` a run's findings, in the terminal or in Markdown (the reports), and
``rates_table`` their hold rates over seeds (``hold_rates``: ``sweep.json``, ``exercise.json``), each with its 95%
Wilson interval (``wilson``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .tables import rich_table, table as markdown


@dataclass(frozen=True)
class Kind:
    """How the findings of one kind read: the ``header`` of the column that names them, the ``label`` that names one
    (a Markdown format of its fields), the ``plural`` a count counts (``'N of M claims hold'``), a verdict of None in
    a table (``none``) and in a count (``none_count``), the heading of the verdict's column (``holds``)."""
    header: str
    label: str
    plural: str
    none: str
    none_count: str = 'not applicable'
    holds: str = 'holds'


KINDS = {'band': Kind('finding (band)', '{key}', 'bands', 'n/a'),
         'claim': Kind('claim', '{section} `{key}`', 'claims', 'n/a'),
         'answer': Kind('answer', '`{key}`: {statement}', 'answers', 'undecided', 'undecided'),
         'beyond': Kind('claim', '{statement}', 'claims', 'not measurable', 'not measurable', 'supported')}
"""The kinds of finding: the chapter's bands and claims, the exercises' answers, and the claims of ``reproduce
--extended``'s "Beyond the chapter" (``report.BEYOND_CLAIMS``)."""


@dataclass(frozen=True)
class Finding:
    """One band, claim or answer, and its verdict on one run."""
    kind: str
    """A key of ``KINDS``."""
    key: str
    """Its name: a band's (``bands.CHAPTER``'s key), a claim's or an answer's short key."""
    section: str
    """The section of the chapter it belongs to ('' for an answer)."""
    statement: str
    """What it says, in words (a band: its name)."""
    rule: str
    """The figure that decides it and its threshold ('' for a band: its name says both)."""
    verdict: bool | None
    """True (it holds), False (it does not) or None (the run cannot decide it: a claim the environment or the
    settings leave nothing to apply to, an answer the run has nothing to decide with)."""
    measured: str
    """What the run measured, in words (with a verdict of None: why there is none)."""
    chapter: str = ''
    """The chapter's own figure, for a band."""

    @property
    def label(self) -> str:
        """How a table names it."""
        return KINDS[self.kind].label.format(key=self.key, section=self.section, statement=self.statement)


def tally(findings) -> tuple:
    """Findings -> (how many hold, how many the run decides, how many it does not)."""
    decided = [f.verdict for f in findings if f.verdict is not None]
    return sum(decided), len(decided), len(findings) - len(decided)


def summary(findings) -> str:
    """``'N of M claims hold'`` (M: those the run decides), with how many it does not (``'(2 not applicable)'``)."""
    held, m, none = tally(findings)
    kind = KINDS[findings[0].kind if findings else 'claim']
    return f'{held} of {m} {kind.plural} hold' + (f' ({none} {kind.none_count})' if none else '')


def verdict(ok, kind: Kind, medium: str = 'md'):
    """A verdict in a table cell: Markdown's ``yes`` / ``**no**``, the terminal's coloured ``held`` / ``not held``,
    the HTML report's plain ones; None as ``kind`` says (``n/a``, ``undecided``)."""
    word = kind.none if ok is None else ('yes' if ok else '**no**') if medium == 'md' else 'held' if ok else 'not held'
    if medium != 'rich':
        return word
    from rich.text import Text
    return Text.assemble((word, 'dim' if ok is None else 'green' if ok else 'red'))


def columns(kind: Kind, findings, chapter: bool = True) -> list:
    """The columns that say what each finding is, as (heading, its cell of a finding): its name, the chapter's figure
    (with ``chapter``, where a finding has one), what decides it (where one says)."""
    out = [(kind.header, lambda f: f.label)]
    if chapter and any(f.chapter for f in findings):
        out.append(('chapter', lambda f: f.chapter))
    if any(f.rule for f in findings):
        out.append(('decided by', lambda f: f.rule))
    return out


def rows(findings, medium: str = 'md') -> tuple:
    """(header, rows) of a table of a run's findings, one row each: ``columns``, what the run measured, the verdict.
    ``medium``: ``'md'`` (a report), ``'rich'`` (the terminal, which keeps to the run: no chapter's figure) or
    ``'html'`` (``report.html``)."""
    kind = KINDS[findings[0].kind if findings else 'claim']
    cols = [*columns(kind, findings, medium != 'rich'),
            ('measured' if medium == 'rich' else 'this run', lambda f: f.measured),
            (kind.holds, lambda f: verdict(f.verdict, kind, medium))]
    return [h for h, _ in cols], [[cell(f) for _, cell in cols] for f in findings]


def table(findings, title: str | None = None):
    """A run's findings as a Markdown table, or with a ``title`` as the terminal's rich Table."""
    return markdown(*rows(findings)) if title is None else rich_table(title, *rows(findings, 'rich'))


def hold_rates(per_seed: dict, head, figure: str = 'figure') -> dict:
    """Findings over seeds: {seed: [Finding]} -> {key: {**head(finding), 'per_seed': {seed: {'holds', figure: what it
    measured}}, 'hold_rate', 'held', 'n'}}, in the findings' order. A verdict of None counts in neither ``held`` nor
    ``n``; the row then has ``not_applicable`` (how many seeds), and when no seed decides it, ``hold_rate`` None and
    ``why`` (the first seed's reason)."""
    out = {}
    for seed in sorted(per_seed):
        for f in per_seed[seed]:
            row = out.setdefault(f.key, {**head(f), 'per_seed': {}})
            row['per_seed'][str(seed)] = {'holds': f.verdict, figure: f.measured}
    for row in out.values():
        outcomes = [v['holds'] for v in row['per_seed'].values()]
        oks = [o for o in outcomes if o is not None]
        row.update(hold_rate=sum(oks) / len(oks) if oks else None, held=sum(oks), n=len(oks))
        if len(oks) < len(outcomes):
            row['not_applicable'] = len(outcomes) - len(oks)
        if not oks and outcomes:
            row['why'] = next(iter(row['per_seed'].values()))[figure]
    return out


def wilson(held: int, n: int) -> list:
    """The 95% Wilson score interval of a hold rate ``held`` of ``n`` -> [low, high] (None with n = 0).

    Over 10 seeds a rate is coarse, and the interval says how coarse: 9/10 is [0.60, 0.98]. Unlike the normal
    approximation p +- 1.96 sqrt(p(1-p)/n), it stays inside [0, 1] and is not a point at 0/n or n/n (10/10 is [0.72,
    1]); ``scipy.stats.binomtest(...).proportion_ci(method='wilson')``."""
    if not 0 <= held <= n:
        raise ValueError(f'a hold rate needs 0 <= held <= n, got {held} of {n}')
    if n == 0:
        return None
    from scipy.stats import binomtest  # here, not at the top: a single run needs no scipy
    ci = binomtest(held, n).proportion_ci(0.95, method='wilson')
    return [float(ci.low), float(ci.high)]


def every_seed_line(rates: dict, noun: str = ' claims') -> str:
    """``'N of M claims hold at every seed'`` over ``hold_rates``' rows (M: those some seed decides), with how many no
    seed decides (``noun``: what follows M)."""
    decided = [r for r in rates.values() if r['n']]
    held, none = sum(r['held'] == r['n'] for r in decided), len(rates) - len(decided)
    return f'{held} of {len(decided)}{noun} hold at every seed' + (f' ({none} not applicable)' if none else '')


def interval(held: int, n: int) -> str:
    """A hold rate's 95% Wilson interval as a table shows it: ``'[60%, 98%]'``."""
    lo, hi = wilson(held, n)
    return f'[{lo:.0%}, {hi:.0%}]'


def rates_table(kind: str, rates: dict, title: str | None = None):
    """Hold rates over seeds (``hold_rates``' rows, as ``sweep.json`` and ``exercise.json`` keep them) as a Markdown
    table, or with a ``title`` the terminal's: ``columns``, the hold rate and its 95% Wilson interval (``wilson``), how
    many of the seeds that decide it it holds at, and the seeds where it fails (where no seed decides it: why)."""
    k = KINDS[kind]
    heads = {key: Finding(kind, key, r.get('section', ''), r.get('lesson', r.get('says', '')), r.get('test', ''), None,
                          '', r.get('chapter', '')) for key, r in rates.items()}
    cols = columns(k, heads.values(), title is None)
    header = [*(h for h, _ in cols), 'hold rate', '95% CI (Wilson)', 'held', 'seeds where it fails']
    body = [[*(cell(heads[key]) for _, cell in cols),
             *((k.none, '—', '—', r.get('why', '—')) if r['hold_rate'] is None else
               (f"{r['hold_rate']:.0%}", interval(r['held'], r['n']), f"{r['held']}/{r['n']}",
                ', '.join(s for s, v in r['per_seed'].items() if v['holds'] is False) or '—'))]
            for key, r in rates.items()]
    return markdown(header, body) if title is None else rich_table(title, header, body)
