"""Where the seeds of ``agentrl sweep`` run: the job, the two execution backends, and fault injection for tests.

The job (``run_seed``) runs or resumes one seed of one variant into its folder, on one torch
thread (or ``threads``, the same for every seed), so a seed's figures are the same on either backend
and at any worker count; another thread count sums in another order and may move them.

Backends. ``LocalBackend`` runs each seed attempt in a worker process of its own (``workers.Runner``,
forking a ``forkserver`` that preloads torch and the library once; ``spawn`` where there is no
forkserver), so a worker that dies fails only its seed's attempt. ``RayBackend`` runs the same job as
a ``@ray.remote(num_cpus=threads)`` task, on a local instance or on the cluster at ``address`` (the
output folder must then be on a file system the workers share, and the workers need agentrl).

Testing hook: ``AGENTRL_SWEEP_FAULT`` (read by the parent, passed to the jobs) injects faults,
as JSON ``{"SEED": {"mode": "raise"|"kill", "after": "start"|"15.1".."15.6", "attempts": K}}``:
attempts 1..K of that seed (in every variant) raise (or SIGKILL their own worker) right after
section ``after`` is written (or at the job's start).

What the backends share with ``reproduce --jobs`` (thread pinning, the forkserver, the runner) is in
``experiments/workers.py``; the job builds the same ``Chapter15`` as ``agentrl reproduce``.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..workers import Runner, WorkerDied, pin_threads

SECTIONS = ('15.1', '15.2', '15.3', '15.4', '15.5', '15.6')  # == chapter15.reproduction.SECTIONS (not imported: keeps this module light)
RL_SECTIONS = ('15.2', 'rl')  # == chapter15.reproduction.RL_SECTIONS: what sweep --rl runs per seed
FAULT_ENV = 'AGENTRL_SWEEP_FAULT'


# --- the job (runs in a worker process or a ray task)

def faults_from_env() -> dict:
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return {}
    try:
        spec = json.loads(raw)
        return {int(seed): {'mode': f.get('mode', 'raise'), 'after': f.get('after', 'start'), 'attempts': int(f.get('attempts', 1))}
                for seed, f in spec.items()}
    except (ValueError, AttributeError, TypeError) as e:
        raise SystemExit(f'{FAULT_ENV} must be JSON like {{"1": {{"mode": "raise", "after": "15.2", "attempts": 1}}}}: {e}')


class InjectedFault(RuntimeError):
    """Raised by the ``AGENTRL_SWEEP_FAULT`` testing hook."""


def _fire(fault: dict, seed: int, attempt: int):
    if fault['mode'] == 'kill':
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"injected fault: seed {seed}, attempt {attempt}, after {fault['after']}")


def run_seed(out: str, seed: int, config: dict, resume: bool, attempt: int = 1, fault: dict | None = None,
             extended: bool = False, overrides: dict | None = None, threads: int = 1, env: str | None = None,
             logdir: str | None = None, policy: str = 'tiny', rl: bool = False, share: tuple = ()) -> dict:
    """Run (or resume) one seed's reproduction into ``out`` on ``threads`` torch threads -> {'seed', 'seconds', 'pid', ...}.

    ``config``: ``asdict`` of a ``Ch15Config``; ``overrides``: the keys the user set, for the provenance record;
    ``env``: the environment's ``--env`` name (default the chapter's), which this process resolves itself;
    ``logdir``: where the seed's recipe runs write their monitors (``reproduce --logdir``), or None.
    ``rl``: run 15.2 and one RL recipe (``sweep --rl``: ``RL_SECTIONS``) instead of the chapter; ``share``: the
    seed folders of the variants before this one, whose finished 15.2 it copies when it can (``adopt_15_2``).
    Top level and argument-only, so it pickles for a spawned process pool and for ray.
    """
    pin_threads(threads)
    import torch

    from ..chapter15.chapter import Chapter15
    from ..chapter15.config import Ch15Config
    from ..chapter15.env_registry import DEFAULT

    fault = fault if fault and attempt <= fault['attempts'] else None
    if fault and fault['after'] == 'start':
        _fire(fault, seed, attempt)

    def progress(section, done, resumed=False):
        if fault and done and not resumed and section == fault['after']:
            _fire(fault, seed, attempt)

    t0 = time.perf_counter()
    run = Chapter15(Path(out), seed=seed, resume=resume, log=lambda line: None, progress=progress,
                    config=Ch15Config(**config), extended=extended, overrides=overrides, env=env or DEFAULT, policy=policy,
                    jobs=1, logdir=logdir, rl=rl)  # one process per seed: the sweep's pool is the parallelism (no nested pools)
    loaded = sum(s in run.results for s in run.sections)
    adopted = rl and any(run.adopt_15_2(folder) for folder in share)  # any() stops at the first it takes
    run.run()
    return {'seed': seed, 'attempt': attempt, 'seconds': round(time.perf_counter() - t0, 2), 'pid': os.getpid(),
            'resumed_sections': loaded, 'threads': torch.get_num_threads(), 'adopted_15_2': adopted}


# --- backends

class LocalBackend:
    """Each attempt in its own worker process (``workers.Runner``); a dead worker fails only its seed's attempt."""
    name = 'local'

    def __init__(self, workers: int):  # preloading as reproduce --jobs does: a fork is ~2.5 s faster than spawn
        self.runner = Runner(workers, ['agentrl.experiments.sweeps.backends', 'agentrl.experiments.chapter15.chapter',
                                       'safetensors.torch', 'torch._dynamo'])
        self.limit = workers

    def submit(self, *args):
        return self.runner.submit(None, run_seed, *args)

    def wait(self, handles, timeout):
        return self.runner.wait(timeout)

    def result(self, handle):
        return handle.result()

    def close(self):
        self.runner.close()


class RayBackend:
    """The same job as a ``ray.remote(num_cpus=threads)`` task; our own retry (ray's is off), so both backends behave alike."""
    name = 'ray'

    def __init__(self, workers: int, address: str | None, limit: int, threads: int = 1):
        try:
            import ray
        except ImportError:
            raise SystemExit("the ray backend needs ray: pip install -e '.[ray]'  (or use --backend local)")
        import logging
        self.ray = ray
        if address:
            ray.init(address=address, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=workers * threads, include_dashboard=False, logging_level=logging.WARNING)
        self.remote = ray.remote(num_cpus=threads, max_retries=0)(run_seed)
        self.limit = limit

    def submit(self, *args):
        return self.remote.remote(*args)

    def wait(self, handles, timeout):
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        return ready

    def result(self, handle):
        from ray.exceptions import RayTaskError, WorkerCrashedError
        try:
            return self.ray.get(handle)
        except WorkerCrashedError as e:
            raise WorkerDied(f'ray worker died abruptly: {e}') from e
        except RayTaskError as e:  # re-raise the job's own exception (short message, like the local backend)
            cause = getattr(e, 'cause', None)
            raise (cause if isinstance(cause, BaseException) else e) from None

    def close(self):
        self.ray.shutdown()
