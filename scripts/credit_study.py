"""Episode credit against turn credit on an environment that pays at every step (the Keypad), over seeds.

    python scripts/credit_study.py --seeds 0-9 --out runs/credit-0-9.json
    python scripts/credit_study.py --seeds 10-19 --out runs/credit-10-19.json
    python scripts/credit_study.py --plot runs/credit-0-9.json runs/credit-10-19.json --figure docs/assets/credit.png

For each seed: the Keypad's codes (20 train codes), a weak base (SFT on the shuffled-order player), then
REINFORCE from it with ``credit='episode'``, ``credit='turn'`` and ``credit='turn', gamma=0.5`` (same seed, same
first batch), evaluating the mean return on the train codes (the tasks RL trains on) every ``--every`` steps. Writes one JSON with every curve; ``--plot`` draws the mean curves of one or
more such files with a 95% interval, and prints the table the docs quote.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'examples'))

import torch  # noqa: E402

import agentrl as arl  # noqa: E402
from agentrl.experiments.sweeps.stats import summarize as mean_ci  # noqa: E402
from keypad import Keypad, make_codes, measure, weak_base  # noqa: E402

ARMS = {'episode': ('episode', 1.0), 'turn': ('turn', 1.0), 'turn_gamma0.5': ('turn', 0.5)}
"""Each arm: (credit, gamma). The baseline arm is the chapter's estimator."""


def parse_seeds(text: str) -> list:
    lo, _, hi = text.partition('-')
    return list(range(int(lo), int(hi or lo) + 1))


def run_seed(seed: int, steps: int, every: int, lr: float, n_train: int) -> dict:
    train, _ = make_codes(n_train=n_train, seed=seed)
    tok = arl.build_tokenizer(train)
    out = {}
    for arm, (credit, gamma) in ARMS.items():
        model = weak_base(train, tok, seed)
        history = arl.train_rl(model, train, tok, steps=steps, seed=seed, lr=lr, every=every, credit=credit,
                               gamma=gamma, env=Keypad, evaluate=lambda m: tuple(measure(m, train, tok).values()))
        out[arm] = [{'step': s, 'return': r, 'success': w} for s, r, w in history]
    return out


def summarize(record: dict) -> dict:
    """Per credit: the final held-out return and success (mean and 95% half-width over seeds), and the paired
    difference turn - episode of the final return, with the seeds where turn credit ends higher."""
    seeds = sorted(record['seeds'], key=int)
    n = len(seeds)

    def stats(xs):  # 'ci95': the half-width of the 95% t interval (0 with one seed)
        s = mean_ci(xs)
        return {'mean': round(s['mean'], 3), 'ci95': round(s['half_width'] or 0.0, 3)}

    out = {'n_seeds': n}
    for arm in ARMS:
        out[arm] = {k: stats([record['seeds'][s][arm][-1][k] for s in seeds]) for k in ('return', 'success')}
        if arm != 'episode':
            diff = [record['seeds'][s][arm][-1]['return'] - record['seeds'][s]['episode'][-1]['return'] for s in seeds]
            out[arm]['minus_episode'] = stats(diff)
            out[arm]['higher'] = sum(d > 0 for d in diff)
    return out


def plot(paths, figure):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(paths), figsize=(5 * len(paths), 3.6), squeeze=False)
    for ax, path in zip(axes[0], paths):
        record = json.loads(Path(path).read_text())
        seeds = sorted(record['seeds'], key=int)
        for arm, color in zip(ARMS, ('tab:blue', 'tab:orange', 'tab:green')):
            curves = [record['seeds'][s][arm] for s in seeds]
            steps = [p['step'] for p in curves[0]]
            means, halves = [], []
            for i in range(len(steps)):
                s = mean_ci([c[i]['return'] for c in curves])
                means.append(s['mean'])
                halves.append(s['half_width'] or 0.0)
            credit, gamma = ARMS[arm]
            ax.plot(steps, means, color=color, label=f"credit='{credit}'" + (f', gamma={gamma:g}' if gamma != 1 else ''))
            ax.fill_between(steps, [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)],
                            color=color, alpha=0.2)
        ax.set_title(f'Keypad, seeds {seeds[0]}-{seeds[-1]} (mean, 95% CI)', fontsize=10)
        ax.set_xlabel('REINFORCE step')
        ax.set_ylabel('mean return (train codes)')
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
    ap.add_argument('--steps', type=int, default=100, help='REINFORCE steps per arm (default 100)')
    ap.add_argument('--every', type=int, default=10, help='evaluate every this many steps (default 10)')
    ap.add_argument('--lr', type=float, default=1e-3, help='REINFORCE learning rate (default 1e-3)')
    ap.add_argument('--codes', type=int, default=20, help='train codes (default 20)')
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
        'settings': {'steps': args.steps, 'every': args.every, 'lr': args.lr, 'codes': args.codes,
                     'arms': {k: list(v) for k, v in ARMS.items()}},
        'machine': {'cpu': platform.processor() or platform.machine(), 'torch_threads': 1,
                    'torch': torch.__version__, 'python': platform.python_version()},
        'seeds': {}}
    for seed in parse_seeds(args.seeds):
        if str(seed) in record['seeds']:
            continue
        t0 = time.time()
        record['seeds'][str(seed)] = run_seed(seed, args.steps, args.every, args.lr, args.codes)
        last = ', '.join(f'{arm} {record["seeds"][str(seed)][arm][-1]["return"]:.2f}' for arm in ARMS)
        print(f'seed {seed}: final mean return {last} ({time.time() - t0:.0f} s)', flush=True)
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + '.tmp')
            tmp.write_text(json.dumps(record, indent=1))
            os.replace(tmp, path)
    print(json.dumps(summarize(record)))


if __name__ == '__main__':
    main()


def table_rows(paths) -> list:
    """The docs' table rows (docs/rewards.md) from recorded runs: one per file and arm."""
    rows = []
    for path in paths:
        record = json.loads(Path(path).read_text())
        seeds = sorted(record['seeds'], key=int)
        summary = summarize(record)
        for arm, (credit, gamma) in ARMS.items():
            s = summary[arm]
            name = f"`credit='{credit}'`" + (f', gamma={gamma:g}' if gamma != 1 else '')
            diff = (f"{s['minus_episode']['mean']:+.3f} ± {s['minus_episode']['ci95']:.3f}", f"{s['higher']} of {len(seeds)}") \
                if 'minus_episode' in s else ('', '')
            rows.append(f"| {seeds[0]}-{seeds[-1]} | {name} | {s['return']['mean']:.3f} ± {s['return']['ci95']:.3f} | "
                        f"{s['success']['mean']:.3f} ± {s['success']['ci95']:.3f} | {diff[0]} | {diff[1]} |")
    return rows


def seeds_ahead(path, arm: str, step: int) -> int:
    """On how many seeds ``arm``'s mean return at ``step`` is above episode credit's."""
    record = json.loads(Path(path).read_text())
    at = {a: {s: next(p['return'] for p in record['seeds'][s][a] if p['step'] == step) for s in record['seeds']}
          for a in (arm, 'episode')}
    return sum(at[arm][s] > at['episode'][s] for s in record['seeds'])
