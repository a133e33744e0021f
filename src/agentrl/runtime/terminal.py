"""The ``agentrl`` commands' console: a terminal's own width, and no folded values in a pipe or a file.

``rich`` lays tables out to the console's width, and a console that writes to a pipe or a file is 80 columns
wide unless ``COLUMNS`` says otherwise: a wider table then folds its cells, splitting a label from its value
(``held-out`` on one line, ``0.10`` on the next) and breaking ``grep`` and ``awk``. Written anywhere but a
terminal, the commands' console is ``PIPE_WIDTH`` columns wide instead, so every table keeps its natural width
and every line stays one line; ``COLUMNS`` still decides when it is set.
"""
from __future__ import annotations

import os

PIPE_WIDTH = 1000
"""The width of a console that writes to a pipe or a file (no table of the commands is this wide)."""


def console(**kwargs):
    """A ``rich.console.Console`` (``kwargs`` passed on): a terminal's width, else ``COLUMNS`` or ``PIPE_WIDTH``."""
    from rich.console import Console
    out = Console(**kwargs)
    if 'width' not in kwargs and not out.is_terminal and not os.environ.get('COLUMNS'):
        out = Console(width=PIPE_WIDTH, **kwargs)
    return out


def rule_width(out) -> int:
    """How wide a rule drawn on ``out`` should be: the console's width, at most 100 columns in a pipe or a file."""
    return out.width if out.is_terminal else min(out.width, 100)


def one_line(title: str):
    """A table's title kept on one line: rich folds a title to its table's width, however wide the console."""
    from rich.text import Text
    return Text(title, no_wrap=True, overflow='ignore')
