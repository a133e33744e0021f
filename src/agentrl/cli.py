"""The ``agentrl`` command: ``agentrl reproduce | bench | demo | ...`` (each subcommand imports what it needs)."""
from __future__ import annotations

import argparse
import sys


def _demo(args):
    """Play the environment's scripted players on every task; print their pass rates (the share of episodes that pass)
    per group and split, or, where a return is neither 0 nor 1, their mean returns and success rates."""
    from .envs.protocol import env_attr
    from .experiments.chapter15.env_registry import get_env
    from .recipes.outcomes import zero_one
    from .rollouts.engine import scripted_rollout
    from .runtime.terminal import console

    try:
        env = get_env(args.env)
    except ValueError as e:
        print(f'agentrl demo: error: {e}', file=sys.stderr)
        return 2
    tok = env.tokenizer()
    groups = env.groups()
    played = []  # (policy, split, {group: episodes})
    for kind in env_attr(env.env_id, 'scripted_kinds', ('oracle',)):
        for split in ('train', 'heldout'):
            rows = {g: [] for g in groups}
            for task in env.tasks(split):
                for seed in range(args.seeds):
                    rows[task.group].append(scripted_rollout(env.player(kind, seed=seed), env.make(), task, tok))
            played.append((kind, split, rows))
    binary = all(zero_one(ts) for _, _, rows in played for ts in rows.values())
    console().print(_demo_table(env, args.seeds, groups, played, binary))
    return 0


def _demo_table(env, seeds: int, groups: list, played: list, binary: bool):
    """The scripted players' table: pass rates with 0/1 returns; else each cell's mean return / success rate."""
    from rich.table import Table

    from .recipes.outcomes import mean_return, success_rate
    from .runtime.terminal import one_line
    what = '' if binary else ': mean return / success rate (a return that reaches 1)'  # 0/1: the share that pass
    table = Table(title=one_line(f'Scripted play on {env.title} ({seeds} seeds per task, the hidden reward){what}'))
    table.add_column('policy')
    table.add_column('split')
    for group in [*groups, 'all']:
        table.add_column(group, justify='right')

    def cell(trajs):
        if not trajs:
            return '-'
        return f'{mean_return(trajs):.2f}' if binary else f'{mean_return(trajs):.2f} / {success_rate(trajs):.2f}'
    for kind, split, rows in played:
        table.add_row(kind, split, *[cell(rows[g]) for g in groups], cell([t for g in groups for t in rows[g]]))
    return table


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='agentrl', description=__doc__)
    sub = p.add_subparsers(dest='command', required=True, metavar='COMMAND')

    from .experiments.chapter15.env_registry import DEFAULT, ENV_HELP
    demo = sub.add_parser('demo', help="an environment's scripted players (oracle, blind, random) on every task")
    demo.add_argument('--seeds', type=int, default=4, help='episodes per task and policy (default 4)')
    demo.add_argument('--env', default=DEFAULT, metavar='ENV', help=f'the environment: {ENV_HELP}')
    demo.set_defaults(func=_demo)

    from .experiments.cli import add_commands
    add_commands(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .runtime.memory import keep_freed_memory
    from .runtime.threads import torch_decides
    keep_freed_memory()  # freed tensors are reused without page faults; no figure changes (runtime/memory.py)
    try:
        with torch_decides():  # the commands set their own thread counts (reproduce, bench --threads): runtime/threads.py
            return args.func(args) or 0
    except KeyboardInterrupt:
        print('\ninterrupted; finished work is saved (resume with --resume where supported)', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
