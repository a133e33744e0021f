"""Where a run's figures came from: what ``results.json`` and ``sweep.json`` record beside the figures.

Two runs can be compared honestly only if one knows what differed: the overrides, the package
version and git commit, torch and its thread count (which can change float summation order), the
CPU. No timestamps: a rerun of the same code on the same machine writes the same record.
"""
from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what ``platform`` knows)."""
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.lower().startswith(('model name', 'hardware', 'cpu model')):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or 'unknown'


@lru_cache(maxsize=None)
def git_state() -> tuple:
    """(commit, dirty) of the git checkout the package runs from, or (None, None) outside one."""
    src = Path(__file__).resolve().parents[2]

    def git(*args):
        return subprocess.run(['git', '-C', str(src), *args], capture_output=True, text=True, timeout=10)

    try:
        head = git('rev-parse', 'HEAD')
        if head.returncode != 0:
            return None, None
        status = git('status', '--porcelain', '--untracked-files=no')
        return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None, None


def version() -> str:
    """The version of the code that runs: the package's ``__version__`` (an editable install's metadata
    keeps the version it was installed at, which may be older)."""
    from ... import __version__
    return __version__


def collect(overrides: dict | None = None) -> dict:
    """This process's record: overrides, agentrl version, git commit (and whether the tree had local changes),
    torch version and thread count, CPU model and count, Python and platform."""
    import torch
    commit, dirty = git_state()
    return {'overrides': dict(overrides or {}), 'agentrl': version(), 'git_commit': commit, 'git_dirty': dirty,
            'torch': torch.__version__, 'torch_threads': torch.get_num_threads(), 'cpu': cpu_model(),
            'cpu_count': os.cpu_count(), 'python': platform.python_version(), 'platform': platform.platform()}
