"""``report.md``: the chapter's tables with this run's figures next to the chapter's own."""
from __future__ import annotations

from pathlib import Path

from .findings import Finding, summary, table as findings_table, tally
from .tables import bold_min, by_group, shares, table

# The chapter's printed figures (chapter15.md), for side-by-side tables.
CH_DESCRIBE = {'weak base': (0.144, 0.138, 0.06, 0.29, 0.251), 'oracle SFT': (0.981, 0.887, 0.02, 1.00, 0.022),
               'after RFT': (0.756, 0.150, 0.01, 0.30, 0.062), 'mismatched': (0.075, 0.087, 0.62, 1.00, 0.190)}
CH_SFT = [(0, 0.16, 0.05), (10, 0.47, 0.47), (20, 0.8, 0.85), (30, 0.91, 0.95), (40, 0.99, 0.9), (50, 0.97, 0.9), (60, 0.99, 0.93)]
CH_SFT_AT = {k: (a, b) for k, a, b in CH_SFT}
CH_RFT = [(0.153, 49, 16, 0.33, 0.12), (0.263, 84, 15, 0.68, 0.23), (0.659, 211, 16, 0.75, 0.10), (0.713, 228, 15, 0.74, 0.15)]
CH_DPO = [(25, -0.42, -15.05, 0.20, 0.10, 0.50), (50, -0.64, -29.04, 0.20, 0.07, 2.26), (75, 0.34, -38.68, 0.31, 0.07, 2.44),
          (100, 0.74, -44.68, 0.41, 0.00, 2.02)]
CH_RECIPES = {'SFT (oracle)': (20, 0, 0.99, 0.93), 'RFT': (0, 1280, 0.74, 0.15), 'SFT -> RL': (20, 2560, 0.96, 0.95),
              'RL only': (0, 3840, 0.36, 0.30)}
CH_PROBE = {'weak base': (0.14, 0.60, 0.255), 'SFT step 20': (0.82, 0.70, 0.126), 'SFT step 60': (0.93, 0.10, 0.027)}
CH_HACK = [(83, 35, 0.61, 0.23), (188, 111, 0.94, 0.34), (287, 185, 0.97, 0.36)]


def render(results: dict, findings: list, seed: int, timing: dict | None = None, claims=None, env=None) -> str:
    """The report as Markdown. ``findings``: the bands (``env.bands``, on the transcript); ``claims``:
    ``claims.check_claims``' findings; ``env``: the run's ``envs.ChapterEnv`` (default the chapter's own). The
    chapter's printed figures stand beside this run's only on the environment that has its bands (they were measured
    there)."""
    from .env_registry import DEFAULT, get_env
    R = results
    env = env or get_env(DEFAULT)
    ch = env.bands is not None
    what, groups = env.task_label, env.groups()

    def cols(header, rows, chapter_cols):
        """A table without its chapter columns (their indices) when the run is not on BugFix."""
        if ch:
            return table(header, rows)
        keep = [i for i in range(len(header)) if i not in chapter_cols]
        return table([header[i] for i in keep], [tuple(r[i] for i in keep) for r in rows])

    def chapter(text):
        return f' ({text})' if ch else ''

    from .real_model import is_pretrained
    policy = R.get('setup', {}).get('policy', 'tiny')
    pretrained = is_pretrained(policy)
    title = ('Chapter 15, reproduced' if ch else f'Chapter 15 on {env.title}') + ('' if policy == 'tiny' else f', policy {policy}')
    md = [f'# {title} (seed shift {seed})', '']
    if ch and not pretrained:
        md += [f'**{tally(findings)[0]} of {len(findings)} findings hold** (the bands of docs/bands.md). Every number and plot below comes from this '
               'run; where the chapter prints the same number, the chapter\'s value stands beside it, in parentheses '
               'or in a column headed "chapter". Pass rates are means over 4 or 8 sampled episodes per task, so each '
               'has a standard error of up to about 0.06.', '']
        md += ['## Findings', '', findings_table(findings), '']
    else:
        own = ', '.join(f'`{k}={v}`' for k, v in env.budgets.items())
        command = f'agentrl reproduce --env {env.name}' + (f' --policy {policy}' if policy != 'tiny' else '')
        budgets = ("a pretrained model's budgets (docs/real-models.md)" if pretrained else "the chapter's budgets")
        bands = ("The chapter's bands are the TinyAgent's figures and are not the verdict for a pretrained model; its "
                 'claims are, ' if pretrained else "The chapter's bands are figures of BugFix and do not apply here; its "
                 'claims do, ')
        md += [f'The chapter\'s sections run on {env.title} with the same recipe code (`{command}`), at {budgets}'
               + (f' with its own on top ({own})' if own else '')
               + f'. {bands}where {env.title} has what they need.', '']
    if claims is not None:
        md += ['## Claims', '', f"**{summary(claims)}** (the chapter's lessons as directions and relations, "
               '`docs/claims.md`; a claim that needs what the environment lacks, or that the settings leave nothing '
               'to compare, does not apply).', '', findings_table(claims), '']
    s1 = R['15.1']
    total = sum(s1['owner_counts'].values())
    md += ['## 15.1 Trajectory SFT and the action mask', '',
           cols(['owner', 'predicted tokens', 'share', 'chapter'],
                [(k, v, f'{v / total:.0%}', f"{ {'template': 120, 'prompt': 120, 'policy': 260, 'tool': 838}[k]} "
                  f"({ {'template': 9, 'prompt': 9, 'policy': 19, 'tool': 63}[k]}%)") for k, v in s1['owner_counts'].items()], {3}),
           '', f"Loss at init: masked {s1['loss_masked']:.3f}, unmasked {s1['loss_unmasked']:.3f} "
           f"(log V = {s1['log_vocab']:.3f}{'; chapter 5.913 / 5.879 with log 316 = 5.76' if ch else ''}).", '']
    rows = []
    for label, key, sec in [('weak base', 'weak', '15.2'), ('oracle SFT', 'oracle_sft', '15.2'), ('after RFT', 'after_rft', '15.3'),
                            ('mismatched', 'mismatch', '15.6')]:
        d, c = R[sec][key], CH_DESCRIBE[label]
        rows.append((label, f"{d['train']:.3f}{chapter(c[0])}", f"{d['held']:.3f}{chapter(c[1])}",
                     f"{d['invalid']:.2f}{chapter(c[2])}", f"{d['reads']:.2f}{chapter(c[3])}", f"{d['entropy']:.3f}{chapter(c[4])}"))
    md += ['## 15.2 Warm start: format first, then skill', '',
           *(['Each cell: this run (chapter).', ''] if ch else []),
           table(['policy', 'train', 'held-out', 'invalid/ep', 'reads', 'action entropy'], rows), '',
           cols(['SFT step', 'train', 'held-out', 'chapter train', 'chapter held-out'],
                [(k, f'{a:.2f}', f'{b:.2f}', *((f'{x:.2f}' for x in CH_SFT_AT[k]) if k in CH_SFT_AT else ('', '')))
                 for k, a, b in R['15.2']['hist_sft']], {3, 4}), '']
    md += family_transfer(R['15.2'], what, groups)
    s3 = R['15.3']
    identity = (f"Gradient identity: kept {s3['kept_of_sample'][0]} of {s3['kept_of_sample'][1]}, token ratio {s3['token_ratio']:.4f}, "
                f"max |g_pg - ratio * g_rft| = {s3['grad_gap']:.1e}{chapter('chapter 1.4e-09')}; cosine(baseline PG, RFT) = "
                f"{s3['cosine']:.3f}{chapter('chapter 0.985')}."
                if s3['grad_gap'] is not None else 'Gradient identity: no success in the sample, nothing to compare.')
    md += ['## 15.3 Rejection sampling and expert iteration', '', identity, '',
           cols(['round', 'sample pass', 'kept', 'tasks solved', 'train', 'held-out', 'chapter (pass, kept, solved, train, held)'],
                [(k, f"{r['rate']:.3f}", r['kept'], len(r['solved']), f"{s3['hist_rft'][k + 1][1]:.2f}", f"{s3['hist_rft'][k + 1][2]:.2f}",
                  ', '.join(str(x) for x in CH_RFT[k]) if k < len(CH_RFT) else '') for k, r in enumerate(s3['rounds'])], {6}), '',
           f"Never solved by the weak base: {', '.join(s3['never_solved']) or 'none'}. First actions of kept episodes in round 0: "
           f"{', '.join(f'{a.strip()} ({n})' for a, n in s3['first_kept'])}"
           f"{chapter('chapter: edit swap_minmax 16, edit fix_range_end 16, read 10')}.", '']
    s4 = R['15.4']
    md += ['## 15.4 DPO for agent trajectories', '',
           f"Loss at ratios (0,0), (+2,-2), (-2,+2), beta 0.5: {' / '.join(f'{v:.4f}' for v in s4['loss_values'])}"
           f"{chapter('chapter 0.6931 / 0.1269 / 2.1269')}. "
           f"Pairs: {s4['pairs']} over {s4['tasks_with_pair']} tasks{chapter('chapter 55 / 14')}.", '',
           cols(['step', 'd_chosen', 'd_rejected', 'train', 'held', 'invalid/ep', 'chapter'],
                [(r['step'], f"{r['d_chosen']:.2f}", f"{r['d_rejected']:.2f}", f"{r['train']:.2f}", f"{r['held']:.2f}", f"{r['invalid']:.2f}",
                  ', '.join(str(x) for x in c[1:])) for r, c in zip(s4['log'], CH_DPO + [()] * len(s4['log']))], {6}), '',
           '![Figure 15.2](fig15_2_dpo.png)', '']
    curves = R['15.5']['curves']
    md += ['## 15.5 Four recipes from the same weak base', '',
           cols(['recipe', 'demos', 'sampled', 'train', 'held', 'chapter train', 'chapter held'],
                [(name, *(CH_RECIPES[name][:2] if ch else ('', '')), f'{h[-1][1]:.2f}', f'{h[-1][2]:.2f}',
                  CH_RECIPES[name][2], CH_RECIPES[name][3]) for name, h in curves.items()], {1, 2, 5, 6}), '',
           *rl_roads(R['15.5'], what),
           '![Figure 15.3](fig15_3_recipes.png)', '']
    s6 = R['15.6']
    last_dpo = s6['dpo_vs_dpo_nll'][0]['step'] if s6['dpo_vs_dpo_nll'] else 'last'
    md += ['## 15.6 Design questions in practice', '',
           cols(['checkpoint', 'held-out pass', 'groups with signal', 'action entropy', 'chapter'],
                [(k, f"{v['held']:.2f}", f"{v['signal']:.2f}", f"{v['entropy']:.3f}", ', '.join(str(x) for x in CH_PROBE.get(k, ())))
                 for k, v in s6['probe'].items()], {4}), '',
           f"Template mismatch: NLL on correctly rendered demos {s6['mismatch']['nll']:.3f}{chapter('chapter 0.815')}; "
           f"train pass {s6['mismatch']['train']:.3f} vs {R['15.2']['oracle_sft']['train']:.3f} rendered right"
           f"{chapter('chapter 0.075 vs 0.981')}.", '',
           table([f'step {last_dpo}', 'train', 'held', 'invalid/ep', 'd_chosen', 'd_rejected'],
                  [(name, f"{r['train']:.2f}", f"{r['held']:.2f}", f"{r['invalid']:.2f}", f"{r['d_chosen']:+.2f}", f"{r['d_rejected']:+.2f}")
                   for name, r in zip(['DPO', 'DPO + NLL'], s6['dpo_vs_dpo_nll'])]), '',
           f"Dedup: {s6['dedup']['distinct']} distinct action sequences among {s6['dedup']['kept']} kept episodes of RFT round 1"
           f"{chapter('chapter 21 of 84')}. "
           + (f"Group share raw {shares(by_group(s6['dedup']['share_raw'], groups))}; "
              f"deduplicated {shares(by_group(s6['dedup']['share_deduped'], groups))}." if groups else ''), '']
    if s6['hacking']:
        md += [cols(['public-filter round', 'kept', f'fail hidden {env.check_label}', 'share', 'public pass', 'hidden pass', 'chapter'],
                    [(k, r['kept'], r['hacks'], f"{(r['hacks'] or 0) / max(r['kept'], 1):.0%}", f"{r['public']:.2f}",
                      f"{r['hidden']:.2f}", ', '.join(str(x) for x in c))
                     for k, (r, c) in enumerate(zip(s6['hacking'], CH_HACK + [()] * len(s6['hacking'])))], {6}), '',
               '![Figure 15.4](fig15_4_hacking.png)', '']
    else:
        md += [f"No public-filter rounds: {env.lacks().get('public check', 'the run has none')}.", '']
    if 'beyond' in R:
        md += beyond_section(R, groups)
    if timing:
        md += ['## Time', '', table(['section', 'seconds'], [(k, f'{v:.1f}') for k, v in timing.items()]), '']
    return '\n'.join(md)


def rl_roads(s5: dict, what: str = 'functions') -> list:
    """How each RL policy goes about a train task: the share of its final train episodes that read first (15.5)."""
    roads = s5.get('reads_first')
    if not roads:  # results written before the figure existed
        return []
    return [f"Final train episodes that read before acting: {shares(roads)}. RL only that acts at once can go only by "
            f"the prompt's names, which carry nothing to held-out {what}; RL only that learned to read takes its answer "
            "from the reply, and its held-out pass rises with it.", '']


def family_transfer(s2: dict, what: str = 'functions', groups=()) -> list:
    """15.2's held-out pass per task group after oracle SFT (in ``groups``' order), the lowest in bold (nothing for
    runs that predate it, or tasks without groups)."""
    fam = by_group(s2.get('heldout_by_family'), groups)
    if not fam:
        return []
    return ['Held-out pass per task group after oracle SFT, from the held-out episodes of the oracle SFT row above '
            f"(the lowest in bold). Section 15.2's transfer holds only if every group carries over to unseen {what}.", '',
            table(['', *fam], [('held-out pass', *bold_min(list(fam.values())))]), '']


def write(out: Path, results: dict, findings: list, seed: int, timing: dict | None = None, claims=None, env=None) -> Path:
    path = Path(out) / 'report.md'
    path.write_text(render(results, findings, seed, timing, claims, env))
    return path


def _last(hist, col):
    return hist[-1][col]


def _uncovered(b: dict, r: dict):
    """Train pass of ``r`` (a ``beyond['star']`` row) on the groups expert iteration never solved -> (pass, their names)."""
    groups = b.get('uncovered', ['init'])  # runs before the key: BugFix's init family
    if not groups:
        raise KeyError('no group that expert iteration never solves')
    return sum(r['family'].get(g, 0) for g in groups) / len(groups), '/'.join(groups)


BEYOND_CLAIMS = [
    ('expert iteration (15.3) never learns the group it never solves (BugFix: init)',
     lambda b, R: (lambda p, g: (p == 0, f'{g} train pass {p:.2f}'))(*_uncovered(b, b['star']['RFT (15.3)']))),
    ('STaR with the forced answer masked makes that group learnable (its pass >= 0.5)',
     lambda b, R: (lambda p, g: (p >= 0.5, f'{g} {p:.2f}'))(*_uncovered(b, b['star']['STaR, forced op masked']))),
    ('STaR with the forced answer trained makes that group learnable (its pass >= 0.5)',
     lambda b, R: (lambda p, g: (p >= 0.5, f'{g} {p:.2f}'))(*_uncovered(b, b['star']['STaR, forced op trained']))),
    ("a group baseline moves RFT's plateau up (final train pass higher)",
     lambda b, R: (_last(b['rft_baseline']['RFT + group baseline'], 1) > _last(b['rft_baseline']['RFT'], 1),
                   f"{_last(b['rft_baseline']['RFT + group baseline'], 1):.2f} vs RFT {_last(b['rft_baseline']['RFT'], 1):.2f}")),
    ('a group baseline raises held-out pass over RFT',
     lambda b, R: (_last(b['rft_baseline']['RFT + group baseline'], 2) > _last(b['rft_baseline']['RFT'], 2),
                   f"{_last(b['rft_baseline']['RFT + group baseline'], 2):.2f} vs RFT {_last(b['rft_baseline']['RFT'], 2):.2f}")),
    ('online DPO makes fewer invalid calls than offline DPO (last step)',
     lambda b, R: (b['dpo']['online DPO'][-1]['invalid'] < b['dpo']['offline DPO'][-1]['invalid'],
                   f"{b['dpo']['online DPO'][-1]['invalid']:.2f} vs offline {b['dpo']['offline DPO'][-1]['invalid']:.2f}")),
    ('online DPO has a higher held-out pass than offline DPO (last step)',
     lambda b, R: (b['dpo']['online DPO'][-1]['held'] > b['dpo']['offline DPO'][-1]['held'],
                   f"{b['dpo']['online DPO'][-1]['held']:.2f} vs offline {b['dpo']['offline DPO'][-1]['held']:.2f}")),
    ('online DPO + NLL makes fewer invalid calls than offline DPO + NLL',
     lambda b, R: (b['dpo']['online DPO + NLL'][-1]['invalid'] < b['dpo']['offline DPO + NLL'][-1]['invalid'],
                   f"{b['dpo']['online DPO + NLL'][-1]['invalid']:.2f} vs offline {b['dpo']['offline DPO + NLL'][-1]['invalid']:.2f}")),
    ('RL from the checkpoint chosen by informative groups ends above RL from the last one (held-out)',
     lambda b, R: (lambda h: (_last(h[0], 2) > _last(h[1], 2), f'{_last(h[0], 2):.2f} vs {_last(h[1], 2):.2f}'))(list(b['select']['rl'].values()))),
    ("SFT -> clipped trainer reaches the chapter's SFT -> RL bands (train >= 0.88, held >= 0.80) on the same samples",
     lambda b, R: (_last(b['grpo']['SFT -> GRPO']['hist'], 1) >= 0.88 and _last(b['grpo']['SFT -> GRPO']['hist'], 2) >= 0.80,
                   f"{_last(b['grpo']['SFT -> GRPO']['hist'], 1):.2f}/{_last(b['grpo']['SFT -> GRPO']['hist'], 2):.2f}")),
    ('after SFT, the clipped trainer ends at least as high as REINFORCE (held-out)',
     lambda b, R: (_last(b['grpo']['SFT -> GRPO']['hist'], 2) >= _last(R['15.5']['curves']['SFT -> RL'], 2),
                   f"{_last(b['grpo']['SFT -> GRPO']['hist'], 2):.2f} vs {_last(R['15.5']['curves']['SFT -> RL'], 2):.2f}")),
    ('from the weak base, the clipped trainer ends above REINFORCE (train)',
     lambda b, R: (_last(b['grpo']['GRPO only']['hist'], 1) > _last(R['15.5']['curves']['RL only'], 1),
                   f"{_last(b['grpo']['GRPO only']['hist'], 1):.2f} vs {_last(R['15.5']['curves']['RL only'], 1):.2f}")),
]
"""Each beyond-the-chapter claim: (statement, fn(beyond results, all results) -> (holds, figure))."""


def beyond_claims(R: dict) -> list:
    """Evaluate every claim on one run's results -> [Finding] (kind ``'beyond'``; None: nothing to compare)."""
    out = []
    for name, fn in BEYOND_CLAIMS:
        try:
            holds, fig = fn(R['beyond'], R)
        except (KeyError, IndexError, TypeError) as e:  # a recipe produced nothing to compare (tiny budgets)
            holds, fig = None, f'not measurable ({type(e).__name__})'
        out.append(Finding('beyond', name, 'beyond', name, '', holds, fig))
    return out


def beyond_section(R: dict, groups=()) -> list:
    """The "Beyond the chapter" section of ``reproduce --extended``: a table and a figure per recipe (``groups``: the
    environment's task groups, the order of the STaR table's columns).

    One seed's figures; ``agentrl sweep --extended`` reports each comparison over seeds.
    """
    b, curves = R['beyond'], R['15.5']['curves']
    groups = list(by_group(next(iter(b['star'].values()))['family'], groups))
    md = ['## Beyond the chapter', '',
          'Each recipe runs from the same weak base or SFT checkpoint as the chapter\'s and is compared with the '
          'chapter\'s recipe at the same budget. This is one seed: see `agentrl sweep --extended` for how often '
          'each comparison holds over seeds.', '',
          findings_table(beyond_claims(R)), '',
          '### STaR rationalization (exercise 3)', '',
          table(['recipe', *groups, 'train', 'held-out', 'rationalized successes per round'],
                 [(name, *[f"{r['family'].get(f, 0):.2f}" for f in groups], f"{r['train']:.2f}", f"{r['held']:.2f}",
                   ', '.join(str(x) for x in r.get('rationalized', [])) or '-') for name, r in b['star'].items()]), '',
          '![STaR](fig_beyond_star.png)', '',
          '### RFT with a group baseline (exercise 4)', '',
          table(['recipe', 'final train', 'final held-out'],
                 [(name, f'{h[-1][1]:.2f}', f'{h[-1][2]:.2f}') for name, h in b['rft_baseline'].items()]), '',
          '![RFT with a baseline](fig_beyond_rft_baseline.png)', '',
          '### Online vs offline DPO, and the preference loss', '',
          table(['recipe', 'step', 'invalid/ep', 'train', 'held-out'],
                 [(name, log[-1]['step'], f"{log[-1]['invalid']:.2f}", f"{log[-1]['train']:.2f}", f"{log[-1]['held']:.2f}")
                  for name, log in b['dpo'].items() if log]), '',
          '![DPO](fig_beyond_dpo.png)', '',
          '### SFT checkpoint chosen by informative groups', '',
          table(['SFT step', 'held-out pass', 'groups with signal', 'action entropy'],
                 [(t[0], f'{t[1]:.2f}', f'{t[2]:.2f}', f'{t[3]:.3f}') for t in b['select']['table']]), '',
          table(['RL from', 'final train', 'final held-out'],
                 [(name, f'{h[-1][1]:.2f}', f'{h[-1][2]:.2f}') for name, h in b['select']['rl'].items()]), '',
          '![checkpoint selection](fig_beyond_select.png)', '',
          '### A clipped group-policy-gradient trainer vs REINFORCE', '',
          table(['setting', 'REINFORCE train/held', 'clipped trainer train/held', 'episodes sampled (each)'],
                 [(ref, f'{curves[ref][-1][1]:.2f}/{curves[ref][-1][2]:.2f}',
                   f"{b['grpo'][new]['hist'][-1][1]:.2f}/{b['grpo'][new]['hist'][-1][2]:.2f}",
                   64 * len(b['grpo'][new]['logs']))
                  for ref, new in [('SFT -> RL', 'SFT -> GRPO'), ('RL only', 'GRPO only')]]), '',
          '![GRPO](fig_beyond_grpo.png)', '']
    return md
