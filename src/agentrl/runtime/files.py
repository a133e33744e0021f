"""Files written whole or not at all: ``atomic_path`` gives a temporary path to write and renames it over the target.

Every file or folder the library writes for later (checkpoints, a recipe's saved state, episodes, a run's JSON,
exported datasets, a converted model, a compiled kernel) is written through it, so a reader, or a run killed while
writing, sees the old contents or the new, never half of them.
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


@contextmanager
def atomic_path(path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without error, rename it over ``path``.

    Write a file or a folder to the yielded path. The rename (``os.replace``) is atomic for a file; a folder replaces
    an existing one by removing it first. Each process writes its own temporary (its name holds the process id), so
    processes writing the same ``path`` at once do not mix their bytes: the last rename wins. If the block raises,
    the temporary is removed and ``path`` is left as it was. The parent folder is created if missing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'{path.name}.{os.getpid()}.tmp')
    _remove(tmp)  # a leftover of a killed process that had this id
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir():
            shutil.rmtree(path)  # os.replace cannot rename a folder over a non-empty one
        os.replace(tmp, path)
    finally:
        _remove(tmp)  # gone already after the rename
