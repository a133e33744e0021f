#!/usr/bin/env python3
"""Section 15.5's two RL recipes and oracle SFT's transfer, per seed: a quick look before a sweep.

usage: python scripts/probe_recipes.py [--seeds 0-9] [--set KEY=VALUE ...] [--jobs 2] [--json FILE] [--smoke]

For each seed this runs the part of `agentrl reproduce --seed N` that the transfer-dependent findings
come from, with the same seeds and budgets, so each figure equals the reproduction's:
  1. the weak base: 150 SFT steps on blind and random play (section 15.2);
  2. oracle SFT from it for 60 steps, snapshotting step 20: the step-20 train pass (band: at least
     0.55) and held-out pass per bug family at step 60 (every family at least 0.6);
  3. SFT -> RL: 40 REINFORCE steps from the step-20 snapshot (band: train at least 0.88, held-out at
     least 0.80);
  4. RL only: 60 REINFORCE steps from the weak base (band: train at most 0.65, held-out at least 0.25
     below SFT -> RL's).
A figure outside its band is marked `!`. About 130 s for 10 seeds on 2 cores, against about 250 s for
`agentrl sweep`, which measures all 30 findings. `--set` takes the model keys (`model.n_heads=8`) and
the budgets and hyperparameters these steps use, as `agentrl reproduce --set` takes them.
"""
import argparse
import copy
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

USED = ('weak_steps', 'sft_steps', 'sft_every', 'cold_start_step', 'eval_samples', 'describe_samples', 'sft_lr',
        'sft_batch_size', 'rl_cold_steps', 'rl_only_steps', 'rl_lr', 'rl_tasks', 'rl_group', 'rl_temperature',
        'rl_entropy_bonus')
"""The Ch15Config keys these steps read; `--set` refuses the others (they would change nothing here)."""
FAMILY_MIN = 0.6


def one(seed: int, config):
    """Steps 1-4 for one seed shift, on one torch thread -> dict of figures."""
    import torch

    import agentrl as arl
    from agentrl.recipes.evaluation import group_pass
    from agentrl.recipes.reinforce import train_rl
    from agentrl.recipes.sft import sft_train
    torch.set_num_threads(1)
    c, s = config, seed
    tok = arl.build_tokenizer(arl.make_tasks('all'))
    train, heldout = arl.make_tasks('train'), arl.make_tasks('heldout')
    oracle = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, tok) for t in train]
    play = [arl.scripted_rollout(arl.scripted_policy(kind, seed=k + s), arl.BugFixEnv(), t, tok)
            for kind in ['blind', 'random'] for k in range(4) for t in train]
    torch.manual_seed(s)
    weak = arl.TinyAgent(tok.vocab_size, **c.model)
    sft_train(weak, play, tok, steps=c.weak_steps, lr=c.sft_lr, batch_size=c.sft_batch_size, seed=s)

    def evaluate(m):
        return (arl.pass_rate(m, train, tok, c.eval_samples, seed=s)[0],
                arl.pass_rate(m, heldout, tok, c.eval_samples, seed=s)[0])

    sft, snapshot = copy.deepcopy(weak), {}

    def hook(step):
        if step == c.cold_start_step:
            snapshot['model'] = copy.deepcopy(sft)
    sft_train(sft, oracle, tok, steps=c.sft_steps, lr=c.sft_lr, batch_size=c.sft_batch_size, hook=hook,
              every=c.sft_every, seed=s)
    families = group_pass(sft, heldout, tok, c.describe_samples, seed=s)

    def rl(model, steps):
        return train_rl(model, train, tok, steps, lr=c.rl_lr, seed=s, n_tasks=c.rl_tasks, group=c.rl_group,
                        every=steps, evaluate=evaluate, temperature=c.rl_temperature,
                        entropy_bonus=c.rl_entropy_bonus)[-1][1:]
    step20 = evaluate(snapshot['model'])
    sft_rl = rl(snapshot['model'], c.rl_cold_steps)
    rl_only = rl(copy.deepcopy(weak), c.rl_only_steps)
    return {'seed': seed, 'sft_step20': step20, 'families': families, 'sft_rl': sft_rl, 'rl_only': rl_only}


def holds(r: dict) -> dict:
    """Which of the four figures hold their band (docs/bands.md; the family line is this script's own)."""
    return {'sft_step20': r['sft_step20'][0] >= 0.55,
            'families': min(r['families'].values()) >= FAMILY_MIN,
            'sft_rl': r['sft_rl'][0] >= 0.88 and r['sft_rl'][1] >= 0.80,
            'rl_only': r['rl_only'][0] <= 0.65 and r['rl_only'][1] <= r['sft_rl'][1] - 0.25}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seeds', default='0-9', help='seed shifts, as `agentrl sweep --seeds` takes them: 0-9, 0,3,7 or 0-3,7 (default 0-9)')
    ap.add_argument('--set', dest='sets', action='append', default=[], metavar='KEY=VALUE',
                    help='a model.* key or one of the budgets these steps use, as `agentrl reproduce --set` '
                         'takes it (repeatable)')
    ap.add_argument('--jobs', type=int, default=2, help='worker processes, one torch thread each (default 2)')
    ap.add_argument('--json', metavar='FILE', help='also write every seed\'s figures to FILE')
    ap.add_argument('--smoke', action='store_true', help='the tiny budgets of `agentrl reproduce --smoke` (seconds; '
                    'for testing the script: its figures are meaningless)')
    args = ap.parse_args(argv)
    bad = [s for s in args.sets if not s.startswith('model.') and s.split('=')[0] not in USED]
    if bad:
        print(f'probe_recipes: error: {bad} change nothing these steps run; valid keys are model.* and '
              f'{list(USED)}', file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f'probe_recipes: error: --jobs must be at least 1, got {args.jobs}', file=sys.stderr)
        return 2
    from agentrl.experiments.chapter15.settings import resolve
    from agentrl.experiments.sweeps.seeds import parse_seeds
    try:
        config, _ = resolve(args.smoke, None, args.sets)
        seeds = parse_seeds(args.seeds)
    except argparse.ArgumentTypeError as e:
        print(f'probe_recipes: error: --seeds takes what `agentrl sweep --seeds` takes: {e}', file=sys.stderr)
        return 2
    except ValueError as e:
        print(f'probe_recipes: error: {e}', file=sys.stderr)
        return 2
    t0, results = time.perf_counter(), []
    print('seed  SFT step 20   SFT -> RL     RL only       lowest family   (train / held-out; ! = outside the band)')
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(one, seeds, [config] * len(seeds)):
            results.append(r)
            ok = holds(r)
            low = min(r['families'], key=r['families'].get)
            cells = [f"{a:.2f} / {b:.2f}{' ' if ok[k] else '!'}" for k, (a, b) in
                     (('sft_step20', r['sft_step20']), ('sft_rl', r['sft_rl']), ('rl_only', r['rl_only']))]
            print(f"{r['seed']:>4}  " + '   '.join(cells) +
                  f"   {low} {r['families'][low]:.2f}{' ' if ok['families'] else '!'}", flush=True)
    n = len(results)
    mean = lambda f: statistics.mean(f(r) for r in results)
    held = {k: sum(holds(r)[k] for r in results) for k in ('sft_step20', 'sft_rl', 'rl_only', 'families')}
    print(f"mean  {mean(lambda r: r['sft_step20'][0]):.3f} train | SFT -> RL {mean(lambda r: r['sft_rl'][0]):.3f} / "
          f"{mean(lambda r: r['sft_rl'][1]):.3f} | RL only {mean(lambda r: r['rl_only'][0]):.3f} / "
          f"{mean(lambda r: r['rl_only'][1]):.3f} | lowest family {mean(lambda r: min(r['families'].values())):.3f}")
    print(f"holds SFT step 20 {held['sft_step20']}/{n} | SFT -> RL {held['sft_rl']}/{n} | RL only {held['rl_only']}/{n} "
          f"| every family >= {FAMILY_MIN} {held['families']}/{n} | {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'sets': args.sets, 'seeds': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
