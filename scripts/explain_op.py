#!/usr/bin/env python3
"""What a policy's fix decision rests on: the function's name, or words of the source it read.

usage: python scripts/explain_op.py RUN_DIR [--checkpoint sft_step60] [--split heldout] [--top 3] [--json FILE]

Section 15.2's transfer claim is that oracle SFT teaches the skill (read the source, pick the fix from
its family cue), not a habit per function. This script tests that claim on one checkpoint of a
`reproduce` (or sweep seed) run, task by task, on the oracle's own episode (`read`, then
`edit FIX`) cut at the op token, so every figure is P(op | the context a reading policy sees):

  P(fix)   the probability of the correct op, and the op the policy prefers if it is another;
  shuffled P(fix) with the words of the `read` reply (the source) in random order, mean of 20 orders:
           if it equals P(fix), the decision reads the source as a bag of words, not in order;
  names    P(fix) with the function's name (in the prompt and the `def` line) replaced by each train
           function's name, averaged per family of the name: if P(fix) follows the name's family,
           the decision reads the name; if it stays put, the name does not matter;
  unseen   the lowest and highest P(fix) with each other held-out function's name in its place: names
           no training step has touched, so their embeddings are still the random ones of
           initialisation. A wide range means an untrained word moves the decision by chance;
  leans on / pulled by
           the source words whose deletion lowers (raises) P(fix) the most. Deleting a word is exact
           for a policy without position embeddings (the TinyAgent's default). A held-out function
           that fails by a word its family's train functions do not share, such as `len` in
           `a < len ( xs ) < b` pulling towards `guard_zero`, shows an incidental word deciding.

Deterministic (no sampling): the same checkpoint gives the same table.
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch

import agentrl as arl
from agentrl.envs.bugfix.ops import OPS
from agentrl.envs.bugfix.source import LAYOUT

SPLITS = ('train', 'heldout', 'all')
SHUFFLES = 20
"""Random orders of the source words averaged in the `shuffled` column (``random.Random(0)``, one after another)."""


def decision_prefix(task, tok) -> tuple[list[int], torch.Tensor]:
    """The oracle episode's ids up to (not including) the op token -> (ids, owner of each id)."""
    traj = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), task, tok)
    ids = traj.ids.tolist()
    at = ids.index(tok.token_to_id[task.fix])  # the oracle's call after `read` is `edit FIX`: the first FIX token
    return ids[:at], traj.owner[:at]


@torch.no_grad()
def op_probs(model, variants: list[list[int]], tok) -> torch.Tensor:
    """P(op) at the end of each variant (right-padded, one forward) -> [n_variants, len(OPS)]."""
    T = max(len(v) for v in variants)
    ids = torch.full((len(variants), T), tok.pad_id, dtype=torch.long)  # (N, T)
    for i, v in enumerate(variants):
        ids[i, :len(v)] = torch.tensor(v)
    last = torch.tensor([len(v) - 1 for v in variants])
    logits = model(ids)[torch.arange(len(variants)), last]  # (N, V): the next-token logits after each prefix
    probs = torch.softmax(logits.float(), -1)
    return probs[:, [tok.token_to_id[op] for op in OPS]]  # (N, len(OPS))


def explain(model, task, tok, train_tasks, top: int = 3, unseen_tasks=()) -> dict:
    """One task's figures: P(fix), the preferred op, P(fix) per family of a swapped-in train name, its range
    over the names of ``unseen_tasks`` (held-out functions, other than this one), and the source words whose
    deletion moves P(fix) most."""
    prefix, owner = decision_prefix(task, tok)
    fix = OPS.index(task.fix)
    name_id = tok.token_to_id[task.func]
    swaps = [t for t in train_tasks if t.func != task.func]
    unseen = [t for t in unseen_tasks if t.func != task.func]
    reply = (owner == arl.OWNER['tool']).nonzero().squeeze(1).tolist()  # the `read` reply: the only tool tokens so far
    lo, hi = reply[0], reply[-1] + 1  # its words, between <tool> and </tool>
    source_at = [j for j in range(lo, hi) if prefix[j] != name_id and tok.vocab[prefix[j]] not in LAYOUT]
    rng, shuffled = random.Random(0), []
    for _ in range(SHUFFLES):
        words = prefix[lo:hi]
        rng.shuffle(words)
        shuffled.append(prefix[:lo] + words + prefix[hi:])
    renamed = lambda other: [tok.token_to_id[other.func] if i == name_id else i for i in prefix]  # noqa: E731
    variants = [prefix]
    variants += [renamed(s) for s in swaps]
    variants += [prefix[:j] + prefix[j + 1:] for j in source_at]
    variants += [renamed(s) for s in unseen]
    p = op_probs(model, variants + shuffled, tok)
    p, p_shuffled = p[:len(variants)], p[len(variants):]
    p_unseen = p[len(variants) - len(unseen):, fix]
    base = p[0]
    by_name = {}
    for s, row in zip(swaps, p[1:1 + len(swaps)]):
        by_name.setdefault(s.family, []).append(row[fix].item())
    deltas = [(tok.vocab[prefix[j]], (row[fix] - base[fix]).item())
              for j, row in zip(source_at, p[1 + len(swaps):])]
    deltas.sort(key=lambda x: x[1])
    return {'task': task.name, 'split': task.split, 'fix': task.fix, 'p_fix': base[fix].item(),
            'p_fix_shuffled': p_shuffled[:, fix].mean().item(), 'preferred': OPS[int(base.argmax())], 'p_preferred': base.max().item(),
            'p_fix_by_name_family': {f: sum(v) / len(v) for f, v in by_name.items()},
            'p_fix_unseen_names': [p_unseen.min().item(), p_unseen.max().item()] if unseen else None,
            'leans_on': [d for d in deltas[:top] if d[1] < 0],
            'pulled_by': [d for d in deltas[::-1][:top] if d[1] > 0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('run', type=Path, help='a reproduce (or sweep seed) output folder')
    ap.add_argument('--checkpoint', default='sft_step60', help='checkpoint name in RUN/checkpoints (default sft_step60)')
    ap.add_argument('--split', default='heldout', help=f'tasks to explain, one of {list(SPLITS)} (default heldout)')
    ap.add_argument('--top', type=int, default=3, help='words listed per direction (default 3)')
    ap.add_argument('--json', metavar='FILE', help='also write every task\'s figures to FILE')
    args = ap.parse_args(argv)
    path = args.run / 'checkpoints' / f'{args.checkpoint}.safetensors'
    if args.split not in SPLITS:
        print(f'explain_op: error: unknown split {args.split!r}; valid splits are {list(SPLITS)}', file=sys.stderr)
        return 2
    if not path.exists():
        print(f'explain_op: error: no {path} (run `agentrl reproduce --out {args.run}` first)', file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    tok = arl.build_tokenizer(arl.make_tasks('all'))
    model = arl.load_model(path, tok)
    train = arl.make_tasks('train')
    heldout = arl.make_tasks('heldout')
    rows = [explain(model, t, tok, train, args.top, unseen_tasks=heldout) for t in arl.make_tasks(args.split)]
    fams = arl.FAMILIES
    print(f'{args.run} {args.checkpoint}: P(fix) at the op token of the oracle episode; with the source\'s words '
          f'shuffled; with a train name of each family in the task\'s place; its range with an unseen (held-out) '
          f'name in place; the words whose deletion lowers | raises P(fix) most')
    print(f'{"task":<22}{"P(fix)":>7}{"shuffled":>9}  {"preferred":<16}' + ''.join(f'{f:>9}' for f in fams)
          + f'{"unseen":>11}  leans on | pulled by')
    for r in rows:
        pref = '' if r['preferred'] == r['fix'] else f"{r['preferred']} {r['p_preferred']:.2f}"
        names = ''.join(f"{r['p_fix_by_name_family'].get(f, float('nan')):>9.2f}" for f in fams)
        words = lambda ws: ', '.join(f'{w} {d:+.2f}' for w, d in ws) or '-'
        lo_hi = r['p_fix_unseen_names']
        unseen = f'{lo_hi[0]:.2f}-{lo_hi[1]:.2f}' if lo_hi else '-'
        print(f"{r['task']:<22}{r['p_fix']:>7.2f}{r['p_fix_shuffled']:>9.2f}  {pref:<16}{names}{unseen:>11}  "
              f"{words(r['leans_on'])} | {words(r['pulled_by'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
