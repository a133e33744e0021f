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


#: The vector instruction sets that decide how a CPU rounds and how fast it multiplies, widest first.
VECTOR_ISAS = ('avx512_bf16', 'avx512f', 'avx2', 'avx', 'sve', 'asimd', 'neon')


def cpu_model() -> str:
    """The CPU's model name, with its family, model and widest vector instruction set where ``/proc/cpuinfo``
    says them (``AMD EPYC (family 26, model 2, avx512_bf16)``): cloud machines often report one name for CPUs
    that round floats differently. Elsewhere what ``platform`` knows."""
    try:
        fields = {}
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            key, _, value = line.partition(':')
            key = key.strip().lower()
            if not key:
                break                                   # the first processor's block ends
            fields.setdefault(key, value.strip())
        name = fields.get('model name') or fields.get('hardware') or fields.get('cpu model')
        if name:
            flags = set((fields.get('flags') or fields.get('features') or '').split())
            isa = next((f for f in VECTOR_ISAS if f in flags), None)
            detail = [f'family {fields["cpu family"]}' if 'cpu family' in fields else None,
                      f'model {fields["model"]}' if fields.get('model', '').isdigit() else None, isa]
            detail = [d for d in detail if d]
            return f"{name} ({', '.join(detail)})" if detail else name
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
