"""``agentrl show``: a run's sampled episodes (or, with no run folder, an oracle demo) in the terminal,
tokens coloured by owner (``viewer.trajectory_text``)."""
from __future__ import annotations

from pathlib import Path

from .page_data import label, run_config


def main_show(args) -> int:
    """Print episodes in the terminal with ``viewer.trajectory_text``."""
    from rich.console import Console

    from ...viewer import trajectory_text
    console = Console()
    if args.dir is None:
        import sys

        from ...rollout import scripted_rollout
        from .envs import DEFAULT, get_env
        try:
            env = get_env(getattr(args, 'env', None) or DEFAULT)
        except ValueError as e:
            print(f'agentrl show: error: {e}', file=sys.stderr)
            return 2
        tok = env.tokenizer()
        source = f'oracle demo on {env.title} (no run folder given)'
        trajs = [scripted_rollout(env.player('oracle'), env.make(), t, tok) for t in env.tasks('train')]
        n = args.n or 1
    else:
        from ...export import run_tokenizer
        try:
            tok = run_tokenizer(args.dir)
        except ValueError as e:
            console.print(str(e), markup=False)
            return 1
        from ...trajio import load_trajectories
        folder = Path(args.dir) / 'episodes'
        have = sorted(p.stem for p in folder.glob('*.json')) if folder.is_dir() else []
        from .reproduction import POLICIES
        name = args.policy or next((p for p in POLICIES if p in have), have[0] if have else None)
        if name is None or name not in have:
            console.print(f'no episodes for policy {name!r} in {folder} (have: {", ".join(have) or "none"})', markup=False)
            return 1
        try:
            trajs = load_trajectories(folder / f'{name}.json')
        except ValueError as e:
            console.print(str(e), markup=False)
            return 1
        source = f'{label(name, run_config(args.dir))} [{name}]'
        console.print(f'episodes of {source} from {folder / (name + ".json")}', markup=False, highlight=False)
        n = args.n or 2
    if args.task:
        exact = [t for t in trajs if t.info.get('task') == args.task]
        trajs = exact or [t for t in trajs if args.task in t.info.get('task', '')]
    if not trajs:
        console.print(f'no episode of task {args.task!r} in {source}', markup=False)
        return 1
    for k, t in enumerate(trajs[:n]):
        console.rule(f'{source}: episode {k + 1} of {len(trajs)}')
        console.print(trajectory_text(t, tok))
    return 0
