"""Multi-seed sweeps of the chapter 15 reproduction, and grids of variants (``agentrl sweep``).

``agentrl sweep --seeds 0-9`` runs one reproduction per seed shift, each into ``DIR/seed{N}/``
through :class:`~agentrl.experiments.chapter15.chapter.Chapter15` (so every seed folder is a complete
``agentrl reproduce`` output), then aggregates them into

- ``DIR/sweep.json``: for every numeric figure of ``results.json`` (each leaf of the sections,
  plus a few derived counts and shares), the per-seed values, the mean, the standard error
  (sample std / sqrt(n)) and a 95% confidence interval (mean +- t_{0.975, n-1} * stderr); for every
  finding (its band, docs/bands.md), its hold rate over seeds; the seeds, per-seed times and failures; the
  effective config, the overrides and the provenance (version, commit, torch, CPU);
- ``DIR/sweep.md``: the chapter's tables as mean +- CI half-width beside the chapter's own
  single-seed figures, and the findings sorted by hold rate, lowest first, each with its 95% Wilson interval;
- ``DIR/fig15_3_recipes_ci.png``: the four recipes' mean curves with their CI bands.

``--set KEY=VALUE`` and ``--config FILE.toml`` change settings as for ``reproduce`` (see
``experiments/chapter15/config.py``). ``--grid KEY=V1,V2`` (repeatable: every combination) runs each variant
over the same seeds into ``DIR/<variant>/seed{N}``, each variant folder a sweep as above, and
writes ``DIR/grid.json``; ``agentrl compare DIR`` then sets the variants side by side.

This module orchestrates, and holds the command line: the seed specs and seed folders are in
``seeds.py``, the worker job and the local and Ray backends (with the fault injection the tests
use) in ``backends.py``, what is written at the end in ``summary.py``, the statistics in
``stats.py``, ``sweep.md`` in ``sweep_report.py``. Faults: a seed whose job raises or whose
worker dies is reported and retried once, resuming from its finished sections; a second failure
marks it failed and the sweep goes on and aggregates the others (exit status 1). ``--resume`` skips seeds whose folder already holds
every section, resumes partial ones, and refuses folders written with another config. A sweep holds ``DIR`` (and
each seed's run its seed folder) with ``experiments/lock.py``'s lock: a second sweep on it is refused at once.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from ..chapter15.settings import add_setting_args
from ..chapter15.env_registry import DEFAULT
from ..run_folder import peek
from ..workers import THREAD_ENV, exit_on_sigterm
from .backends import RL_SECTIONS, SECTIONS
from .seeds import Poller, finished_sections, parse_seeds, seed_dir
from .summary import summarize_sweep, write_grid

MAX_ATTEMPTS = 2
"""A failed seed is retried once."""


# --- the sweep

def plan(out, config=None, overrides=None, grid=None, env: str = DEFAULT, policy: str = 'tiny') -> list:
    """The variants of a sweep -> [{'name', 'folder', 'config' (Ch15Config), 'overrides', 'record' (effective)}].

    No grid: one unnamed variant in ``out``. A grid (``settings.parse_grid`` output): one per combination, in
    ``out/<name>``, its keys applied over ``config``. Every config is checked here (ValueError naming the key),
    on the environment ``env`` (its ``--env`` name), for the policy ``policy`` (its ``--policy``).
    """
    from ..chapter15.config import Ch15Config, apply
    from ..chapter15.settings import effective as _effective
    from ..chapter15.env_registry import get_env
    setup = get_env(env)
    effective = lambda cfg: _effective(cfg, env=setup, policy=policy)  # noqa: E731
    config = config or Ch15Config.for_env(setup, policy)
    overrides = dict(overrides or {})
    out = Path(out)
    if not grid:
        return [{'name': None, 'folder': out, 'config': config, 'overrides': overrides, 'record': effective(config)}]
    variants = []
    for name, keys in grid:
        both = sorted(set(keys) & set(overrides))
        if both:
            raise ValueError(f"{', '.join(both)} set by both --set/--config and --grid; give it in one place")
        cfg = apply(config, keys)
        variants.append({'name': name, 'folder': out / name, 'config': cfg, 'overrides': {**overrides, **keys},
                         'record': effective(cfg)})
    return variants


def check_resume(variants: list, seeds, threads: int = 1, env: str = DEFAULT) -> None:
    """Refuse to resume into seed folders written on another environment or with another config (saying which keys
    differ) or another thread count (whose float rounding differs, so the finished sections would not match the rest)."""
    from ..chapter15.settings import describe_differences, resume_differences
    for v in variants:
        for s in seeds:
            saved = peek(seed_dir(v['folder'], s) / 'results.json')
            if saved and saved.get('env', DEFAULT) != env:
                raise ValueError(f"{seed_dir(v['folder'], s)} was written on another environment ({saved.get('env', DEFAULT)}, "
                                 f'now {env}); resume with the same --env or use another --out')
            if saved and saved.get('seed') == s:
                diffs = resume_differences(saved.get('config'), v['record'])
                if diffs:
                    raise ValueError(f"{seed_dir(v['folder'], s)} was written with another config: "
                                     f'{describe_differences(diffs)}; resume with the same settings or use another --out')
                was = (saved.get('provenance') or {}).get('torch_threads')
                if was is not None and was != threads:
                    raise ValueError(f"{seed_dir(v['folder'], s)} was written on {was} torch thread(s), not {threads}; "
                                     f'resume with --threads {was} or use another --out')


def run_sweep(out, seeds, workers: int | None = None, backend: str = 'local', address: str | None = None,
              resume: bool = False, smoke: bool = False, console=None, poll: float = 0.5, extended: bool = False,
              config=None, overrides: dict | None = None, grid: list | None = None, threads: int = 1,
              env: str = DEFAULT, logdir=None, policy: str = 'tiny', rl: bool = False) -> dict:
    """Run every seed of every variant (retrying failures once), aggregate, write each variant's sweep.json /
    sweep.md / figure -> the sweep dict, or with ``grid`` ``{'grid': ..., 'variants': {name: sweep dict}}``.

    ``config`` (a ``Ch15Config``; default the chapter's, or the smoke preset with ``smoke``) and ``overrides``
    (the keys the user set, recorded) apply to every variant; ``grid`` is ``settings.parse_grid``'s list.
    ``extended`` runs ``reproduce --extended`` per seed (the chapter plus its exercises). ``threads``: torch
    threads per seed (default 1); the same seed gives the same figures at the same thread count, and
    another count rounds differently (a check of how robust a finding is to float rounding). ``env``: the
    environment every seed runs on (its ``--env`` name; its budgets are the default config's). The sweep holds
    ``out`` (``lock.FolderLock``): a second sweep or run on it is refused at once. ``logdir``: every seed's recipe
    runs write their monitors there (``reproduce --logdir``; a grid's variants below ``LOGDIR/VARIANT``).
    ``policy``: every seed's policy (``reproduce --policy``: the TinyAgent, or a pretrained model with its budgets).
    ``rl``: each seed runs 15.2 and then one RL recipe, ``rl_variant`` from ``rl_start`` (``chapter15/rl_section.py``),
    instead of the chapter: ``--grid rl_variant=reinforce,clipped,dapo`` compares the recipes from one checkpoint.
    """
    from ...runtime.terminal import console as new_console
    from ..lock import FolderLock
    console = console or new_console()
    out = Path(out).resolve()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f'threads must be a positive int, got {threads!r}')
    seeds = sorted(set(seeds))
    variants = plan(out, config or _default_config(smoke, env, policy), overrides, grid, env, policy)
    if resume:
        check_resume(variants, seeds, threads, env)
    if rl and extended:
        raise ValueError('--rl runs 15.2 and one RL recipe per seed, not the chapter: it cannot be --extended too')
    sections = RL_SECTIONS if rl else SECTIONS + (('beyond',) if extended else ())
    workers_given, workers = workers, workers or max(1, (os.cpu_count() or 1) // threads)
    with FolderLock(out):
        runs = SeedRuns(variants, seeds, sections, resume)
        t_start = time.perf_counter()
        with _thread_env(threads), _backend(backend, workers, address, workers_given, len(runs.jobs), threads) as be:
            runs.run(be, console, poll, extended, threads, env, None if logdir is None else Path(logdir).resolve(), policy, rl)
        wall = time.perf_counter() - t_start
        sweeps = {var['name']: summarize_sweep(var['folder'], seeds, runs.of_variant(v), runs.failures[v],
                                               config=var['record'], smoke=smoke, backend=backend, workers=workers,
                                               wall=wall, overrides=var['overrides'], variant=var['name'],
                                               threads=threads, env=env, policy=policy, rl=rl)
                  for v, var in enumerate(variants)}
        return sweeps[None] if not grid else write_grid(out, seeds, variants, sweeps, overrides, wall, threads)


def _default_config(smoke: bool, env: str, policy: str = 'tiny'):
    """The smoke preset, or the chapter's budgets with the environment's own (and a pretrained policy's)."""
    from ..chapter15.config import Ch15Config
    from ..chapter15.env_registry import get_env
    return Ch15Config.smoke() if smoke else Ch15Config.for_env(get_env(env), policy)


@contextmanager
def _thread_env(threads: int):
    """``THREAD_ENV`` set to ``threads`` while the sweep runs (inherited by spawned workers and a local ray), then restored."""
    saved = {v: os.environ.get(v) for v in THREAD_ENV}
    os.environ.update({v: str(threads) for v in THREAD_ENV})
    try:
        yield
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old


@contextmanager
def _backend(name: str, workers: int, address, workers_given, n_jobs: int, threads: int):
    """The backend the seeds run on (``local`` or ``ray``), closed at the end; SIGTERM ends its workers too."""
    from .backends import LocalBackend, RayBackend
    be = None
    restore_sigterm = exit_on_sigterm()  # `kill PID` then runs the finally below, which ends the workers too
    try:
        if name == 'ray':
            # on a cluster, ray schedules every seed unless --workers caps how many are in flight
            be = RayBackend(workers, address, limit=(workers_given or n_jobs) if address else workers, threads=threads)
        elif name == 'local':
            be = LocalBackend(workers)
        else:
            raise ValueError(f'unknown backend {name!r} (local or ray)')
        yield be
    finally:
        if be is not None:
            be.close()
        restore_sigterm()


class SeedRuns:
    """The state of every (variant, seed) job of a sweep: queued, skipped (``--resume``), running, retried, done or
    failed; ``run`` drives them on a backend, with a progress bar per job."""

    def __init__(self, variants: list, seeds: list, sections: tuple, resume: bool):
        self.variants, self.seeds, self.sections, self.resume = variants, seeds, sections, resume
        self.jobs = [(v, s) for v in range(len(variants)) for s in seeds]
        self.label = {(v, s): (f"{variants[v]['name']} seed {s}" if variants[v]['name'] else f'seed {s}') for v, s in self.jobs}
        self.state = {j: {'status': 'queued', 'attempts': 0, 'seconds': 0.0, 'wall_seconds': 0.0, 'errors': []}
                      for j in self.jobs}
        self.failures = {v: [] for v in range(len(variants))}
        self.todo = [j for j in self.jobs if not self._skip_if_done(j)]

    def of_variant(self, v: int) -> dict:
        """Seed -> its run record, for variant ``v``."""
        return {s: self.state[v, s] for s in self.seeds}

    def _skip_if_done(self, job) -> bool:
        """With ``--resume``, mark a seed whose folder holds every section (and its transcript) skipped -> skipped?"""
        v, s = job
        folder = self.variants[v]['folder']
        if not self.resume or len(finished_sections(folder, s, self.variants[v]['record'], self.sections)) < len(self.sections) \
                or not (seed_dir(folder, s) / 'transcript.txt').exists():
            return False
        timing = peek(seed_dir(folder, s) / 'timing.json') or {}
        self.state[job].update(status='skipped', seconds=round(sum(timing.values()), 2), note='all sections done (--resume)')
        return True

    def run(self, be, console, poll: float, extended: bool, threads: int, env: str, logdir=None, policy='tiny',
            rl: bool = False) -> None:
        """Run the jobs ``todo`` on the backend ``be``, at most ``be.limit`` at a time, retrying a failed one once."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from .backends import faults_from_env
        self.be, self.console, self.faults = be, console, faults_from_env()
        self.args = (extended, threads, env, logdir, policy, rl)
        poller = Poller(self.sections)
        with Progress(TextColumn('[bold]{task.description}'), BarColumn(bar_width=24),
                      TextColumn('{task.completed}/{task.total}'), TextColumn('{task.fields[status]}'),
                      TimeElapsedColumn(), console=console, transient=False) as self.bar:
            n = len(self.sections)
            self.ids = {j: self.bar.add_task(self.label[j], total=n, status=self.state[j]['status'], start=False)
                        for j in self.jobs}
            for j in self.jobs:
                if self.state[j]['status'] == 'skipped':
                    self.bar.update(self.ids[j], completed=n, status='[dim]skipped: already complete[/dim]')
            self.pending, self.inflight = [(j, 1) for j in self.todo], {}
            while self.pending or self.inflight:
                while self.pending and len(self.inflight) < be.limit:
                    self._launch(*self.pending.pop(0))
                for h in be.wait(list(self.inflight), poll):
                    self._collect(h)
                self._show_progress(poller)

    def _launch(self, job, attempt: int) -> None:
        (v, seed), again = job, attempt > 1
        self.state[job].update(attempts=attempt, status='running')
        var = self.variants[v]
        extended, threads, env, logdir, policy, rl = self.args
        if logdir is not None and var['name']:  # a grid: each variant's runs in their own folder
            logdir = logdir / var['name']
        share = tuple(str(seed_dir(self.variants[u]['folder'], seed)) for u in range(v)) if rl else ()  # their 15.2
        h = self.be.submit(str(seed_dir(var['folder'], seed)), seed, asdict(var['config']), self.resume or again, attempt,
                           self.faults.get(seed), extended, var['overrides'], threads, env,
                           None if logdir is None else str(logdir), policy, rl, share)
        self.inflight[h] = (job, attempt, time.perf_counter())
        self.bar.start_task(self.ids[job])
        self.bar.update(self.ids[job], status='starting' + (f' [yellow](attempt {attempt})[/yellow]' if again else ''))

    def _collect(self, h) -> None:
        """A finished job: record its result, or report its failure and retry it once (resuming)."""
        from rich.markup import escape
        job, attempt, t0 = self.inflight.pop(h)
        run = self.state[job]
        run['wall_seconds'] = round(run['wall_seconds'] + time.perf_counter() - t0, 2)
        try:
            res = self.be.result(h)
        except Exception as e:  # the job raised or its worker died: report, retry once (resuming)
            msg = f'{type(e).__name__}: {e}'
            run['errors'].append({'attempt': attempt, 'error': msg})
            self.failures[job[0]].append({'seed': job[1], 'attempt': attempt, 'error': msg})
            if attempt < MAX_ATTEMPTS:
                self.console.print(f'[yellow]{self.label[job]}: attempt {attempt} failed ({escape(msg)}); retrying, '
                                   f'resuming from its finished sections[/yellow]')
                self.pending.insert(0, (job, attempt + 1))
                run['status'] = 'retrying'
            else:
                self.console.print(f'[red]{self.label[job]}: attempt {attempt} failed again ({escape(msg)}); giving up on it[/red]')
                run['status'] = 'failed'
                self.bar.update(self.ids[job], status='[red]FAILED[/red]')
            return
        run.update(status='ok', seconds=res['seconds'], pid=res['pid'], resumed_sections=res['resumed_sections'],
                   torch_threads=res['threads'], **({'adopted_15_2': True} if res.get('adopted_15_2') else {}))
        self.bar.update(self.ids[job], completed=len(self.sections), status=f"[green]done[/green] in {res['seconds']:.0f} s"
                        + (' (15.2 shared)' if res.get('adopted_15_2') else '') + (f' (attempt {attempt})' if attempt > 1 else ''))

    def _show_progress(self, poller) -> None:
        """Each running job's bar at its finished sections, named by the section it runs."""
        from ..chapter15.reproduction import TITLES
        for job, attempt, _ in self.inflight.values():
            done = poller.done(self.variants[job[0]]['folder'], job[1])
            cur = next((s for s in self.sections if s not in done), None)
            text = f'{cur} {TITLES[cur]}' if cur else 'saving episodes'
            self.bar.update(self.ids[job], completed=len(done),
                            status=text + (f' [yellow](attempt {attempt})[/yellow]' if attempt > 1 else ''))
        for job, _ in self.pending:
            if self.state[job]['status'] == 'retrying':
                self.bar.update(self.ids[job], status='[yellow]waiting to retry[/yellow]')


# --- command line

def add_parser(sub):
    """Register ``agentrl sweep`` on an argparse subparsers object."""
    from ..chapter15.env_registry import ENV_HELP
    p = sub.add_parser('sweep', help='run the chapter 15 reproduction over several seeds (and a grid of variants) and '
                       'aggregate: mean, 95%% CI, hold rates', description=__doc__.split('\n\n')[0])
    p.add_argument('--seeds', type=parse_seeds, default=parse_seeds('0-9'),
                   help="seed shifts: a range '0-9', a list '0,3,5' or a mix '0-3,7' (default 0-9)")
    p.add_argument('--workers', type=int, default=None, help='seeds run at once (default: os.cpu_count() // --threads)')
    p.add_argument('--threads', type=int, default=1, help='torch threads per seed (default 1); another count rounds '
                   'floats differently: a check of whether a finding survives other rounding')
    p.add_argument('--backend', choices=('local', 'ray'), default='local',
                   help="local: a process pool on this machine (default); ray: ray tasks (pip install -e '.[ray]')")
    p.add_argument('--address', default=None, help='ray cluster address (default: start a local ray instance); '
                   'the output folder must be shared with the workers')
    p.add_argument('--out', default='runs/sweep', help='output folder; seed N goes to OUT/seedN (default runs/sweep)')
    p.add_argument('--resume', action='store_true', help='skip seeds already complete in OUT, resume partial ones '
                   '(refuses folders written with another config)')
    p.add_argument('--logdir', default=None, metavar='DIR',
                   help="every seed's recipe runs write their monitors to DIR/RECIPE/LABEL/seedN (as reproduce --logdir; "
                   'a grid: DIR/VARIANT/...)')
    p.add_argument('--smoke', action='store_true', help='the tiny Ch15Config.smoke() budget (for testing; figures meaningless)')
    p.add_argument('--env', default=DEFAULT, metavar='ENV', help=f'the environment every seed runs on: {ENV_HELP} '
                   '(the workers find it by the same name)')
    p.add_argument('--policy', default='tiny', metavar='POLICY',
                   help="every seed's policy, as reproduce --policy: the TinyAgent (default), or a pretrained model "
                   "('smollm2', a model folder or a .gguf file) with its own budgets")
    p.add_argument('--rl', action='store_true', help="each seed runs 15.2, then one RL recipe from its checkpoint "
                   "(rl_variant from rl_start, at the chapter's RL budget) and measures it: curve, pass@k, greedy pass, "
                   'episodes to rl_target; e.g. --rl --grid rl_variant=reinforce,clipped,dapo, then agentrl compare OUT')
    p.add_argument('--extended', action='store_true', help="run each seed with reproduce --extended (the chapter's "
                   'exercises and the clipped trainer) and aggregate those comparisons too')
    add_setting_args(p)
    p.add_argument('--grid', action='append', default=[], metavar='KEY=V1,V2',
                   help='run every value of KEY over the same seeds, into OUT/KEY=V/seedN (repeat for every '
                   'combination of several keys); then: agentrl compare OUT')
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    import sys

    from ..chapter15.settings import parse_grid, resolve
    from ..chapter15.env_registry import get_env
    try:  # every setting is checked before anything runs (and before torch is imported)
        config, overrides = resolve(args.smoke, args.config, args.sets, env=get_env(args.env), policy=args.policy)
        grid = parse_grid(args.grid)
        from ..chapter15.real_model import check_policy
        check_policy(args.policy)
    except ValueError as e:
        print(f'agentrl sweep: error: {e}', file=sys.stderr)
        return 2
    from ...runtime.terminal import console as new_console
    console = new_console()
    if args.workers is not None and args.workers < 1:
        console.print('[red]--workers must be at least 1[/red]')
        return 2
    if args.threads < 1:
        console.print('[red]--threads must be at least 1[/red]')
        return 2
    if args.address and args.backend != 'ray':
        console.print('[red]--address needs --backend ray[/red]')
        return 2
    try:
        result = run_sweep(args.out, args.seeds, workers=args.workers, backend=args.backend, address=args.address,
                           resume=args.resume, smoke=args.smoke, console=console, extended=args.extended,
                           config=config, overrides=overrides, grid=grid, threads=args.threads, env=args.env,
                           logdir=args.logdir, policy=args.policy, rl=args.rl)
    except ValueError as e:  # a model setting torch rejects, or --resume into another config or thread count
        print(f'agentrl sweep: error: {e}', file=sys.stderr)
        return 2
    out = Path(args.out)
    sweeps = result['variants'] if grid else {None: result}
    failed = False
    for name, sweep in sweeps.items():
        where = out / name if name else out
        low = sorted(sweep['findings'].items(), key=lambda kv: kv[1]['hold_rate'])[:5]
        console.print(f"{name + ': ' if name else ''}{sweep['n']} of {len(sweep['seeds'])} seeds aggregated in "
                      f"{sweep['wall_seconds']:.0f} s | {where}/sweep.json, sweep.md" + (', fig15_3_recipes_ci.png' if sweep['n'] and not args.rl else ''),
                      markup=False, highlight=False)
        if low:
            console.print('lowest hold rates: ' + '; '.join(f"{n} {r['hold_rate']:.0%}" for n, r in low), markup=False)
        claims = sweep.get('claims') or {}
        if claims:
            from ..chapter15.findings import every_seed_line
            rated = sorted(((k, c) for k, c in claims.items() if c['hold_rate'] is not None), key=lambda kv: kv[1]['hold_rate'])
            console.print(f"the chapter's claims: {every_seed_line(claims, noun='')}; lowest: " + '; '.join(
                f"{k} {c['hold_rate']:.0%}" for k, c in rated[:5]), markup=False, highlight=False)
        if sweep['failed_seeds']:
            failed = True
            console.print(f"[red]failed seeds: {', '.join(map(str, sweep['failed_seeds']))} (see sweep.json 'failures')[/red]")
    if grid:
        console.print(f'{len(sweeps)} variants in {out}/grid.json; compare them: agentrl compare {out}', markup=False, highlight=False)
    return 1 if failed else 0
