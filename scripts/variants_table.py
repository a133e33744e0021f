"""The variants page's tables, from what ``agentrl compare`` wrote (its ``compare.json``).

    agentrl compare runs/variants/bugfix-3x09 runs/variants/bugfix-9x09 --out runs/variants/bugfix09
    python scripts/variants_table.py runs/variants/bugfix09/compare.json

prints one Markdown row per variant (its name as the grid wrote it, less ``rl_variant=``): final train and held-out
pass, held-out pass@k at the largest k, the episodes to the target train pass and in all, each as mean ± 95% CI
half-width over seeds, then the train and held-out differences from the first variant (the baseline) with their
95% CI and the paired t-test's p, Holm-adjusted over this table's tests (the train and held-out difference of each
variant: 2 x (variants - 1)), not over compare's whole table of figures. ``--json`` prints the same cells as JSON, what docs/figures.json records.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentrl.experiments.chapter15.tables import fmt, table
from agentrl.experiments.sweeps.compare_report import _diff, _p
from agentrl.experiments.sweeps.stats import holm

PREFIX = 'rl_variant='


def rows(result: dict) -> dict:
    """variant -> {column: cell} from ``compare.json``."""
    figs = {r['figure']: r for r in result['figures'] if r['section'] == 'rl'}
    pk = max((f for f in figs if f.startswith('held-out pass@')), key=lambda f: int(f.rsplit('@', 1)[1]))
    # absent when no variant reached the target train pass at any seed
    target = next((f for f in figs if f.startswith('episodes to train pass')), None)
    names = [v['name'].split('/')[-1].removeprefix(PREFIX) for v in result['variants']]
    # Holm over this table's tests alone (train and held-out, each variant against the baseline), not compare's
    # whole figures table: the question the table asks is these differences
    tests = [t for label in ('final train pass', 'final held-out pass') for t in figs[label]['vs_first']
             if t and t.get('p') is not None]
    for t, q in zip(tests, holm([t['p'] for t in tests])):
        t['p_holm'] = q
    out = {}
    for i, name in enumerate(names):
        def cell(label, digits=2):  # [n=k]: only k of the variant's seeds have the figure (never reached the target)
            stat, seeds = figs[label]['stats'][i], len(result['variants'][i]['seeds'])
            return fmt(stat, digits) + (f" [n={stat['n'] if stat else 0}]" if not stat or stat['n'] < seeds else '')

        def vs(label):
            if i == 0:
                return 'baseline'
            t = figs[label]['vs_first'][i - 1]
            return f'{_diff(t)}, p {_p(t)}'.replace('**', '')
        out[name] = {'train': cell('final train pass'), 'held': cell('final held-out pass'), 'pass@k': cell(pk),
                     'to_target': cell(target, 0) if target else '— [n=0]', 'episodes': cell('episodes sampled', 0),
                     'train_vs': vs('final train pass'), 'held_vs': vs('final held-out pass')}
    return out


HEADER = ['variant', 'train pass', 'held-out pass', 'held-out pass@16', 'episodes to train 0.9', 'episodes sampled',
          'train − REINFORCE [95% CI], p', 'held-out − REINFORCE [95% CI], p']


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('compare_json', help="a compare.json of agentrl compare over sweep --rl grids")
    p.add_argument('--json', action='store_true', help='print the cells as JSON')
    p.add_argument('--env', default='', help="the environment's name, in the first column's header ('variant (ENV)')")
    args = p.parse_args(argv)
    cells = rows(json.loads(Path(args.compare_json).read_text()))
    if args.json:
        print(json.dumps(cells, indent=1))
        return
    header = [f'variant ({args.env})' if args.env else 'variant', *HEADER[1:]]
    print(table(header, [(f'`{name}`', *c.values()) for name, c in cells.items()]))


if __name__ == '__main__':
    main()
