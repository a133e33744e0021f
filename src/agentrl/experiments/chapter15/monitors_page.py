"""The report's "Training monitors" section: every recipe run's curves, from the ``metrics.jsonl`` files that
``agentrl reproduce --logdir DIR`` writes (section 15.6: what to watch while training, and when).

Two figures, both drawn from the logs alone:

- the chapter's 15.6 monitors, highlighted: the share of probe groups with reward variance at each SFT checkpoint
  (what chooses the cold start), the public filter's kept episodes that fail the hidden check per round (its gap
  to an independent check), DPO's log-prob margin beside the invalid calls its evaluation counts, and REINFORCE's
  informative groups per step;
- one panel per recipe: its headline metric (``HEADLINE``) for each of its runs.

A table lists every run with its records and metrics. The log folder is found as ``report`` is told (``--logdir``),
else where the run recorded it (``results.json``'s provenance), else ``DIR/logs``.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from ...loggers import METRICS_FILE, read_jsonl, series
from .figures import pyplot

HEADLINE = {'sft_train': 'loss', 'expert_iteration': 'success_rate', 'star_iteration': 'success_rate',
            'rft_baseline_iteration': 'success_rate', 'train_dpo': 'rewards/margins', 'train_online_dpo': 'rewards/margins',
            'train_rl': 'reward', 'train_grpo': 'reward', 'select_sft_checkpoint': 'probe/informative',
            'probe': 'probe/informative'}
"""Per recipe, the metric its panel draws (every run of the recipe, one line each)."""


def find_logdir(run_dir: Path, saved: dict, logdir=None):
    """The log folder of a reproduction -> a Path holding ``metrics.jsonl`` files, or None if there is none."""
    candidates = [logdir] if logdir is not None else [saved.get('provenance', {}).get('logdir'), run_dir / 'logs']
    for c in candidates:
        if c is not None and Path(c).is_dir() and any(Path(c).rglob(METRICS_FILE)):
            return Path(c)
    if logdir is not None:
        raise ValueError(f'{logdir} holds no {METRICS_FILE} (write one with `agentrl reproduce --logdir {logdir}`)')
    return None


def load_runs(logdir: Path, seed: int) -> dict:
    """``'RECIPE/LABEL'`` -> its records (``read_jsonl``), for the runs of ``seed`` below ``logdir``, sorted by name."""
    runs = {}
    for path in sorted(logdir.rglob(f'seed{seed}/{METRICS_FILE}')):
        runs[str(path.parent.parent.relative_to(logdir))] = read_jsonl(path)
    return runs


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format='png', dpi=100)
    pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _line(ax, records, name, label, **kw):
    points = [(s, v) for s, v in series(records, name) if v is not None]
    if points:
        ax.plot([s for s, _ in points], [v for _, v in points], marker='o' if len(points) < 12 else None,
                ms=3, label=label, **kw)
    return bool(points)


def fig_highlights(runs: dict) -> str:
    """The 15.6 monitors (four panels) -> base64 PNG."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.4))
    ax = axes[0]
    if 'probe/sft_checkpoints' in runs:
        _line(ax, runs['probe/sft_checkpoints'], 'probe/informative', 'groups with signal', color='#1f77b4')
    ax.set(title='SFT checkpoints: probe groups with signal', xlabel='SFT step', ylim=(-0.05, 1.05))
    ax = axes[1]
    if 'expert_iteration/public' in runs:
        _line(ax, runs['expert_iteration/public'], 'filter/hack_share', 'kept that fail hidden', color='#d62728')
        _line(ax, runs['expert_iteration/public'], 'filter/pass_gap', 'filter pass - hidden pass', color='#9467bd')
    ax.set(title='public filter vs the hidden check', xlabel='SFT step (rounds)', ylim=(-0.05, 1.05))
    ax = axes[2]
    for run, color in (('train_dpo/dpo', '#ff7f0e'), ('train_dpo/dpo_nll', '#2ca02c')):
        if run in runs:
            _line(ax, runs[run], 'rewards/margins', f'{run.split("/")[1]} margin', color=color)
    twin = ax.twinx()
    for run, color in (('train_dpo/dpo', '#ff7f0e'), ('train_dpo/dpo_nll', '#2ca02c')):
        if run in runs:
            _line(twin, runs[run], 'eval/invalid', f'{run.split("/")[1]} invalid/ep', color=color, ls='--')
    ax.set(title="DPO's margin (-) and invalid calls (--)", xlabel='DPO step')
    twin.set_ylabel('invalid calls per episode')
    ax = axes[3]
    for run, color in (('train_rl/sft_rl', '#2ca02c'), ('train_rl/rl_only', '#d62728')):
        if run in runs:
            _line(ax, runs[run], 'informative', run.split('/')[1], color=color)
    ax.set(title='REINFORCE: groups with signal', xlabel='RL step', ylim=(-0.05, 1.05))
    for a in axes:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    return _png(fig)


def fig_recipes(runs: dict) -> str:
    """One panel per recipe, its ``HEADLINE`` metric for each run -> base64 PNG."""
    plt = pyplot()
    recipes = [r for r in HEADLINE if any(name.split('/')[0] == r for name in runs)]
    cols = 4
    rows = max(1, -(-len(recipes) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(16, 3.1 * rows), squeeze=False)
    for ax, recipe in zip(axes.flat, recipes):
        for name, records in runs.items():
            if name.split('/')[0] == recipe:
                _line(ax, records, HEADLINE[recipe], '/'.join(name.split('/')[1:]) or recipe)
        ax.set(title=f'{recipe}: {HEADLINE[recipe]}', xlabel='step')
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(recipes):]:
        ax.axis('off')
    return _png(fig)


def monitors_html(run_dir: Path, saved: dict, logdir=None) -> str:
    """The report's "Training monitors" section, or '' when the run wrote no logs."""
    found = find_logdir(Path(run_dir), saved, logdir)
    if found is None:
        return ''
    runs = load_runs(found, saved.get('seed', 0))
    if not runs:
        return ''
    rows = ''.join(f'<tr><td><code>{html.escape(name)}</code></td><td>{len(recs)}</td>'
                   f'<td>{len({k for r in recs for k in r["metrics"]})}</td></tr>' for name, recs in runs.items())
    return f"""
<h2 id="monitors">Training monitors</h2>
<p>Every recipe run of this reproduction logged its monitors while it trained (<code>{html.escape(str(found))}</code>;
open it with <code>tensorboard --logdir {html.escape(str(found))}</code>). Section 15.6's four, drawn from the logs:
the share of probe groups whose rewards differ (it falls as SFT sharpens the policy), the public filter's kept episodes
that fail the hidden check, DPO's margin beside the invalid calls it causes, and REINFORCE's groups with signal.</p>
<figure id="monitors-15-6"><img src="data:image/png;base64,{fig_highlights(runs)}" alt="section 15.6 monitors"></figure>
<figure id="monitors-recipes"><img src="data:image/png;base64,{fig_recipes(runs)}" alt="every recipe run's headline metric"></figure>
<table id="monitor-runs"><thead><tr><th>run</th><th>records</th><th>metrics</th></tr></thead><tbody>{rows}</tbody></table>
"""
