"""Multi-seed sweeps of the chapter 15 reproduction (``agentrl sweep``).

``agentrl sweep --seeds 0-9`` runs one reproduction per seed shift, each into ``DIR/seed{N}/``
through :class:`~agentrl.experiments.ch15.Chapter15` (so every seed folder is a complete
``agentrl reproduce`` output), then aggregates them into

- ``DIR/sweep.json``: for every numeric figure of ``results.json`` (each leaf of the sections,
  plus a few derived counts and shares), the per-seed values, the mean, the standard error
  (sample std / sqrt(n)) and a 95% confidence interval (mean +- t_{0.975, n-1} * stderr); for every
  finding (band of BANDS.md), its hold rate over seeds; the seeds, per-seed times and failures;
- ``DIR/sweep.md``: the chapter's tables as mean +- CI half-width beside the chapter's own
  single-seed figures, and the findings sorted by hold rate, lowest first;
- ``DIR/fig15_3_recipes_ci.png``: the four recipes' mean curves with their CI bands.

Backends. ``local`` (default) runs each seed attempt in its own single-worker
``ProcessPoolExecutor`` (``forkserver`` context, preloading torch and the library once; ``spawn``
where there is no forkserver), at most ``--workers`` at once. One pool per attempt
rather than one shared pool: when a worker of a shared pool dies, the executor marks *every*
in-flight future broken, so a SIGKILLed seed could not be told apart from its innocent
neighbours; with one pool per attempt a death is charged to exactly its seed. The price is one
fork of the preloaded server per attempt (milliseconds).
``ray`` runs the same job function as a ``@ray.remote(num_cpus=1)`` task, on a local instance or
on the cluster at ``--address`` (``DIR`` must then be on a file system the workers share, and
the workers need agentrl installed).

Every worker runs torch on one thread (``OMP_NUM_THREADS=1`` is set in the environment the
workers inherit, and the job calls ``torch.set_num_threads(1)``), so a seed's figures are the
same whichever backend or worker count ran it, and equal a one-thread ``agentrl reproduce``.

Faults. A seed whose job raises or whose worker dies is reported and retried once, resuming from
its finished sections (``Chapter15(resume=True)``); a second failure marks it failed and the
sweep goes on and aggregates the others (exit status 1). ``--resume`` skips seeds whose folder
already holds every section and resumes partial ones.

Testing hook: ``AGENTRL_SWEEP_FAULT`` (read by the parent, passed to the jobs) injects faults,
as JSON ``{"SEED": {"mode": "raise"|"kill", "after": "start"|"15.1".."15.6", "attempts": K}}``:
attempts 1..K of that seed raise (or SIGKILL their own worker) right after section ``after``
is written (or at the job's start).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from pathlib import Path

SECTIONS = ('15.1', '15.2', '15.3', '15.4', '15.5', '15.6')  # == ch15.SECTIONS (not imported: keeps this module light)
MAX_ATTEMPTS = 2
"""A failed seed is retried once."""
FAULT_ENV = 'AGENTRL_SWEEP_FAULT'
THREAD_ENV = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS')
EXCLUDE = re.compile(r'15\.3/first_kept(/|$)|15\.3/rounds/\d+/first_actions(/|$)')
"""Numeric leaves that are not one figure across seeds: per-seed rankings and counts keyed by action text."""

# --- seeds

SEED_FORM = "expected seeds like '0-9' (a range), '0,3,5' (a list) or a mix such as '0-3,7,10-12'"


def parse_seeds(spec: str) -> list:
    """'0-9', '0,3,5' or a mix ('0-3,7') -> sorted distinct seeds; argparse.ArgumentTypeError otherwise."""
    seeds = set()
    parts = str(spec).replace(' ', '').split(',')
    for part in parts:
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', part)
        if not m:
            raise argparse.ArgumentTypeError(f'bad seed spec {spec!r}: {SEED_FORM}')
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise argparse.ArgumentTypeError(f'bad seed range {part!r} (end before start): {SEED_FORM}')
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


# --- statistics

T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
        2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
        2.0518, 2.0484, 2.0452, 2.0423)
"""Student-t 0.975 quantiles for 1..30 degrees of freedom."""
Z975 = 1.959964


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom.

    A table for df 1..30; beyond, the normal quantile with the Cornish-Fisher correction
    z + (z^3 + z) / 4df + (5z^5 + 16z^3 + 3z) / 96df^2 (within 1e-4 of the exact value there,
    and tending to the normal 1.96).
    """
    if df < 1:
        raise ValueError(f'need at least 1 degree of freedom, got {df}')
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def summarize(values) -> dict:
    """Mean, stderr (sample std / sqrt(n)), 95% CI (mean +- t_{0.975,n-1} stderr) and half-width of a list.

    With one value, stderr and the CI are None (no spread to estimate).
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError('no values to summarize')
    mean = sum(xs) / n
    if n < 2:
        return {'n': n, 'mean': mean, 'std': None, 'stderr': None, 'half_width': None, 'ci95': None}
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    stderr = std / math.sqrt(n)
    half = t975(n - 1) * stderr
    return {'n': n, 'mean': mean, 'std': std, 'stderr': stderr, 'half_width': half, 'ci95': [mean - half, mean + half]}


def hold_rate(outcomes) -> float | None:
    """Share of True among per-seed band outcomes (None when there are none)."""
    outcomes = list(outcomes)
    return sum(bool(o) for o in outcomes) / len(outcomes) if outcomes else None


# --- figures of one seed

def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def flatten(obj, prefix: str = '') -> dict:
    """Every numeric leaf of nested dicts / lists -> {'a/b/0/1': value} (bools, strings and None skipped)."""
    out = {}
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        if _is_num(obj):
            out[prefix] = obj
        return out
    for k, v in items:
        path = f'{prefix}/{k}' if prefix else str(k)
        if EXCLUDE.match(path):
            continue
        out.update(flatten(v, path))
    return out


def derived(sections: dict) -> dict:
    """Figures the bands and tables use that are not leaves themselves: counts of name lists, shares."""
    out = {}
    s1 = sections.get('15.1', {})
    counts = s1.get('owner_counts') or {}
    total = sum(counts.values())
    for k, v in counts.items():
        if total:
            out[f'15.1/owner_share/{k}'] = v / total
    s3 = sections.get('15.3', {})
    for k, r in enumerate(s3.get('rounds', [])):
        out[f'15.3/rounds/{k}/n_solved'] = len(r.get('solved', []))
    if 'never_solved' in s3:
        out['15.3/n_never_solved'] = len(s3['never_solved'])
    for k, r in enumerate(sections.get('15.6', {}).get('hacking', [])):
        if r.get('kept'):
            out[f'15.6/hacking/{k}/hack_share'] = r['hacks'] / r['kept']
    return out


def seed_figures(sections: dict) -> dict:
    return {**flatten(sections), **derived(sections)}


def aggregate(per_seed: dict) -> tuple:
    """{seed: sections} -> (figures, partial): summaries of figures numeric in every seed, and of the rest.

    Each summary also lists the seeds and their values. ``partial`` holds figures present (or
    numeric) in only some seeds, e.g. the gradient gap of a seed whose sample had no success.
    """
    flat = {seed: seed_figures(s) for seed, s in per_seed.items()}
    seeds = sorted(flat)
    keys = sorted({k for f in flat.values() for k in f})
    full, partial = {}, {}
    for key in keys:
        have = [s for s in seeds if key in flat[s]]
        summary = {**summarize([flat[s][key] for s in have]), 'seeds': have, 'values': [flat[s][key] for s in have]}
        if len(have) < len(seeds):
            summary['partial'] = True
        (full if len(have) == len(seeds) else partial)[key] = summary
    return full, partial


def aggregate_findings(per_seed_findings: dict) -> dict:
    """{seed: [(name, holds, figure)]} -> {name: hold rate, held, n, per-seed outcome and figure, chapter figure}."""
    from .bands import CHAPTER
    out = {}
    for seed in sorted(per_seed_findings):
        for name, ok, fig in per_seed_findings[seed]:
            row = out.setdefault(name, {'chapter': CHAPTER.get(name, ''), 'per_seed': {}})
            row['per_seed'][str(seed)] = {'holds': bool(ok), 'figure': fig}
    for row in out.values():
        oks = [v['holds'] for v in row['per_seed'].values()]
        row.update(hold_rate=hold_rate(oks), held=sum(oks), n=len(oks))
    return out


# --- the job (runs in a worker process or a ray task)

def _faults_from_env() -> dict:
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


def run_seed(out: str, seed: int, smoke: bool, resume: bool, attempt: int = 1, fault: dict | None = None,
             extended: bool = False) -> dict:
    """Run (or resume) one seed's reproduction into ``out`` on one torch thread -> {'seed', 'seconds', 'pid', ...}.

    Top level and argument-only, so it pickles for a spawned process pool and for ray.
    """
    for var in THREAD_ENV:
        os.environ[var] = '1'
    import torch
    torch.set_num_threads(1)
    from .ch15 import Ch15Config, Chapter15

    fault = fault if fault and attempt <= fault['attempts'] else None
    if fault and fault['after'] == 'start':
        _fire(fault, seed, attempt)

    def progress(section, done, resumed=False):
        if fault and done and not resumed and section == fault['after']:
            _fire(fault, seed, attempt)

    t0 = time.perf_counter()
    run = Chapter15(Path(out), seed=seed, resume=resume, log=lambda line: None, progress=progress,
                    config=Ch15Config.smoke() if smoke else Ch15Config(), extended=extended)
    loaded = sum(s in run.results for s in SECTIONS)
    run.run()
    return {'seed': seed, 'attempt': attempt, 'seconds': round(time.perf_counter() - t0, 2), 'pid': os.getpid(),
            'resumed_sections': loaded, 'threads': torch.get_num_threads()}


# --- backends

class LocalBackend:
    """Each attempt in its own single-worker ``ProcessPoolExecutor`` (forkserver, else spawn); a dead worker breaks only its seed."""
    name = 'local'

    def __init__(self, workers: int):
        import multiprocessing as mp
        if 'forkserver' in mp.get_all_start_methods():
            # a clean server process that imports torch and the library once (with OMP_NUM_THREADS=1 already
            # set, before any thread pool exists); each attempt is then a fork of it, ~2.5 s faster than spawn
            self.ctx = mp.get_context('forkserver')
            self.ctx.set_forkserver_preload(['agentrl.experiments.sweep', 'agentrl.experiments.ch15'])
        else:
            self.ctx = mp.get_context('spawn')
        self.limit = workers
        self.pools = {}

    def submit(self, *args):
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(max_workers=1, mp_context=self.ctx)
        fut = pool.submit(run_seed, *args)
        self.pools[fut] = pool
        return fut

    def wait(self, handles, timeout):
        from concurrent.futures import FIRST_COMPLETED, wait
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return list(done)

    def result(self, handle):
        from concurrent.futures.process import BrokenProcessPool
        pool = self.pools.pop(handle)
        try:
            return handle.result()
        except BrokenProcessPool as e:
            raise WorkerDied('worker process died abruptly (killed, e.g. SIGKILL or out of memory)') from e
        finally:
            pool.shutdown(wait=True)

    def close(self):
        for fut, pool in list(self.pools.items()):
            fut.cancel()
            procs = list((getattr(pool, '_processes', None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:  # a running job is not stopped by shutdown(); end the worker we started
                if p.is_alive():
                    p.terminate()
        self.pools.clear()


class RayBackend:
    """The same job as a ``ray.remote(num_cpus=1)`` task; our own retry (ray's is off), so both backends behave alike."""
    name = 'ray'

    def __init__(self, workers: int, address: str | None, limit: int):
        try:
            import ray
        except ImportError:
            raise SystemExit("the ray backend needs ray: pip install -e '.[ray]'  (or use --backend local)")
        import logging
        self.ray = ray
        if address:
            ray.init(address=address, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, logging_level=logging.WARNING)
        self.remote = ray.remote(num_cpus=1, max_retries=0)(run_seed)
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


class WorkerDied(RuntimeError):
    """A worker process ended without returning (SIGKILL, OOM, segfault)."""


# --- state of a seed folder

def _read_results(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def seed_dir(out: Path, seed: int) -> Path:
    return Path(out) / f'seed{seed}'


def finished_sections(out: Path, seed: int, config: dict | None = None, sections=SECTIONS) -> list:
    """Sections already written in ``DIR/seed{N}/results.json`` (for this seed and config, if given)."""
    saved = _read_results(seed_dir(out, seed) / 'results.json')
    if not saved or saved.get('seed') != seed or (config is not None and saved.get('config') != config):
        return []
    return [s for s in sections if s in saved.get('sections', {})]


class Poller:
    """Finished sections per seed, from each folder's results.json (re-read only when it changes)."""

    def __init__(self, out: Path, sections=SECTIONS):
        self.out, self.cache, self.sections = Path(out), {}, sections

    def done(self, seed: int) -> list:
        path = seed_dir(self.out, seed) / 'results.json'
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return []
        if self.cache.get(seed, (None,))[0] != stamp:
            saved = _read_results(path)
            secs = [s for s in self.sections if s in (saved or {}).get('sections', {})] if saved and saved.get('seed') == seed else []
            self.cache[seed] = (stamp, secs)
        return self.cache[seed][1]


# --- the sweep

def _exit_on_sigterm():
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


def _restore_sigterm(old) -> None:
    import signal
    import threading
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)


def run_sweep(out, seeds, workers: int | None = None, backend: str = 'local', address: str | None = None,
              resume: bool = False, smoke: bool = False, console=None, poll: float = 0.5, extended: bool = False) -> dict:
    """Run every seed (retrying failures once), aggregate, write sweep.json / sweep.md / figure -> the sweep dict.

    ``extended`` runs ``reproduce --extended`` per seed (the chapter plus its exercises).
    """
    from dataclasses import asdict

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .ch15 import TITLES, Ch15Config

    console = console or Console()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    seeds = sorted(set(seeds))
    asked, workers = workers, workers or os.cpu_count() or 1
    config = asdict(Ch15Config.smoke() if smoke else Ch15Config())
    SECTIONS = globals()['SECTIONS'] + (('beyond',) if extended else ())  # noqa: N806 (this sweep's sections)
    faults = _faults_from_env()
    runs = {s: {'status': 'queued', 'attempts': 0, 'seconds': 0.0, 'wall_seconds': 0.0, 'errors': []} for s in seeds}
    failures = []

    todo = []
    for s in seeds:
        done = finished_sections(out, s, config, SECTIONS) if resume else []
        if resume and len(done) == len(SECTIONS) and (seed_dir(out, s) / 'transcript.txt').exists():
            timing = _read_results(seed_dir(out, s) / 'timing.json') or {}
            runs[s].update(status='skipped', seconds=round(sum(timing.values()), 2), note='all sections done (--resume)')
        else:
            todo.append(s)

    saved_env = {v: os.environ.get(v) for v in THREAD_ENV}
    os.environ.update({v: '1' for v in THREAD_ENV})  # inherited by spawned workers / a local ray instance
    t_start = time.perf_counter()
    be = None
    old_term = _exit_on_sigterm()  # `kill PID` then runs the finally below, which ends the workers too
    try:
        if backend == 'ray':
            # on a cluster, ray schedules every seed unless --workers caps how many are in flight
            be = RayBackend(workers, address, limit=(asked or len(seeds)) if address else workers)
        elif backend == 'local':
            be = LocalBackend(workers)
        else:
            raise ValueError(f'unknown backend {backend!r} (local or ray)')
        poller = Poller(out, SECTIONS)
        with Progress(TextColumn('[bold]{task.description}'), BarColumn(bar_width=24),
                      TextColumn('{task.completed}/{task.total}'), TextColumn('{task.fields[status]}'),
                      TimeElapsedColumn(), console=console, transient=False) as bar:
            ids = {s: bar.add_task(f'seed {s}', total=len(SECTIONS), status=runs[s]['status'], start=False) for s in seeds}
            for s in seeds:
                if runs[s]['status'] == 'skipped':
                    bar.update(ids[s], completed=len(SECTIONS), status='[dim]skipped: already complete[/dim]')
            pending = [(s, 1) for s in todo]
            inflight = {}

            def launch(seed, attempt):
                again = attempt > 1
                runs[seed]['attempts'] = attempt
                runs[seed]['status'] = 'running'
                h = be.submit(str(seed_dir(out, seed)), seed, smoke, resume or again, attempt, faults.get(seed), extended)
                inflight[h] = (seed, attempt, time.perf_counter())
                bar.start_task(ids[seed])
                bar.update(ids[seed], status='starting' + (f' [yellow](attempt {attempt})[/yellow]' if again else ''))

            while pending or inflight:
                while pending and len(inflight) < be.limit:
                    launch(*pending.pop(0))
                for h in be.wait(list(inflight), poll):
                    seed, attempt, t0 = inflight.pop(h)
                    runs[seed]['wall_seconds'] = round(runs[seed]['wall_seconds'] + time.perf_counter() - t0, 2)
                    try:
                        res = be.result(h)
                    except Exception as e:  # the job raised or its worker died: report, retry once (resuming)
                        msg = f'{type(e).__name__}: {e}'
                        runs[seed]['errors'].append({'attempt': attempt, 'error': msg})
                        failures.append({'seed': seed, 'attempt': attempt, 'error': msg})
                        if attempt < MAX_ATTEMPTS:
                            console.print(f'[yellow]seed {seed}: attempt {attempt} failed ({escape(msg)}); retrying, '
                                          f'resuming from its finished sections[/yellow]')
                            pending.insert(0, (seed, attempt + 1))
                            runs[seed]['status'] = 'retrying'
                        else:
                            console.print(f'[red]seed {seed}: attempt {attempt} failed again ({escape(msg)}); giving up on it[/red]')
                            runs[seed]['status'] = 'failed'
                            bar.update(ids[seed], status='[red]FAILED[/red]')
                        continue
                    runs[seed].update(status='ok', seconds=res['seconds'], pid=res['pid'],
                                      resumed_sections=res['resumed_sections'], torch_threads=res['threads'])
                    bar.update(ids[seed], completed=len(SECTIONS),
                               status=f"[green]done[/green] in {res['seconds']:.0f} s" + (f' (attempt {attempt})' if attempt > 1 else ''))
                for h, (seed, attempt, _) in inflight.items():
                    done = poller.done(seed)
                    cur = next((s for s in SECTIONS if s not in done), None)
                    label = f'{cur} {TITLES[cur]}' if cur else 'saving episodes'
                    bar.update(ids[seed], completed=len(done), status=label + (f' [yellow](attempt {attempt})[/yellow]' if attempt > 1 else ''))
                for seed, _ in pending:
                    if runs[seed]['status'] == 'retrying':
                        bar.update(ids[seed], status='[yellow]waiting to retry[/yellow]')
    finally:
        if be is not None:
            be.close()
        _restore_sigterm(old_term)
        for v, old in saved_env.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    wall = time.perf_counter() - t_start
    result = summarize_sweep(out, seeds, runs, failures, config=config, smoke=smoke, backend=backend,
                             workers=workers, wall=wall)
    return result


def summarize_sweep(out, seeds, runs, failures, config, smoke, backend, workers, wall) -> dict:
    """Aggregate the finished seeds of ``out`` and write sweep.json, sweep.md and the CI figure."""
    from .bands import check_transcript

    out = Path(out)
    ok = [s for s in seeds if runs[s]['status'] in ('ok', 'skipped')]
    per_seed, per_seed_findings = {}, {}
    for s in ok:
        saved = _read_results(seed_dir(out, s) / 'results.json')
        per_seed[s] = saved['sections']
        per_seed_findings[s] = check_transcript((seed_dir(out, s) / 'transcript.txt').read_text())
    figures_, partial = aggregate(per_seed) if per_seed else ({}, {})
    findings = aggregate_findings(per_seed_findings)
    claims = aggregate_claims(per_seed)
    sweep = {'seeds': seeds, 'aggregated_seeds': ok, 'failed_seeds': [s for s in seeds if runs[s]['status'] == 'failed'],
             'n': len(ok), 'budget': 'smoke' if smoke else 'chapter', 'config': config, 'backend': backend,
             'workers': workers, 'wall_seconds': round(wall, 2),
             'runs': {str(s): runs[s] for s in seeds}, 'failures': failures,
             'figures': figures_, 'figures_partial': partial, 'findings': findings, 'beyond_claims': claims}
    tmp = out / 'sweep.json.tmp'
    tmp.write_text(json.dumps(sweep, indent=1))
    os.replace(tmp, out / 'sweep.json')
    fig = None
    if per_seed:
        fig = draw_ci_figure(sweep, out / 'fig15_3_recipes_ci.png')
    (out / 'sweep.md').write_text(render(sweep, fig.name if fig else None))
    return sweep


def aggregate_claims(per_seed: dict) -> dict:
    """Beyond-the-chapter claims (report.BEYOND_CLAIMS) over the seeds that ran --extended -> per claim its
    support rate among the seeds where it was measurable, and each seed's figure."""
    from .report import beyond_claims
    claims = {}
    for seed, sections in per_seed.items():
        if 'beyond' not in sections:
            continue
        for name, holds, fig in beyond_claims(sections):
            c = claims.setdefault(name, {'per_seed': {}})
            c['per_seed'][str(seed)] = {'holds': holds, 'figure': fig}
    for c in claims.values():
        measured = [v['holds'] for v in c['per_seed'].values() if v['holds'] is not None]
        c['n'], c['supported'] = len(measured), sum(measured)
        c['support_rate'] = c['supported'] / c['n'] if c['n'] else None
    return claims


# --- figure

RECIPES = ('SFT (oracle)', 'RFT', 'SFT -> RL', 'RL only')


def recipe_curves(figs: dict) -> tuple:
    """Mean curves and CI bands of the four recipes from aggregated figures -> (results-like dict, bands)."""
    curves, bands = {}, {}
    for name in RECIPES:
        k, rows = 0, []
        while f'15.5/curves/{name}/{k}/0' in figs:
            rows.append(tuple(figs[f'15.5/curves/{name}/{k}/{c}'] for c in range(3)))
            k += 1
        if not rows:
            continue
        curves[name] = [(r[0]['mean'], r[1]['mean'], r[2]['mean']) for r in rows]

        def lohi(col):
            lo = [(r[col]['ci95'] or [r[col]['mean']] * 2)[0] for r in rows]
            hi = [(r[col]['ci95'] or [r[col]['mean']] * 2)[1] for r in rows]
            return [max(0.0, x) for x in lo], [min(1.0, x) for x in hi]  # pass rates live in [0, 1]

        bands[name] = {'train': lohi(1), 'held': lohi(2)}
    return {'15.5': {'curves': curves}}, bands


def draw_ci_figure(sweep: dict, path: Path) -> Path:
    from .figures import fig_recipes
    results, bands = recipe_curves(sweep['figures'])
    return fig_recipes(results, path, bands=bands)


# --- sweep.md

def _stat(sweep, key):
    return sweep['figures'].get(key) or sweep['figures_partial'].get(key)


def fmt(stat, digits=2) -> str:
    """'mean ± half-width' (just the mean with one seed, a dash when missing)."""
    if not stat:
        return '—'
    m = f"{stat['mean']:.{digits}f}"
    if stat.get('half_width') is not None:
        m += f" ± {stat['half_width']:.{digits}f}"
    return m + (f" [n={stat['n']}]" if stat.get('partial') else '')


def render(sweep: dict, figure: str | None = None) -> str:
    from .report import CH_DESCRIBE, CH_DPO, CH_HACK, CH_PROBE, CH_RECIPES, CH_RFT, CH_SFT, _table

    S = lambda key, d=2: fmt(_stat(sweep, key), d)  # noqa: E731
    n, seeds = sweep['n'], sweep['seeds']
    md = [f'# Chapter 15 over {len(seeds)} seeds', '',
          f"Seed shifts {', '.join(map(str, seeds))}; {sweep['budget']} budget; backend {sweep['backend']}, "
          f"{sweep['workers']} workers; {sweep['wall_seconds']:.0f} s wall. "
          f"**{n} of {len(seeds)} seeds aggregated**" + (f"; failed: {', '.join(map(str, sweep['failed_seeds']))}" if sweep['failed_seeds'] else '') + '.',
          '', f'Each cell: mean ± half-width of the 95% confidence interval over the {n} seeds '
          '(t quantile × sample std / √n), then the chapter\'s single-seed figure in parentheses; '
          '[n=k] marks a figure only k seeds have (e.g. a DPO log when a seed found no pair).', '']
    if sweep['budget'] == 'smoke':
        md += ['> Smoke budget: every section runs, but the figures mean nothing; compare with the chapter only at the full budget.', '']
    rows = []
    for name, r in sorted(sweep['findings'].items(), key=lambda kv: (kv[1]['hold_rate'], kv[0])):
        fails = [s for s, v in r['per_seed'].items() if not v['holds']]
        rows.append((name, r['chapter'], f"{r['hold_rate']:.0%}", f"{r['held']}/{r['n']}", ', '.join(fails) or '—'))
    md += ['## Findings, by hold rate', '', _table(['finding (band)', 'chapter', 'hold rate', 'held', 'seeds where it fails'], rows)
           if rows else 'No seed finished.', '']
    if sweep.get('beyond_claims'):
        crow = []
        for name, c in sweep['beyond_claims'].items():
            rate = 'n/a' if c['support_rate'] is None else f"{c['support_rate']:.0%}"
            verdict = ('not measurable' if c['support_rate'] is None else 'supported' if c['support_rate'] >= 2 / 3
                       else 'not supported' if c['support_rate'] <= 1 / 3 else 'mixed')
            crow.append((name, rate, f"{c['supported']}/{c['n']}", verdict,
                         '; '.join(f"seed {k}: {v['figure']}" for k, v in c['per_seed'].items())))
        md += ['## Beyond the chapter: claims over seeds', '',
               'A claim is reported as supported when it holds on at least two thirds of the seeds, not supported '
               'when on at most a third.', '',
               _table(['claim', 'support rate', 'seeds', 'verdict', 'per seed'], crow), '']
    if n == 0:
        return '\n'.join(md + _runs_md(sweep, _table))

    md += ['## 15.1 Trajectory SFT and the action mask', '',
           _table(['owner', 'share of predicted tokens', 'chapter'],
                  [(k, S(f'15.1/owner_share/{k}', 3), c) for k, c in [('template', '9%'), ('prompt', '9%'), ('policy', '19%'), ('tool', '63%')]]),
           '', f"Loss at init: masked {S('15.1/loss_masked', 3)}, unmasked {S('15.1/loss_unmasked', 3)} (chapter 5.913 / 5.879; "
           f"log V = {S('15.1/log_vocab', 3)}).", '']
    rows = []
    for label, key in [('weak base', '15.2/weak'), ('oracle SFT', '15.2/oracle_sft'), ('after RFT', '15.3/after_rft'), ('mismatched', '15.6/mismatch')]:
        c = CH_DESCRIBE[label]
        rows.append((label, *(f"{S(f'{key}/{m}', d)} ({cv})" for m, d, cv in
                              zip(['train', 'held', 'invalid', 'reads', 'entropy'], [3, 3, 2, 2, 3], c))))
    ch_sft = {k: (a, b) for k, a, b in CH_SFT}
    sft_rows, k = [], 0
    while _stat(sweep, f'15.2/hist_sft/{k}/0'):
        step = round(_stat(sweep, f'15.2/hist_sft/{k}/0')['mean'])
        c = ch_sft.get(step, ('—', '—'))
        sft_rows.append((step, f"{S(f'15.2/hist_sft/{k}/1')} ({c[0]})", f"{S(f'15.2/hist_sft/{k}/2')} ({c[1]})"))
        k += 1
    md += ['## 15.2 Warm start: format first, then skill', '',
           _table(['policy', 'train', 'held-out', 'invalid/ep', 'reads', 'action entropy'], rows), '',
           _table(['SFT step', 'train', 'held-out'], sft_rows), '']
    rft_rows, k = [], 0
    while _stat(sweep, f'15.3/rounds/{k}/rate'):
        c = CH_RFT[k] if k < len(CH_RFT) else ('—',) * 5
        rft_rows.append((k, f"{S(f'15.3/rounds/{k}/rate', 3)} ({c[0]})", f"{S(f'15.3/rounds/{k}/kept', 1)} ({c[1]})",
                         f"{S(f'15.3/rounds/{k}/n_solved', 1)} ({c[2]})", f"{S(f'15.3/hist_rft/{k + 1}/1')} ({c[3]})",
                         f"{S(f'15.3/hist_rft/{k + 1}/2')} ({c[4]})"))
        k += 1
    gap = _stat(sweep, '15.3/grad_gap')
    md += ['## 15.3 Rejection sampling and expert iteration', '',
           f"Gradient identity max |g_pg - ratio * g_rft|: mean {gap['mean']:.1e}, max over seeds {max(gap['values']):.1e} "
           f"over {gap['n']} seeds with a success in the sample (chapter 1.4e-09)." if gap else
           'Gradient identity: no seed had a success in its sample.',
           f"cosine(baseline PG, RFT) = {S('15.3/cosine', 3)} (chapter 0.985). "
           f"Train tasks never solved by the weak base: {S('15.3/n_never_solved', 1)} (chapter 4).", '',
           _table(['round', 'sample pass', 'kept', 'tasks solved', 'train', 'held-out'], rft_rows), '']
    ch_dpo = {c[0]: c for c in CH_DPO}
    dpo_rows, k = [], 0
    while _stat(sweep, f'15.4/log/{k}/step'):
        step = round(_stat(sweep, f'15.4/log/{k}/step')['mean'])
        c = ch_dpo.get(step, ('—',) * 6)
        dpo_rows.append((step, *(f"{S(f'15.4/log/{k}/{m}')} ({cv})" for m, cv in
                                 zip(['d_chosen', 'd_rejected', 'train', 'held', 'invalid'], c[1:]))))
        k += 1
    md += ['## 15.4 DPO for agent trajectories', '',
           f"Loss values at ratios (0,0), (+2,-2), (-2,+2): {' / '.join(S(f'15.4/loss_values/{i}', 4) for i in range(3))} "
           f"(chapter 0.6931 / 0.1269 / 2.1269). Pairs {S('15.4/pairs', 1)} over {S('15.4/tasks_with_pair', 1)} tasks (chapter 55 / 14).", '',
           _table(['step', 'd_chosen', 'd_rejected', 'train', 'held', 'invalid/ep'], dpo_rows), '']
    rec_rows = []
    for name in RECIPES:
        k = 0
        while _stat(sweep, f'15.5/curves/{name}/{k + 1}/0'):
            k += 1
        c = CH_RECIPES[name]
        rec_rows.append((name, f"{S(f'15.5/cost/{name}/demos', 0)} ({c[0]})", f"{S(f'15.5/cost/{name}/sampled', 0)} ({c[1]})",
                         f"{S(f'15.5/curves/{name}/{k}/1')} ({c[2]})", f"{S(f'15.5/curves/{name}/{k}/2')} ({c[3]})"))
    md += ['## 15.5 Four recipes from the same weak base', '',
           'Final points of each curve.', '',
           _table(['recipe', 'demos', 'sampled', 'train', 'held'], rec_rows), '']
    if figure:
        md += [f'![Figure 15.3 with 95% CI bands]({figure})', '']
    probe_rows = [(label, *(f"{S(f'15.6/probe/{label}/{m}', d)} ({cv})" for m, d, cv in zip(['held', 'signal', 'entropy'], [2, 2, 3], c)))
                  for label, c in CH_PROBE.items()]
    nll_rows = [(name, *(S(f'15.6/dpo_vs_dpo_nll/{i}/{m}') for m in ['train', 'held', 'invalid', 'd_chosen', 'd_rejected']), ch)
                for i, (name, ch) in enumerate([('DPO', 'train 0.41, invalid 2.02'), ('DPO + NLL', 'train 0.69, invalid 0.61')])]
    hack_rows, k = [], 0
    while _stat(sweep, f'15.6/hacking/{k}/kept'):
        c = CH_HACK[k] if k < len(CH_HACK) else ('—',) * 4
        hack_rows.append((k + 1, f"{S(f'15.6/hacking/{k}/kept', 1)} ({c[0]})", f"{S(f'15.6/hacking/{k}/hacks', 1)} ({c[1]})",
                          S(f'15.6/hacking/{k}/hack_share'), f"{S(f'15.6/hacking/{k}/public')} ({c[2]})",
                          f"{S(f'15.6/hacking/{k}/hidden')} ({c[3]})"))
        k += 1
    md += ['## 15.6 Design questions in practice', '',
           _table(['checkpoint', 'held-out pass', 'groups with signal', 'action entropy'], probe_rows), '',
           f"Template mismatch: NLL on correctly rendered demos {S('15.6/mismatch/nll', 3)} (chapter 0.815).", '',
           _table(['final DPO step', 'train', 'held', 'invalid/ep', 'd_chosen', 'd_rejected', 'chapter'], nll_rows), '',
           f"Dedup: {S('15.6/dedup/distinct', 1)} distinct action sequences among {S('15.6/dedup/kept', 1)} kept episodes of RFT round 1 (chapter 21 of 84).", '',
           _table(['public-filter round', 'kept', 'fail hidden tests', 'hack share', 'public pass', 'hidden pass'], hack_rows), '']
    return '\n'.join(md + _runs_md(sweep, _table))


def _runs_md(sweep, _table) -> list:
    rows = []
    for s, r in sweep['runs'].items():
        errs = '; '.join(f"attempt {e['attempt']}: {e['error']}" for e in r['errors']) or '—'
        rows.append((s, r['status'], r['attempts'], f"{r['seconds']:.1f}", f"{r['wall_seconds']:.1f}", errs))
    return ['## Runs', '', _table(['seed', 'status', 'attempts', 'run seconds', 'wall seconds', 'errors'], rows), '']


# --- command line

def add_parser(sub):
    """Register ``agentrl sweep`` on an argparse subparsers object."""
    p = sub.add_parser('sweep', help='run the chapter 15 reproduction over several seeds and aggregate (mean, 95% CI, hold rates)',
                       description=__doc__.split('\n\n')[0])
    p.add_argument('--seeds', type=parse_seeds, default=parse_seeds('0-9'),
                   help="seed shifts: a range '0-9', a list '0,3,5' or a mix '0-3,7' (default 0-9)")
    p.add_argument('--workers', type=int, default=None, help='seeds run at once (default: os.cpu_count())')
    p.add_argument('--backend', choices=('local', 'ray'), default='local',
                   help="local: a process pool on this machine (default); ray: ray tasks (pip install -e '.[ray]')")
    p.add_argument('--address', default=None, help='ray cluster address (default: start a local ray instance); '
                   'the output folder must be shared with the workers')
    p.add_argument('--out', default='runs/sweep', help='output folder; seed N goes to OUT/seedN (default runs/sweep)')
    p.add_argument('--resume', action='store_true', help='skip seeds already complete in OUT, resume partial ones')
    p.add_argument('--smoke', action='store_true', help='the tiny Ch15Config.smoke() budget (for testing; figures meaningless)')
    p.add_argument('--extended', action='store_true', help="run each seed with reproduce --extended (the chapter's "
                   'exercises and the clipped trainer) and aggregate those comparisons too')
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from rich.console import Console
    console = Console()
    if args.workers is not None and args.workers < 1:
        console.print('[red]--workers must be at least 1[/red]')
        return 2
    if args.address and args.backend != 'ray':
        console.print('[red]--address needs --backend ray[/red]')
        return 2
    sweep = run_sweep(args.out, args.seeds, workers=args.workers, backend=args.backend, address=args.address,
                      resume=args.resume, smoke=args.smoke, console=console, extended=args.extended)
    out = Path(args.out)
    low = sorted(sweep['findings'].items(), key=lambda kv: kv[1]['hold_rate'])[:5]
    console.print(f"{sweep['n']} of {len(sweep['seeds'])} seeds aggregated in {sweep['wall_seconds']:.0f} s | "
                  f"{out}/sweep.json, sweep.md" + (', fig15_3_recipes_ci.png' if sweep['n'] else ''))
    if low:
        console.print('lowest hold rates: ' + '; '.join(f"{name} {r['hold_rate']:.0%}" for name, r in low))
    if sweep['failed_seeds']:
        console.print(f"[red]failed seeds: {', '.join(map(str, sweep['failed_seeds']))} (see sweep.json 'failures')[/red]")
        return 1
    return 0
