"""Process-level settings for the ``agentrl`` command: keep freed memory for reuse.

A rollout at the chapter's batch (320 episodes) and a training step allocate tensors of several
MiB each, step after step. glibc's ``malloc`` serves blocks that large with fresh ``mmap``s and
hands them back to the kernel when they are freed, so the next step touches brand-new pages and
takes one page fault per 4 KiB page: about 19,000 faults per oracle-SFT rollout of 320 episodes,
7% of its time, and 8% of the whole chapter's wall time. Raising glibc's mmap and trim
thresholds keeps freed blocks in the process, where the next step reuses them without faults.

Nothing numerical changes: the same kernels run on the same values, so every figure is
identical (the chapter's printed output is byte for byte the same). The cost is that the process keeps
up to its peak memory mapped instead of returning it between steps; the peak itself is unchanged.
The ``agentrl`` command applies this at start-up (``cli.main``); call ``keep_freed_memory()`` at
the top of your own script for the same effect. Off glibc (macOS, Windows, musl) it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

MMAP_THRESHOLD = 256 << 20
"""Blocks below this many bytes come from the heap, not a private ``mmap`` (glibc default: 128 KiB, adapting up to 32 MiB)."""
TRIM_THRESHOLD = 1 << 30
"""Free memory at the top of the heap is returned to the kernel only beyond this many bytes."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, from glibc's <malloc.h>


def _glibc():
    if not sys.platform.startswith('linux'):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
        libc.gnu_get_libc_version  # present in glibc only
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_memory(workers: bool = True) -> bool:
    """Keep freed large blocks in this process for reuse, instead of new page-faulting ``mmap``s -> applied?

    Sets glibc's mmap threshold to ``MMAP_THRESHOLD`` and its trim threshold to ``TRIM_THRESHOLD``
    with ``mallopt``. With ``workers`` (default), it also exports ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_`` (unless already set), which glibc reads when a process starts, so
    worker processes started afterwards (``reproduce --jobs``, ``sweep``) get the same setting.
    Returns False, changing nothing, where the C library is not glibc.
    """
    libc = _glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if ok and workers:
        os.environ.setdefault('MALLOC_MMAP_THRESHOLD_', str(MMAP_THRESHOLD))
        os.environ.setdefault('MALLOC_TRIM_THRESHOLD_', str(TRIM_THRESHOLD))
    return ok
