"""Markdown and number formatting shared by ``report.md``, ``sweep.md`` and ``compare.md``.

Every figure a reader sees goes through here as a labelled number, never a Python repr.
"""
from __future__ import annotations


def table(header, rows) -> str:
    """A Markdown table: a header row and one row per tuple (cells through ``str``, a ``|`` in one escaped)."""
    cell = lambda c: str(c).replace('|', '\\|')  # noqa: E731
    out = ['| ' + ' | '.join(map(cell, header)) + ' |', '|' + '|'.join(' --- ' for _ in header) + '|']
    out += ['| ' + ' | '.join(cell(c) for c in row) + ' |' for row in rows]
    return '\n'.join(out)


def fmt(stat, digits=2) -> str:
    """A summary (``stats.summarize``) as 'mean ± half-width' (just the mean with one seed, a dash when missing)."""
    if not stat:
        return '—'
    m = f"{stat['mean']:.{digits}f}"
    if stat.get('half_width') is not None:
        m += f" ± {stat['half_width']:.{digits}f}"
    return m + (f" [n={stat['n']}]" if stat.get('partial') else '')


def shares(d: dict, digits=2) -> str:
    """``{'minmax': 0.3, 'range': 0.2}`` -> ``'minmax 0.30, range 0.20'``."""
    return ', '.join(f'{k} {v:.{digits}f}' for k, v in d.items()) if d else '—'


def bold_min(values, digits=2) -> list:
    """Numbers as text, every occurrence of the minimum in bold (None: a dash; no bold when all are equal)."""
    present = [v for v in values if v is not None]
    low = min(present) if len(set(present)) > 1 else None
    return ['—' if v is None else f'**{v:.{digits}f}**' if v == low else f'{v:.{digits}f}' for v in values]


def by_family(d: dict | None, groups=()) -> dict:
    """A dict keyed by task group in ``groups``' order (the environment's: ``ChapterEnv.groups()``, or a run's
    ``results.json['groups']``; ``results.json`` sorts its keys), groups not among them after, sorted."""
    d = d or {}
    known = list(groups or ())
    return {f: d[f] for f in [*known, *sorted(set(d) - set(known))] if f in d}
