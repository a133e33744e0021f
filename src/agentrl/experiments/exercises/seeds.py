"""An exercise over seeds (``agentrl exercise N --seeds 0-9 [--from SWEEP_DIR]``): each answer's hold rate.

Every seed runs the exercise into ``OUT/seedN`` (a complete ``agentrl exercise N --seed N`` folder) in a worker
process of its own, at most ``--workers`` at a time, each on ``--threads`` torch threads (1 by default, as
``agentrl sweep``'s seeds, so a seed folder of ``agentrl sweep`` is the ``--from`` of the same seed here:
``--from SWEEP_DIR`` gives seed N the folder ``SWEEP_DIR/seedN``). Then every answer is checked again on every
seed's figures (so a changed threshold needs no new run) and summed up:

- ``OUT/exercise.json``: per answer, each seed's verdict and figure, the seeds that decide it, how many hold, the
  hold rate; what the exercise pools over seeds (its ``pooled``: exercise 6's correlation, exercise 7's winners);
  the seeds, their times and failures, the config and the provenance;
- ``OUT/exercise.md``: the same as tables, and the exercise's pooled figure where it has one.

A seed whose run raises, or whose worker dies, is reported, the others go on, and the command exits 1. ``--resume``
skips the seeds whose folder holds a finished run and resumes the others from their finished parts. The sweep holds
``OUT`` (``lock.FolderLock``).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ..chapter15.findings import rates_table
from ..lock import FolderLock
from ..run_folder import peek, read_json

SUMMARY = 'exercise.json'


def sweep_env(source) -> str:
    """The environment of an ``agentrl sweep`` folder (its ``sweep.json``, else its first seed folder's run)."""
    from ..chapter15.env_registry import DEFAULT
    source = Path(source)
    files = [source / 'sweep.json'] if (source / 'sweep.json').is_file() else sorted(source.glob('seed*/results.json'))
    if not files:
        raise ValueError(f'{source} holds no seed folder (seedN/results.json): give --from an agentrl sweep folder')
    return read_json(files[0], 'give --from an agentrl sweep folder').get('env', DEFAULT)


def source_policy(source, seeds=None) -> str:
    """The ``--policy`` of a ``--from`` folder: a run's, or (with ``seeds``) a sweep's first seed's; the TinyAgent when
    it cannot be read (the run's own checks then say what is wrong)."""
    path = Path(source) / (f'seed{seeds[0]}' if seeds else '') / 'results.json'
    try:
        return read_json(path, kind='reproduce')['sections'].get('setup', {}).get('policy', 'tiny')
    except ValueError:
        return 'tiny'


def seed_source(source, seed: int):
    """Seed ``seed``'s ``--from`` folder in a sweep folder, or None without one."""
    return None if source is None else Path(source) / f'seed{seed}'


def run_seed(number: int, out: str, seed: int, env: str, config: dict, overrides: dict, source, resume: bool,
             threads: int, policy: str = 'tiny') -> dict:
    """One seed of the sweep, in a worker process -> {'seed', 'seconds', 'summary'}. Top level: it pickles."""
    from ..workers import pin_threads
    pin_threads(threads)
    from ..chapter15.config import Ch15Config
    from .exercise_run import ExerciseRun
    t0 = time.perf_counter()
    run = ExerciseRun(number, out, seed=seed, env=env, config=Ch15Config(**config), overrides=overrides, source=source,
                      resume=resume, log=lambda line: None, policy=policy)
    record = run.run()
    return {'seed': seed, 'seconds': round(time.perf_counter() - t0, 2), 'summary': record['summary']}


def finished(folder: Path) -> bool:
    """Whether a seed folder holds a finished exercise run (its answers written)."""
    return 'answers' in (peek(folder / 'results.json') or {})


def main_seeds(spec, args, out: Path, env: str, config, overrides: dict) -> int:
    """``agentrl exercise N --seeds ...``: run the seeds, then print and write every answer's hold rate."""
    import sys

    from ...runtime.terminal import console as new_console
    console = new_console()
    seeds = args.seeds
    try:
        if args.source is not None:
            missing = [s for s in seeds if not (seed_source(args.source, s) / 'results.json').is_file()]
            if missing:
                raise ValueError(f"{args.source} has no finished run for seed {', '.join(map(str, missing))} "
                                 f'(seedN/results.json): run agentrl sweep --seeds ... --out {args.source} first, or '
                                 'leave --from out')
        from .exercise_run import ExerciseRun
        for s in seeds:  # every seed's arguments are checked before any runs (the --from folders' settings, sections)
            ExerciseRun(spec.number, out / f'seed{s}', seed=s, env=env, config=config, overrides=overrides,
                        source=seed_source(args.source, s), resume=args.resume, log=lambda line: None,
                        policy=args.policy)
    except ValueError as e:
        print(f'agentrl exercise: error: {e}', file=sys.stderr)
        return 2
    from ..lock import FolderInUse
    try:
        with FolderLock(out):
            state = run_all(spec, args, out, env, config, overrides, console)
            summary = summarize(spec.number, out, seeds, state, config_record=None)
    except FolderInUse as e:
        print(f'agentrl exercise: error: {e}', file=sys.stderr)
        return 2
    print_summary(console, spec, summary, out)
    return 1 if summary['failed_seeds'] else 0


def run_all(spec, args, out: Path, env: str, config, overrides: dict, console) -> dict:
    """Run every seed not finished yet, each in a worker process of its own -> {seed: {'status', 'seconds', 'error'}}."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..workers import Runner, usable_cores
    todo = [s for s in args.seeds if not (args.resume and finished(out / f'seed{s}'))]
    state = {s: {'status': 'skipped', 'seconds': 0.0} for s in args.seeds if s not in todo}
    workers = args.workers or max(1, usable_cores() // args.threads)
    with Runner(workers, ['torch', 'agentrl']) as runner, \
            Progress(TextColumn('[bold]{task.description}'), BarColumn(bar_width=30), TextColumn('{task.completed}/'
                     '{task.total} seeds'), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f'exercise {spec.number} on {env}', total=len(args.seeds), completed=len(state))
        for s in todo:
            runner.submit(s, run_seed, spec.number, str(out / f'seed{s}'), s, env, asdict(config), overrides,
                          seed_source(args.source, s), args.resume, args.threads, args.policy)
        for job in runner.as_finished():
            s = job.key
            try:
                res = job.result()
                state[s] = {'status': 'ok', 'seconds': res['seconds']}
                console.print(f"seed {s}: {res['summary']} in {res['seconds']:.0f} s", markup=False, highlight=False)
            except Exception as e:  # the seed's run raised, or its worker died
                state[s] = {'status': 'failed', 'seconds': 0.0, 'error': f'{type(e).__name__}: {e}'}
                console.print(f'[red]seed {s} failed: {type(e).__name__}: {e}[/red]')
            bar.advance(task)
    return state


def summarize(number: int, out: Path, seeds, state: dict | None = None, config_record=None) -> dict:
    """Every answer's verdict on every finished seed, its hold rate, and the exercise's pooled figures; written to
    ``OUT/exercise.json`` and ``OUT/exercise.md``."""
    from ..chapter15.findings import hold_rates
    from .answers import check_answers
    from .catalog import get_spec
    spec = get_spec(number)
    module = spec.load()
    state = dict(state or {})
    per_seed, records = {}, {}
    for s in seeds:
        folder = out / f'seed{s}'
        if not finished(folder):
            state.setdefault(s, {'status': 'missing', 'seconds': 0.0})
            continue
        rec = read_json(folder / 'results.json', kind='exercise')
        records[s] = rec
        per_seed[s] = check_answers(module.ANSWERS, rec['parts'])
        state.setdefault(s, {'status': 'ok', 'seconds': rec['seconds'].get('total', 0.0)})
        state[s]['exercise_seconds'] = rec['seconds'].get('total', 0.0)
    answers = hold_rates(per_seed, lambda f: {'says': f.statement, 'test': f.rule}, figure='measured')
    pooled = getattr(module, 'pooled', None)
    extra = pooled({s: r['parts'] for s, r in records.items()}, out) if pooled and records else {}
    first = next(iter(records.values()), {})
    summary = {'exercise': number, 'title': spec.title, 'question': spec.question, 'env': first.get('env'),
               'seeds': list(seeds), 'n': len(records), 'answers': answers, 'pooled': extra,
               'failed_seeds': [s for s, v in state.items() if v['status'] == 'failed'],
               'runs': {str(s): v for s, v in sorted(state.items())}, 'config': first.get('config'),
               'provenance': first.get('provenance')}
    (out / SUMMARY).write_text(json.dumps(summary, indent=1, sort_keys=True))
    (out / 'exercise.md').write_text(markdown(summary))
    return summary


def markdown(summary: dict) -> str:
    """``exercise.md``: the question, each answer's hold rate, what the exercise pools."""
    lines = [f"# Exercise {summary['exercise']}: {summary['title']}", '', summary['question'], '',
             f"{summary['n']} seeds on {summary['env']} ({', '.join(map(str, summary['seeds']))}).", '',
             rates_table('answer', summary['answers'])]
    for line in summary['pooled'].get('lines', []):
        lines += ['', line]
    return '\n'.join(lines) + '\n'


def print_summary(console, spec, summary: dict, out: Path) -> None:
    """``exercise.md``'s table in the terminal, what the exercise pools, and the files written."""
    console.print(rates_table('answer', summary['answers'],
                              f"Exercise {spec.number} over {summary['n']} seeds on {summary['env']}"))
    for line in summary['pooled'].get('lines', []):
        console.print(line, markup=False, highlight=False)
    console.print(f"{summary['n']} of {len(summary['seeds'])} seeds | {out}/{SUMMARY}, exercise.md"
                  + ''.join(f', {f}' for f in summary['pooled'].get('figures', [])), markup=False, highlight=False)
