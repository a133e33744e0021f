"""``agentrl exercise N``: one of the chapter's seven exercises, answered by a run (or, with ``--seeds``, by a sweep).

Every refusal comes before any work, as one line on stderr (``agentrl exercise: error: ...``, exit status 2): the
exercise number, the settings (``settings.resolve``), the ``--from`` folder (same environment, seed and settings, with
the sections and checkpoints the exercise reads), a folder another run holds.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path


def error(e) -> int:
    print(f'agentrl exercise: error: {e}', file=sys.stderr)
    return 2


def default_out(number: int, env: str, seeds) -> str:
    """``runs/exercise3`` (on the chapter's environment), ``runs/exercise3-wiring`` (another), ``...-sweep`` (seeds)."""
    from ..chapter15.env_registry import DEFAULT
    tail = '' if env == DEFAULT else '-' + re.sub(r'[^A-Za-z0-9_.-]+', '_', env)
    return f'runs/exercise{number}{tail}' + ('-sweep' if seeds else '')


def list_exercises() -> int:
    from .catalog import EXERCISES
    for spec in EXERCISES.values():
        print(f'{spec.number}. {spec.title}\n   {spec.question}\n')
    print('agentrl exercise N [--from RUN_DIR] runs one; docs/exercises.md gives every answer with its hold rate.')
    return 0


def main(args) -> int:
    if args.list:
        return list_exercises()
    from ..chapter15.settings import resolve
    from ..chapter15.env_registry import DEFAULT, get_env
    from ..run_folder import read_run
    from .catalog import get_spec
    try:
        if args.number is None:
            raise ValueError('give the exercise number, 1 to 7 (agentrl exercise --list shows them)')
        spec = get_spec(args.number)
        if args.seed is not None and args.seeds is not None:
            raise ValueError('give --seed (one run) or --seeds (a sweep), not both')
        if args.threads < 1 or (args.workers is not None and args.workers < 1):
            raise ValueError('--threads and --workers must be at least 1')
        env = args.env
        if args.source is not None and args.seeds is None:
            env = env or read_run(args.source).get('env', DEFAULT)
        elif args.source is not None:
            from .seeds import sweep_env
            env = env or sweep_env(args.source)
        env = env or DEFAULT
        if args.policy is None and args.source is not None:  # the --from run's (a sweep's: its first seed's)
            from .seeds import source_policy
            args.policy = source_policy(args.source, args.seeds)
        args.policy = args.policy or 'tiny'
        from ..chapter15.real_model import check_policy
        check_policy(args.policy)
        config, overrides = resolve(args.smoke, args.config, args.sets, env=get_env(env), policy=args.policy)
    except ValueError as e:
        return error(e)
    out = Path(args.out or default_out(spec.number, env, args.seeds))
    if args.seeds is not None:
        from .seeds import main_seeds
        return main_seeds(spec, args, out, env, config, overrides)
    return run_one(spec, args, out, env, config, overrides)


def run_one(spec, args, out: Path, env: str, config, overrides: dict) -> int:
    """One seed: the question, the exercise's lines as it runs, then its answers."""
    from ...runtime.terminal import console as new_console
    from ..chapter15.findings import table
    from ..lock import FolderInUse
    from ..workers import pin_threads
    from .exercise_run import ExerciseRun
    pin_threads(args.threads)
    console = new_console()
    say = (lambda line: None) if args.quiet else (lambda line: console.print(line, markup=False, highlight=False))
    t0 = time.perf_counter()
    try:
        run = ExerciseRun(spec.number, out, seed=args.seed, env=env, config=config, overrides=overrides,
                          source=args.source, resume=args.resume, log=say, policy=args.policy)
    except ValueError as e:
        return error(e)
    console.print(f'[bold]Exercise {spec.number}: {spec.title}[/bold] ({run.env.title}, seed {run.seed}'
                  + (f', from {run.source}' if run.source else '') + ')')
    console.print(spec.question, markup=False, highlight=False)
    try:
        record = run.run()
    except FolderInUse as e:
        return error(e)
    console.print(table(run.answers, f'Exercise {spec.number}: the answers (seed {run.seed}, {run.env.title})'))
    files = ', '.join(['results.json', *record['figures']])
    console.print(f"{record['summary']} | {time.perf_counter() - t0:.0f} s | {out}/{files}", markup=False, highlight=False)
    return 0


def add_parser(sub):
    """Register ``agentrl exercise`` on an argparse subparsers object."""
    from ..chapter15.settings import add_setting_args
    from ..chapter15.env_registry import ENV_HELP
    from ..sweeps.seeds import parse_seeds
    p = sub.add_parser('exercise', help="one of chapter 15's seven exercises, answered by a run (--list shows them)",
                       description=__doc__.split('\n\n')[0])
    p.add_argument('number', nargs='?', default=None, help='the exercise, 1 to 7')
    p.add_argument('--list', action='store_true', help='print the seven exercises and exit')
    p.add_argument('--from', dest='source', default=None, metavar='RUN_DIR',
                   help='start from this agentrl reproduce folder (same environment, seed and settings): its weak base, '
                   'SFT checkpoints and figures; with --seeds, an agentrl sweep folder (its seedN folders). Without it '
                   "the exercise trains the chapter's sections it needs first, into OUT/chapter")
    p.add_argument('--seed', type=int, default=None, help="the chapter's seed shift (default: --from's, else 0)")
    p.add_argument('--seeds', type=parse_seeds, default=None,
                   help="run the exercise over several seeds ('0-9', '0,3,5'), into OUT/seedN, and give each answer's "
                   'hold rate (exercise.json, exercise.md)')
    p.add_argument('--env', default=None, metavar='ENV', help=f"the environment (default: --from's, else the chapter's "
                   f'own): {ENV_HELP}')
    p.add_argument('--out', default=None, help='output folder (default runs/exerciseN, runs/exerciseN-ENV on another '
                   'environment, ...-sweep with --seeds)')
    p.add_argument('--resume', action='store_true', help='continue a killed run from its finished parts (with --seeds: '
                   'skip finished seeds)')
    p.add_argument('--threads', type=int, default=1, help='torch threads (default 1, as every seed of agentrl sweep: '
                   "the same figures as a sweep's seed folder)")
    p.add_argument('--workers', type=int, default=None, help='with --seeds: seeds run at once (default: the usable cores)')
    p.add_argument('--quiet', action='store_true', help="don't echo the exercise's lines")
    p.add_argument('--policy', default=None, metavar='POLICY',
                   help="the chapter's policy, as agentrl reproduce --policy: the TinyAgent, or a pretrained model "
                   "('smollm2', a model folder, a .gguf file) with its own budgets (default: --from's, else the TinyAgent)")
    p.add_argument('--smoke', action='store_true', help="the chapter's tiny smoke budget (for testing; answers meaningless)")
    add_setting_args(p)
    p.set_defaults(func=main)
    return p
