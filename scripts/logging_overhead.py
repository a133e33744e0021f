#!/usr/bin/env python3
"""What logging a recipe's monitors costs: the same recipe at the chapter's budgets, without and with a JSONL logger.

usage: python scripts/logging_overhead.py [--run runs/reproduce] [--recipe train_rl|expert_iteration] [--repeats 5]
                                          [--budget KEY=VALUE ...]

Loads a ``reproduce`` run's checkpoints (``train_rl`` starts from ``sft_step20``, as the chapter's cold start
does; ``expert_iteration`` from ``weak``, as section 15.3 does) and runs the recipe ``--repeats`` times with no
logger and as many with a ``JsonlLogger`` writing to a temporary folder, interleaved (off, on, on, off, off, on
...) so a slow spell of a shared machine hits both alike, after one uncounted warm-up run. Prints each run's wall
time and CPU time (``time.process_time``: what the process itself computed, much less sensitive than wall time to
other work on a shared machine), their medians and the overheads ``median(on) / median(off) - 1``, and checks that both settings trained the same weights (logging
changes no number). One torch thread, as the chapter's worker processes use.
"""
import argparse
import contextlib
import copy
import functools
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import agentrl as arl
from agentrl.experiments.chapter15.config import Ch15Config
from agentrl.loggers import JsonlLogger, read_jsonl
from agentrl.loggers.protocol import Reporter

RECIPE_MODULES = ('sft', 'rejection', 'reinforce', 'monitors')
"""The modules of ``agentrl.recipes`` through which the two recipes call the monitors."""
MONITORS = ('action_entropy_of', 'grad_norm', 'batch_tokens', 'sample_metrics', 'filter_metrics')
"""The monitor functions they call (``logp_and_entropy`` is the loss's own forward, and is left out)."""

RECIPES = ('train_rl', 'expert_iteration')


def budgets(overrides) -> dict:
    """The chapter's budgets for the two recipes, with ``KEY=VALUE`` overrides (ints, or floats for lr)."""
    c = Ch15Config()
    out = {'rl_cold_steps': c.rl_cold_steps, 'rl_tasks': c.rl_tasks, 'rl_group': c.rl_group, 'rl_lr': c.rl_lr,
           'rft_rounds': c.rft_rounds, 'rft_samples': c.rft_samples, 'rft_steps': c.rft_steps, 'sft_lr': c.sft_lr,
           'sft_batch_size': c.sft_batch_size}
    for item in overrides:
        key, _, value = item.partition('=')
        if key not in out:
            raise SystemExit(f'unknown budget {key!r}; valid ones are {sorted(out)}')
        out[key] = type(out[key])(value)
    return out


@contextlib.contextmanager
def timed_logging():
    """Count the seconds spent in the monitors and in ``Reporter.log`` while the block runs -> a one-item list."""
    spent, patched = [0.0], []

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            began = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - began
        return wrapper

    for name in RECIPE_MODULES:
        module = importlib.import_module(f'agentrl.recipes.{name}')
        for fn in MONITORS:
            if hasattr(module, fn):
                patched.append((module, fn, getattr(module, fn)))
                setattr(module, fn, timed(getattr(module, fn)))
    patched.append((Reporter, 'log', Reporter.log))
    Reporter.log = timed(Reporter.log)
    try:
        yield spent
    finally:
        for owner, name, original in patched:
            setattr(owner, name, original)


def run_once(recipe, start, train, tok, b, loggers):
    """One run of ``recipe`` from a copy of ``start`` -> (wall seconds, CPU seconds, trained model)."""
    model = copy.deepcopy(start)
    began, cpu = time.perf_counter(), time.process_time()
    if recipe == 'train_rl':
        arl.train_rl(model, train, tok, b['rl_cold_steps'], lr=b['rl_lr'], n_tasks=b['rl_tasks'], group=b['rl_group'],
                     loggers=loggers)
    else:
        arl.expert_iteration(model, train, tok, rounds=b['rft_rounds'], n_samples=b['rft_samples'],
                             steps=b['rft_steps'], lr=b['sft_lr'], batch_size=b['sft_batch_size'], loggers=loggers)
    return time.perf_counter() - began, time.process_time() - cpu, model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--run', type=Path, default=Path('runs/reproduce'), help='a reproduce run (its checkpoints/)')
    ap.add_argument('--recipe', choices=RECIPES, default='train_rl')
    ap.add_argument('--repeats', type=int, default=5, help='runs with and as many without a logger')
    ap.add_argument('--budget', nargs='*', default=[], metavar='KEY=VALUE', help='e.g. rl_cold_steps=10')
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tok = arl.build_tokenizer(arl.make_tasks('all'))
    train = arl.make_tasks('train')
    name = 'sft_step20' if args.recipe == 'train_rl' else 'weak'
    path = args.run / 'checkpoints' / f'{name}.safetensors'
    if not path.exists():
        print(f'{path} not found: run `agentrl reproduce --out {args.run}` first', file=sys.stderr)
        return 1
    start, b = arl.load_model(path, tok), budgets(args.budget)
    times, cpus, inside, models = {False: [], True: []}, {False: [], True: []}, {False: [], True: []}, {}
    run_once(args.recipe, start, train, tok, b, None)  # warm-up: first calls pay for allocation and lazy imports
    with tempfile.TemporaryDirectory() as tmp:
        order = [k % 4 in (1, 2) for k in range(2 * args.repeats)]  # off, on, on, off, off, on, on, off ...
        for k, on in enumerate(order):
            logger = JsonlLogger(Path(tmp) / f'{k}.jsonl') if on else None
            with timed_logging() if on else contextlib.nullcontext([0.0]) as spent:
                seconds, cpu, models[on] = run_once(args.recipe, start, train, tok, b, logger)
            inside[on].append(spent[0] / seconds)
            records = len(read_jsonl(logger.path)) if on else 0
            if logger is not None:
                logger.close()
            times[on].append(seconds)
            cpus[on].append(cpu)
            print(f'run {k + 1:>2}: logger {"on " if on else "off"} {seconds:6.2f} s wall, {cpu:6.2f} s CPU'
                  + (f' ({records} records, {100 * inside[on][-1]:.2f}% of it in the logging code)' if on else ''),
                  flush=True)
    same = all(torch.equal(p, q) for p, q in zip(models[False].parameters(), models[True].parameters()))
    keys = [k for k in b if k.startswith('rl_' if args.recipe == 'train_rl' else ('rft_', 'sft_'))]
    print(f'{args.recipe} at {", ".join(f"{k}={b[k]}" for k in keys)}, {args.repeats} runs each:')
    for label, xs in (('wall', times), ('CPU', cpus)):
        off, on = statistics.median(xs[False]), statistics.median(xs[True])
        print(f'  {label:>4} median: off {off:.2f} s, on {on:.2f} s, overhead {100 * (on / off - 1):+.1f}%')
    print(f'  inside the runs with the logger: {100 * statistics.median(inside[True]):.2f}% of the wall time in the '
          f'monitors and the logger (median; max {100 * max(inside[True]):.2f}%)')
    print(f'  same weights with and without the logger: {same}')
    return 0 if same else 1


if __name__ == '__main__':
    sys.exit(main())
