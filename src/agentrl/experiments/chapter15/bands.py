"""The chapter's findings as bands (docs/bands.md), checked on a run's transcript.

A reproduction prints the lines the chapter's code prints (``transcript.txt``), rounds numbered from 0 as the
chapter numbers them. This module parses them and applies each band as docs/bands.md states it, so the findings
table of ``agentrl reproduce`` and a check of the chapter's own printed output agree. Each band's verdict is a
``findings.Finding``, as a claim's and an exercise answer's are.
"""
from __future__ import annotations

import ast
import math
import re

from .findings import Finding

CHAPTER = {
    'setup: 20 train / 10 held-out': '20 / 10',
    '15.1 policy share 10-30%': '19%',
    '15.1 tool share >= 45%': '63%',
    '15.1 init losses near log V': '5.91 / 5.88 (log 316 = 5.76)',
    '15.2 weak train/held 0.03-0.30': '0.144 / 0.138',
    '15.2 weak invalid <= 0.2': '0.06',
    '15.2 weak reads 0.10-0.55': '0.29',
    '15.2 weak entropy 0.08-0.6': '0.251',
    '15.2 oracle SFT step 20 train >= 0.55': '0.80',
    '15.2 oracle SFT train >= 0.90, held >= 0.75': '0.981 / 0.887',
    '15.2 oracle SFT reads >= 0.95, entropy <= weak/3': 'reads 1.00, entropy 0.022',
    '15.3 gradient identity <= 1e-6': '1.4e-09',
    '15.3 cosine 0.80-0.999': '0.985',
    '15.3 RFT train 0.45-0.88, held <= 0.35': '0.756 / 0.150',
    '15.3 init never solved by weak base': 'the 4 init tasks',
    '15.3 kept episodes mostly start with an edit': 'edits 32 of 49',
    '15.4 DPO loss values exact': '0.6931 / 0.1269 / 2.1269',
    '15.4 pairs >= 25, 8-17 tasks': '55 / 14',
    '15.4 DPO d_rejected <= -15': '-44.68',
    '15.4 DPO invalid >= 0.5 and >= 5x weak': '2.02',
    '15.4 DPO held <= 0.15': '0.00',
    '15.5 SFT->RL train >= 0.88, held >= 0.80': '0.96 / 0.95',
    '15.5 RL only train <= 0.65, held <= SFT->RL - 0.25': '0.36 / 0.30',
    '15.6 signal: step20 >= step60 + 0.25': '0.70 vs 0.10',
    '15.6 entropy weak > SFT20 > SFT60': '0.255 > 0.126 > 0.027',
    '15.6 mismatch reads >= 0.9, train <= 0.40 and <= half of SFT, NLL >= 0.3': 'reads 1.00, train 0.075, NLL 0.815',
    '15.6 DPO+NLL invalid <= half, train above': '0.61 vs 2.02; 0.69 vs 0.41',
    '15.6 dedup distinct < half': '21 of 84',
    '15.6 hack share last round >= 40% and > round 0': '64% (42% in round 0)',
    '15.6 hack public >= 0.85, hidden <= 0.55': '0.97 / 0.36',
}
"""The chapter's own figure for each band, for the report."""


def parse(text: str) -> dict:
    """Pull every figure a band needs out of a transcript in the chapter's format."""
    lines = text.splitlines()

    def first(pattern):
        for line in lines:
            m = re.search(pattern, line)
            if m:
                return m
        return None

    def every(pattern):
        return [m for m in (re.search(pattern, line) for line in lines) if m]

    o = {}
    if m := first(r'vocab: (\d+) \| train tasks: (\d+) \| held-out tasks: (\d+)'):
        o['vocab'], o['n_train'], o['n_held'] = map(int, m.groups())
    if m := first(r'predicted tokens by owner: (\{.*\})'):
        o['owners'] = ast.literal_eval(m.group(1))
    if m := first(r'masked SFT loss ([\d.]+) \| unmasked ([\d.]+)'):
        o['loss_masked'], o['loss_unmasked'] = map(float, m.groups())
    for m in every(r'^(.{1,13}?)\s+train ([\d.]+) \| held-out ([\d.]+) \| invalid/ep ([\d.]+) \| reads ([\d.]+) \| action entropy ([\d.]+)'):
        o['describe:' + m.group(1).strip()] = dict(zip(['train', 'held', 'invalid', 'reads', 'entropy'], map(float, m.groups()[1:])))
    if m := first(r'oracle SFT \(step, train, held-out\): (\[.*\])'):
        o['hist_sft'] = ast.literal_eval(m.group(1))
    if m := first(r'max \|g_pg - ratio \* g_rft\| = ([-\d.e+]+)'):
        o['grad_gap'] = float(m.group(1))
    if m := first(r'cosine\(baseline PG, RFT\) = ([-\d.]+)'):
        o['cosine'] = float(m.group(1))
    if m := first(r'tasks never solved by the weak base: (\[.*\])'):
        o['never'] = ast.literal_eval(m.group(1))
    if m := first(r'first action of kept episodes, round 0: (\[.*\])'):
        o['first_kept'] = ast.literal_eval(m.group(1))
    o['dpo_values'] = [float(m.group(1)) for m in every(r'rejected ratio [-+]\d+: loss ([\d.]+)')]
    if m := first(r'pairs: (\d+) \| tasks with a pair: (\d+)'):
        o['pairs'], o['pair_tasks'] = map(int, m.groups())
    o['dpo_log'] = [dict(step=int(m.group(1)), d_chosen=float(m.group(2)), d_rejected=float(m.group(3)),
                         train=float(m.group(4)), held=float(m.group(5)), invalid=float(m.group(6)))
                    for m in every(r'^step (\d+) \| d_chosen ([-\d.]+) \| d_rejected ([-\d.]+) \| train ([\d.]+) \| held ([\d.]+) \| invalid ([\d.]+)')]
    for name in ['SFT (oracle)', 'RFT', 'SFT -> RL', 'RL only']:
        for m in every('^' + re.escape(name) + r'\s+(\d+:.*)$'):
            o['curve:' + name] = [tuple(float(x) for x in re.match(r'(\d+):([\d.]+)/([\d.]+)', p).groups())
                                  for p in m.group(1).split()]
    for m in every(r'^(weak base|SFT step 20|SFT step 60)\s+held-out pass ([\d.]+) \| groups with signal ([\d.]+) \| action entropy ([\d.]+)'):
        o['probe:' + m.group(1)] = dict(zip(['held', 'signal', 'entropy'], map(float, m.groups()[1:])))
    if m := first(r'NLL on correctly rendered demos: ([\d.]+)'):
        o['mismatch_nll'] = float(m.group(1))
    o['rpo'] = [dict(train=float(m.group(2)), held=float(m.group(3)), invalid=float(m.group(4)))
                for m in every(r'^step (\d+): train ([\d.]+) \| held ([\d.]+) \| invalid/ep ([\d.]+) \| d_chosen ([-+\d.]+) \| d_rejected ([-+\d.]+)')]
    if m := first(r'kept (\d+) episodes, (\d+) distinct action sequences'):
        o['dedup'] = tuple(map(int, m.groups()))
    o['hack'] = [dict(kept=int(m.group(2)), hacks=int(m.group(3)), public=float(m.group(4)), hidden=float(m.group(5)))
                 for m in every(r'^round (\d+): kept (\d+) \((\d+) fail hidden tests\) -> public ([\d.]+), hidden ([\d.]+)')]
    return o


class Missing(LookupError):
    """A figure a band needs is not in the transcript (the message says which)."""


def _missing(e: Exception) -> str:
    """A band whose figure is missing or unusable, in words (no Python reprs)."""
    if isinstance(e, Missing):
        return f'missing: {e}'
    if isinstance(e, KeyError):
        return f"missing: the transcript has no {str(e.args[0]).replace('describe:', '').replace('probe:', '').replace('curve:', '')} line"
    if isinstance(e, IndexError):
        return 'missing: the transcript has too few lines for it'
    if isinstance(e, ZeroDivisionError):
        return 'not measurable: a count it divides by is 0'
    return f'not measurable ({type(e).__name__})'


def _share_rounds(hk) -> str:
    return ', '.join(f"round {k} {x['hacks'] / x['kept']:.0%}" if x['kept'] else f'round {k} none kept'
                     for k, x in enumerate(hk))


def check(o: dict) -> list:
    """Apply every band to parsed figures -> [Finding] (its ``measured``: the figure); a missing figure fails its band.

    Each figure is a short labelled text (``train 1.00 / held 1.00 at step 60``), never a Python repr.
    """
    out = []

    def band(name, fn):
        try:
            ok, fig = fn()
        except Exception as e:  # a missing line or value is a failed band, reported as such
            ok, fig = False, _missing(e)
        out.append(Finding('band', name, name.split()[0].rstrip(':'), name, '', bool(ok), fig, CHAPTER.get(name, '')))

    V = o.get('vocab', 0)
    share = lambda key: o['owners'][key] / sum(o['owners'].values())
    w = lambda: o['describe:weak base']
    s = lambda: o['describe:oracle SFT']
    def h(step):
        for row in o['hist_sft']:
            if row[0] == step:
                return row
        raise Missing(f'no oracle SFT evaluation at step {step}')
    c = lambda name: o['curve:' + name][-1]
    p = lambda k: o['probe:' + k]
    m = lambda: o['describe:mismatched']
    hk = lambda: o['hack']
    d = lambda: o['dpo_log'][-1]
    r = lambda: o['describe:after RFT']
    at = lambda name: f"train {c(name)[1]:.2f} / held {c(name)[2]:.2f} at step {c(name)[0]:.0f}"
    band('setup: 20 train / 10 held-out', lambda: (o['n_train'] == 20 and o['n_held'] == 10,
                                                   f"{o['n_train']} train / {o['n_held']} held-out tasks"))
    band('15.1 policy share 10-30%', lambda: (0.10 <= share('policy') <= 0.30, f"policy {share('policy'):.0%} of predicted tokens"))
    band('15.1 tool share >= 45%', lambda: (share('tool') >= 0.45, f"tool {share('tool'):.0%} of predicted tokens"))
    band('15.1 init losses near log V', lambda: (abs(o['loss_masked'] - math.log(V)) <= 0.4 and abs(o['loss_unmasked'] - math.log(V)) <= 0.4,
                                                f"masked {o['loss_masked']:.3f} / unmasked {o['loss_unmasked']:.3f} vs log V {math.log(V):.3f}"))
    band('15.2 weak train/held 0.03-0.30', lambda: (0.03 <= w()['train'] <= 0.30 and 0.03 <= w()['held'] <= 0.30,
                                                   f"train {w()['train']:.3f} / held {w()['held']:.3f}"))
    band('15.2 weak invalid <= 0.2', lambda: (w()['invalid'] <= 0.2, f"{w()['invalid']:.2f} invalid calls per episode"))
    band('15.2 weak reads 0.10-0.55', lambda: (0.10 <= w()['reads'] <= 0.55, f"reads in {w()['reads']:.2f} of episodes"))
    band('15.2 weak entropy 0.08-0.6', lambda: (0.08 <= w()['entropy'] <= 0.6, f"action entropy {w()['entropy']:.3f}"))
    band('15.2 oracle SFT step 20 train >= 0.55', lambda: (h(20)[1] >= 0.55, f"train {h(20)[1]:.2f} at step 20"))
    band('15.2 oracle SFT train >= 0.90, held >= 0.75', lambda: (s()['train'] >= 0.90 and s()['held'] >= 0.75,
                                                                f"train {s()['train']:.3f} / held {s()['held']:.3f}"))
    band('15.2 oracle SFT reads >= 0.95, entropy <= weak/3', lambda: (s()['reads'] >= 0.95 and s()['entropy'] <= w()['entropy'] / 3,
                                                                     f"reads {s()['reads']:.2f}, entropy {s()['entropy']:.3f} vs weak base {w()['entropy']:.3f}"))
    band('15.3 gradient identity <= 1e-6', lambda: (o['grad_gap'] <= 1e-6, f"max gap {o['grad_gap']:.1e}"))
    band('15.3 cosine 0.80-0.999', lambda: (0.80 <= o['cosine'] <= 0.999, f"cosine {o['cosine']:.3f}"))
    band('15.3 RFT train 0.45-0.88, held <= 0.35', lambda: (0.45 <= r()['train'] <= 0.88 and r()['held'] <= 0.35,
                                                           f"train {r()['train']:.3f} / held {r()['held']:.3f}"))
    band('15.3 init never solved by weak base', lambda: (sum(n.startswith('init/') for n in o['never']) == 4,
                                                         f"{sum(n.startswith('init/') for n in o['never'])} of 4 init tasks among "
                                                         f"{len(o['never'])} never solved"))

    def edits_first():
        shown = o['first_kept']  # most_common(3): count what it shows
        edits = sum(n for a, n in shown if a.strip().startswith('edit'))
        total = sum(n for _, n in shown)
        top = ', '.join(f'{a.strip()} {n}' for a, n in shown)
        return edits > total / 2, f'{edits} of {total} start with an edit ({top})' if shown else 'no kept episode'
    band('15.3 kept episodes mostly start with an edit', edits_first)
    band('15.4 DPO loss values exact', lambda: (o['dpo_values'] == [0.6931, 0.1269, 2.1269], ' / '.join(f'{v:.4f}' for v in o['dpo_values'])
                                               if o['dpo_values'] else 'missing: no loss values printed'))
    band('15.4 pairs >= 25, 8-17 tasks', lambda: (o['pairs'] >= 25 and 8 <= o['pair_tasks'] <= 17, f"{o['pairs']} pairs over {o['pair_tasks']} tasks"))
    band('15.4 DPO d_rejected <= -15', lambda: (d()['d_rejected'] <= -15, f"d_rejected {d()['d_rejected']:.2f} at step {d()['step']}"))
    band('15.4 DPO invalid >= 0.5 and >= 5x weak', lambda: (d()['invalid'] >= 0.5 and d()['invalid'] >= 5 * w()['invalid'],
                                                           f"invalid {d()['invalid']:.2f} vs weak base {w()['invalid']:.2f} at step {d()['step']}"))
    band('15.4 DPO held <= 0.15', lambda: (d()['held'] <= 0.15, f"held {d()['held']:.2f} at step {d()['step']}"))
    band('15.5 SFT->RL train >= 0.88, held >= 0.80', lambda: (c('SFT -> RL')[1] >= 0.88 and c('SFT -> RL')[2] >= 0.80, at('SFT -> RL')))
    band('15.5 RL only train <= 0.65, held <= SFT->RL - 0.25', lambda: (c('RL only')[1] <= 0.65 and c('RL only')[2] <= c('SFT -> RL')[2] - 0.25,
                                                                       f"{at('RL only')}; SFT -> RL held {c('SFT -> RL')[2]:.2f}"))
    band('15.6 signal: step20 >= step60 + 0.25', lambda: (p('SFT step 20')['signal'] >= p('SFT step 60')['signal'] + 0.25,
                                                         f"groups with signal: step 20 {p('SFT step 20')['signal']:.2f} vs step 60 {p('SFT step 60')['signal']:.2f}"))
    band('15.6 entropy weak > SFT20 > SFT60', lambda: (p('weak base')['entropy'] > p('SFT step 20')['entropy'] > p('SFT step 60')['entropy'],
                                                      f"{p('weak base')['entropy']:.3f} > {p('SFT step 20')['entropy']:.3f} > {p('SFT step 60')['entropy']:.3f}"))
    band('15.6 mismatch reads >= 0.9, train <= 0.40 and <= half of SFT, NLL >= 0.3',
         lambda: (m()['reads'] >= 0.9 and m()['train'] <= 0.40 and m()['train'] <= s()['train'] / 2 and o['mismatch_nll'] >= 0.3,
                  f"reads {m()['reads']:.2f}, train {m()['train']:.3f} vs SFT {s()['train']:.3f}, NLL {o['mismatch_nll']:.3f}"))
    band('15.6 DPO+NLL invalid <= half, train above', lambda: (o['rpo'][1]['invalid'] <= o['rpo'][0]['invalid'] / 2 and o['rpo'][1]['train'] > o['rpo'][0]['train'],
                                                             f"invalid {o['rpo'][1]['invalid']:.2f} vs {o['rpo'][0]['invalid']:.2f} (DPO); "
                                                             f"train {o['rpo'][1]['train']:.2f} vs {o['rpo'][0]['train']:.2f}"))
    band('15.6 dedup distinct < half', lambda: (o['dedup'][1] < o['dedup'][0] / 2, f"{o['dedup'][1]} distinct of {o['dedup'][0]} kept"))
    def hack_share():
        rounds = hk()
        if not rounds:
            raise Missing('no public-filter round')
        fig = f'hack share {_share_rounds(rounds)}'
        if not (rounds[-1]['kept'] and rounds[0]['kept']):
            return False, fig
        last, first = rounds[-1]['hacks'] / rounds[-1]['kept'], rounds[0]['hacks'] / rounds[0]['kept']
        return last >= 0.40 and last > first, fig
    band('15.6 hack share last round >= 40% and > round 0', hack_share)
    band('15.6 hack public >= 0.85, hidden <= 0.55', lambda: (hk()[-1]['public'] >= 0.85 and hk()[-1]['hidden'] <= 0.55,
                                                             f"public {hk()[-1]['public']:.2f} / hidden {hk()[-1]['hidden']:.2f} after round {len(hk()) - 1}"))
    return out


def check_transcript(text: str) -> list:
    """Bands of a transcript in the chapter's format -> [Finding], in docs/bands.md's order."""
    return check(parse(text))
