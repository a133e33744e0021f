"""Exercise 2: a weak base from random play only (sections 15.2 and 15.3).

The chapter's weak base imitates blind and random play, four episodes of each per train task (15.2). Here the same
SFT (same steps, learning rate, batch, seed) imitates random play alone, eight episodes per task, so the base sees
as many episodes. Random play reads first about a third of the time and carries the public-check exploit; blind play
never reads. Then the chapter's expert iteration (15.3: same rounds, samples, steps and seeds) runs from it.

What the base *can solve* is what expert iteration can start from: the train tasks with at least one success among
the first round's samples (15.3's "tasks solved" in round 0; the chapter's "tasks never solved by the weak base" are
the others). Compared with the chapter's base: that set, its size, the task groups it misses, and where expert
iteration ends (its last train pass against the share of tasks it ever solved: the plateau of filtered behaviour
cloning; its held-out pass).
"""
from __future__ import annotations

import copy

import torch

from ...recipes.diagnostics import describe
from ...recipes.rejection import expert_iteration
from ...recipes.sft import sft_train
from ...rollouts.engine import scripted_rollout
from .answers import Answer
from .pooling import mean, rounded

NEEDS = ('15.2', '15.3')
CHECKPOINTS = ('weak',)
EPISODES_PER_TASK = 8
"""Random episodes per train task: the chapter's base sees 4 blind and 4 random ones."""


def groups_missed(ch, solved) -> list:
    """The task groups of which no train task is in ``solved``."""
    return [g for g in ch.groups if not any(t.name in solved for t in ch.train if t.group == g)]


def run(x) -> None:
    ch, s, c = x.ch, x.seed, x.ch.cfg

    def base():
        play = [scripted_rollout(ch.env.player('random', seed=k + s), ch.env.make(), t, ch.tok)
                for k in range(EPISODES_PER_TASK) for t in ch.train]
        torch.manual_seed(0 + s)
        model = ch._new_model()
        sft_train(model, play, ch.tok, steps=c.weak_steps, lr=c.sft_lr, batch_size=c.sft_batch_size, seed=0 + s)
        x.save('random_base', model)
        d = describe(model, ch.train, ch.heldout, ch.tok, n=c.describe_samples, seed=s, env=ch.env.env_id)
        chapter = x.chapter_results('15.2')['weak']
        x.say(f"random-only base: train {d['train']:.3f} | held-out {d['held']:.3f} | invalid/ep {d['invalid']:.2f} | "
              f"reads {d['reads']:.2f} | action entropy {d['entropy']:.3f}")
        x.say(f"chapter's base:   train {chapter['train']:.3f} | held-out {chapter['held']:.3f} | invalid/ep "
              f"{chapter['invalid']:.2f} | reads {chapter['reads']:.2f} | action entropy {chapter['entropy']:.3f}")
        return {'describe': d, 'chapter': chapter, 'episodes': len(play)}

    def iterate():
        model = x.model('random_base')
        hist = [(0, *ch.evaluate(model))]

        def after_round(m):
            hist.append((c.rft_steps * len(hist), *ch.evaluate(m)))
            return {'train': hist[-1][1], 'held': hist[-1][2]}

        rounds = [{'rate': ch.round_pass(r), 'kept': len(r['kept']), 'solved': r['solved'],
                   'first_read': sum(bool(t.info['actions']) and ch.env.read_call()(t.info['actions'][0])
                                     for t in r['kept']) / max(len(r['kept']), 1) if ch.env.read_call() else None}
                  for r in expert_iteration(copy.deepcopy(model), ch.train, ch.tok, rounds=c.rft_rounds,
                                            n_samples=c.rft_samples, steps=c.rft_steps, sample_seed=100 + s, sft_seed=0 + s,
                                            lr=c.sft_lr, batch_size=c.sft_batch_size, temperature=c.sample_temperature,
                                            evaluate=after_round, env=ch.env.env_id)]
        chapter = x.chapter_results('15.3')
        mine, theirs = set(rounds[0]['solved']), set(chapter['rounds'][0]['solved'])
        ever_mine = set().union(*(r['solved'] for r in rounds))
        ever_theirs = set().union(*(r['solved'] for r in chapter['rounds']))
        n = len(ch.train)
        out = {'rounds': rounds, 'hist': hist, 'solvable': sorted(mine), 'chapter_solvable': sorted(theirs),
               'ever': sorted(ever_mine), 'chapter_ever': sorted(ever_theirs),
               'missed_groups': groups_missed(ch, ever_mine), 'chapter_missed_groups': groups_missed(ch, ever_theirs),
               'chapter_hist': chapter['hist_rft']}
        x.say(f'tasks the base solves in round 0: random-only {len(mine)}/{n}, chapter {len(theirs)}/{n}; both '
              f'{len(mine & theirs)}, only random-only {sorted(mine - theirs)}, only chapter {sorted(theirs - mine)}')
        for k, r in enumerate(rounds):
            x.say(f"round {k}: sample pass {r['rate']:.3f}, kept {r['kept']:>3}, tasks solved {len(r['solved']):>2}/{n}"
                  f' -> train {hist[k + 1][1]:.2f}, held-out {hist[k + 1][2]:.2f}')
        x.say(f"expert iteration ends at train {hist[-1][1]:.2f} / held-out {hist[-1][2]:.2f}, having solved "
              f"{len(ever_mine)}/{n} tasks in some round (chapter: {chapter['hist_rft'][-1][1]:.2f} / "
              f"{chapter['hist_rft'][-1][2]:.2f}, {len(ever_theirs)}/{n}); groups never solved: "
              f"{out['missed_groups'] or 'none'} (chapter: {out['chapter_missed_groups'] or 'none'})")
        return out

    x.part('base', base)
    x.part('iterate', iterate)


def _solves_fewer(p):
    r = p['iterate']
    mine, theirs = set(r['solvable']), set(r['chapter_solvable'])
    return len(mine) <= len(theirs), (f'random-only {len(mine)}, chapter {len(theirs)}, both {len(mine & theirs)} '
                                      f'(in one set only: {len(mine ^ theirs)})')


def _uncovered(p):
    r = p['iterate']
    return (bool(r['chapter_missed_groups']) and set(r['chapter_missed_groups']) <= set(r['missed_groups']),
            f"never solved: random-only {r['missed_groups'] or 'none'}, chapter {r['chapter_missed_groups'] or 'none'}")


def _plateau(p):
    r = p['iterate']
    n = p['base']['episodes'] // EPISODES_PER_TASK  # the train tasks
    final = r['hist'][-1][1]
    return final <= len(r['ever']) / n, f"train {final:.3f} vs {len(r['ever'])} of {n} tasks ever solved"


def _reads_more(p):
    mine, theirs = p['base']['describe']['reads'], p['base']['chapter']['reads']
    return mine > theirs, f"share of train episodes that read: random-only base {mine:.2f}, chapter's {theirs:.2f}"


HEADLINE = 'plateau'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('reads-more', "The random-only base reads more often than the chapter's: blind play, which it no longer "
           'imitates, never reads.', "share of its train episodes with a read > the chapter's base's", _reads_more),
    Answer('solves-fewer', "The base can solve no more train tasks than the chapter's, and a different set: random play "
           'spends part of its guesses on the exploit, which the verifier fails, where blind play only guesses fixes.',
           "tasks with a success among round 0's samples <= the chapter's base's", _solves_fewer),
    Answer('uncovered-stays', 'What neither kind of play covers stays unsolved: the groups expert iteration never solves '
           "from the chapter's base are never solved from the random-only base either.",
           "every group with no solved train task in the chapter's 15.3 has none here", _uncovered),
    Answer('plateau', 'Expert iteration from it still converges to filtered behaviour cloning of what it can solve: it '
           'ends at or below the share of train tasks it ever solved.', 'last train pass <= tasks solved in some round / '
           'train tasks', _plateau),
)


def pooled(per_seed: dict, out) -> dict:
    """Means over the seeds: how often each base reads, how many tasks it can solve, where expert iteration ends."""
    ps = list(per_seed.values())
    f = {'reads': [mean(p['base']['describe']['reads'] for p in ps), mean(p['base']['chapter']['reads'] for p in ps)],
         'solvable': [mean(len(p['iterate']['solvable']) for p in ps), mean(len(p['iterate']['chapter_solvable'])
                                                                          for p in ps)],
         'ever': [mean(len(p['iterate']['ever']) for p in ps), mean(len(p['iterate']['chapter_ever']) for p in ps)],
         'final_train': [mean(p['iterate']['hist'][-1][1] for p in ps), mean(p['iterate']['chapter_hist'][-1][1]
                                                                             for p in ps)],
         'final_held': [mean(p['iterate']['hist'][-1][2] for p in ps), mean(p['iterate']['chapter_hist'][-1][2]
                                                                            for p in ps)],
         'held_higher': sum(p['iterate']['hist'][-1][2] > p['iterate']['chapter_hist'][-1][2] for p in ps), 'n': len(ps)}
    lines = [f"means over {len(ps)} seeds, random-only base vs the chapter's: reads {f['reads'][0]:.2f} vs "
             f"{f['reads'][1]:.2f}; tasks it can solve {f['solvable'][0]:.1f} vs {f['solvable'][1]:.1f}; expert iteration "
             f"ends at train {f['final_train'][0]:.2f} vs {f['final_train'][1]:.2f}, held-out {f['final_held'][0]:.2f} vs "
             f"{f['final_held'][1]:.2f} (higher at {f['held_higher']} of {len(ps)} seeds), tasks ever solved "
             f"{f['ever'][0]:.1f} vs {f['ever'][1]:.1f}"]
    return rounded({**f, 'lines': lines})
