"""The figures of a sweep and of a comparison: figure 15.3's four recipes as mean curves with 95% CI bands.

``draw_ci_figure`` is a sweep's ``fig15_3_recipes_ci.png`` (``agentrl sweep``), ``fig_compare`` the
recipes per variant of ``agentrl compare`` (``compare.png``); both read the aggregated figures of
``stats.aggregate`` and draw with the chapter's ``figures.py``.
"""
from __future__ import annotations

from pathlib import Path

from ..chapter15.figures import RECIPES, fig_recipes, pyplot, save_figure


def recipe_curves(figs: dict) -> tuple:
    """Mean curves and CI bands of the four recipes from aggregated figures (``stats.aggregate``) -> (results-like dict, bands)."""
    curves, bands = {}, {}
    for name in RECIPES:
        k, rows = 0, []
        while f'15.5/curves/{name}/{k}/0' in figs:
            rows.append(tuple(figs[f'15.5/curves/{name}/{k}/{c}'] for c in range(3)))
            k += 1
        if not rows:
            continue
        curves[name] = [(r[0]['mean'], r[1]['mean'], r[2]['mean']) for r in rows]

        def lohi(col):
            lo = [(r[col]['ci95'] or [r[col]['mean']] * 2)[0] for r in rows]
            hi = [(r[col]['ci95'] or [r[col]['mean']] * 2)[1] for r in rows]
            return [max(0.0, x) for x in lo], [min(1.0, x) for x in hi]  # pass rates live in [0, 1]

        bands[name] = {'train': lohi(1), 'held': lohi(2)}
    return {'15.5': {'curves': curves}}, bands


def draw_ci_figure(sweep: dict, path: Path, tasks: str = 'functions', checks: str = 'tests') -> Path:
    """Figure 15.3 of a sweep: mean curves with 95% CI bands (``tasks``, ``checks``: the environment's words for its
    held-out tasks and its hidden check, ``ChapterEnv.task_label`` and ``check_label``)."""
    results, bands = recipe_curves(sweep['figures'])
    return fig_recipes(results, path, bands=bands, cold_start=(sweep.get('config') or {}).get('cold_start_step'),
                       tasks=tasks, checks=checks)


VARIANT_COLORS = ('#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f')


def fig_compare(variants: dict, path: Path) -> Path:
    """The recipe curves per variant: ``{name: aggregated figures}`` -> a 2 x 4 grid (train / held-out x recipe),
    each panel one line per variant (its mean over seeds) with its 95% CI band where it has two or more seeds."""
    plt = pyplot()
    fig, axes = plt.subplots(2, len(RECIPES), figsize=(3.4 * len(RECIPES), 6.2), sharey=True)
    for v, (name, figs) in enumerate(variants.items()):
        results, bands = recipe_curves(figs)
        color = VARIANT_COLORS[v % len(VARIANT_COLORS)]
        n = max((s['n'] for s in figs.values()), default=0)
        for j, recipe in enumerate(RECIPES):
            hist = results['15.5']['curves'].get(recipe)
            if not hist:
                continue
            steps = [h[0] for h in hist]
            for i, (col, key) in enumerate([(1, 'train'), (2, 'held')]):
                ax = axes[i][j]
                ax.plot(steps, [h[col] for h in hist], 'o-', ms=3, color=color, label=f'{name} (n={n})' if i == j == 0 else None)
                if n > 1:
                    ax.fill_between(steps, *bands[recipe][key], color=color, alpha=0.15, lw=0)
    from matplotlib.ticker import MaxNLocator
    for j, recipe in enumerate(RECIPES):
        axes[0][j].set_title(recipe)
        axes[1][j].set_xlabel('gradient steps')
        for i in range(2):
            axes[i][j].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set(ylabel='train pass', ylim=(0, 1.02))
    axes[1][0].set(ylabel='held-out pass', ylim=(0, 1.02))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc='lower center', ncol=min(len(labels), 4), fontsize=9, frameon=False)
    return save_figure(fig, path, 'The four recipes per variant (mean over seeds, 95% CI bands)', rect=(0, 0.06, 1, 1))


def _series(figs: dict, key: str, cols: int) -> list:
    """Rows ``key/0/*``, ``key/1/*``, ... of aggregated figures, each a tuple of ``cols`` summaries, while present."""
    rows, k = [], 0
    while f'{key}/{k}/0' in figs:
        rows.append(tuple(figs.get(f'{key}/{k}/{c}') for c in range(cols)))
        k += 1
    return rows


def fig_rl_compare(variants: dict, path: Path) -> Path:
    """The variants of ``sweep --rl`` side by side: ``{name: aggregated figures}`` -> a 2 x 2 grid, the RL curve (train
    and held-out pass against the episodes sampled) and pass@k after RL (train and held-out), one line per variant
    (its mean over seeds) with its 95% CI band where it has two or more seeds."""
    plt = pyplot()
    rows = -(-len(variants) // 4)  # the legend's rows, four variants a row, below the panels
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.2 + 0.25 * rows))
    many = len(variants) > len(VARIANT_COLORS)

    def band(ax, xs, stats, color):
        lo = [max(0.0, (s['ci95'] or [s['mean']] * 2)[0]) for s in stats]
        hi = [min(1.0, (s['ci95'] or [s['mean']] * 2)[1]) for s in stats]
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
    for v, (name, figs) in enumerate(variants.items()):
        color = plt.get_cmap('tab20')(v % 20) if many else VARIANT_COLORS[v]
        n = max((s['n'] for s in figs.values()), default=0)
        hist = _series(figs, 'rl/hist', 3)
        per_step, k = [], 0  # mean episodes each step sampled
        while f'rl/episodes_per_step/{k}' in figs:
            per_step.append(figs[f'rl/episodes_per_step/{k}'])
            k += 1
        if hist:
            first = hist[0][0]['mean']
            done = [0.0]
            for s in per_step:
                done.append(done[-1] + s['mean'])
            xs = [done[min(len(done) - 1, round(h[0]['mean'] - first))] for h in hist]  # mean episodes by that step
            for i, split in enumerate(('train', 'held-out')):
                ax = axes[0][i]
                ax.plot(xs, [h[i + 1]['mean'] for h in hist], 'o-', ms=3, color=color,
                        label=f"{name.removeprefix('rl_variant=')} (n={n})" if i == 0 else None)
                if n > 1:
                    band(ax, xs, [h[i + 1] for h in hist], color)
        for i, split in enumerate(('train', 'held')):
            ks = sorted((int(k.rsplit('/', 1)[1]) for k in figs if k.startswith(f'rl/pass_at_k/{split}/mean/')))
            if not ks:
                continue
            stats = [figs[f'rl/pass_at_k/{split}/mean/{k}'] for k in ks]
            ax = axes[1][i]
            ax.plot(ks, [s['mean'] for s in stats], 'o-', ms=3, color=color)
            if n > 1:
                band(ax, ks, stats, color)
            ax.set_xscale('log', base=2)
            ax.set_xticks(ks, [str(k) for k in ks])
    for i, split in enumerate(('train', 'held-out')):
        axes[0][i].set(title=f'RL: {split} pass', xlabel='episodes sampled', ylim=(0, 1.02))
        axes[1][i].set(title=f'after RL: {split} pass@k', xlabel='k (attempts per task)', ylim=(0, 1.02))
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc='lower center', ncol=min(len(labels), 4), fontsize=9, frameon=False)
    bottom = (0.3 + 0.3 * rows) / (7.2 + 0.25 * rows)  # room for the legend's rows under the x labels
    return save_figure(fig, path, 'RL variants from one checkpoint (mean over seeds, 95% CI bands)', rect=(0, bottom, 1, 1))
