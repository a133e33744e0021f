"""What ``reproduce --jobs`` and ``agentrl sweep``'s backends share about worker processes.

- the cores this process may use (``usable_cores``);
- pinning a worker's thread count: the OpenMP / MKL / OpenBLAS variables (``THREAD_ENV``) and torch's
  (``pin_threads``), before the worker's first torch op;
- the start method (``process_context``): a ``forkserver`` that imports torch and the library once
  (``preload``), so each worker is a fork of a clean process with no running thread pool; ``spawn``
  where there is no forkserver;
- ending the workers of a pool that is given up on (``stop_pool``), and turning SIGTERM into
  ``SystemExit`` so that ``kill PID`` runs the ``finally`` that does it (``exit_on_sigterm``).

Both the section runner (``chapter15/parallel.py``) and the sweep backends (``sweeps/backends.py``)
import this module; neither imports the other.
"""
from __future__ import annotations

import os

THREAD_ENV = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS')


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pin_threads(threads: int) -> None:
    """In a worker: ``threads`` threads for OpenMP, MKL and OpenBLAS (``THREAD_ENV``) and for torch."""
    for var in THREAD_ENV:
        os.environ[var] = str(threads)
    import torch
    torch.set_num_threads(threads)


def process_context(preload):
    """The process start method: a forkserver importing the modules ``preload`` once (else spawn)."""
    import multiprocessing as mp
    if 'forkserver' in mp.get_all_start_methods():
        ctx = mp.get_context('forkserver')
        ctx.set_forkserver_preload(list(preload))
        return ctx
    return mp.get_context('spawn')


def stop_pool(pool) -> list:
    """Shut ``pool`` (a ``ProcessPoolExecutor``) down without waiting and terminate its live workers (a running
    job is not stopped by ``shutdown``) -> its worker processes."""
    procs = list((getattr(pool, '_processes', None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    return procs


def exit_on_sigterm():
    """Turn SIGTERM into SystemExit (main thread only) -> the previous handler, or None if not installed.

    Python's default SIGTERM handling exits without running ``finally`` blocks, which would leave
    the workers of a terminated sweep computing on their own.
    """
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise SystemExit(128 + signum)
    return signal.signal(signal.SIGTERM, handler)


def restore_sigterm(old) -> None:
    """Put back the SIGTERM handler ``exit_on_sigterm`` replaced (``old``; None: nothing to do)."""
    import signal
    import threading
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)
