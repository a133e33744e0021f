"""``agentrl reproduce --jobs N``: the sections after 15.2 in N worker processes.

15.1 and 15.2 run in the calling process (15.2 trains the weak base and the SFT snapshots every
later section starts from). The later sections (15.3-15.6, and ``beyond`` with ``--extended``)
read those checkpoints, and a few read another section's results or files; every such read
happens at the very end of the section, through ``Reproduction._after``, and each section method
declares the sections it reads (``@reads``, gathered in ``Reproduction.depends``: the ``deps`` the
order below is planned on; ``_after`` refuses an undeclared read at once). So a section can start
before the sections it reads have finished: it waits for them only at its end.

Each section runs in a worker process (``run_section``) that builds its own ``Reproduction`` on the
same folder, settings and seed with ``resume=True`` (so it loads the finished sections from
``results.json`` and the checkpoints from disk, bit for bit), runs that one section and returns
its results, printed lines and time; it writes only its own checkpoints and episode files, never
``results.json``. When a section needs another's results it polls ``results.json`` until the
parent has written them. The parent (``Chapter15.run``, ``chapter.py``) merges each section as it
comes back (``Chapter15._merge``: ``results.json``, ``timing.json`` and ``transcript.txt`` written
atomically per section, as with ``--jobs 1``), so an interrupted run resumes per section, and the
transcript is in section order whatever order the sections finish in.

Threads: with N jobs on C usable cores each worker runs ``max(1, C // N)`` torch threads
(``--threads`` wins when given). Figures depend on the thread count (float summation order), so
``--jobs N`` gives the same figures as ``--jobs 1`` when every section runs with the same thread
count, e.g. ``--threads 1`` for both.

Order: the sections are dispatched to free workers in the order ``plan`` picks: of the orders that
cannot deadlock (a section waiting for one not yet started must leave a worker free for it), the one
with the shortest simulated wall at the typical section times ``COST``.

Workers come from a ``forkserver`` (preloading torch and the library once, started before 15.1 so
its start overlaps the parent's work; ``spawn`` where there is none): the parent has run torch by
the time the workers start, and forking a process whose OpenMP pool is running is not safe. They are
``../workers.py``'s ``Runner``'s; Ctrl-C or SIGTERM ends them, and the sections merged by then stay written.
"""
from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

from ..run_folder import peek
from ..workers import Runner, WorkerDied, pin_threads, process_context, usable_cores

PARENT = ('15.1', '15.2')
"""Sections that always run in the calling process: they create the checkpoints the others read."""
COST = {'15.3': 4.0, '15.4': 11.0, '15.5': 20.0, '15.6': 25.0, 'beyond': 60.0}
"""Typical seconds per section at the chapter's budget on one thread (runs/sweep_0_9/seed0/timing.json;
``beyond`` estimated), for ordering only."""
EPISODES = {'15.2': ('weak', 'sft_step20', 'sft_step60'), '15.3': ('rft',), '15.4': ('dpo', 'dpo_pairs'),
            '15.5': ('sft_rl', 'rl_only'), '15.6': ('mismatched', 'dpo_nll', 'hacker')}
"""The episode files (``save_episodes``) each section's worker writes after its section (15.2's: the
worker of the shortest section)."""
PRELOAD = ('agentrl.experiments.chapter15.parallel', 'agentrl.experiments.chapter15.reproduction', 'safetensors.torch',
           'torch._dynamo')
"""What the forkserver imports once for every worker: the library, and what its first section would import
lazily (safetensors to load checkpoints; ``torch._dynamo``, about 1 s, on the first optimizer)."""
POLL = 0.2
"""Seconds between two looks at ``results.json`` by a worker waiting for another section."""


def worker_threads(jobs: int, threads: int | None = None) -> int:
    """Torch threads per worker: ``threads`` if given, else ``max(1, cores // jobs)``."""
    return threads if threads else max(1, usable_cores() // jobs)


def parse_jobs(text) -> int:
    """``--jobs``: a positive int (argparse type)."""
    try:
        n = int(str(text).strip())
    except ValueError:
        n = None
    if n is None or n < 1:
        raise argparse.ArgumentTypeError(f'expected a positive integer (worker processes; this machine has '
                                         f'{usable_cores()} usable cores), got {text!r}')
    return n


def check_jobs(jobs) -> int:
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f'jobs must be a positive int, got {jobs!r}')
    return jobs


# --- the order

def _deps(todo, deps) -> dict:
    """``deps`` (section -> the sections it reads) restricted to ``todo``; ValueError naming a section it lacks."""
    missing = [s for s in todo if s not in deps]
    if missing:
        raise ValueError(f'no dependency entry for section(s) {missing}: every section must declare its reads (@reads)')
    return {s: tuple(d for d in deps[s] if d in todo) for s in todo}


def safe(order, jobs: int, deps: dict) -> bool:
    """Can dispatching ``order`` first come first served to ``jobs`` workers never deadlock, whatever the times?

    ``deps``: section -> the sections it reads (``Reproduction.depends``). A section dispatched before one it waits
    for holds its worker until that one has run; when it is the turn of position k, fewer than ``jobs`` such
    sections may be holding a worker for something at k or later.
    """
    pos = {s: i for i, s in enumerate(order)}
    d = _deps(order, deps)
    last = {s: max((pos[x] for x in d[s]), default=-1) for s in order}
    return all(sum(1 for s in order[:k] if last[s] >= k) < jobs for k in range(len(order)))


def simulate(order, jobs: int, deps: dict, cost=COST) -> float:
    """Wall of dispatching ``order`` to ``jobs`` workers, each section taking ``cost`` and ending no earlier than
    the sections it reads (inf if it deadlocks)."""
    d = _deps(order, deps)
    queue, running, finished, t = list(order), {}, {}, 0.0
    while queue or running:
        while queue and len(running) < jobs:
            running[queue.pop(0)] = t
        ends = {s: max([start + cost.get(s, 1.0)] + [finished[x] for x in d[s]])
                for s, start in running.items() if all(x in finished for x in d[s])}
        if not ends:
            return float('inf')
        s = min(ends, key=lambda k: (ends[k], order.index(k)))
        t = finished[s] = ends[s]
        del running[s]
    return t


def plan(todo, jobs: int, deps: dict, cost=COST) -> list:
    """The dispatch order of the sections ``todo``: the safe order with the shortest simulated wall (ties: the
    first in section order)."""
    todo = list(todo)
    best, best_t = todo, None
    for order in itertools.permutations(todo):
        if not safe(order, jobs, deps):
            continue
        t = simulate(order, jobs, deps, cost)
        if best_t is None or t < best_t - 1e-9:
            best, best_t = list(order), t
    return best


# --- the worker

def _alive(pid) -> bool:
    if not pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for(path: Path, seed: int, parent: int | None, section: str, poll: float = POLL, scheduled=None):
    """Section ``section``'s results, once the parent has written them to ``path`` (``results.json``).

    ``scheduled``: the sections the parent runs or has run; waiting for any other fails at once (it would never come).
    """
    if scheduled is not None and section not in scheduled:
        raise RuntimeError(f'waiting for section {section}, which this run does not run (it runs {sorted(scheduled)})')
    stamp = None
    while True:
        try:
            now = path.stat().st_mtime_ns
        except OSError:
            now = None
        if now is not None and now != stamp:
            stamp = now
            saved = peek(path)
            if saved is None:  # replaced while being read: look again
                stamp = None
            if saved and saved.get('seed') == seed and section in saved.get('sections', {}):
                return saved['sections'][section]
        if not _alive(parent):
            raise SystemExit(f'waiting for section {section}: the reproduce process that started this worker is gone')
        time.sleep(poll)


def run_section(out: str, seed: int, config: dict, section: str, threads: int, extended: bool = False,
                overrides: dict | None = None, policy: str = 'tiny', episodes=(), parent: int | None = None,
                env: str | None = None, scheduled=None, logdir: str | None = None) -> dict:
    """Run one section of the reproduction in ``out`` (a worker job) -> {'section', 'results', 'lines', 'seconds', ...}.

    Builds a ``Reproduction`` with ``resume=True`` on the parent's folder and settings (``config``: ``asdict`` of a
    ``Ch15Config``), on ``threads`` torch threads; waits for other sections' results through ``results.json``
    (``scheduled``: the sections the parent runs; waiting for another fails at once); then writes the episode files
    of ``episodes`` (policy names, or ``'dpo_pairs'``). Writes no results file and takes no folder lock (the parent
    holds it). Top level and argument-only, so it pickles for a process pool.
    """
    pin_threads(threads)
    import torch

    from .config import Ch15Config
    from .env_registry import DEFAULT
    from .reproduction import Reproduction

    run = Reproduction(Path(out), seed=seed, resume=True, log=lambda line: None, config=Ch15Config(**config),
                       extended=extended, overrides=overrides, policy=policy, env=env or DEFAULT, logdir=logdir)
    run.wait_for = lambda name: wait_for(Path(out) / 'results.json', seed, parent, name, scheduled=scheduled)
    results, lines, seconds = run.run_section(section)
    t0 = time.perf_counter()
    run.save_episodes(names=episodes)
    return {'section': section, 'results': results, 'lines': lines, 'seconds': seconds, 'pid': os.getpid(),
            'threads': torch.get_num_threads(), 'episode_seconds': round(time.perf_counter() - t0, 2)}


# --- the parent

def prestart() -> None:
    """Start the forkserver now (it imports torch while the parent runs 15.1 and 15.2)."""
    if process_context(PRELOAD).get_start_method() == 'forkserver':
        from multiprocessing import forkserver
        forkserver.ensure_running()


def run_sections(chapter, todo) -> None:
    """Run the sections ``todo`` of ``chapter`` (a ``Chapter15`` whose 15.1 and 15.2 are done) in
    ``chapter.jobs`` worker processes; merge each into ``chapter`` (``Chapter15._merge``) as it finishes."""
    from dataclasses import asdict

    order = plan(todo, chapter.jobs, chapter.depends)
    episodes = {s: EPISODES.get(s, ()) for s in order}
    shortest = min(order, key=lambda s: COST.get(s, 1.0))
    episodes[shortest] = EPISODES['15.2'] + episodes[shortest]
    args = dict(out=str(chapter.out.resolve()), seed=chapter.seed, config=asdict(chapter.cfg), policy=chapter.policy,
                threads=chapter.worker_threads, extended='beyond' in chapter.sections, parent=os.getpid(),
                overrides=chapter.provenance.get('overrides'), env=chapter.env.name, scheduled=tuple(chapter.sections),
                logdir=None if chapter.logdir is None else str(chapter.logdir))
    started = (lambda job: chapter.progress(job.key, done=False, worker=job.slot)) if chapter.progress else None
    with Runner(chapter.jobs, PRELOAD, on_start=started) as runner:
        for section in order:  # started in this order as workers free up, handed back in it when they end together
            runner.submit(section, run_section, section=section, episodes=episodes[section], **args)
        for job in runner.as_finished():
            try:
                res = job.result()
            except WorkerDied as e:
                raise RuntimeError(f'section {job.key}: {e}') from e
            chapter._merge(job.key, res['results'], res['lines'], res['seconds'], worker=job.slot)
