"""A run folder's JSON files (``results.json``, ``timing.json``, ``sweep.json``): written whole, read with one
set of checks.

Every command that reads a run folder reads it here: ``agentrl reproduce --resume`` and ``agentrl exercise --resume``
their own folder; ``agentrl claims``, ``report`` and ``exercise --from`` a finished one; a sweep its seed folders
while they run. ``write_json`` writes a file whole (a temporary file, then renamed), so a reader sees the old file or
the new one, never half of one.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..runtime.files import atomic_path

RESUME_FIX = 'move it away to keep it, then run again without --resume (or with another --out) to start afresh'
"""What a resumed run should do about a results.json it cannot read."""
SHAPES = {'reproduce': ('a results.json written by agentrl reproduce (no sections or transcript)',
                        lambda saved: isinstance(saved.get('sections'), dict) and 'transcript' in saved),
          'exercise': ('the results.json of an exercise (no exercise or parts)',
                       lambda saved: 'exercise' in saved and isinstance(saved.get('parts'), dict))}
"""What each command's ``results.json`` holds: (what it is, in words; whether a file's contents are one)."""


def write_json(path, obj, sort_keys: bool = True) -> None:
    """``obj`` as JSON in ``path``, written whole (``sort_keys``: else in the dicts' own order)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=sort_keys))


def read_json(path, fix: str = RESUME_FIX, kind: str | None = None) -> dict:
    """The JSON object in ``path``. ValueError naming the file when it cannot be read, is not JSON, is not an object or
    (``kind``: a key of ``SHAPES``) is not what that command writes; ``fix`` says what to do about it."""
    path = Path(path)
    try:
        saved = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f'{path} is not a readable {path.name} ({type(e).__name__}: {e}); {fix}') from None
    what, fits = SHAPES.get(kind, (f'a {path.name} that holds a JSON object', lambda saved: True))
    if not isinstance(saved, dict) or not fits(saved):
        raise ValueError(f'{path} is not {what}; {fix}')
    return saved


def peek(path) -> dict | None:
    """``read_json`` of a file that may not be written yet, or may be rewritten while it is read: None when it cannot
    be read (a sweep's progress, a worker waiting for a section, a folder's settings where any will do)."""
    try:
        return read_json(path)
    except ValueError:
        return None


def transcript(folder, saved: dict) -> str:
    """A run's printed lines: its ``transcript.txt``, else the same lines as its ``results.json`` (``saved``) keeps them."""
    path, lines = Path(folder) / 'transcript.txt', saved.get('transcript', {})
    if path.is_file():
        return path.read_text()
    return '\n'.join(x for sec in ['setup', *sorted(k for k in lines if k != 'setup')] for x in lines[sec]) + '\n'


def read_run(folder) -> dict:
    """The ``results.json`` of a finished ``agentrl reproduce`` folder, for the commands that read one (``agentrl
    claims``, ``report``, ``exercise --from``): ValueError naming what is wrong (no such folder, no results.json, a
    damaged one) and how to get a run there."""
    folder = Path(folder)
    make = f'`agentrl reproduce --out {folder}` writes one'
    if not folder.is_dir():
        raise ValueError(f'{folder} does not exist: give a run folder (`agentrl reproduce --out DIR` writes one)')
    if not (folder / 'results.json').is_file():
        raise ValueError(f'{folder} has no results.json, so it is not a run folder (or its run has not finished a '
                         f'section yet); {make}')
    return read_json(folder / 'results.json', f'run the reproduction again to rewrite it ({make})', 'reproduce')
