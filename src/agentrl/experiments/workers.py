"""Worker processes for ``reproduce --jobs`` (``chapter15/parallel.py``), ``agentrl sweep`` (``sweeps/backends.py``)
and ``agentrl exercise N --seeds`` (``exercises/seeds.py``), which import this module (it imports none of them):
the cores this process may use; a worker's thread count (``THREAD_ENV`` and torch's, set before its first torch op);
the start method, a ``forkserver`` that imports torch and the library once, so each worker is a fork of a clean
process with no running thread pool (``spawn`` where there is none); the ``Runner`` of their jobs; and SIGTERM
turned into ``SystemExit``, so that ``kill PID`` runs the ``finally`` that ends the workers.
"""
from __future__ import annotations

import os
import signal

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


def exit_on_sigterm():
    """Make SIGTERM raise ``SystemExit`` (in the main thread) -> what puts the previous handler back. Python's default
    SIGTERM handling exits without running ``finally`` blocks, which would leave a killed run's workers computing."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise SystemExit(128 + signum)
    old = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL if old is None else old)  # None: set outside Python


class WorkerDied(RuntimeError):
    """A worker process ended without returning (SIGKILL, out of memory, a segfault, ``os._exit``)."""


class Job:
    """A job of a ``Runner``: ``key``, the caller's name for it; ``slot``, which of the N workers (1..N) runs it."""

    def __init__(self, key, call):
        self.key, self.call, self.slot, self.pool, self.future, self.proc = key, call, 0, None, None, None

    def result(self):
        """What the finished job returned; else raises what it raised, or ``WorkerDied`` saying how the worker ended."""
        from concurrent.futures.process import BrokenProcessPool
        try:
            return self.future.result()
        except BrokenProcessPool:
            rc = self.proc.exitcode  # negative: killed by that signal
            how = f'exited with code {rc}' if rc >= 0 else f'was killed by signal {-rc} ({signal.strsignal(-rc)})'
            raise WorkerDied(f'the worker process {how} before its job returned'
                             + ('; out of memory?' if rc == -signal.SIGKILL else '')) from None


class Runner:
    """Jobs (a top-level function and picklable arguments) in worker processes, at most ``size`` at a time.

    Each job has a worker of its own (a single-worker ``ProcessPoolExecutor`` on ``process_context(preload)``, a fork
    of the forkserver: milliseconds), so a worker that dies fails its own job only, with a ``WorkerDied`` naming the
    signal or exit code (a shared pool's executor fails *every* job it holds). Jobs start in the order submitted as
    workers free up (``on_start(job)`` then) and are handed back as they finish. As a context manager, SIGTERM raises
    ``SystemExit`` inside it, and leaving it closes the runner.
    """

    def __init__(self, size: int, preload, on_start=None):
        self.size, self.ctx, self.on_start = size, process_context(preload), on_start
        self.queue, self.running = [], []

    def submit(self, key, fn, *args, **kwargs) -> Job:
        """Queue ``fn(*args, **kwargs)`` under ``key``, started at once if a worker is free -> its ``Job``."""
        from functools import partial
        job = Job(key, partial(fn, *args, **kwargs))
        self.queue.append(job)
        self._start()
        return job

    def _start(self) -> None:
        from concurrent.futures import ProcessPoolExecutor
        while self.queue and len(self.running) < self.size:
            job = self.queue.pop(0)
            job.slot = min(set(range(1, self.size + 1)) - {j.slot for j in self.running})
            job.pool = ProcessPoolExecutor(max_workers=1, mp_context=self.ctx)
            job.future = job.pool.submit(job.call)
            (job.proc,) = job.pool._processes.values()  # started by submit
            self.running.append(job)
            if self.on_start:
                self.on_start(job)

    def wait(self, timeout: float | None = None) -> list:
        """Start the queued jobs that fit, then wait up to ``timeout`` seconds (None: until a job finishes) -> the jobs
        that finished, in the order they were submitted (each handed back once)."""
        from concurrent.futures import FIRST_COMPLETED, wait
        self._start()
        done, _ = wait([j.future for j in self.running], timeout, FIRST_COMPLETED)
        finished = [j for j in self.running if j.future in done]
        for job in finished:
            self.running.remove(job)
            job.pool.shutdown(wait=True)  # joins the worker, so its exit code is known
        return finished

    def as_finished(self):
        """Every job submitted, including those submitted meanwhile, as it finishes (``wait``)."""
        while self.queue or self.running:
            yield from self.wait()

    def close(self) -> None:
        """Drop the queued jobs and terminate the running ones' workers (``shutdown`` alone leaves a running job
        computing); none of them is handed back, so nothing half done is reported done."""
        self.queue.clear()
        for job in self.running:
            job.pool.shutdown(wait=False, cancel_futures=True)
            job.proc.terminate()
            job.proc.join(timeout=5)
        self.running.clear()

    def __enter__(self):
        self.restore_sigterm = exit_on_sigterm()  # `kill PID` then runs __exit__, which ends the workers too
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            self.restore_sigterm()
