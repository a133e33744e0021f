"""``sweep.md``: the chapter's tables as mean ± 95% CI over seeds, next to the chapter's single-seed figures."""
from __future__ import annotations

from ..chapter15.env_registry import DEFAULT
from ..chapter15.figures import RECIPES
from ..chapter15.findings import every_seed_line, rates_table
from ..chapter15.probes import probe_labels
from ..chapter15.report import CH_DESCRIBE, CH_DPO, CH_HACK, CH_PROBE, CH_RECIPES, CH_RFT, CH_SFT
from ..chapter15.tables import bold_min, by_group, fmt, table


def _stat(sweep, key):
    return sweep['figures'].get(key) or sweep['figures_partial'].get(key)


def _threads(sweep: dict) -> int:
    """Torch threads per seed (sweeps written before ``--threads`` existed ran on one)."""
    return (sweep.get('provenance') or {}).get('worker_torch_threads', 1)


def _resumed(sweep: dict) -> str:
    """What the wall time leaves out: the seeds an earlier invocation had finished (``--resume``)."""
    done = [s for s, r in (sweep.get('runs') or {}).items() if r.get('status') == 'skipped']
    return f" for this invocation (seed{'s' * (len(done) > 1)} {', '.join(done)} finished by an earlier one)" if done else ''


def render(sweep: dict, figure: str | None = None, checks: str = 'tests') -> str:
    """The whole of sweep.md from a sweep dict (``sweep.json``); ``checks``: what the environment's hidden and public
    checks are called (``ChapterEnv.check_label``; BugFix: tests)."""
    S = lambda key, d=2: fmt(_stat(sweep, key), d)  # noqa: E731
    env = sweep.get('env', DEFAULT)
    ch = sweep.get('bands', env == DEFAULT)  # the chapter's own figures: beside a sweep on the environment of its bands
    P = (lambda v: f' ({v})') if ch else (lambda v: '')  # noqa: E731
    n, seeds = sweep['n'], sweep['seeds']
    title = (f"Chapter 15 over {len(seeds)} seeds" + (f' on {env}' if not ch else '')
             + (f": {sweep['variant']}" if sweep.get('variant') else ''))
    md = [f'# {title}', '',
          f"Seed shifts {', '.join(map(str, seeds))}; {sweep['budget']} budget; backend {sweep['backend']}, "
          f"{sweep['workers']} workers, {_threads(sweep)} torch thread(s) each; {sweep['wall_seconds']:.0f} s wall"
          + _resumed(sweep) + '. '
          f"**{n} of {len(seeds)} seeds aggregated**" + (f"; failed: {', '.join(map(str, sweep['failed_seeds']))}" if sweep['failed_seeds'] else '') + '.',
          '', f'Each cell: mean ± half-width of the 95% confidence interval over the {n} seeds '
          '(t quantile × sample std / √n)' + (", then the chapter's single-seed figure in parentheses" if ch else '') + '; '
          '[n=k] marks a figure only k seeds have (e.g. a DPO log when a seed found no pair).', '']
    if sweep.get('overrides'):
        md += ['Settings changed from the ' + ('smoke preset' if sweep.get('smoke') else "chapter's") + ': ' +
               ', '.join(f'`{k}={v}`' for k, v in sweep['overrides'].items()) + '.', '']
    if sweep['budget'] == 'smoke':
        md += ['> Smoke budget: every section runs, but the figures mean nothing; compare with the chapter only at the full budget.', '']
    bands = dict(sorted(sweep['findings'].items(), key=lambda kv: (kv[1]['hold_rate'], kv[0])))
    if ch:
        md += ['## Findings, by hold rate', '', rates_table('band', bands) if bands else 'No seed finished.', '']
    md += claimtable(sweep)
    if sweep.get('beyond_claims'):
        crow = []
        for name, c in sweep['beyond_claims'].items():
            rate = 'n/a' if c['support_rate'] is None else f"{c['support_rate']:.0%}"
            verdict = ('not measurable' if c['support_rate'] is None else 'supported' if c['support_rate'] >= 2 / 3
                       else 'not supported' if c['support_rate'] <= 1 / 3 else 'mixed')
            crow.append((name, rate, f"{c['supported']}/{c['n']}", verdict,
                         '; '.join(f"seed {k}: {v['figure']}" for k, v in c['per_seed'].items())))
        md += ['## Beyond the chapter: claims over seeds', '',
               'A claim is reported as supported when it holds on at least two thirds of the seeds, not supported '
               'when on at most a third.', '',
               table(['claim', 'support rate', 'seeds', 'verdict', 'per seed'], crow), '']
    if n == 0:
        return '\n'.join(md + _runs_md(sweep))

    md += ['## 15.1 Trajectory SFT and the action mask', '',
           table(['owner', 'share of predicted tokens', *(['chapter'] if ch else [])],
                 [(k, S(f'15.1/owner_share/{k}', 3), *((c,) if ch else ()))
                  for k, c in [('template', '9%'), ('prompt', '9%'), ('policy', '19%'), ('tool', '63%')]]),
           '', f"Loss at init: masked {S('15.1/loss_masked', 3)}, unmasked {S('15.1/loss_unmasked', 3)} ("
           + ('chapter 5.913 / 5.879; ' if ch else '') + f"log V = {S('15.1/log_vocab', 3)}).", '']
    rows = []
    for label, key in [('weak base', '15.2/weak'), ('oracle SFT', '15.2/oracle_sft'), ('after RFT', '15.3/after_rft'), ('mismatched', '15.6/mismatch')]:
        c = CH_DESCRIBE[label]
        rows.append((label, *(f"{S(f'{key}/{m}', d)}{P(cv)}" for m, d, cv in
                              zip(['train', 'held', 'invalid', 'reads', 'entropy'], [3, 3, 2, 2, 3], c))))
    ch_sft = {k: (a, b) for k, a, b in CH_SFT}
    sft_rows, k = [], 0
    while _stat(sweep, f'15.2/hist_sft/{k}/0'):
        step = round(_stat(sweep, f'15.2/hist_sft/{k}/0')['mean'])
        c = ch_sft.get(step, ('—', '—'))
        sft_rows.append((step, f"{S(f'15.2/hist_sft/{k}/1')}{P(c[0])}", f"{S(f'15.2/hist_sft/{k}/2')}{P(c[1])}"))
        k += 1
    md += ['## 15.2 Warm start: format first, then skill', '',
           table(['policy', 'train', 'held-out', 'invalid/ep', 'reads', 'action entropy'], rows), '',
           table(['SFT step', 'train', 'held-out'], sft_rows), '']
    md += familytable(sweep)
    rft_rows, k = [], 0
    while _stat(sweep, f'15.3/rounds/{k}/rate'):
        c = CH_RFT[k] if k < len(CH_RFT) else ('—',) * 5
        rft_rows.append((k + 1, f"{S(f'15.3/rounds/{k}/rate', 3)}{P(c[0])}", f"{S(f'15.3/rounds/{k}/kept', 1)}{P(c[1])}",
                         f"{S(f'15.3/rounds/{k}/n_solved', 1)}{P(c[2])}", f"{S(f'15.3/hist_rft/{k + 1}/1')}{P(c[3])}",
                         f"{S(f'15.3/hist_rft/{k + 1}/2')}{P(c[4])}"))
        k += 1
    gap = _stat(sweep, '15.3/grad_gap')
    md += ['## 15.3 Rejection sampling and expert iteration', '',
           f"Gradient identity max |g_pg - ratio * g_rft|: mean {gap['mean']:.1e}, max over seeds {max(gap['values']):.1e} "
           f"over {gap['n']} seeds with a success in the sample{P('chapter 1.4e-09')}." if gap else
           'Gradient identity: no seed had a success in its sample.',
           f"cosine(baseline PG, RFT) = {S('15.3/cosine', 3)}{P('chapter 0.985')}. "
           f"Train tasks never solved by the weak base: {S('15.3/n_never_solved', 1)}{P('chapter 4')}.", '',
           table(['round', 'sample pass', 'kept', 'tasks solved', 'train', 'held-out'], rft_rows), '']
    ch_dpo = {c[0]: c for c in CH_DPO}
    dpo_rows, k = [], 0
    while _stat(sweep, f'15.4/log/{k}/step'):
        step = round(_stat(sweep, f'15.4/log/{k}/step')['mean'])
        c = ch_dpo.get(step, ('—',) * 6)
        dpo_rows.append((step, *(f"{S(f'15.4/log/{k}/{m}')}{P(cv)}" for m, cv in
                                 zip(['d_chosen', 'd_rejected', 'train', 'held', 'invalid'], c[1:]))))
        k += 1
    md += ['## 15.4 DPO for agent trajectories', '',
           f"Loss values at ratios (0,0), (+2,-2), (-2,+2): {' / '.join(S(f'15.4/loss_values/{i}', 4) for i in range(3))} "
           f"{P('chapter 0.6931 / 0.1269 / 2.1269')}. Pairs {S('15.4/pairs', 1)} over {S('15.4/tasks_with_pair', 1)} tasks"
           f"{P('chapter 55 / 14')}.", '',
           table(['step', 'd_chosen', 'd_rejected', 'train', 'held', 'invalid/ep'], dpo_rows), '']
    rec_rows = []
    for name in RECIPES:
        k = _last_point(sweep, name)
        c = CH_RECIPES[name]
        rec_rows.append((name, f"{S(f'15.5/cost/{name}/demos', 0)}{P(c[0])}", f"{S(f'15.5/cost/{name}/sampled', 0)}{P(c[1])}",
                         f"{S(f'15.5/curves/{name}/{k}/1')}{P(c[2])}", f"{S(f'15.5/curves/{name}/{k}/2')}{P(c[3])}"))
    md += ['## 15.5 Four recipes from the same weak base', '',
           'Final points of each curve.', '',
           table(['recipe', 'demos', 'sampled', 'train', 'held'], rec_rows), '']
    md += roadtable(sweep)
    if figure:
        md += [f'![Figure 15.3 with 95% CI bands]({figure})', '']
    config = sweep.get('config') or {}
    labels = dict.fromkeys(label for label, _ in probe_labels(config.get('cold_start_step', 20), config.get('sft_steps', 60)))
    probe_rows = [(label, *(f"{S(f'15.6/probe/{label}/{m}', d)}{P(cv)}" for m, d, cv in
                            zip(['held', 'signal', 'entropy'], [2, 2, 3], CH_PROBE.get(label, ('—',) * 3))))
                  for label in labels]
    nll_rows = [(name, *(S(f'15.6/dpo_vs_dpo_nll/{i}/{m}') for m in ['train', 'held', 'invalid', 'd_chosen', 'd_rejected']),
                 *((chf,) if ch else ()))
                for i, (name, chf) in enumerate([('DPO', 'train 0.41, invalid 2.02'), ('DPO + NLL', 'train 0.69, invalid 0.61')])]
    hack_rows, k = [], 0
    while _stat(sweep, f'15.6/hacking/{k}/kept'):
        c = CH_HACK[k] if k < len(CH_HACK) else ('—',) * 4
        hack_rows.append((k + 1, f"{S(f'15.6/hacking/{k}/kept', 1)}{P(c[0])}", f"{S(f'15.6/hacking/{k}/hacks', 1)}{P(c[1])}",
                          S(f'15.6/hacking/{k}/hack_share'), f"{S(f'15.6/hacking/{k}/public')}{P(c[2])}",
                          f"{S(f'15.6/hacking/{k}/hidden')}{P(c[3])}"))
        k += 1
    md += ['## 15.6 Design questions in practice', '',
           table(['checkpoint', 'held-out pass', 'groups with signal', 'action entropy'], probe_rows), '',
           f"Template mismatch: NLL on correctly rendered demos {S('15.6/mismatch/nll', 3)}{P('chapter 0.815')}.", '',
           table(['final DPO step', 'train', 'held', 'invalid/ep', 'd_chosen', 'd_rejected', *(['chapter'] if ch else [])],
                 nll_rows), '',
           f"Dedup: {S('15.6/dedup/distinct', 1)} distinct action sequences among {S('15.6/dedup/kept', 1)} kept episodes of RFT "
           f"round 2{P('chapter 21 of 84')}.", '',
           table(['public-filter round', 'kept', f'fail hidden {checks}', 'hack share', 'public pass', 'hidden pass'], hack_rows), '']
    return '\n'.join(md + _runs_md(sweep))


def claimtable(sweep: dict) -> list:
    """The chapter's claims (``chapter15.claims``) over the seeds: hold rate and the seeds where each fails (a claim
    that does not apply: n/a, and why)."""
    claims = sweep.get('claims') or {}
    if not claims:
        return []
    return ["## The chapter's claims", '', f'{every_seed_line(claims)} (`docs/claims.md`).', '', rates_table('claim', claims), '']


def familytable(sweep: dict) -> list:
    """Held-out pass per task group after oracle SFT (15.2): one row per seed, each seed's lowest group in bold,
    then the mean ± CI and the minimum over seeds per group."""
    fams = list(by_group({k.split('/')[-1]: 0 for k in sweep['figures'] if k.startswith('15.2/heldout_by_family/')},
                          sweep.get('groups', ())))
    if not fams:
        return []
    stats = {f: sweep['figures'][f'15.2/heldout_by_family/{f}'] for f in fams}
    seeds = stats[fams[0]]['seeds']
    rows = [(f'seed {s}', *bold_min([stats[f]['values'][i] for f in fams])) for i, s in enumerate(seeds)]
    rows.append(('mean ± CI', *(fmt(stats[f]) for f in fams)))
    rows.append(('minimum over seeds', *bold_min([min(stats[f]['values']) for f in fams])))
    return ['Held-out pass per task group after oracle SFT (the episodes of the oracle SFT row above; in each row '
            'the lowest group in bold). Transfer holds only if every group carries over, at every seed.', '',
            table(['', *fams], rows), '']


def _last_point(sweep: dict, recipe: str) -> int:
    """Index of the last point of a 15.5 recipe curve."""
    k = 0
    while _stat(sweep, f'15.5/curves/{recipe}/{k + 1}/0'):
        k += 1
    return k


def roadtable(sweep: dict) -> list:
    """Section 15.5's two RL recipes per seed: final train / held-out pass and the share of final train episodes
    that read first. Shows which road RL from the weak base took at each seed (edit by name, or read)."""
    cells = {(r, c): _stat(sweep, f'15.5/curves/{r}/{_last_point(sweep, r)}/{i}')
             for r in ('SFT -> RL', 'RL only') for c, i in (('train', 1), ('held', 2))}
    cells.update({(r, 'reads'): _stat(sweep, f'15.5/reads_first/{r}') for r in ('SFT -> RL', 'RL only')})
    if any(v is None for v in cells.values()):  # sweeps written before the figure existed
        return []
    seeds = cells['RL only', 'reads']['seeds']
    at = {key: dict(zip(v['seeds'], v['values'])) for key, v in cells.items()}
    order = [(r, c) for r in ('SFT -> RL', 'RL only') for c in ('train', 'held', 'reads')]
    rows = [(f'seed {s}', *(f"{at[key][s]:.2f}" if s in at[key] else '—' for key in order)) for s in seeds]
    rows.append(('mean ± CI', *(fmt(cells[key]) for key in order)))
    return ['Per seed: each RL recipe\'s final train and held-out pass, and the share of its final train episodes that '
            '*read* before acting. RL only that acts at once can go only by the names in the prompt (held-out stays near '
            'the weak base\'s); RL only that learned to read takes its answer from the reply, and its held-out pass rises.', '',
            table(['', 'SFT -> RL train', 'held', 'reads first', 'RL only train', 'held', 'reads first'], rows), '']


def _runs_md(sweep) -> list:
    rows = []
    for s, r in sweep['runs'].items():
        errs = '; '.join(f"attempt {e['attempt']}: {e['error']}" for e in r['errors']) or '—'
        rows.append((s, r['status'], r['attempts'], f"{r['seconds']:.1f}", f"{r['wall_seconds']:.1f}", errs))
    return ['## Runs', '', table(['seed', 'status', 'attempts', 'run seconds', 'wall seconds', 'errors'], rows), '']


def render_rl(sweep: dict, rl: dict | None) -> str:
    """sweep.md of a ``sweep --rl``: the RL section's figures (``rl_section.rl_figures``) as mean ± 95% CI over seeds;
    ``rl``: one seed's section (which names the figures), None when no seed finished."""
    from ..chapter15.rl_section import rl_figures
    n, seeds = sweep['n'], sweep['seeds']
    cfg = sweep.get('config') or {}
    title = f"RL from one checkpoint over {len(seeds)} seeds on {sweep.get('env', DEFAULT)}" + (
        f": {sweep['variant']}" if sweep.get('variant') else '')
    md = [f'# {title}', '',
          f"`{cfg.get('rl_variant')}` from `{cfg.get('rl_start')}`; seed shifts {', '.join(map(str, seeds))}; "
          f"{sweep['budget']} budget; backend {sweep['backend']}, {sweep['workers']} workers, {_threads(sweep)} torch "
          f"thread(s) each; {sweep['wall_seconds']:.0f} s wall" + _resumed(sweep) + '. '
          f"**{n} of {len(seeds)} seeds aggregated**" + (f"; failed: {', '.join(map(str, sweep['failed_seeds']))}"
                                                          if sweep['failed_seeds'] else '') + '.', '',
          f'Each cell: mean ± half-width of the 95% confidence interval over the {n} seeds; [n=k] marks a figure only k '
          'seeds have (the episodes to the target, where some seeds never reached it).', '']
    if sweep.get('overrides'):
        md += ["Settings changed from the chapter's: " + ', '.join(f'`{k}={v}`' for k, v in sweep['overrides'].items())
               + '.', '']
    if rl is None:
        return '\n'.join(md + ['No seed finished.', ''])
    rows = [(label, fmt(_stat(sweep, '/'.join(path)), 0 if 'episodes' in label or 'seconds' in label else 2))
            for label, path in rl_figures(rl)]
    return '\n'.join(md + [table(['figure', f'mean ± 95% CI (n={n})'], rows), ''])
