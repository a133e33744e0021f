"""Exercise 6: SFT -> RL from the step-10, step-20 and step-40 checkpoints (sections 15.5 and 15.6).

Section 15.6 finds that a later SFT checkpoint leaves REINFORCE fewer informative groups (groups of one task with
both a pass and a fail): the step-20 checkpoint has most of its held-out groups mixed, the step-60 one few. Here
the chapter's oracle SFT is run again from the weak base with its own seed (the same steps, draws and checkpoints:
its step 20 equals 15.2's ``sft_step20`` bit for bit on the same thread count, which the run checks), and from each
of its step-10, -20 and -40 checkpoints: the informative-group share at the start (15.6's probe: ``probe_group``
episodes per held-out task, and the same on the train tasks RL samples from), then the chapter's REINFORCE
(``rl_cold_steps`` steps, its learning rate, tasks, group and seed), and the final held-out pass.

One point per checkpoint: final held-out pass against the informative share at the start (``fig_ex6_cold_start.png``).
Over a sweep (``--seeds``) every seed adds three points, and ``exercise.json`` gives their correlation, and that of
the held-out pass RL adds (after RL minus the probe's at the start): the informative share says how much RL can
still change, which is not the same as where it ends.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from ...recipes.diagnostics import probe
from ...recipes.reinforce import train_rl
from ...recipes.sft import sft_train
from .answers import Answer

NEEDS = ('15.2',)
CHECKPOINTS = ('weak', 'sft_step20')
STEPS = (10, 20, 40)
"""The SFT checkpoints RL starts from (the exercise's; each a multiple of the chapter's ``sft_every``)."""


def checkpoint_steps(c) -> list:
    """``STEPS`` where the SFT run evaluates (multiples of ``sft_every``, at most ``sft_steps``); a budget too small for
    any of them (the smoke preset): its evaluation steps, up to three."""
    steps = [k for k in STEPS if k <= c.sft_steps and k % c.sft_every == 0]
    return steps or list(range(c.sft_every, c.sft_steps + 1, c.sft_every))[:3]


def run(x) -> None:
    ch, s, c = x.ch, x.seed, x.ch.cfg
    steps = checkpoint_steps(c)

    def checkpoints():
        model = copy.deepcopy(x.chapter_model('weak'))
        saved = {}

        def hook(step):
            if step in steps:
                x.save(f'sft_step{step}', model)
                saved[step] = True

        sft_train(model, ch.oracle_demos, ch.tok, steps=max(steps), lr=c.sft_lr, batch_size=c.sft_batch_size, hook=hook,
                  every=c.sft_every, seed=0 + s)  # 15.2's SFT run, cut at the last checkpoint wanted
        same = None
        if c.cold_start_step in steps:
            mine, chapter = x.model(f'sft_step{c.cold_start_step}'), x.chapter_model('sft_step20')
            same = all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), chapter.state_dict().values()))
            x.say(f"step {c.cold_start_step} checkpoint {'equals' if same else 'differs from'} 15.2's bit for bit")
        return {'steps': sorted(saved), 'equals_chapter': same}

    def from_step(k):
        def work():
            model = x.model(f'sft_step{k}')
            held, signal, entropy = probe(model, ch.heldout, ch.tok, group=c.probe_group, seed=5 + s, env=ch.env.env_id)
            _, signal_train, _ = probe(model, ch.train, ch.tok, group=c.probe_group, seed=5 + s, env=ch.env.env_id)
            hist = train_rl(model, ch.train, ch.tok, c.rl_cold_steps, start=k, lr=c.rl_lr, seed=0 + s, n_tasks=c.rl_tasks,
                            group=c.rl_group, every=c.rl_every, evaluate=ch.evaluate, temperature=c.rl_temperature,
                            entropy_bonus=c.rl_entropy_bonus, env=ch.env.env_id)
            out = {'step': k, 'signal': signal, 'signal_train': signal_train, 'entropy': entropy, 'held_start': held,
                   'hist': hist, 'final_train': hist[-1][1], 'final_held': hist[-1][2]}
            x.say(f'SFT step {k:>2}: groups with signal {signal:.2f} held-out / {signal_train:.2f} train, held-out pass '
                  f"{held:.2f} -> after {c.rl_cold_steps} RL steps train {out['final_train']:.2f}, held-out "
                  f"{out['final_held']:.2f}")
            return out
        return work

    x.part('checkpoints', checkpoints)
    for k in steps:
        x.part(f'from_step{k}', from_step(k))


def points(parts) -> list:
    """(step, informative share at the start, final held-out pass) of each checkpoint."""
    return [(r['step'], r['signal'], r['final_held']) for k, r in sorted(parts.items()) if k.startswith('from_step')]


def draw(parts, out):
    """Final held-out pass against the informative share at the start, a point per checkpoint."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    pts = sorted(points(parts))
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.plot([p[1] for p in pts], [p[2] for p in pts], color='#bbbbbb', zorder=1)
    for step, signal, held in pts:
        ax.scatter(signal, held, s=40, zorder=2)
        ax.annotate(f'SFT step {step}', (signal, held), textcoords='offset points', xytext=(6, 4), fontsize=8)
    ax.set_xlabel('held-out groups with signal at the start')
    ax.set_ylabel('held-out pass after RL')
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title('SFT -> RL from three checkpoints', fontsize=10)
    fig.tight_layout()
    path = out / 'fig_ex6_cold_start.png'
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def _matches(p):
    same = p['checkpoints']['equals_chapter']
    return same, f"step-20 checkpoint {'equals' if same else 'differs from'} 15.2's"


def _signal_falls(p):
    pts = sorted(points(p))
    signals = [sig for _, sig, _ in pts]
    return signals[0] >= signals[-1], 'groups with signal ' + ', '.join(f'step {k} {v:.2f}' for k, v, _ in pts)


def _least_signal_gains_least(p):
    rows = [r for k, r in sorted(p.items()) if k.startswith('from_step')]
    least = min(rows, key=lambda r: (r['signal'], -r['step']))
    gains = {r['step']: r['final_held'] - r['held_start'] for r in rows}
    return (gains[least['step']] <= min(gains.values()) + 1e-9,
            f"held-out gain from RL: {', '.join(f'step {k} {g:+.2f}' for k, g in gains.items())}; fewest informative "
            f"groups: step {least['step']} ({least['signal']:.2f})")


def _late_ends_high(p):
    rows = sorted((r for k, r in p.items() if k.startswith('from_step')), key=lambda r: r['step'])
    first, last = rows[0], rows[-1]
    return (last['final_held'] >= first['final_held'],
            f"final held-out pass: step {last['step']} {last['final_held']:.2f} ({last['signal']:.2f} informative at the "
            f"start) vs step {first['step']} {first['final_held']:.2f} ({first['signal']:.2f})")


HEADLINE = 'least-signal-gains-least'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('same-checkpoints', "The exercise's SFT run is the chapter's: its step-20 checkpoint is 15.2's.",
           'every weight equal', _matches),
    Answer('signal-falls', 'The later the checkpoint, the fewer held-out groups carry signal at the start.',
           "the first checkpoint's share >= the last's", _signal_falls),
    Answer('least-signal-gains-least', 'Informative groups measure what RL can still add: the checkpoint with the '
           'fewest gains the least held-out pass from RL.', 'its held-out gain (after RL minus at the start) is the '
           'smallest of the three', _least_signal_gains_least),
    Answer('late-ends-high', 'They do not decide where RL ends at this budget: the last checkpoint, with the fewest '
           'informative groups, ends at least as high as the first.', "the last checkpoint's final held-out pass >= "
           "the first's", _late_ends_high),
)


def correlation(xs, ys):
    """Pearson's r of two equal-length lists (None when either is constant)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(xs, ys))
    sxx, syy = sum((a - mx) ** 2 for a in xs), sum((b - my) ** 2 for b in ys)
    return None if sxx == 0 or syy == 0 else sxy / (sxx * syy) ** 0.5


def pooled(per_seed: dict, out) -> dict:
    """Over seeds: every (seed, checkpoint) point, the correlation of the final held-out pass with the informative
    share at the start (held-out groups, and train groups), and the figure of all points."""
    rows = [(int(s), r['step'], r['signal'], r['signal_train'], r['final_held'], r['final_held'] - r['held_start'])
            for s, parts in per_seed.items() for k, r in parts.items() if k.startswith('from_step')]
    r_held = correlation([p[2] for p in rows], [p[4] for p in rows]) if len(rows) > 2 else None
    r_train = correlation([p[3] for p in rows], [p[4] for p in rows]) if len(rows) > 2 else None
    r_gain = correlation([p[2] for p in rows], [p[5] for p in rows]) if len(rows) > 2 else None
    by_step = {}
    for _, step, sig, _, held, _ in rows:
        by_step.setdefault(step, []).append((sig, held))
    means = {step: (sum(a for a, _ in v) / len(v), sum(b for _, b in v) / len(v)) for step, v in sorted(by_step.items())}
    lines = [f'{len(rows)} points ({len(per_seed)} seeds x {len(by_step)} checkpoints): correlation of the final held-out '
             f"pass with the informative share at the start: r = {_r(r_held)} (held-out groups), {_r(r_train)} (train "
             f'groups); of the held-out gain from RL (after minus at the start): r = {_r(r_gain)}',
             'means per checkpoint: ' + '; '.join(f'step {k}: signal {a:.2f}, final held-out {b:.2f}'
                                                  for k, (a, b) in means.items())]
    figures = []
    if rows:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8), sharex=True)
        for step in sorted(by_step):
            pts = [p for p in rows if p[1] == step]
            axes[0].scatter([p[2] for p in pts], [p[4] for p in pts], s=22, alpha=0.75, label=f'SFT step {step}')
            axes[1].scatter([p[2] for p in pts], [p[5] for p in pts], s=22, alpha=0.75, label=f'SFT step {step}')
        axes[0].set_ylabel('held-out pass after RL')
        axes[0].set_title(f'where RL ends (r = {_r(r_held)})', fontsize=10)
        axes[1].set_ylabel('held-out pass: after RL minus at the start')
        axes[1].axhline(0, color='#999999', lw=0.8)
        axes[1].set_title(f'what RL adds (r = {_r(r_gain)})', fontsize=10)
        for ax in axes:
            ax.set_xlabel('held-out groups with signal at the start')
            ax.set_xlim(-0.05, 1.05)
        axes[0].set_ylim(-0.05, 1.05)
        axes[0].legend(fontsize=8)
        fig.suptitle(f'SFT -> RL from three checkpoints, {len(per_seed)} seeds', fontsize=10)
        fig.tight_layout()
        path = Path(out) / 'fig_ex6_cold_start_seeds.png'
        fig.savefig(path, dpi=120)
        plt.close(fig)
        figures.append(path.name)
    return {'points': rows, 'r_heldout_signal': r_held, 'r_train_signal': r_train, 'r_gain_signal': r_gain,
            'means': means, 'lines': lines,
            'figures': figures}


def _r(r) -> str:
    return 'undefined' if r is None else f'{r:+.2f}'
