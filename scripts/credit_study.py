"""Episode credit against turn credit on an environment that pays at every step (the Keypad), over seeds.

    python scripts/credit_study.py --seeds 0-9 --out runs/credit-0-9.json
    python scripts/credit_study.py --seeds 10-19 --out runs/credit-10-19.json
    python scripts/credit_study.py --plot runs/credit-0-9.json runs/credit-10-19.json --figure docs/assets/credit.png

For each seed: the Keypad's codes, a weak base (SFT on the shuffled-order player), then REINFORCE from it with
``credit='episode'`` and with ``credit='turn'`` (same seed, same first batch), evaluating the held-out mean
return every ``--every`` steps. Writes one JSON with every curve; ``--plot`` draws the mean curves of one or
more such files with a 95% interval, and prints the table the docs quote.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'examples'))

import torch  # noqa: E402

import agentrl as arl  # noqa: E402
from keypad import Keypad, make_codes, measure, weak_base  # noqa: E402

CREDITS = ('episode', 'turn')


def parse_seeds(text: str) -> list:
    lo, _, hi = text.partition('-')
    return list(range(int(lo), int(hi or lo) + 1))


def run_seed(seed: int, steps: int, every: int, lr: float, gamma: float) -> dict:
    train, heldout = make_codes(seed=seed)
    tok = arl.build_tokenizer(train + heldout)
    out = {}
    for credit in CREDITS:
        model = weak_base(train, tok, seed)
        history = arl.train_rl(model, train, tok, steps=steps, seed=seed, lr=lr, every=every, credit=credit,
                               gamma=gamma, env=Keypad, evaluate=lambda m: tuple(measure(m, heldout, tok).values()))
        out[credit] = [{'step': s, 'return': r, 'success': w} for s, r, w in history]
    return out


def t95(n: int) -> float:
    """Student's t quantile for a two-sided 95% interval with n - 1 degrees of freedom (n <= 30; 1.96 beyond)."""
    table = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26, 11: 2.23, 12: 2.20,
             13: 2.18, 14: 2.16, 15: 2.14, 16: 2.13, 17: 2.12, 18: 2.11, 19: 2.10, 20: 2.09}
    return table.get(n, 2.05 if n <= 30 else 1.96)


def summarize(record: dict) -> dict:
    """Per credit: the final held-out return and success (mean and 95% half-width over seeds), and the paired
    difference turn - episode of the final return, with the seeds where turn credit ends higher."""
    seeds = sorted(record['seeds'], key=int)
    n = len(seeds)

    def stats(xs):
        mean = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        return {'mean': round(mean, 3), 'ci95': round(t95(len(xs)) * sd / math.sqrt(len(xs)), 3)}

    out = {'n_seeds': n}
    for credit in CREDITS:
        out[credit] = {k: stats([record['seeds'][s][credit][-1][k] for s in seeds]) for k in ('return', 'success')}
    diff = [record['seeds'][s]['turn'][-1]['return'] - record['seeds'][s]['episode'][-1]['return'] for s in seeds]
    out['turn_minus_episode'] = stats(diff)
    out['turn_higher'] = sum(d > 0 for d in diff)
    return out


def plot(paths, figure):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(paths), figsize=(5 * len(paths), 3.6), squeeze=False)
    for ax, path in zip(axes[0], paths):
        record = json.loads(Path(path).read_text())
        seeds = sorted(record['seeds'], key=int)
        for credit, color in zip(CREDITS, ('tab:blue', 'tab:orange')):
            curves = [record['seeds'][s][credit] for s in seeds]
            steps = [p['step'] for p in curves[0]]
            means, halves = [], []
            for i in range(len(steps)):
                xs = [c[i]['return'] for c in curves]
                m = sum(xs) / len(xs)
                sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
                means.append(m)
                halves.append(t95(len(xs)) * sd / math.sqrt(len(xs)))
            ax.plot(steps, means, color=color, label=f"credit='{credit}'")
            ax.fill_between(steps, [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)],
                            color=color, alpha=0.2)
        ax.set_title(f'Keypad, seeds {seeds[0]}-{seeds[-1]} (mean, 95% CI)', fontsize=10)
        ax.set_xlabel('REINFORCE step')
        ax.set_ylabel('held-out mean return')
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(loc='upper left', fontsize=8)
    fig.tight_layout()
    Path(figure).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=110)
    print(f'wrote {figure}')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--seeds', default='0-9', help='a seed or a range, e.g. 0-9 (default 0-9)')
    ap.add_argument('--steps', type=int, default=80, help='REINFORCE steps per credit (default 80)')
    ap.add_argument('--every', type=int, default=10, help='evaluate every this many steps (default 10)')
    ap.add_argument('--lr', type=float, default=3e-3, help='REINFORCE learning rate (default 3e-3)')
    ap.add_argument('--gamma', type=float, default=1.0, help="turn credit's discount (default 1)")
    ap.add_argument('--out', help='write the curves here (JSON); resumes the seeds it already holds')
    ap.add_argument('--plot', nargs='+', metavar='JSON', help='draw and summarise these files instead of running')
    ap.add_argument('--figure', default='docs/assets/credit.png', help='where --plot draws (default docs/assets/credit.png)')
    args = ap.parse_args(argv)
    if args.plot:
        for path in args.plot:
            print(path, json.dumps(summarize(json.loads(Path(path).read_text()))))
        plot(args.plot, args.figure)
        return
    torch.set_num_threads(1)
    path = Path(args.out) if args.out else None
    record = json.loads(path.read_text()) if path and path.exists() else {
        'settings': {'steps': args.steps, 'every': args.every, 'lr': args.lr, 'gamma': args.gamma},
        'machine': {'cpu': platform.processor() or platform.machine(), 'torch_threads': 1,
                    'torch': torch.__version__, 'python': platform.python_version()},
        'seeds': {}}
    for seed in parse_seeds(args.seeds):
        if str(seed) in record['seeds']:
            continue
        t0 = time.time()
        record['seeds'][str(seed)] = run_seed(seed, args.steps, args.every, args.lr, args.gamma)
        last = {c: record['seeds'][str(seed)][c][-1]['return'] for c in CREDITS}
        print(f'seed {seed}: held-out return episode {last["episode"]:.2f}, turn {last["turn"]:.2f} '
              f'({time.time() - t0:.0f} s)', flush=True)
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + '.tmp')
            tmp.write_text(json.dumps(record, indent=1))
            os.replace(tmp, path)
    print(json.dumps(summarize(record)))


if __name__ == '__main__':
    main()
