"""The chapter's figures 15.2 to 15.4 (and the ``--extended`` run's), drawn from a reproduction's ``results.json``.

The figures over seeds and variants (CI bands, ``compare.png``) are ``sweeps/figures.py``'s, drawn with
``fig_recipes`` and the helpers here (``pyplot``, ``save_figure``)."""
from __future__ import annotations

from pathlib import Path

COLORS = {'SFT (oracle)': '#1f77b4', 'RFT': '#ff7f0e', 'SFT -> RL': '#2ca02c', 'RL only': '#d62728'}
BELOW = 0.05
"""How far below 0 a pass-rate axis starts (as a share of its range), so that points at 0 sit above the x axis."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path: Path, title: str | None = None, dpi: int = 120, rect=(0, 0, 1, 1)) -> Path:
    """Title, lay out, write and close ``fig`` -> ``path``."""
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def fig_dpo(results: dict, path: Path) -> Path:
    """Figure 15.2: what a DPO dashboard shows (left) next to what the policy does (right)."""
    plt = pyplot()
    r = results['15.4']
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [m[0] for m in r['monitor']]
    ax1.plot(steps, [m[1] for m in r['monitor']], label='chosen', color='#2ca02c')
    ax1.plot(steps, [m[2] for m in r['monitor']], label='rejected', color='#d62728')
    ax1.axhline(0, color='grey', lw=0.8)
    ax1.set(title='DPO monitor: log-prob change vs reference', xlabel='DPO step', ylabel='mean change of summed action log-prob (nats)')
    ax1.legend()
    log = r['log']
    x = [row['step'] for row in log]
    # where the two pass rates coincide (at 0, say) the held-out's small hollow square sits inside the train's dot,
    # and its dashed line lets the train's solid one show through
    ax2.plot(x, [row['train'] for row in log], 'o-', ms=8, label='train pass', color='#1f77b4')
    ax2.plot(x, [row['held'] for row in log], 's--', ms=4.5, mfc='white', mew=1.3, label='held-out pass', color='#9467bd')
    weak = results['15.2']['weak']
    ax2.axhline(weak['train'], color='#1f77b4', ls=':', lw=1, label=f"weak base train pass ({weak['train']:.2f})")
    # both axes start a little below 0, with their zeros level, so a curve or line at 0 stands clear of the x axis
    ax2.set(title='What the policy does in the gym', xlabel='DPO step', ylabel='pass rate', ylim=(-BELOW, 1))
    ax3 = ax2.twinx()
    invalid = [row['invalid'] for row in log]
    ax3.plot(x, invalid, '^--', color='#8c564b', label='invalid calls / episode')
    ax3.axhline(weak['invalid'], color='#8c564b', ls='-.', lw=1.2, label=f"weak base invalid calls ({weak['invalid']:.2f})")
    ax3.set_ylabel('invalid calls per episode')
    top = max([1.0, weak['invalid'], *invalid]) * 1.1  # from 0, so a flat line looks flat
    ax3.set_ylim(-BELOW * top, top)
    lines = ax2.get_legend_handles_labels()
    lines3 = ax3.get_legend_handles_labels()
    ax2.legend(lines[0] + lines3[0], lines[1] + lines3[1], loc='upper left', fontsize=8)
    return save_figure(fig, path, 'Figure 15.2  Offline DPO: rejected log-probs fall without bound while the policy breaks')


def fig_recipes(results: dict, path: Path, bands: dict | None = None, tasks: str = 'functions',
                cold_start: int | None = None, checks: str = 'tests') -> Path:
    """Figure 15.3: train and held-out pass of the four recipes over gradient steps.

    ``bands`` (optional, from a sweep) maps recipe -> {'train': (lo, hi) lists, 'held': ...} to
    shade confidence intervals; ``tasks``: what the held-out tasks are (BugFix: functions); ``checks``: what the
    hidden check that decides a pass is called (BugFix: tests).
    ``cold_start``: the SFT step RL starts from (``cold_start_step``); SFT -> RL's curve is SFT's up to it, so it
    is drawn from there on, and the steps it shares with SFT are shaded and said so.
    """
    plt = pyplot()
    curves = results['15.5']['curves']
    shared = sum(h[0] <= cold_start for h in curves.get('SFT -> RL', [])) if cold_start is not None else 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, col, title in [(axes[0], 1, 'train tasks'), (axes[1], 2, f'held-out {tasks}')]:
        for name, hist in sorted(curves.items(), key=lambda kv: list(COLORS).index(kv[0])):  # the chapter's order
            first = max(shared - 1, 0) if name == 'SFT -> RL' else 0  # from the cold start: before it, it is SFT's curve
            steps = [h[0] for h in hist][first:]
            label = f'{name} (from SFT step {cold_start})' if first else name
            ax.plot(steps, [h[col] for h in hist][first:], 'o-', ms=3, label=label, color=COLORS[name])
            if bands and name in bands:
                key = 'train' if col == 1 else 'held'
                lo, hi = bands[name][key]
                ax.fill_between(steps, lo[first:], hi[first:], color=COLORS[name], alpha=0.15, lw=0)
        if shared > 1:
            ax.axvspan(curves['SFT -> RL'][0][0], cold_start, color='grey', alpha=0.12, lw=0)
            ax.text(cold_start / 2, 0.99, f'SFT -> RL is SFT here\n(up to step {cold_start})', ha='center', va='top',
                    fontsize=7.5, color='#444444')
        ax.set(title=title, xlabel='gradient steps', ylim=(-BELOW, 1.02))
    axes[0].set_ylabel(f'pass rate (hidden {checks})')
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc='lower center', ncol=len(labels), fontsize=9, frameon=False)  # below, off the curves
    return save_figure(fig, path, 'Figure 15.3  Four recipes from the same weak base' + (' (mean and 95% CI over seeds)' if bands else ''),
                       rect=(0, 0.07, 1, 1))


def fig_hacking(results: dict, path: Path, checks: str = 'tests') -> Path:
    """Figure 15.4: kept episodes per public-filter round, split into real successes and hacks; public vs hidden pass.

    ``checks``: what the environment's hidden and public checks are called (BugFix: tests)."""
    plt = pyplot()
    log = results['15.6']['hacking']
    rounds = list(range(len(log)))  # from 0, as the chapter prints them (the log's 'round' key counts from 1)
    real = [row['kept'] - row['hacks'] for row in log]
    hacks = [row['hacks'] for row in log]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.bar(rounds, real, color='#2ca02c', label=f'real successes (pass hidden {checks})')
    ax1.bar(rounds, hacks, bottom=real, color='#d62728', label=f'hacks (fail hidden {checks})')
    for x, r_, h in zip(rounds, real, hacks):
        ax1.text(x, r_ + h, f'{h / max(r_ + h, 1):.0%} hacks', ha='center', va='bottom', fontsize=8)
    ax1.set(title=f'Episodes kept by the filter on the public {checks}', xlabel='round', ylabel='kept episodes', xticks=rounds)
    ax1.set_ylim(0, 1.3 * max(max(row['kept'] for row in log), 1))  # headroom: the legend clears the bars' labels
    ax1.legend(fontsize=8, loc='upper left')
    ax2.plot(rounds, [row['public'] for row in log], 'o-', color='#ff7f0e', label=f'public {checks} (the filter)')
    ax2.plot(rounds, [row['hidden'] for row in log], 's-', color='#1f77b4', label=f'hidden {checks} (the truth)')
    ax2.set(title='Pass rate after each round', xlabel='round', ylabel='pass rate', ylim=(-BELOW, 1.02), xticks=rounds)
    ax2.legend(fontsize=8, loc='center right')  # between the public curve (high) and the hidden one (low)
    return save_figure(fig, path, 'Figure 15.4  Filtering on a reward the policy can see amplifies the exploit')


RECIPES = tuple(COLORS)
"""The four recipes of figure 15.3, in its order."""


def draw_all(results: dict, out: Path, groups=None, tasks: str = 'functions', cold_start: int | None = None,
             checks: str = 'tests') -> list:
    """Write the chapter's three figures (15.4 only when the run has public-filter rounds) and the extended run's into
    ``out`` -> their paths.

    ``groups``: the environment's task groups, in order (default: those in the results); ``tasks``: what its
    held-out tasks are (BugFix: functions); ``cold_start``: the run's ``cold_start_step`` (figure 15.3 marks the
    steps SFT -> RL shares with SFT); ``checks``: what its hidden and public checks are called (BugFix: tests)."""
    out = Path(out)
    paths = [fig_dpo(results, out / 'fig15_2_dpo.png'),
             fig_recipes(results, out / 'fig15_3_recipes.png', tasks=tasks, cold_start=cold_start, checks=checks)]
    if results['15.6']['hacking']:  # no public-filter rounds (an environment with no public check): no figure 15.4
        paths.append(fig_hacking(results, out / 'fig15_4_hacking.png', checks=checks))
    if 'beyond' in results:
        paths += fig_beyond(results, out, groups)
    return paths


def fig_beyond(results: dict, out: Path, groups=None) -> list:
    """One figure per beyond-the-chapter recipe (``reproduce --extended``) -> their paths."""
    plt = pyplot()
    b, paths = results['beyond'], []
    groups = list(groups or next(iter(b['star'].values()))['family'])
    uncovered = '/'.join(b.get('uncovered', ['init'])) or 'the uncovered group'

    fig, ax = plt.subplots(figsize=(8, 3.6))  # STaR: train pass per family
    names = list(b['star'])
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        fam = b['star'][name]['family']
        ax.bar([j + i * w for j in range(len(groups))], [fam.get(f, 0) for f in groups], w, label=name)
    ax.set(xticks=[j + w * (len(names) - 1) / 2 for j in range(len(groups))], xticklabels=groups, ylim=(0, 1.05),
           ylabel='train pass', title=f'STaR rationalization vs expert iteration: is {uncovered} learnable?')
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out / 'fig_beyond_star.png', None, dpi=110))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)  # RFT with a group baseline
    for name, hist in b['rft_baseline'].items():
        for ax, col, title in [(axes[0], 1, 'train'), (axes[1], 2, 'held-out')]:
            ax.plot([h[0] for h in hist], [h[col] for h in hist], 'o-', label=name)
            ax.set(title=title, xlabel='SFT steps', ylim=(0, 1.02))
    axes[0].set_ylabel('pass rate')
    axes[1].legend(fontsize=8)
    paths.append(save_figure(fig, out / 'fig_beyond_rft_baseline.png', 'RFT with a group baseline (exercise 4): does the plateau move?', dpi=110))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))  # online vs offline DPO
    for name, log in b['dpo'].items():
        if log:
            axes[0].plot([r['step'] for r in log], [r['invalid'] for r in log], 'o-', label=name)
            axes[1].plot([r['step'] for r in log], [r['held'] for r in log], 'o-', label=name)
    axes[0].set(title='invalid calls per episode', xlabel='DPO step')
    axes[1].set(title='held-out pass', xlabel='DPO step', ylim=(0, 1.02))
    axes[1].legend(fontsize=7)
    paths.append(save_figure(fig, out / 'fig_beyond_dpo.png', 'Online vs offline DPO, and the preference loss', dpi=110))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))  # checkpoint selection
    table = b['select']['table']
    axes[0].plot([t[0] for t in table], [t[2] for t in table], 'o-', label='groups with signal')
    axes[0].plot([t[0] for t in table], [t[1] for t in table], 's--', label='held-out pass')
    axes[0].axvline(b['select']['step'], color='grey', ls=':')
    axes[0].set(title='probe during oracle SFT', xlabel='SFT step', ylim=(0, 1.02))
    axes[0].legend(fontsize=8)
    for name, hist in b['select']['rl'].items():
        axes[1].plot([h[0] for h in hist], [h[2] for h in hist], 'o-', label=name)
    axes[1].set(title='held-out pass during RL', xlabel='RL step', ylim=(0, 1.02))
    axes[1].legend(fontsize=8)
    paths.append(save_figure(fig, out / 'fig_beyond_select.png', 'Choosing the SFT checkpoint by its informative groups', dpi=110))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)  # GRPO vs REINFORCE
    curves = results['15.5']['curves']
    pairs = [('SFT -> RL', 'SFT -> GRPO'), ('RL only', 'GRPO only')]
    for ax, (ref, new) in zip(axes, pairs):
        for name, hist, style in [(ref, curves[ref], 'o--'), (new, b['grpo'][new]['hist'], 'o-')]:
            ax.plot([h[0] for h in hist], [h[1] for h in hist], style, label=f'{name} train')
            ax.plot([h[0] for h in hist], [h[2] for h in hist], style, alpha=0.5, label=f'{name} held-out')
        ax.set(title=f'{ref} vs {new}', xlabel='gradient steps (64 episodes per RL step)', ylim=(0, 1.02))
        ax.legend(fontsize=7)
    axes[0].set_ylabel('pass rate')
    paths.append(save_figure(fig, out / 'fig_beyond_grpo.png', "A clipped group-policy-gradient trainer vs the chapter's REINFORCE, same samples", dpi=110))
    return paths
