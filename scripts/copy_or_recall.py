"""Where a Wiring policy's answer comes from: copied from a reply, or recalled from training (the lessons page).

For every seed of a Wiring sweep (or one run folder), samples each held-out (and train) task's episodes
from a checkpoint and sorts the value each episode's first ``set`` writes:

- ``right``: the task's value (which only a reply shows);
- ``shown, wrong``: another value a reply of the episode showed (a copy from the wrong place);
- ``recalled``: a value no reply showed but some train task's answer is (memorised, not read);
- ``other``: anything else; ``no set``: the episode never set a value.

    python scripts/copy_or_recall.py runs/wiring09 --checkpoint sft_step60

The shares are over every episode of every seed; ``reads`` is the share of episodes that looked anything up.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import agentrl as arl
from agentrl.envs.wiring import WiringEnv, make_tasks

CATEGORIES = ('right', 'shown, wrong', 'recalled', 'other', 'no set')


def classify(traj, task, train_answers) -> str:
    """The category of one episode's first ``set`` value (replaying its calls in a fresh environment)."""
    env = WiringEnv()
    env.reset(options={'task': task})
    shown = set()
    for call in traj.info['actions']:
        words = call.split()
        if words[:1] == ['set'] and len(words) == 3:
            value = words[2]
            if value == task.answer:
                return 'right'
            if value in shown:
                return 'shown, wrong'
            return 'recalled' if value in train_answers else 'other'
        reply, *_ = env.step(call)
        shown.update(reply.split())
    return 'no set'


def seed_folders(path: Path) -> list:
    if (path / 'sweep.json').is_file():
        sweep = json.loads((path / 'sweep.json').read_text())
        return [path / f'seed{s}' for s in sweep['aggregated_seeds']]
    return [path]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('path', help='a Wiring sweep folder (sweep.json) or reproduction folder (results.json)')
    p.add_argument('--checkpoint', default='sft_step60', help='which checkpoints/NAME.safetensors (default sft_step60)')
    p.add_argument('--samples', type=int, default=8, help='episodes per task (default 8)')
    args = p.parse_args(argv)
    train_answers = {t.answer for t in make_tasks('train')}
    tok = arl.build_tokenizer(make_tasks('all'))
    totals = {split: Counter() for split in ('train', 'heldout')}
    reads = {split: [] for split in totals}
    for folder in seed_folders(Path(args.path)):
        saved = json.loads((folder / 'results.json').read_text())
        if saved.get('env') != 'wiring':
            raise SystemExit(f'{folder} is not a Wiring run (env {saved.get("env", "bugfix")!r})')
        model = arl.load_model(folder / 'checkpoints' / f'{args.checkpoint}.safetensors', tok)
        for split in totals:
            tasks = make_tasks(split)
            by_name = {t.name: t for t in tasks}
            _, trajs = arl.pass_rate(model, tasks, tok, args.samples, seed=saved['seed'], env='agentrl/Wiring-v0')
            totals[split].update(classify(t, by_name[t.info['task']], train_answers) for t in trajs)
            reads[split] += [any(map(WiringEnv.is_read_call, t.info['actions'])) for t in trajs]
    print(f'{args.checkpoint} over {len(seed_folders(Path(args.path)))} run(s), {args.samples} episodes per task')
    print(f"{'split':<8} " + ' '.join(f'{c:>13}' for c in CATEGORIES) + f" {'reads':>7}")
    for split, counts in totals.items():
        n = sum(counts.values())
        print(f'{split:<8} ' + ' '.join(f'{counts[c] / n:>13.2f}' for c in CATEGORIES) + f' {sum(reads[split]) / n:>7.2f}')
    return totals


if __name__ == '__main__':
    main()
