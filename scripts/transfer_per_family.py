#!/usr/bin/env python3
"""Held-out pass per bug family after oracle SFT, from the checkpoints of ``agentrl reproduce`` runs.

usage: python scripts/transfer_per_family.py RUN_DIR [RUN_DIR ...] [--samples 8] [--checkpoint sft_step60]

Each RUN_DIR is a ``reproduce`` (or ``sweep`` seed) output folder. The script loads its oracle-SFT
checkpoint (``checkpoints/sft_step60.safetensors``, the policy of section 15.2 after 60 steps),
samples ``--samples`` episodes per held-out task with the run's seed shift, and prints held-out
pass per family, one row per run, then the minimum over runs per family. Section 15.2's transfer
claim is that every family carries over: the skill (read the source, pick the fix from its cue)
rather than the train functions' names.

``agentrl reproduce`` records the same figure itself (``results.json``: ``15.2/heldout_by_family``, from the
oracle-SFT evaluation's own held-out episodes, ``describe_samples`` = 8 per task); this script recomputes it
from a checkpoint with the library's ``group_rates``, for other checkpoints or sample counts.
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch

import agentrl as arl
from agentrl.recipes.evaluation import group_rates


def per_family(run: Path, samples: int, checkpoint: str) -> tuple[int, dict, float]:
    results = json.loads((run / 'results.json').read_text())
    seed = int(results['seed'])
    tok = arl.build_tokenizer(arl.make_tasks('all'))
    model = arl.load_model(run / 'checkpoints' / f'{checkpoint}.safetensors', tok)
    rate, trajs = arl.pass_rate(model, arl.make_tasks('heldout'), tok, samples, seed=seed)
    return seed, group_rates(trajs), rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('runs', nargs='+', type=Path)
    ap.add_argument('--samples', type=int, default=8, help='episodes per held-out task (default 8)')
    ap.add_argument('--checkpoint', default='sft_step60', help='checkpoint name in RUN_DIR/checkpoints (default sft_step60)')
    a = ap.parse_args()
    torch.set_num_threads(2)
    os.environ.setdefault('AGENTRL_THREADS', 'torch')  # the library keeps 2 threads (agentrl.runtime.threads)
    rows = []
    print(f"{'run':<28} {'seed':>4} " + ' '.join(f'{f:>8}' for f in arl.FAMILIES) + f" {'held':>6}")
    for run in a.runs:
        if not (run / 'checkpoints' / f'{a.checkpoint}.safetensors').exists():
            print(f'{run}: no checkpoints/{a.checkpoint}.safetensors (run agentrl reproduce first)', file=sys.stderr)
            return 2
        seed, fam, rate = per_family(run, a.samples, a.checkpoint)
        rows.append(fam)
        print(f'{str(run):<28} {seed:>4} ' + ' '.join(f'{fam[f]:>8.2f}' for f in arl.FAMILIES) + f' {rate:>6.2f}')
    print(f"{'minimum over runs':<33} " + ' '.join(f'{min(r[f] for r in rows):>8.2f}' for f in arl.FAMILIES))
    return 0


if __name__ == '__main__':
    sys.exit(main())
