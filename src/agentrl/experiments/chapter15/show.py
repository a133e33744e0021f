"""``agentrl show``: a run's sampled episodes (or, with no run folder, an oracle demo) in the terminal,
tokens coloured by owner (``viewer.trajectory_text``)."""
from __future__ import annotations

import sys
from pathlib import Path

from .page_data import label, run_config


class EnvNotFound(ValueError):
    """``--env`` names no environment (exit status 2, as for every command's usage errors)."""


def main_show(args) -> int:
    """Print episodes in the terminal with ``viewer.trajectory_text``; a folder without them is a one-line error
    (``agentrl show: error: ...``, exit status 1) saying what is missing and what writes it."""
    from rich.rule import Rule

    from ...runtime.terminal import console as new_console, rule_width
    from ...rendering.viewer import trajectory_text
    console = new_console()
    try:
        source, trajs, tok, n = oracle_demo(args) if args.dir is None else run_episodes(args, console)
    except EnvNotFound as e:  # --env names no environment: a usage error
        print(f'agentrl show: error: {e}', file=sys.stderr)
        return 2
    except ValueError as e:
        print(f'agentrl show: error: {e}', file=sys.stderr)
        return 1
    if args.task:
        exact = [t for t in trajs if t.info.get('task') == args.task]
        trajs = exact or [t for t in trajs if args.task in t.info.get('task', '')]
    if not trajs:
        print(f'agentrl show: error: no episode of task {args.task!r} in {source}', file=sys.stderr)
        return 1
    for k, t in enumerate(trajs[:n]):
        console.print(Rule(f'{source}: episode {k + 1} of {len(trajs)}'), width=rule_width(console))
        console.print(trajectory_text(t, tok))
    return 0


def oracle_demo(args) -> tuple:
    """No run folder: the oracle's episode of every train task of ``--env`` -> (source, episodes, tokenizer, how many)."""
    from ...rollouts.engine import scripted_rollout
    from .env_registry import DEFAULT, get_env
    try:
        env = get_env(getattr(args, 'env', None) or DEFAULT)
    except ValueError as e:
        raise EnvNotFound(str(e)) from None
    tok = env.tokenizer()
    trajs = [scripted_rollout(env.player('oracle'), env.make(), t, tok) for t in env.tasks('train')]
    return f'oracle demo on {env.title} (no run folder given)', trajs, tok, args.n or 1


def run_episodes(args, console) -> tuple:
    """A run folder's saved episodes of ``--policy`` (default: the first of the chapter's policies it has) ->
    (source, episodes, tokenizer, how many); ValueError naming what the folder lacks."""
    from ...integrations.export import run_tokenizer
    from ...rendering.trajio import load_trajectories
    from .reproduction import POLICIES
    run = Path(args.dir)
    if not run.is_dir():
        raise ValueError(f'{run} does not exist: give a folder that `agentrl reproduce --out DIR` wrote, or no folder '
                         'for an oracle demo')
    if not (run / 'checkpoints').is_dir():
        raise ValueError(f'{run} has no checkpoints/, so it is not a run folder (or its run has not finished 15.2); '
                         f'`agentrl reproduce --out {run}` writes one')
    tok = run_tokenizer(run)
    folder = run / 'episodes'
    have = sorted(p.stem for p in folder.glob('*.json')) if folder.is_dir() else []
    name = args.policy or next((p for p in POLICIES if p in have), have[0] if have else None)
    if name is None or name not in have:
        raise ValueError(f'no episodes for policy {name!r} in {folder} (have: {", ".join(have) or "none"}); a run '
                         'writes them when it ends')
    trajs = load_trajectories(folder / f'{name}.json')
    source = f'{label(name, run_config(run))} [{name}]'
    console.print(f'episodes of {source} from {folder / (name + ".json")}', markup=False, highlight=False)
    return source, trajs, tok, args.n or 2
