"""Multi-seed sweeps of the chapter 15 reproduction, and grids of variants (``agentrl sweep``).

``agentrl sweep --seeds 0-9`` runs one reproduction per seed shift, each into ``DIR/seed{N}/``
through :class:`~agentrl.experiments.chapter15.chapter.Chapter15` (so every seed folder is a complete
``agentrl reproduce`` output), then aggregates them into

- ``DIR/sweep.json``: for every numeric figure of ``results.json`` (each leaf of the sections,
  plus a few derived counts and shares), the per-seed values, the mean, the standard error
  (sample std / sqrt(n)) and a 95% confidence interval (mean +- t_{0.975, n-1} * stderr); for every
  finding (band of BANDS.md), its hold rate over seeds; the seeds, per-seed times and failures; the
  effective config, the overrides and the provenance (version, commit, torch, CPU);
- ``DIR/sweep.md``: the chapter's tables as mean +- CI half-width beside the chapter's own
  single-seed figures, and the findings sorted by hold rate, lowest first;
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
every section, resumes partial ones, and refuses folders written with another config.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from ..chapter15.config import add_setting_args
from ..chapter15.envs import DEFAULT
from ..workers import THREAD_ENV, exit_on_sigterm, restore_sigterm
from .backends import SECTIONS  # noqa: F401 (read as globals()['SECTIONS'] in run_sweep)
from .seeds import Poller, finished_sections, parse_seeds, read_results, seed_dir
from .summary import summarize_sweep, write_grid

MAX_ATTEMPTS = 2
"""A failed seed is retried once."""


# --- the sweep

def plan(out, config=None, overrides=None, grid=None, env: str = DEFAULT) -> list:
    """The variants of a sweep -> [{'name', 'folder', 'config' (Ch15Config), 'overrides', 'record' (effective)}].

    No grid: one unnamed variant in ``out``. A grid (``config.parse_grid`` output): one per combination, in
    ``out/<name>``, its keys applied over ``config``. Every config is checked here (ValueError naming the key),
    on the environment ``env`` (its ``--env`` name).
    """
    from ..chapter15.config import Ch15Config, apply
    from ..chapter15.config import effective as _effective
    from ..chapter15.envs import get_env
    setup = get_env(env)
    effective = lambda cfg: _effective(cfg, env=setup)  # noqa: E731
    config = config or Ch15Config.for_env(setup)
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
    from ..chapter15.config import describe_differences, differences
    for v in variants:
        for s in seeds:
            saved = read_results(seed_dir(v['folder'], s) / 'results.json')
            if saved and saved.get('env', DEFAULT) != env:
                raise ValueError(f"{seed_dir(v['folder'], s)} was written on another environment ({saved.get('env', DEFAULT)}, "
                                 f'now {env}); resume with the same --env or use another --out')
            if saved and saved.get('seed') == s:
                diffs = differences(saved.get('config'), v['record'])
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
              env: str = DEFAULT) -> dict:
    """Run every seed of every variant (retrying failures once), aggregate, write each variant's sweep.json /
    sweep.md / figure -> the sweep dict, or with ``grid`` ``{'grid': ..., 'variants': {name: sweep dict}}``.

    ``config`` (a ``Ch15Config``; default the chapter's, or the smoke preset with ``smoke``) and ``overrides``
    (the keys the user set, recorded) apply to every variant; ``grid`` is ``config.parse_grid``'s list.
    ``extended`` runs ``reproduce --extended`` per seed (the chapter plus its exercises). ``threads``: torch
    threads per seed (default 1); the same seed gives the same figures at the same thread count, and
    another count rounds differently (a check of how robust a finding is to float rounding). ``env``: the
    environment every seed runs on (its ``--env`` name; its budgets are the default config's).
    """
    from dataclasses import asdict

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..chapter15.config import Ch15Config
    from ..chapter15.reproduction import TITLES
    from .backends import LocalBackend, RayBackend, faults_from_env

    console = console or Console()
    out = Path(out).resolve()
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f'threads must be a positive int, got {threads!r}')
    seeds = sorted(set(seeds))
    from ..chapter15.envs import get_env
    variants = plan(out, config or (Ch15Config.smoke() if smoke else Ch15Config.for_env(get_env(env))), overrides, grid, env)
    if resume:
        check_resume(variants, seeds, threads, env)
    out.mkdir(parents=True, exist_ok=True)
    asked, workers = workers, workers or max(1, (os.cpu_count() or 1) // threads)
    SECTIONS = globals()['SECTIONS'] + (('beyond',) if extended else ())  # noqa: N806 (this sweep's sections)
    faults = faults_from_env()
    jobs = [(v, s) for v in range(len(variants)) for s in seeds]
    label = {(v, s): (f"{variants[v]['name']} seed {s}" if variants[v]['name'] else f'seed {s}') for v, s in jobs}
    runs = {j: {'status': 'queued', 'attempts': 0, 'seconds': 0.0, 'wall_seconds': 0.0, 'errors': []} for j in jobs}
    failures = {v: [] for v in range(len(variants))}

    todo = []
    for v, s in jobs:
        folder = variants[v]['folder']
        done = finished_sections(folder, s, variants[v]['record'], SECTIONS) if resume else []
        if resume and len(done) == len(SECTIONS) and (seed_dir(folder, s) / 'transcript.txt').exists():
            timing = read_results(seed_dir(folder, s) / 'timing.json') or {}
            runs[v, s].update(status='skipped', seconds=round(sum(timing.values()), 2), note='all sections done (--resume)')
        else:
            todo.append((v, s))

    saved_env = {v: os.environ.get(v) for v in THREAD_ENV}
    os.environ.update({v: str(threads) for v in THREAD_ENV})  # inherited by spawned workers / a local ray instance
    t_start = time.perf_counter()
    be = None
    old_term = exit_on_sigterm()  # `kill PID` then runs the finally below, which ends the workers too
    try:
        if backend == 'ray':
            # on a cluster, ray schedules every seed unless --workers caps how many are in flight
            be = RayBackend(workers, address, limit=(asked or len(jobs)) if address else workers, threads=threads)
        elif backend == 'local':
            be = LocalBackend(workers)
        else:
            raise ValueError(f'unknown backend {backend!r} (local or ray)')
        poller = Poller(SECTIONS)
        with Progress(TextColumn('[bold]{task.description}'), BarColumn(bar_width=24),
                      TextColumn('{task.completed}/{task.total}'), TextColumn('{task.fields[status]}'),
                      TimeElapsedColumn(), console=console, transient=False) as bar:
            ids = {j: bar.add_task(label[j], total=len(SECTIONS), status=runs[j]['status'], start=False) for j in jobs}
            for j in jobs:
                if runs[j]['status'] == 'skipped':
                    bar.update(ids[j], completed=len(SECTIONS), status='[dim]skipped: already complete[/dim]')
            pending = [(j, 1) for j in todo]
            inflight = {}

            def launch(job, attempt):
                (v, seed), again = job, attempt > 1
                runs[job]['attempts'] = attempt
                runs[job]['status'] = 'running'
                var = variants[v]
                h = be.submit(str(seed_dir(var['folder'], seed)), seed, asdict(var['config']), resume or again, attempt,
                              faults.get(seed), extended, var['overrides'], threads, env)
                inflight[h] = (job, attempt, time.perf_counter())
                bar.start_task(ids[job])
                bar.update(ids[job], status='starting' + (f' [yellow](attempt {attempt})[/yellow]' if again else ''))

            while pending or inflight:
                while pending and len(inflight) < be.limit:
                    launch(*pending.pop(0))
                for h in be.wait(list(inflight), poll):
                    job, attempt, t0 = inflight.pop(h)
                    runs[job]['wall_seconds'] = round(runs[job]['wall_seconds'] + time.perf_counter() - t0, 2)
                    try:
                        res = be.result(h)
                    except Exception as e:  # the job raised or its worker died: report, retry once (resuming)
                        msg = f'{type(e).__name__}: {e}'
                        runs[job]['errors'].append({'attempt': attempt, 'error': msg})
                        failures[job[0]].append({'seed': job[1], 'attempt': attempt, 'error': msg})
                        if attempt < MAX_ATTEMPTS:
                            console.print(f'[yellow]{label[job]}: attempt {attempt} failed ({escape(msg)}); retrying, '
                                          f'resuming from its finished sections[/yellow]')
                            pending.insert(0, (job, attempt + 1))
                            runs[job]['status'] = 'retrying'
                        else:
                            console.print(f'[red]{label[job]}: attempt {attempt} failed again ({escape(msg)}); giving up on it[/red]')
                            runs[job]['status'] = 'failed'
                            bar.update(ids[job], status='[red]FAILED[/red]')
                        continue
                    runs[job].update(status='ok', seconds=res['seconds'], pid=res['pid'],
                                     resumed_sections=res['resumed_sections'], torch_threads=res['threads'])
                    bar.update(ids[job], completed=len(SECTIONS),
                               status=f"[green]done[/green] in {res['seconds']:.0f} s" + (f' (attempt {attempt})' if attempt > 1 else ''))
                for h, (job, attempt, _) in inflight.items():
                    done = poller.done(variants[job[0]]['folder'], job[1])
                    cur = next((s for s in SECTIONS if s not in done), None)
                    text = f'{cur} {TITLES[cur]}' if cur else 'saving episodes'
                    bar.update(ids[job], completed=len(done), status=text + (f' [yellow](attempt {attempt})[/yellow]' if attempt > 1 else ''))
                for job, _ in pending:
                    if runs[job]['status'] == 'retrying':
                        bar.update(ids[job], status='[yellow]waiting to retry[/yellow]')
    finally:
        if be is not None:
            be.close()
        restore_sigterm(old_term)
        for v, old in saved_env.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    wall = time.perf_counter() - t_start
    sweeps = {}
    for v, var in enumerate(variants):
        sweeps[var['name']] = summarize_sweep(var['folder'], seeds, {s: runs[v, s] for s in seeds}, failures[v],
                                              config=var['record'], smoke=smoke, backend=backend, workers=workers,
                                              wall=wall, overrides=var['overrides'], variant=var['name'], threads=threads,
                                              env=env)
    if not grid:
        return sweeps[None]
    return write_grid(out, seeds, variants, sweeps, overrides, wall, threads)


# --- command line

def add_parser(sub):
    """Register ``agentrl sweep`` on an argparse subparsers object."""
    from ..chapter15.envs import ENV_HELP
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
    p.add_argument('--smoke', action='store_true', help='the tiny Ch15Config.smoke() budget (for testing; figures meaningless)')
    p.add_argument('--env', default=DEFAULT, metavar='ENV', help=f'the environment every seed runs on: {ENV_HELP} '
                   '(the workers find it by the same name)')
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

    from ..chapter15.config import parse_grid, resolve
    from ..chapter15.envs import get_env
    try:  # every setting is checked before anything runs (and before torch is imported)
        config, overrides = resolve(args.smoke, args.config, args.sets, env=get_env(args.env))
        grid = parse_grid(args.grid)
    except ValueError as e:
        print(f'agentrl sweep: error: {e}', file=sys.stderr)
        return 2
    from rich.console import Console
    console = Console()
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
                           config=config, overrides=overrides, grid=grid, threads=args.threads, env=args.env)
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
                      f"{sweep['wall_seconds']:.0f} s | {where}/sweep.json, sweep.md" + (', fig15_3_recipes_ci.png' if sweep['n'] else ''),
                      markup=False, highlight=False)
        if low:
            console.print('lowest hold rates: ' + '; '.join(f"{n} {r['hold_rate']:.0%}" for n, r in low), markup=False)
        claims = sweep.get('claims') or {}
        if claims:
            from .sweep_report import every_seed_line
            rated = sorted(((k, c) for k, c in claims.items() if c['hold_rate'] is not None), key=lambda kv: kv[1]['hold_rate'])
            console.print(f"the chapter's claims: {every_seed_line(claims, noun='')}; lowest: " + '; '.join(
                f"{k} {c['hold_rate']:.0%}" for k, c in rated[:5]), markup=False, highlight=False)
        if sweep['failed_seeds']:
            failed = True
            console.print(f"[red]failed seeds: {', '.join(map(str, sweep['failed_seeds']))} (see sweep.json 'failures')[/red]")
    if grid:
        console.print(f'{len(sweeps)} variants in {out}/grid.json; compare them: agentrl compare {out}', markup=False, highlight=False)
    return 1 if failed else 0
