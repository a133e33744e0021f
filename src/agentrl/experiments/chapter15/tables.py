"""Tables and number formatting shared by ``report.md``, ``sweep.md``, ``compare.md`` and the commands' terminal tables.

Every figure a reader sees goes through here as a labelled number, never a Python repr. A table is a header and
rows of cells, written as Markdown (``table``) or for the terminal (``rich_table``), the same cells either way.
"""
from __future__ import annotations


def table(header, rows) -> str:
    """A Markdown table: a header row and one row per tuple (cells through ``str``, a ``|`` in one escaped, a line
    break a space)."""
    cell = lambda c: str(c).replace('|', '\\|').replace('\n', ' ')  # noqa: E731
    out = ['| ' + ' | '.join(map(cell, header)) + ' |', '|' + '|'.join(' --- ' for _ in header) + '|']
    out += ['| ' + ' | '.join(cell(c) for c in row) + ' |' for row in rows]
    return '\n'.join(out)


def rich_table(title: str, header, rows, **column):
    """``table``'s rows as a rich Table titled ``title`` (on one line): Markdown's marks (bold, code) dropped, rich's
    markup escaped, a cell of rich text (a coloured verdict) kept; ``column``: every column's options."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ...runtime.terminal import one_line
    out = Table(title=one_line(title))
    for name in header:
        out.add_column(name, **column)
    for row in rows:
        out.add_row(*(c if isinstance(c, Text) else escape(str(c).replace('**', '').replace('`', '')) for c in row))
    return out


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


def by_group(d: dict | None, groups=()) -> dict:
    """A dict keyed by task group in ``groups``' order (the environment's: ``ChapterEnv.groups()``, or a run's
    ``results.json['groups']``; ``results.json`` sorts its keys), groups not among them after, sorted."""
    d = d or {}
    known = list(groups or ())
    return {f: d[f] for f in [*known, *sorted(set(d) - set(known))] if f in d}
