"""``Chapter15``: the reproduction ``agentrl reproduce`` and ``agentrl sweep`` run, with ``--jobs``.

``Chapter15`` is a ``Reproduction`` (``reproduction.py``: the sections, resume, the run folder) whose
``run()`` can spread the sections over worker processes. With ``jobs > 1`` the sections after 15.2
run in worker processes (``parallel.py``); each section seeds every draw itself and reads other
sections' results only at its end (``_after``), so the figures equal a ``jobs=1`` run's at the same
torch thread count.

The dependency runs one way: this module drives ``parallel.py``, whose workers each build a plain
``Reproduction`` to run their one section.
"""
from __future__ import annotations

from . import parallel
from .config import Ch15Config
from .env_registry import DEFAULT
from .reproduction import Reproduction, check_seed


class Chapter15(Reproduction):
    """One reproduction of chapter 15 in ``out``; ``run()`` executes (or resumes) every section, on ``jobs`` processes."""

    def __init__(self, out, seed: int = 0, resume: bool = False, log=print, progress=None, config: Ch15Config | None = None,
                 extended: bool = False, overrides: dict | None = None, policy: str = 'tiny', jobs: int = 1,
                 worker_threads: int | None = None, env: str = DEFAULT, logdir=None, rl: bool = False):
        """``overrides``: the keys the user set (``--set``, ``--config``), recorded in the provenance; ``config`` is
        what they resolved to. Checks every setting before any work: a bad one raises ValueError naming it.
        ``policy``: the architecture, ``'tiny'`` (the TinyAgent) or ``'gpt2'`` / ``'llama'`` (see ``_new_model``).
        ``env``: the environment, by its ``--env`` name (``envs.py``).
        ``jobs``: worker processes for the sections after 15.2 (1: all in this process), each on ``worker_threads``
        torch threads (default ``max(1, cores // jobs)``); both are recorded in the provenance."""
        check_seed(seed)  # the seed first, then the jobs, then the rest (``Reproduction``)
        self.jobs = parallel.check_jobs(jobs)
        if worker_threads is not None and (not isinstance(worker_threads, int) or isinstance(worker_threads, bool)
                                           or worker_threads < 1):
            raise ValueError(f'worker_threads must be a positive int, got {worker_threads!r}')
        self.worker_threads = parallel.worker_threads(jobs, worker_threads)
        super().__init__(out, seed=seed, resume=resume, log=log, progress=progress, config=config, extended=extended,
                         overrides=overrides, policy=policy, env=env, logdir=logdir, rl=rl)

    def spread(self) -> dict:
        """The jobs, and with more than one the torch threads of each worker (recorded in the provenance)."""
        return {'jobs': self.jobs, **({'worker_torch_threads': self.worker_threads} if self.jobs > 1 else {})}

    def run(self):
        """Run every unfinished section in order -> results dict keyed by section.

        With ``jobs > 1``, 15.1 and 15.2 run here and the unfinished later sections in worker processes
        (``parallel.run_sections``); each is written as it finishes, so a resume works per section either way.
        For those, ``progress`` is also given ``worker`` (1..jobs), and ``seconds`` when done, before the lines are echoed.
        """
        later = [s for s in self.sections if s not in parallel.PARENT and s not in self.results] if self.jobs > 1 else []
        if not later:
            return super().run()
        parallel.prestart()
        with self.session():
            self.run_here(skip=later)
            parallel.run_sections(self, later)
            order = [k for k in ('setup', *self.sections) if k in self.results]  # section order, not finishing order
            self.results = {**{k: self.results[k] for k in order}, **self.results}
            self.save_episodes()
            self.tidy()
        return self.results

    def _merge(self, section, results, lines, seconds, worker=None):
        """Record a section a worker ran: write it like ``run`` does, then echo its lines."""
        self.lines[section] = list(lines)
        self._finish(section, results, seconds)
        if self.progress:
            self.progress(section, done=True, worker=worker, seconds=seconds)
        for line in lines:
            self.log(line)
