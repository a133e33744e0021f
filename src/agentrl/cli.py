"""The ``agentrl`` command: ``agentrl reproduce | bench | demo | ...`` (each subcommand imports what it needs)."""
from __future__ import annotations

import argparse
import sys


def _demo(args):
    """Play the three scripted policies on all 30 tasks; print pass rates per family and split."""
    from rich.console import Console
    from rich.table import Table

    from .envs.bugfix import FAMILIES, KINDS, BugFixEnv, make_tasks, scripted_policy
    from .rollout import scripted_rollout
    from .tokenizer import build_tokenizer

    tasks = make_tasks('all')
    tok = build_tokenizer(tasks)
    table = Table(title=f'Scripted play on the BugFix gym ({args.seeds} seeds per task, hidden-test reward)')
    table.add_column('policy')
    table.add_column('split')
    for family in FAMILIES:
        table.add_column(family, justify='right')
    table.add_column('all', justify='right')
    for kind in KINDS:
        for split in ('train', 'heldout'):
            rows = {f: [] for f in FAMILIES}
            for task in make_tasks(split):
                for seed in range(args.seeds):
                    traj = scripted_rollout(scripted_policy(kind, seed=seed), BugFixEnv(), task, tok)
                    rows[task.family].append(traj.reward)
            every = [r for f in FAMILIES for r in rows[f]]
            table.add_row(kind, split, *[f'{sum(rows[f]) / len(rows[f]):.2f}' for f in FAMILIES],
                          f'{sum(every) / len(every):.2f}')
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='agentrl', description=__doc__)
    sub = p.add_subparsers(dest='command', required=True, metavar='COMMAND')

    demo = sub.add_parser('demo', help='scripted oracle / blind / random play on all 30 tasks')
    demo.add_argument('--seeds', type=int, default=4, help='episodes per task and policy (default 4)')
    demo.set_defaults(func=_demo)

    from .experiments.cli import add_commands
    add_commands(sub)
    from .export import add_parser as add_export  # agentrl export: episodes as chat JSON Lines (issue 13)
    add_export(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .runtime import keep_freed_memory
    keep_freed_memory()  # freed tensors are reused without page faults; no figure changes (runtime.py)
    try:
        return args.func(args) or 0
    except KeyboardInterrupt:
        print('\ninterrupted; finished work is saved (resume with --resume where supported)', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
