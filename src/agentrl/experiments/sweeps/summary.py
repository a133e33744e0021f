"""What a sweep writes once its seeds have run: each variant's ``sweep.json``, ``sweep.md`` and CI figure
(``summarize_sweep``), and a grid's ``grid.json`` (``write_grid``)."""
from __future__ import annotations

from pathlib import Path

from ..run_folder import peek, write_json
from .seeds import seed_dir


def write_grid(out: Path, seeds, variants, sweeps: dict, overrides, wall, threads: int = 1) -> dict:
    """``OUT/grid.json``: the variants of a grid sweep, their keys and folders, and a summary of each."""
    from ..chapter15.provenance import collect
    grid = {'seeds': seeds, 'overrides': dict(overrides or {}), 'wall_seconds': round(wall, 2),
            'variants': {v['name']: {'folder': v['name'], 'keys': {k: v['overrides'][k] for k in v['overrides']
                                                                    if k not in (overrides or {})},
                                     'n': sweeps[v['name']]['n'], 'failed_seeds': sweeps[v['name']]['failed_seeds']}
                         for v in variants},
            'provenance': {**collect(overrides), 'worker_torch_threads': threads}}
    write_json(Path(out) / 'grid.json', grid, sort_keys=False)
    return {'grid': grid, 'variants': sweeps}


def seed_claims(out, sweep: dict) -> dict:
    """The chapter's claims over a sweep's aggregated seeds, recomputed from each seed's results.json (so a sweep
    written before the claims existed has them too) -> ``stats.aggregate_verdicts``'s dict."""
    from ..chapter15.claims import check_claims
    from ..chapter15.env_registry import DEFAULT, get_env
    from .stats import aggregate_verdicts
    env = get_env(sweep.get('env', DEFAULT))  # ValueError when it cannot be found here
    per_seed = {}
    for s in sweep.get('aggregated_seeds', []):
        saved = peek(seed_dir(out, s) / 'results.json')
        if saved:
            per_seed[s] = check_claims(saved['sections'], env)
    return aggregate_verdicts(per_seed)


def summarize_sweep(out, seeds, runs, failures, config, smoke, backend, workers, wall, overrides=None, variant=None,
                    threads: int = 1, env: str | None = None, policy: str = 'tiny', rl: bool = False) -> dict:
    """Aggregate the finished seeds of ``out`` and write sweep.json, sweep.md and the CI figure -> the sweep dict.

    ``env``: the environment's ``--env`` name (default the chapter's); the chapter's bands (``findings``) apply only
    to the environment that has them (``ChapterEnv.bands``), the chapter's claims (``claims``) to every environment,
    where it has what they need; the bands are the TinyAgent's figures, so a pretrained ``policy`` has claims only.
    ``rl`` (``sweep --rl``): the seeds ran 15.2 and one RL recipe, so there are neither bands nor claims, and sweep.md
    tables the RL section's figures (``sweep_report.render_rl``)."""
    from ..chapter15.claims import check_claims
    from ..chapter15.settings import budget_name
    from ..chapter15.env_registry import DEFAULT, get_env
    from ..chapter15.provenance import collect
    from ..chapter15.real_model import is_pretrained
    from .figures import draw_ci_figure
    from .stats import aggregate, aggregate_claims, aggregate_findings, aggregate_verdicts
    from .sweep_report import render, render_rl

    out, env = Path(out), env or DEFAULT
    chapter_env = get_env(env)
    bands = chapter_env.bands if not (is_pretrained(policy) or rl) else None
    ok = [s for s in seeds if runs[s]['status'] in ('ok', 'skipped')]
    per_seed, per_seed_findings, per_seed_claims = {}, {}, {}
    for s in ok:
        saved = peek(seed_dir(out, s) / 'results.json')
        per_seed[s] = saved['sections']
        if bands:
            per_seed_findings[s] = bands((seed_dir(out, s) / 'transcript.txt').read_text())
        if not rl:
            per_seed_claims[s] = check_claims(saved['sections'], chapter_env)
    figures_, partial = aggregate(per_seed) if per_seed else ({}, {})
    findings = aggregate_findings(per_seed_findings)
    claims = aggregate_claims(per_seed)
    sweep = {'env': env, **({'rl': True} if rl else {}), 'policy': str(policy), 'groups': chapter_env.groups(), 'bands': bands is not None,
             'seeds': seeds, 'aggregated_seeds': ok,
             'failed_seeds': [s for s in seeds if runs[s]['status'] == 'failed'],
             'n': len(ok), 'variant': variant, 'budget': budget_name(config, chapter_env, policy), 'smoke': bool(smoke),
             'config': config,
             'overrides': dict(overrides or {}), 'provenance': {**collect(overrides), 'worker_torch_threads': threads},
             'backend': backend, 'workers': workers, 'wall_seconds': round(wall, 2),
             'runs': {str(s): runs[s] for s in seeds}, 'failures': failures,
             'figures': figures_, 'figures_partial': partial, 'findings': findings,
             'claims': aggregate_verdicts(per_seed_claims), 'beyond_claims': claims}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / 'sweep.json', sweep, sort_keys=False)
    fig = None
    if rl:
        (out / 'sweep.md').write_text(render_rl(sweep, next((per_seed[s].get('rl') for s in ok), None)))
        return sweep
    if per_seed:
        fig = draw_ci_figure(sweep, out / 'fig15_3_recipes_ci.png', tasks=chapter_env.task_label,
                             checks=chapter_env.check_label)
    (out / 'sweep.md').write_text(render(sweep, fig.name if fig else None, checks=chapter_env.check_label))
    return sweep
