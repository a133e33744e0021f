#!/usr/bin/env python3
"""How fast RL from the weak base learns, per seed: section 15.5's "RL only" curve on its own.

usage: python scripts/probe_rl_only.py [--seeds 0-9] [--set model.KEY=VALUE ...] [--jobs 2]

For each seed this trains the chapter's weak base (150 SFT steps on blind and random play, seeds
shifted as `agentrl reproduce --seed N` shifts them), then runs 60 REINFORCE steps from it (8 tasks
x 8 episodes, lr 1e-3), and prints train / held-out pass at steps 0, 20, 40 and 60 and the final
train pass against the band (at most 0.65; the chapter's 0.36). About 90 s for 10 seeds on 2 cores,
against about 6 minutes for a sweep: a quick first look at a model setting before `agentrl sweep`
measures every finding with it. ``--set`` takes the model keys `agentrl reproduce --set` takes.
"""
import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

BAND = 0.65


def one(seed: int, model_kw: dict):
    import torch

    import agentrl as arl
    from agentrl.recipes.reinforce import train_rl
    from agentrl.recipes.sft import sft_train
    torch.set_num_threads(1)
    tok = arl.build_tokenizer(arl.make_tasks('all'))
    train, heldout = arl.make_tasks('train'), arl.make_tasks('heldout')
    play = [arl.scripted_rollout(arl.scripted_policy(kind, seed=k + seed), arl.BugFixEnv(), t, tok)
            for kind in ['blind', 'random'] for k in range(4) for t in train]
    torch.manual_seed(seed)
    model = arl.TinyAgent(tok.vocab_size, **model_kw)
    sft_train(model, play, tok, steps=150, lr=3e-3, batch_size=32, seed=seed)

    def evaluate(m):
        return (arl.pass_rate(m, train, tok, 4, seed=seed)[0], arl.pass_rate(m, heldout, tok, 4, seed=seed)[0])
    return seed, train_rl(model, train, tok, 60, lr=1e-3, seed=seed, evaluate=evaluate, every=20)


def parse_seeds(text: str) -> list:
    if '-' in text:
        lo, hi = (int(x) for x in text.split('-'))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(',')]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--seeds', default='0-9', help='seed shifts, e.g. 0-9 or 0,3,7 (default 0-9)')
    ap.add_argument('--set', dest='sets', action='append', default=[], metavar='model.KEY=VALUE',
                    help='a TinyAgent setting, as `agentrl reproduce --set` takes it (repeatable)')
    ap.add_argument('--jobs', type=int, default=2, help='worker processes, one torch thread each (default 2)')
    args = ap.parse_args(argv)
    bad = [s for s in args.sets if not s.startswith('model.')]
    if bad:
        print(f'probe_rl_only: error: only model.* settings apply here, got {bad}', file=sys.stderr)
        return 2
    from agentrl.experiments.config import resolve
    try:
        config, _ = resolve(False, None, args.sets)
    except ValueError as e:
        print(f'probe_rl_only: error: {e}', file=sys.stderr)
        return 2
    seeds, t0, finals = parse_seeds(args.seeds), time.perf_counter(), []
    print('seed  ' + '  '.join(f'step {s:>2}' for s in (0, 20, 40, 60)) + '   (train / held-out)')
    with ProcessPoolExecutor(args.jobs) as pool:
        for seed, hist in pool.map(one, seeds, [dict(config.model)] * len(seeds)):
            finals.append(hist[-1][1])
            flag = '' if hist[-1][1] <= BAND else f'   above the band ({BAND})'
            print(f'{seed:>4}  ' + '  '.join(f'{a:.2f} / {b:.2f}' for _, a, b in hist) + flag, flush=True)
    print(f'final train: mean {statistics.mean(finals):.3f}, at most {BAND} at {sum(f <= BAND for f in finals)} of '
          f'{len(finals)} seeds (chapter 0.36) | {time.perf_counter() - t0:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
