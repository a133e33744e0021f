#!/usr/bin/env python3
"""How much of a sweep's seed-to-seed spread is the evaluation's, and how much the trained policy's.

usage: python scripts/eval_spread.py SWEEP_DIR [SWEEP_DIR ...] [--draws 20] [--checkpoints sft_rl,rl_only]

A run reports each pass rate from one draw of episodes (`eval_samples` per task, 4 in the chapter,
sampled with the run's seed shift). This script reloads each seed's final checkpoints from a sweep folder (or any folder of
`reproduce` runs), re-evaluates each on train and held-out tasks with `--draws` other sampling seeds
(10_000 + k; the run's own figure used its seed shift), and prints per checkpoint and split:
  - reported: the runs' own figures (recomputed: for `sft_rl` and `rl_only` they equal the final
    points of section 15.5's curves), mean and SD over the seeds;
  - per-draw SD: how much one checkpoint's figure moves between draws (mean over seeds) -- the
    evaluation's noise;
  - policy SD: the SD over seeds of each checkpoint's mean over draws -- the trained policy's spread.
If the policy SD is the larger, a finding that fails at a seed fails because training went
differently there, not because the evaluation drew unlucky episodes.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import agentrl as arl

CHECKPOINTS = ('sft_step20', 'sft_step60', 'rft', 'sft_rl', 'rl_only', 'dpo', 'dpo_nll')


def spread(runs: list, checkpoint: str, tasks: list, draws: int, tok) -> dict:
    """Figures for one checkpoint name on one task split, over the runs (one per seed)."""
    reported, per_draw_sd, policy_mean = [], [], []
    for run in runs:
        results = json.loads((run / 'results.json').read_text())
        seed, n = int(results['seed']), int(results['config']['eval_samples'])
        model = arl.load_model(run / 'checkpoints' / f'{checkpoint}.safetensors', tok)
        reported.append(arl.pass_rate(model, tasks, tok, n, seed=seed)[0])
        values = [arl.pass_rate(model, tasks, tok, n, seed=10_000 + k)[0] for k in range(draws)]
        per_draw_sd.append(statistics.stdev(values))
        policy_mean.append(statistics.mean(values))
    return {'reported': reported, 'reported_mean': statistics.mean(reported), 'reported_sd': statistics.stdev(reported),
            'per_draw_sd': statistics.mean(per_draw_sd), 'policy_sd': statistics.stdev(policy_mean)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('dirs', nargs='+', type=Path, help='sweep folders (their seedN/ runs) or reproduce run folders')
    ap.add_argument('--draws', type=int, default=20, help='re-evaluations per checkpoint (default 20)')
    ap.add_argument('--json', metavar='FILE', help='also write the figures (and each run\'s reported value) to FILE')
    ap.add_argument('--checkpoints', default='sft_rl,rl_only',
                    help=f'comma-separated checkpoint names (default sft_rl,rl_only; any of {", ".join(CHECKPOINTS)})')
    args = ap.parse_args(argv)
    names = args.checkpoints.split(',')
    unknown = [n for n in names if n not in CHECKPOINTS]
    if unknown or args.draws < 2:
        print('eval_spread: error: ' + (f'unknown checkpoints {unknown}; valid ones are {list(CHECKPOINTS)}' if unknown
                                         else f'--draws must be at least 2, got {args.draws}'), file=sys.stderr)
        return 2
    runs = []
    for d in args.dirs:
        runs += sorted(d.glob('seed*/')) if not (d / 'results.json').exists() else [d]
    runs = [r for r in runs if (r / 'results.json').exists()]
    missing = [str(r / 'checkpoints' / f'{n}.safetensors') for r in runs for n in names
               if not (r / 'checkpoints' / f'{n}.safetensors').exists()]
    if len(runs) < 2 or missing:
        print('eval_spread: error: ' + (f'need at least 2 runs with results.json, found {len(runs)} under '
                                         f'{[str(d) for d in args.dirs]}' if len(runs) < 2 else f'missing {missing[:3]}'),
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    tok = arl.build_tokenizer(arl.make_tasks('all'))
    splits = {'train': arl.make_tasks('train'), 'held-out': arl.make_tasks('heldout')}
    print(f'{len(runs)} runs, {args.draws} draws each')
    print(f'{"checkpoint":<11}{"split":<10}{"reported mean":>14}{"reported SD":>13}{"per-draw SD":>13}{"policy SD":>11}')
    table = {}
    for name in names:
        for split, tasks in splits.items():
            r = table[f'{name}/{split}'] = spread(runs, name, tasks, args.draws, tok)
            print(f'{name:<11}{split:<10}{r["reported_mean"]:>14.3f}{r["reported_sd"]:>13.3f}{r["per_draw_sd"]:>13.3f}'
                  f'{r["policy_sd"]:>11.3f}', flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({'runs': [str(r) for r in runs], 'draws': args.draws, 'figures': table}, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
