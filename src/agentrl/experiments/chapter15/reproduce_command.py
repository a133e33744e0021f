"""``agentrl reproduce``: check the settings, run chapter 15 with a progress bar, write the figures and the report,
print the findings.

Every step refuses what it can before the next one starts: the settings (``settings.resolve``, before torch
is imported), then what needs the model or the run folder (``Chapter15``: model settings, ``--resume`` into
another config), then a folder another run holds (``Reproduction.session``). Each refusal is one line on
stderr, ``agentrl reproduce: error: ...``, exit status 2.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def error(command: str, e) -> int:
    """Print ``agentrl COMMAND: error: E`` on stderr -> exit status 2."""
    print(f'agentrl {command}: error: {e}', file=sys.stderr)
    return 2


def main_reproduce(args) -> int:
    """Run chapter 15 end to end, write results, report, figures, checkpoints; print the findings."""
    from ..lock import FolderInUse
    from .settings import resolve
    from .env_registry import get_env
    try:  # the environment and every setting are checked before anything runs (and before torch is imported)
        env = get_env(args.env)
        config, overrides = resolve(args.smoke, args.config, args.sets, env=env, policy=args.policy)
    except ValueError as e:
        return error('reproduce', e)
    jobs = start_workers(args)
    from ...runtime.terminal import console as new_console
    console = new_console()
    t0 = time.perf_counter()
    try:  # model settings and --resume into another config are refused here, before any section runs
        run = make_run(args, config, overrides, jobs, console, env.name)
    except ValueError as e:
        return error('reproduce', e)
    try:
        with run.session():  # a folder another run holds is refused here
            announce(console, args, run, overrides, jobs)
            results = run_with_progress(run, console, Path(args.out), args.extended, recipes=not args.quiet)
            outputs = write_outputs(run, results, Path(args.out), args.seed)
    except FolderInUse as e:
        return error('reproduce', e)
    return print_findings(console, run, outputs, args, time.perf_counter() - t0)


def start_workers(args) -> int:
    """The worker processes of ``--jobs`` (default: the usable cores); their forkserver starts now, importing torch
    beside this process's own imports; this process's torch threads are set to match the workers'."""
    from ..workers import usable_cores
    from .parallel import prestart, worker_threads
    from .real_model import is_pretrained
    jobs = args.jobs or usable_cores()
    if jobs > 1:
        prestart()
    # with workers, 15.1 and 15.2 run on the workers' thread count too: every section on the same count, so the
    # figures equal --jobs 1 at that count (and, at 1 thread, the seed's row of `agentrl sweep`). A pretrained
    # model's 15.2 is most of a run's time, with nothing beside it: it takes every core (its figures are not the
    # bands', and the provenance records the count)
    threads = args.threads or (worker_threads(jobs) if jobs > 1 and not is_pretrained(args.policy) else 0)
    if threads:
        import torch
        torch.set_num_threads(threads)
    return jobs


def make_run(args, config, overrides: dict, jobs: int, console, env: str):
    """The ``Chapter15`` the arguments describe, on ``env`` (the name ``--env`` resolved to), printing its lines
    unless ``--quiet`` (ValueError: a bad setting)."""
    from .chapter import Chapter15
    log = (lambda line: None) if args.quiet else (lambda line: console.print(line, markup=False, highlight=False))
    return Chapter15(Path(args.out), seed=args.seed, resume=args.resume, log=log, config=config, extended=args.extended,
                     overrides=overrides, policy=args.policy, jobs=jobs, worker_threads=args.threads or None, env=env,
                     logdir=args.logdir)


def announce(console, args, run, overrides: dict, jobs: int) -> None:
    """What differs from a plain run: the settings changed, the worker processes, the environment."""
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    if overrides:
        say('settings changed from the ' + ('smoke preset' if args.smoke else "chapter's") + ': ' +
            ', '.join(f'{k}={v}' for k, v in overrides.items()))
    if jobs > 1:
        k = run.worker_threads
        import torch
        here = torch.get_num_threads()
        say(f'--jobs {jobs}: 15.1 and 15.2 here ({here} torch thread{"s" if here > 1 else ""}), then the later '
            f'sections in up to {jobs} worker processes, {k} torch thread{"s" if k > 1 else ""} each')
    if run.logdir is not None:
        from ...loggers import tensorboard_available
        from ...loggers.tensorboard import INSTALL
        say(f'monitors of every recipe run -> {run.logdir}/RECIPE/LABEL/seed{run.seed}/metrics.jsonl' +
            (' and TensorBoard event files (tensorboard --logdir ' + str(run.logdir) + ')' if tensorboard_available()
             else f' (JSON Lines only: TensorBoard event files need {INSTALL})'))
    if run.env.bands is None:  # not the chapter's own environment: say which it is
        from ...envs.protocol import env_name
        say(f'chapter 15 on {run.env.title} ({env_name(run.env.env_id)}): {len(run.train)} train and '
            f'{len(run.heldout)} held-out tasks')


def recipe_lines(folder: Path) -> list:
    """One line per recipe running now, from its progress file (``Reproduction.recipe_run``): its section, recipe and
    run, its step of its total, and the time left at the pace of the steps it has run."""
    from ..run_folder import peek
    lines = []
    for path in sorted(folder.glob('*.json')) if folder.is_dir() else []:
        r = peek(path)
        if not r:
            continue
        left = r.get('left_seconds')
        when = '' if left is None else f', {int(left) // 60} min {int(left) % 60:02d} s left' if left >= 60 else \
            f', {left:.0f} s left'
        lines.append(f"  {r['section']} {r['recipe']} ({r['label']}): step {r['step']} of {r['total']}{when}")
    return lines


def run_with_progress(run, console, out: Path, extended: bool, recipes: bool = True) -> dict:
    """``run.run()`` under a progress bar of its sections (with ``--jobs``: which worker runs which) -> the results.
    With ``recipes`` and a terminal, a line under the bar for each recipe running now (``recipe_lines``), from the
    progress files its section writes, in this process or a worker."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from .reproduction import PROGRESS, SECTIONS, TITLES

    class ChapterProgress(Progress):
        def get_renderables(self):
            yield from super().get_renderables()
            if recipes and console.is_terminal:
                lines = recipe_lines(out / PROGRESS)
                if lines:
                    yield Text('\n'.join(lines), style='dim')

    with ChapterProgress(TextColumn('[bold]{task.description}'), BarColumn(),
                         TextColumn('{task.completed}/{task.total} sections'), TimeElapsedColumn(), console=console,
                         transient=False, refresh_per_second=2) as bar:
        job = bar.add_task('chapter 15', total=len(SECTIONS) + (1 if extended else 0))
        running = {}  # with --jobs N: section -> its worker

        def name(section):
            return TITLES[section] if section == 'beyond' else f'{section} {TITLES[section]}'

        def progress(section, done, resumed=False, worker=None, seconds=None):
            if worker is None:  # a section run here, or loaded
                if done:
                    bar.advance(job)
                    if resumed:
                        console.print(f'[dim]section {section} loaded from {out}/results.json[/dim]')
                else:
                    bar.update(job, description=name(section))
                return
            if done:  # its lines follow
                running.pop(section, None)
                bar.advance(job)
                console.print(f'[bold]{name(section)}[/bold] [dim]done on worker {worker} in {seconds:.1f} s:[/dim]')
            else:
                running[section] = worker
                console.print(f'[dim]{name(section)}: started on worker {worker}[/dim]')
            bar.update(job, description='running ' + ', '.join(f'{s} (w{w})' for s, w in sorted(running.items()))
                       if running else 'saving episodes')

        run.progress = progress
        results = run.run()
        bar.update(job, description='figures and report')
    return results


def write_outputs(run, results: dict, out: Path, seed: int) -> dict:
    """The bands (where the environment has them: the chapter's own), the claims, the figures and ``report.md``
    -> {'findings', 'claims', 'paths'}."""
    from . import figures, report
    from .claims import check_claims
    findings = run.env.bands(run.transcript()) if run.env.bands and not run.pretrained else []
    claims = check_claims(results, run.env)
    paths = figures.draw_all(results, out, groups=run.groups, tasks=run.env.task_label,
                             cold_start=run.cfg.cold_start_step, checks=run.env.check_label)
    report.write(out, results, findings, seed, run.timing, claims=claims, env=run.env)
    return {'findings': findings, 'claims': claims, 'paths': paths}


def print_findings(console, run, outputs: dict, args, seconds: float) -> int:
    """The findings table (with bands, on the chapter's own environment: the bands, and a count of the claims; else
    the claims) -> the exit status (``--strict``: 1 unless every one that applies holds)."""
    from .findings import summary, table, tally
    out, findings, claims = Path(args.out), outputs['findings'], outputs['claims']
    arch = '' if args.policy == 'tiny' else f', policy {args.policy}'  # which architecture the findings are for
    files = f'{out}/results.json, report.md, ' + ', '.join(p.name for p in outputs['paths'])
    n_claims, applicable, na = tally(claims)
    if findings:  # the bands: the TinyAgent's figures on the chapter's gym (``write_outputs``)
        console.print(table(findings, f'Chapter 15 findings (seed shift {args.seed}{arch})'))
        console.print(f"the chapter's claims: {n_claims} of {applicable} hold" + (f' ({na} not applicable)' if na else '')
                      + f' (agentrl claims {out})', markup=False, highlight=False)
        console.print(f'{summary(findings)} | {seconds:.0f} s | {files}')
        return 1 if args.strict and tally(findings)[0] < len(findings) else 0
    console.print(table(claims, f'Chapter 15 claims on {run.env.title} (seed shift {args.seed}{arch})'))
    console.print(f'{summary(claims)} | {seconds:.0f} s | {files}')
    return 1 if args.strict and n_claims < applicable else 0
