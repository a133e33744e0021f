"""JSON Lines: one file per recipe run, one line per record, appended whole (section 15.6's monitors, kept).

The schema (``SCHEMA``), one JSON object per line:

- the first line, written when the file is created: ``{"schema": "agentrl.metrics/1", "run": NAME,
  "created": UNIX_TIME}``;
- then one line per record: ``{"step": INT, "time": UNIX_TIME, "metrics": {NAME: FLOAT or null}}``
  (JSON has no NaN or infinity: a non-finite value is written as null).

Each line is written with one ``os.write`` on a file opened for appending, so a killed run leaves every
record it finished, complete; ``read_jsonl`` reads those and skips a last line cut short (a disk full,
a power cut), and raises on damage anywhere else.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .protocol import finite_or_none

SCHEMA = 'agentrl.metrics/1'
"""The value of the header line's ``schema`` key; a reader checks it."""


class JsonlLogger:
    """Append each record to ``path`` (a ``.jsonl`` file; its folder is created), one line per record.

    ``run``: the name written in the header line (default: the file's folder name). A file that exists is
    appended to (a resumed run continues it) and keeps its header. Use as a context manager, or ``close()``."""

    def __init__(self, path, run: str | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if new:
            self._write({'schema': SCHEMA, 'run': run or self.path.parent.name, 'created': time.time()})

    def _write(self, record: dict):
        if self._fd is None:
            raise ValueError(f'JsonlLogger({str(self.path)!r}) is closed')
        line = json.dumps(record, allow_nan=False, separators=(',', ':')) + '\n'
        os.write(self._fd, line.encode())  # one write of a whole line, at the end of the file (O_APPEND)

    def log(self, metrics: dict, step: int) -> None:
        """Append ``{"step", "time", "metrics"}`` as one line."""
        self._write({'step': int(step), 'time': time.time(),
                     'metrics': {k: finite_or_none(float(v)) for k, v in metrics.items()}})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _lines(path):
    """(line number, parsed object) of every complete line of ``path``; a cut-short last line is left out."""
    text = Path(path).read_text(encoding='utf-8')
    lines = text.split('\n')
    last_complete = text.endswith('\n')
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((i, json.loads(line)))
        except json.JSONDecodeError as err:
            if i == len(lines) and not last_complete:  # the last line, cut short by a kill: drop it
                break
            raise ValueError(f'{path}: line {i} is not JSON ({err.msg}); the file is damaged before its end') from err
    return out


def _checked(path, lines) -> list:
    if not lines or not isinstance(lines[0][1], dict) or lines[0][1].get('schema') != SCHEMA:
        raise ValueError(f'{path}: not an agentrl metrics file (its first line has no "schema": "{SCHEMA}")')
    return lines


def jsonl_header(path) -> dict:
    """The header line of a metrics file (``{"schema", "run", "created"}``), or ValueError if it has none."""
    return _checked(path, _lines(path))[0][1]


def read_jsonl(path) -> list:
    """Every complete record of a metrics file (the header left out): ``[{"step", "time", "metrics"}, ...]``.

    A last line cut short (the run was killed while writing it) is skipped; a damaged line before it raises
    ValueError naming it."""
    return [obj for _, obj in _checked(path, _lines(path))[1:]]


def series(records, name: str) -> list:
    """One metric's ``(step, value)`` pairs, in order, from ``read_jsonl``'s records (those that have it)."""
    return [(r['step'], r['metrics'][name]) for r in records if name in r['metrics']]
