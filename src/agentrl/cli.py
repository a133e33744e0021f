"""The ``agentrl`` command: ``agentrl reproduce | bench | demo | ...`` (each subcommand imports what it needs)."""
from __future__ import annotations

import argparse
import sys


def _demo(args):
    """Play the environment's scripted players on every task; print pass rates per group and split."""
    from rich.console import Console
    from rich.table import Table

    from .envs.protocol import env_attr
    from .experiments.chapter15.envs import get_env
    from .rollout import scripted_rollout

    try:
        env = get_env(args.env)
    except ValueError as e:
        print(f'agentrl demo: error: {e}', file=sys.stderr)
        return 2
    tok = env.tokenizer()
    groups = env.groups()
    table = Table(title=f'Scripted play on {env.title} ({args.seeds} seeds per task, the hidden reward)')
    table.add_column('policy')
    table.add_column('split')
    for group in groups:
        table.add_column(group, justify='right')
    table.add_column('all', justify='right')
    for kind in env_attr(env.env_id, 'scripted_kinds', ('oracle',)):
        for split in ('train', 'heldout'):
            rows = {g: [] for g in groups}
            for task in env.tasks(split):
                for seed in range(args.seeds):
                    traj = scripted_rollout(env.player(kind, seed=seed), env.make(), task, tok)
                    rows[task.group].append(traj.reward)
            every = [r for g in groups for r in rows[g]]
            table.add_row(kind, split, *[f'{sum(rows[g]) / len(rows[g]):.2f}' if rows[g] else '-' for g in groups],
                          f'{sum(every) / len(every):.2f}')
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='agentrl', description=__doc__)
    sub = p.add_subparsers(dest='command', required=True, metavar='COMMAND')

    from .experiments.chapter15.envs import DEFAULT, ENV_HELP
    demo = sub.add_parser('demo', help="an environment's scripted players (oracle, blind, random) on every task")
    demo.add_argument('--seeds', type=int, default=4, help='episodes per task and policy (default 4)')
    demo.add_argument('--env', default=DEFAULT, metavar='ENV', help=f'the environment: {ENV_HELP}')
    demo.set_defaults(func=_demo)

    from .experiments.cli import add_commands
    add_commands(sub)
    from .export import add_parser as add_export  # agentrl export: episodes as chat JSON Lines
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
