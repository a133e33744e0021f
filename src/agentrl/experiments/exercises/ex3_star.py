"""Exercise 3: STaR with rationalization (section 15.3; ``recipes.star``).

Expert iteration from the weak base never solves a task of some group (BugFix: ``init``, whose fix no unskilled
player ever writes; 15.3's ``uncovered-stays``). STaR's rationalization rolls the current model out again on
every task with no success in a round, forcing the oracle's answer (the arguments of its answer call:
``edit fix_init``) whenever the model writes that call's verb, and keeps the successes. Two runs from the
chapter's weak base, at the chapter's expert-iteration budget (rounds, samples, steps, seeds):

- **forced tokens masked** (the exercise's own recipe): the forced tokens are in the episode but out of the loss;
- **forced tokens trained**: they are trained like the model's own.

Each is compared with the chapter's expert iteration (15.3's ``rft`` checkpoint), group by group, on the same
evaluation. Whether the result is still filtered behaviour cloning is decided by what the loss trains: every kept
episode passed the verifier and weighs +1 (no negative signal) in both runs; with the forced tokens masked every
trained token is one the model sampled itself (filtered cloning of its own, answer-conditioned, behaviour), while
with them trained a share of the trained tokens is the oracle's answer: cloning of the oracle inside the model's
episodes. ``forced share`` below is that share.
"""
from __future__ import annotations

import copy

from ...recipes.evaluation import group_pass
from ...recipes.star import star_iteration
from .answers import Answer, Undecided
from .pooling import mean, rounded, spread

NEEDS = ('15.2', '15.3')
CHECKPOINTS = ('weak', 'rft')
LEARNED = 0.5
"""An uncovered group counts as learned when the train pass of its tasks reaches this."""
UNLEARNED = 0.1
"""... and as still unlearned at or below this."""
VARIANTS = (('masked', True, 'forced tokens masked'), ('trained', False, 'forced tokens trained'))


def forced_share(kept) -> tuple:
    """(forced tokens the loss trains, action tokens the loss trains) over some kept episodes."""
    forced = trained = 0
    for t in kept:
        mask = t.action_mask
        trained += int(mask.sum())
        forced += sum(int(mask[p - 1]) for p in t.info.get('forced_positions', []))
    return forced, trained


def uncovered_groups(ch, rounds) -> list:
    """The groups of which the chapter's expert iteration solved no train task in any round."""
    solved = set().union(*(r['solved'] for r in rounds))
    return [g for g in ch.groups if not any(t.name in solved for t in ch.train if t.group == g)]


def run(x) -> None:
    ch, s, c = x.ch, x.seed, x.ch.cfg
    env = ch.env.env_id

    def per_group(model):
        return group_pass(model, ch.train, ch.tok, c.eval_samples, seed=s, env=env)

    def chapter():
        rft = per_group(x.chapter_model('rft'))
        uncovered = uncovered_groups(ch, x.chapter_results('15.3')['rounds'])
        x.say(f"expert iteration (15.3), train pass per group: {_groups(rft)}; never solved: {uncovered or 'none'}")
        return {'groups': rft, 'uncovered': uncovered}

    def star(mask):
        def work():
            model = copy.deepcopy(x.chapter_model('weak'))
            hist = star_iteration(model, ch.train, ch.tok, rounds=c.rft_rounds, n_samples=c.rft_samples, steps=c.rft_steps,
                                  seed=100 + s, mask_forced=mask, lr=c.sft_lr, batch_size=c.sft_batch_size, env=env)
            forced, trained = map(sum, zip(*(forced_share(h['kept']) for h in hist)))
            train, held = ch.evaluate(model)
            out = {'groups': per_group(model), 'train': train, 'held': held,
                   'rationalized': [h['n_rationalized'] for h in hist], 'rationalized_tasks': [h['rationalized'] for h in hist],
                   'kept': [h['n_kept'] for h in hist], 'forced_tokens': forced, 'trained_tokens': trained}
            label = dict((m, lab) for _, m, lab in VARIANTS)[mask]
            x.say(f"STaR, {label}: rationalized episodes per round {out['rationalized']}; forced share of the trained "
                  f"tokens {forced}/{trained}; train pass per group: {_groups(out['groups'])}; train {out['train']:.2f} | "
                  f"held-out {out['held']:.2f}")
            return out
        return work

    x.part('chapter', chapter)
    for name, mask, _ in VARIANTS:
        x.part(name, star(mask))


def _groups(d) -> str:
    return ' '.join(f'{g} {v:.2f}' for g, v in d.items())


def _uncovered_pass(p, variant) -> tuple:
    groups = p['chapter']['uncovered']
    if not groups:
        raise Undecided('expert iteration solved a task of every group in this run')
    return [p[variant]['groups'][g] for g in groups], groups


def _masked_unlearned(p):
    values, groups = _uncovered_pass(p, 'masked')
    return max(values) <= UNLEARNED, f"{', '.join(groups)}: train pass {', '.join(f'{v:.2f}' for v in values)} masked"


def _trained_learned(p):
    values, groups = _uncovered_pass(p, 'trained')
    return min(values) >= LEARNED, f"{', '.join(groups)}: train pass {', '.join(f'{v:.2f}' for v in values)} trained"


def _still_cloning(p):
    m, t = p['masked'], p['trained']
    return (m['forced_tokens'] == 0 and t['forced_tokens'] > 0,
            f"forced share of the trained tokens: masked {m['forced_tokens']}/{m['trained_tokens']}, trained "
            f"{t['forced_tokens']}/{t['trained_tokens']} ({t['forced_tokens'] / max(t['trained_tokens'], 1):.1%})")


HEADLINE = 'masked-stays-unlearned'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('masked-stays-unlearned', 'With the forced tokens masked, the group expert iteration never covers stays '
           'unlearned: the answer is the one token the model is never taught.',
           f'train pass of every uncovered group <= {UNLEARNED} (STaR, masked)', _masked_unlearned),
    Answer('trained-becomes-learnable', 'With the forced tokens trained, it becomes learnable.',
           f'train pass of every uncovered group >= {LEARNED} (STaR, trained)', _trained_learned),
    Answer('still-filtered-cloning', 'Masked, the result is still filtered behaviour cloning: every trained token is '
           "the model's own, in episodes the verifier passed. Trained, part of what it clones is the oracle's answer: "
           'what decides it is whether the forced tokens enter the loss.',
           'forced tokens in the loss: none masked, some trained', _still_cloning),
)


def pooled(per_seed: dict, out) -> dict:
    """Means over the seeds: the uncovered groups' train pass, the forced share, train and held-out pass of each run."""
    ps = [p for p in per_seed.values() if p['chapter']['uncovered']]

    def uncovered(p, run):
        return mean(p[run]['groups'][g] for g in p['chapter']['uncovered'])

    f = {'uncovered_pass': {run: mean(uncovered(p, run) for p in ps) for run in ('masked', 'trained')},
         'uncovered_rft': mean(uncovered({**p, 'rft': p['chapter']}, 'rft') for p in ps),
         'forced_share': spread(p['trained']['forced_tokens'] / p['trained']['trained_tokens'] for p in ps),
         'train': {run: mean(p[run]['train'] for p in ps) for run in ('masked', 'trained')},
         'held': {run: mean(p[run]['held'] for p in ps) for run in ('masked', 'trained')}, 'n': len(ps),
         'uncovered_groups': sorted({g for p in ps for g in p['chapter']['uncovered']})}
    lines = [f"{len(ps)} seeds with a group expert iteration never covers ({', '.join(f['uncovered_groups'])}): its train "
             f"pass {f['uncovered_rft']:.2f} after RFT, {f['uncovered_pass']['masked']:.2f} after STaR masked, "
             f"{f['uncovered_pass']['trained']:.2f} trained; forced share of the trained tokens "
             f"{f['forced_share'][0]:.1%} to {f['forced_share'][1]:.1%}; held-out pass masked {f['held']['masked']:.2f}, "
             f"trained {f['held']['trained']:.2f}"]
    return rounded({**f, 'lines': lines})
