"""Exercise 7: the design review, simulated (sections 15.2-15.6).

The team has 2,000 human demonstrations, a test-based verifier and the budget for one stage before RL. Here:

- **the demonstrations** are the gym's ``'human'`` player (``envs.play.HUMAN_FAULTS``: the oracle's episode, but
  15% act without reading, 10% read then write a wrong fix, 10% read then game the public check), 2,000 episodes
  spread evenly over the train tasks;
- **the verifier** is the gym's hidden tests (the chapter's reward): it decides what RFT keeps, which sampled
  episodes are DPO's failures, and RL's reward;
- **the model** the stage starts from is the chapter's weak base, itself an SFT model (on unskilled play): it knows
  the format, not the skill.

The three candidate stages get the same budget: 60 gradient steps (``sft_steps``) of 32 episodes (or pairs), and
2,000 episodes of data.

- ``sft``: SFT on the 2,000 demonstrations, as they are;
- ``rft``: RFT from the SFT model: expert iteration from the weak base, 4 rounds of 500 sampled episodes
  (2,000 in all), each filtered by the verifier, 15 SFT steps a round;
- ``dpo``: DPO on (demonstration, model failure) pairs: 2,000 episodes sampled from the weak base, each one the
  verifier fails paired with a demonstration of its task drawn at random; minibatches of 32 pairs, the chapter's
  beta and learning rate, the weak base as the reference.

Each is followed by the same RL phase (the chapter's REINFORCE from the cold start: ``rl_cold_steps`` steps, its
knobs and seed), and the winner is the best held-out pass after it (``describe_samples`` episodes per held-out
task). During each stage, every 15 steps, the dashboard's metrics are measured on the current model:

- ``informative``: the share of train groups (``probe_group`` episodes of one task) with both a pass and a fail;
- ``entropy``: the action entropy of those episodes;
- ``filter_gap``: the verifier's pass on the train tasks minus the held-out pass (the independent check);
- ``invalid``: invalid calls per episode;
- ``d_chosen`` / ``d_rejected``: DPO's dashboard, for every stage: the change of the summed action log-prob of 64
  fixed pairs' demonstration and failure since the weak base.

A metric *separates* the winner from the losers from the first step at which the winner's value is above both
losers' (or below both), staying on that side to the end of the stage; the earliest such step is when a dashboard
could have told the choice apart, days before the RL phase's result.
"""
from __future__ import annotations

import copy
import math
import random

import torch

from ...recipes.diagnostics import probe
from ...recipes.dpo import episode_logp, train_dpo
from ...recipes.outcomes import is_success
from ...recipes.reinforce import train_rl
from ...recipes.rejection import expert_iteration
from ...recipes.sft import sft_train
from ...rendering.trajectory import collate
from ...rollouts.engine import scripted_rollout
from .answers import Answer, Undecided
from .pooling import mean, rounded, spread

NEEDS = ('15.2',)
CHECKPOINTS = ('weak',)
N_DEMOS = 2000
"""The human demonstrations (and each stage's episodes of data)."""
ROUNDS = 4
"""RFT's rounds; the dashboard is read at the same steps in every stage (every ``sft_steps / ROUNDS`` steps)."""
WATCHED_PAIRS = 64
"""The fixed pairs whose log-probs are DPO's dashboard."""
STAGES = {'sft': 'SFT on the demonstrations', 'rft': 'RFT from the SFT model', 'dpo': 'DPO on (demo, failure) pairs'}
METRICS = ('informative', 'entropy', 'filter_gap', 'invalid', 'd_chosen', 'd_rejected')
FAULTS = ('no_read', 'wrong_fix', 'exploit')
TIE = 0.1
"""A winner must beat the runner-up's held-out pass by this much: with 8 episodes on each held-out task, two stages of
equal skill differ by less about 19 times in 20 (two standard errors of the difference at pass rates near 0.2-0.8)."""


def demo_fault(traj, read) -> str | None:
    """What a demonstration did wrong, from its own episode: ``no_read`` (its first call does not only look),
    ``exploit`` (it read, and passed the public check but not the hidden tests), ``wrong_fix`` (it read, and failed
    both), or None (it read and passed)."""
    actions = traj.info['actions']
    if not actions or not read(actions[0]):
        return 'no_read'
    if traj.info.get('hidden_pass'):
        return None
    return 'exploit' if traj.info.get('public_pass') else 'wrong_fix'


def separation(traces: dict, winner: str, steps: list) -> tuple:
    """(the first step from which ``winner``'s metric stays above both losers' or below both, +1 above / -1 below);
    (None, 0) if it never does."""
    losers = [c for c in traces if c != winner]
    w = traces[winner]

    def side(j):
        if any(v[j] is None or (isinstance(v[j], float) and math.isnan(v[j])) for v in traces.values()):
            return 0
        if all(w[j] > traces[c][j] for c in losers):
            return 1
        return -1 if all(w[j] < traces[c][j] for c in losers) else 0

    sides = [side(j) for j in range(len(steps))]
    for j, sd in enumerate(sides):
        if sd and all(x == sd for x in sides[j:]):
            return steps[j], sd
    return None, 0


class Review:
    """The exercise's shared material: the demonstrations, the pairs, the dashboard."""

    def __init__(self, x):
        self.x, self.ch, self.c, self.s = x, x.ch, x.ch.cfg, x.seed
        self.read = self.ch.env.read_call() or (lambda call: False)
        self._demos = self._pairs = None

    @property
    def demos(self) -> list:
        """The 2,000 demonstrations, task by task in turn, from one ``'human'`` player seeded by the run's seed."""
        if self._demos is None:
            ch = self.ch
            try:
                player = ch.env.player('human', seed=self.s)
            except ValueError as e:
                raise ValueError(f'exercise 7 needs a human demonstrator (scripted_policy("human")), which '
                                 f'{ch.env.title} lacks: {e}') from None
            self._demos = [scripted_rollout(player, ch.env.make(), ch.train[i % len(ch.train)], ch.tok)
                           for i in range(N_DEMOS)]
        return self._demos

    @property
    def pairs(self) -> list:
        """(demonstration, failure) pairs: the weak base's failures among 2,000 samples, each with a demo of its task."""
        if self._pairs is None:
            ch, c = self.ch, self.c
            per_task = N_DEMOS // len(ch.train)
            _, sample = ch.pass_rate(self.x.chapter_model('weak'), ch.train, per_task, 700 + self.s,
                                     temperature=c.sample_temperature)
            by_task = {}
            for d in self.demos:
                by_task.setdefault(d.info['task'], []).append(d)
            rng = random.Random(700 + self.s)
            self._pairs = [(rng.choice(by_task[t.info['task']]), t) for t in sample if not is_success(t)]
        return self._pairs

    def watched(self) -> tuple:
        """The collated chosen and rejected episodes of the first ``WATCHED_PAIRS`` pairs, and their weak-base log-probs."""
        if not hasattr(self, '_watched'):
            pairs = self.pairs[:WATCHED_PAIRS]
            chosen, rejected = (collate([p[side] for p in pairs], self.ch.tok.pad_id) for side in (0, 1))
            weak = self.x.chapter_model('weak')
            with torch.no_grad():
                self._watched = chosen, rejected, episode_logp(weak, chosen), episode_logp(weak, rejected)
        return self._watched

    def dashboard(self, model) -> dict:
        """The stage's metrics on ``model`` now."""
        ch, c, s = self.ch, self.c, self.s
        train, informative, entropy = probe(model, ch.train, ch.tok, group=c.probe_group, seed=5 + s, env=ch.env.env_id)
        _, trajs = ch.pass_rate(model, ch.train, c.eval_samples, s)
        held = ch.pass_rate(model, ch.heldout, c.eval_samples, s)[0]
        chosen, rejected, ref_c, ref_r = self.watched()
        with torch.no_grad():
            d_chosen = (episode_logp(model, chosen) - ref_c).mean().item()
            d_rejected = (episode_logp(model, rejected) - ref_r).mean().item()
        return {'informative': informative, 'entropy': entropy, 'train': train, 'held': held,
                'filter_gap': train - held, 'invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs),
                'd_chosen': d_chosen, 'd_rejected': d_rejected}


def run(x) -> None:
    ch, c, s = x.ch, x.ch.cfg, x.seed
    review = Review(x)
    every = max(c.sft_steps // ROUNDS, 1)
    steps = c.sft_steps

    def demos():
        counts = {f: 0 for f in (*FAULTS, None)}
        for d in review.demos:
            counts[demo_fault(d, review.read)] += 1
        n = len(review.demos)
        out = {'n': n, 'shares': {str(k): v / n for k, v in counts.items()},
               'hidden_pass': sum(is_success(d) for d in review.demos) / n,
               'public_pass': sum(bool(d.info.get('public_pass')) for d in review.demos) / n,
               'pairs': len(review.pairs), 'weak_failures_of': N_DEMOS // len(ch.train) * len(ch.train)}
        x.say(f"{n} demonstrations: pass the verifier {out['hidden_pass']:.2f}, the public check {out['public_pass']:.2f}; "
              'measured faults: ' + ', '.join(f'{f} {counts[f] / n:.3f}' for f in FAULTS))
        x.say(f"DPO pairs: {out['pairs']} failures of the weak base among {out['weak_failures_of']} samples, each with a "
              'demonstration of its task')
        return out

    def stage(name):
        def work():
            model = copy.deepcopy(x.chapter_model('weak'))
            trace = [(0, review.dashboard(model))]
            if name == 'sft':
                sft_train(model, review.demos, ch.tok, steps=steps, lr=c.sft_lr, batch_size=c.sft_batch_size, seed=0 + s,
                          every=every, hook=lambda k: trace.append((k, review.dashboard(model))))
            elif name == 'rft':
                per_round = N_DEMOS // ROUNDS // len(ch.train)
                expert_iteration(model, ch.train, ch.tok, rounds=ROUNDS, n_samples=per_round, steps=every,
                                 sample_seed=600 + s, sft_seed=0 + s, lr=c.sft_lr, batch_size=c.sft_batch_size,
                                 temperature=c.sample_temperature, env=ch.env.env_id,
                                 evaluate=lambda m: trace.append((every * len(trace), review.dashboard(m))) or {})
            else:
                train_dpo(model, review.pairs, ch.tok, steps=steps, beta=c.dpo_beta, lr=c.dpo_lr, every=every,
                          batch_size=c.sft_batch_size, seed=0 + s,
                          evaluate=lambda m: trace.append((len(trace) * every, review.dashboard(m))) or {})
            x.save(f'stage_{name}', model)
            last = trace[-1][1]
            x.say(f"{STAGES[name]:<30} train {last['train']:.2f} | held-out {last['held']:.2f} | informative "
                  f"{last['informative']:.2f} | entropy {last['entropy']:.3f} | invalid/ep {last['invalid']:.2f} | "
                  f"d_chosen {last['d_chosen']:+.1f} | d_rejected {last['d_rejected']:+.1f}")
            return {'trace': trace}
        return work

    def rl(name):
        def work():
            model = x.model(f'stage_{name}')
            hist = train_rl(model, ch.train, ch.tok, c.rl_cold_steps, lr=c.rl_lr, seed=0 + s, n_tasks=c.rl_tasks,
                            group=c.rl_group, every=c.rl_every, evaluate=ch.evaluate, temperature=c.rl_temperature,
                            entropy_bonus=c.rl_entropy_bonus, env=ch.env.env_id)
            held = ch.pass_rate(model, ch.heldout, c.describe_samples, s)[0]
            train = ch.pass_rate(model, ch.train, c.describe_samples, s)[0]
            x.say(f'{STAGES[name]:<30} then RL: train {train:.2f} | held-out {held:.2f}')
            return {'hist': hist, 'held': held, 'train': train}
        return work

    x.part('demos', demos)
    for name in STAGES:
        x.part(f'stage_{name}', stage(name))
    for name in STAGES:
        x.part(f'rl_{name}', rl(name))
    x.part('verdict', lambda: verdict(x))


def decide(parts) -> dict:
    """From the figures alone: the winner on held-out pass after RL (None when the best two are closer than ``TIE``),
    and from which stage step each metric separated it from the losers."""
    held = {name: parts[f'rl_{name}']['held'] for name in STAGES}
    ranked = sorted(held, key=held.get, reverse=True)
    margin = held[ranked[0]] - held[ranked[1]]
    winner = ranked[0] if margin >= TIE else None
    sep, earliest, first = {}, [], None
    if winner is not None:
        traces = {name: parts[f'stage_{name}']['trace'] for name in STAGES}
        steps = [k for k, _ in traces[winner]][1:]  # step 0 is the weak base, the same for all
        for m in METRICS:
            step, side = separation({n: [row[m] for _, row in tr[1:]] for n, tr in traces.items()}, winner, steps)
            sep[m] = {'step': step, 'side': side}
        found = [m for m in METRICS if sep[m]['step'] is not None]
        first = min((sep[m]['step'] for m in found), default=None)
        earliest = [m for m in found if sep[m]['step'] == first]
    return {'held': held, 'ranked': ranked, 'winner': winner, 'margin': margin, 'separation': sep,
            'earliest': earliest, 'earliest_step': first}


def verdict(x) -> dict:
    """Print (and record) what ``decide`` finds."""
    v = decide(x.parts)
    held, ranked, winner = v['held'], v['ranked'], v['winner']
    x.say('after RL, held-out pass: ' + ', '.join(f'{STAGES[n]} {held[n]:.2f}' for n in ranked) + (
        f' -> {STAGES[winner]} wins by {v["margin"]:.2f}' if winner else
        f' -> no winner: the best two are {v["margin"]:.2f} apart, less than {TIE}'))
    for m, r in v['separation'].items():
        x.say(f"  {m:<12} " + (f"separates it from step {r['step']} ({'higher' if r['side'] > 0 else 'lower'} than both)"
                               if r['step'] is not None else 'never separates it'))
    if winner:
        x.say(f"earliest: {', '.join(v['earliest']) or 'no metric'}"
              + (f" at step {v['earliest_step']}" if v['earliest_step'] is not None else ''))
    return v


def draw(parts, out):
    """Each dashboard metric during the three stages, and the held-out pass after RL."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 4, figsize=(12, 5.2))
    colours = {'sft': '#1f77b4', 'rft': '#ff7f0e', 'dpo': '#2ca02c'}
    for ax, m in zip(axes.flat, ('held', *METRICS)):
        for name in STAGES:
            trace = parts[f'stage_{name}']['trace']
            ax.plot([k for k, _ in trace], [row[m] for _, row in trace], marker='o', ms=3, color=colours[name],
                    label=STAGES[name])
        ax.set_title(m if m != 'held' else 'held-out pass (stage)', fontsize=9)
        ax.tick_params(labelsize=7)
    ax = axes.flat[-1]
    held = decide(parts)['held']
    ax.bar(range(3), [held[n] for n in STAGES], color=[colours[n] for n in STAGES])
    ax.set_xticks(range(3), list(STAGES), fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_title('held-out pass after RL', fontsize=9)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle('Exercise 7: the three stages and their dashboards (x: stage step)', fontsize=10)
    fig.tight_layout()
    path = out / 'fig_ex7_design_review.png'
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _rates(p):
    d = p['demos']
    n, bad = d['n'], []
    for f in FAULTS:
        from ...envs.play import HUMAN_FAULTS
        rate, got = HUMAN_FAULTS[f], d['shares'][f]
        if abs(got - rate) > 4 * math.sqrt(rate * (1 - rate) / n):
            bad.append(f)
    return not bad, ', '.join(f"{f} {d['shares'][f]:.3f}" for f in FAULTS) + (f" (off: {', '.join(bad)})" if bad else '')


def _winner(name):
    def check(p):
        v = decide(p)
        said = ', '.join(f'{k} {h:.2f}' for k, h in v['held'].items())
        if v['winner'] is None:
            raise Undecided(f'no winner: {said}')
        return v['winner'] == name, said
    return check


def _earliest(metric):
    def check(p):
        v = decide(p)
        if v['winner'] is None:
            raise Undecided('no winner to separate')
        if v['earliest_step'] is None:
            raise Undecided('no metric separates the winner from the losers')
        return metric in v['earliest'], f"earliest: {', '.join(v['earliest'])} at step {v['earliest_step']}"
    return check


HEADLINE = 'sft-wins'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('demonstrator-rates', "The demonstrations show the demonstrator's stated fault rates.",
           'each measured share within 4 standard errors of its rate', _rates),
    Answer('sft-wins', 'SFT on the demonstrations wins on held-out pass after RL.', 'the best held-out pass after RL',
           _winner('sft')),
    Answer('informative-earliest', 'The informative-group share separates the winner from the losers earliest.',
           'no other metric separates the winner earlier', _earliest('informative')),
)


def pooled(per_seed: dict, out) -> dict:
    """Over seeds: how often each stage wins, how often each metric is (among) the earliest to separate the winner
    and at which step, and the stages' dashboards at their first reading and at their end (means)."""
    from collections import Counter
    verdicts = {int(s): decide(p) for s, p in per_seed.items()}
    decided = [v for v in verdicts.values() if v['winner'] is not None]
    wins = Counter(v['winner'] for v in verdicts.values())  # None: no winner
    earliest = Counter(m for v in decided for m in v['earliest'])
    steps = {m: sorted(v['separation'][m]['step'] for v in decided if v['separation'][m]['step'] is not None)
             for m in METRICS}
    held = {n: mean(v['held'][n] for v in verdicts.values()) for n in STAGES}

    def at(k, m):  # each stage's metric at its k-th reading (0: the weak base), mean over seeds
        return {n: mean(p[f'stage_{n}']['trace'][k][1][m] for p in per_seed.values()) for n in STAGES}

    n = len(verdicts)
    f = {'wins': {str(k): v for k, v in wins.items()}, 'no_winner': wins[None], 'decided': len(decided),
         'earliest': {m: earliest[m] for m in METRICS}, 'separates': {m: len(steps[m]) for m in METRICS},
         'median_step': {m: steps[m][len(steps[m]) // 2] if steps[m] else None for m in METRICS},
         'mean_held': held, 'held_range': {k: spread(v['held'][k] for v in verdicts.values()) for k in STAGES},
         'first_reading': {m: at(1, m) for m in METRICS}, 'end': {m: at(-1, m) for m in METRICS}, 'n': n}
    lines = ['wins on held-out pass after RL: ' + ', '.join(f'{STAGES[k]} {wins[k]}/{n}' for k in STAGES)
             + f', no winner (closer than {TIE}) {wins[None]}/{n} (mean held-out pass: '
             + ', '.join(f'{k} {held[k]:.2f}' for k in STAGES) + ')',
             f'earliest to separate the winner, of {len(decided)} seeds with one: '
             + ', '.join(f'{m} {earliest[m]}' for m in METRICS),
             'separates it at all: ' + ', '.join(f"{m} {f['separates'][m]}" + (
                 f" (median step {f['median_step'][m]})" if steps[m] else '') for m in METRICS)]
    return rounded({**f, 'lines': lines})
