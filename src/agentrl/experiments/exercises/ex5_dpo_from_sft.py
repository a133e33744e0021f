"""Exercise 5: DPO pairs from the step-20 SFT checkpoint (sections 15.4 and 15.6).

Section 15.4 builds its pairs from the weak base's own samples and trains DPO from it: the chosen episodes are the
weak base's rare successes, mostly lucky guesses that never read, and offline DPO pushes both sides down until the
format breaks. Here the same recipe (``rft_samples`` episodes per task sampled at ``sample_temperature`` with 15.4's
seed, ``make_pairs`` at the run's margin, ``dpo_steps`` of DPO at the chapter's beta and learning rate) starts from
the step-20 oracle-SFT checkpoint (15.2's ``sft_step20``: its pairs, its reference, its policy).

The difference is explained by what the chosen episodes contain, side by side for both pair sets: the share that
read first (the skill: read, then act on what was read), the task groups they cover, and how the chosen and
rejected episodes of a pair differ (the share of pairs whose chosen reads first and whose rejected does not).
"""
from __future__ import annotations

import copy

from ...recipes.diagnostics import reads_first
from ...recipes.dpo import make_pairs, train_dpo
from .answers import Answer, Undecided
from .pooling import mean, rounded

NEEDS = ('15.4',)
CHECKPOINTS = ('weak', 'sft_step20')


def pair_contents(pairs, read, groups) -> dict:
    """What a pair set holds: pairs, tasks, the chosen episodes' read-first share and groups, the pairs whose chosen
    reads first and rejected does not."""
    chosen = [c for c, _ in pairs]
    first_read = lambda t: bool(t.info['actions']) and read(t.info['actions'][0])  # noqa: E731
    covered = sorted({c.info.get('group') for c in chosen if c.info.get('group') is not None},
                     key=lambda g: groups.index(g) if g in groups else len(groups))
    return {'pairs': len(pairs), 'tasks': len({c.info['task'] for c in chosen}),
            'chosen_read_first': sum(map(first_read, chosen)) / len(chosen) if chosen else None,
            'rejected_read_first': sum(first_read(r) for _, r in pairs) / len(pairs) if pairs else None,
            'read_vs_not': sum(first_read(c) and not first_read(r) for c, r in pairs) / len(pairs) if pairs else None,
            'chosen_invalid': sum(c.info['n_invalid'] for c in chosen) / len(chosen) if chosen else None,
            'rejected_invalid': sum(r.info['n_invalid'] for _, r in pairs) / len(pairs) if pairs else None,
            'groups': covered}


def run(x) -> None:
    ch, s, c = x.ch, x.seed, x.ch.cfg
    read = ch.env.read_call() or (lambda call: False)

    def evaluate(model):
        rate_train, trajs = ch.pass_rate(model, ch.train, c.eval_samples, s)
        return {'train': rate_train, 'held': ch.pass_rate(model, ch.heldout, c.eval_samples, s)[0],
                'invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs)}

    def weak_pairs():
        out = pair_contents(ch._pairs(), read, ch.groups)  # 15.4's own pairs (the same sample and seed)
        x.say(f"15.4's pairs (weak base): {_contents(out)}")
        return out

    def sft_pairs():
        start = x.chapter_model('sft_step20')
        _, sample = ch.pass_rate(start, ch.train, c.rft_samples, 300 + s, temperature=c.sample_temperature)
        pairs = make_pairs(sample, ch.train, seed=0 + s, margin=c.dpo_margin)
        out = pair_contents(pairs, read, ch.groups)
        out['start'] = evaluate(start)
        out['start_reads_first'] = reads_first(sample, env=ch.env.env_id)
        x.say(f'step-20 pairs (oracle SFT step {c.cold_start_step}): {_contents(out)}')
        if pairs:
            policy = copy.deepcopy(start)
            out['log'] = train_dpo(policy, pairs, ch.tok, steps=c.dpo_steps, beta=c.dpo_beta, lr=c.dpo_lr,
                                   every=c.dpo_every, evaluate=evaluate)
        else:
            out['log'] = []
        return out

    x.part('weak_pairs', weak_pairs)
    p = x.part('sft_pairs', sft_pairs)

    def compare():
        chapter = x.chapter_results('15.4')['log']
        mine = p['log']
        x.say(f"{'DPO from':<22}{'invalid/ep':>11}{'held':>7}{'train':>7}{'d_chosen':>10}{'d_rejected':>12}")
        for name, row, start in (('weak base (15.4)', chapter[-1] if chapter else None, None),
                                 (f'SFT step {c.cold_start_step}', mine[-1] if mine else None, p['start'])):
            if row is None:
                x.say(f'{name:<22} no pairs')
                continue
            x.say(f"{name:<22}{row['invalid']:>11.2f}{row['held']:>7.2f}{row['train']:>7.2f}{row['d_chosen']:>+10.2f}"
                  f"{row['d_rejected']:>+12.2f}" + (f"   (its start: invalid {start['invalid']:.2f}, held "
                                                   f"{start['held']:.2f}, train {start['train']:.2f})" if start else ''))
        return {'chapter_last': chapter[-1] if chapter else None, 'sft_last': mine[-1] if mine else None}

    x.part('compare', compare)


def _contents(r) -> str:
    if not r['pairs']:
        return 'no pairs'
    return (f"{r['pairs']} pairs over {r['tasks']} tasks; chosen read first {r['chosen_read_first']:.0%} (rejected "
            f"{r['rejected_read_first']:.0%}), invalid calls chosen {r['chosen_invalid']:.2f} / rejected "
            f"{r['rejected_invalid']:.2f}; chosen groups {', '.join(r['groups']) or '-'}")


def _last(p):
    r = p['compare']
    if r['chapter_last'] is None or r['sft_last'] is None:
        raise Undecided('a pair set is empty')
    return r['chapter_last'], r['sft_last']


def _reads(p):
    w, s = p['weak_pairs'], p['sft_pairs']
    if not w['pairs'] or not s['pairs']:
        raise Undecided('a pair set is empty')
    return (s['chosen_read_first'] >= w['chosen_read_first'] + 0.3,
            f"chosen read first: {s['chosen_read_first']:.0%} vs 15.4's {w['chosen_read_first']:.0%}; groups "
            f"{len(s['groups'])} vs {len(w['groups'])}")


def _rejected_read(p):
    s = p['sft_pairs']
    if not s['pairs']:
        raise Undecided('no pair from the step-20 checkpoint')
    return (s['rejected_read_first'] >= 0.8,
            f"step-20 pairs: chosen read first {s['chosen_read_first']:.0%}, rejected {s['rejected_read_first']:.0%}")


def _format_breaks(p):
    chapter, last = _last(p)
    start = p['sft_pairs']['start']
    return (last['invalid'] >= start['invalid'] + 1.0,
            f"invalid calls per episode {start['invalid']:.2f} at the start -> {last['invalid']:.2f} (15.4: "
            f"{chapter['invalid']:.2f})")


def _held_falls(p):
    chapter, last = _last(p)
    start = p['sft_pairs']['start']
    return (last['held'] < start['held'],
            f"held-out pass {start['held']:.2f} at the start -> {last['held']:.2f} (15.4: {chapter['held']:.2f})")


def _chosen_down(p):
    _, last = _last(p)
    return last['d_chosen'] < 0, f"d_chosen {last['d_chosen']:+.2f}, d_rejected {last['d_rejected']:+.2f} at the last step"


HEADLINE = 'format-breaks-anyway'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('chosen-read-first', "The chosen episodes differ from 15.4's: from the step-20 checkpoint they read before "
           "they act and cover every group, where 15.4's are mostly lucky guesses that never read.",
           "share of chosen episodes that read first >= 15.4's + 0.3", _reads),
    Answer('rejected-read-first-too', 'So do the rejected ones: a pair differs in the answer, not in the way of working.',
           'share of rejected episodes that read first >= 0.8', _rejected_read),
    Answer('format-breaks-anyway', 'Offline DPO still breaks the format, from a checkpoint that had it.',
           "invalid calls per episode at the last step >= the start's + 1", _format_breaks),
    Answer('held-out-falls', 'And it loses held-out pass the checkpoint had: good chosen episodes do not make offline '
           'DPO safe.', "held-out pass at the last step < the step-20 checkpoint's", _held_falls),
    Answer('chosen-pushed-down', 'The mechanism: pushing the rejected down pushes the chosen down too, whose tokens '
           'they share.', 'd_chosen < 0 at the last step', _chosen_down),
)


def pooled(per_seed: dict, out) -> dict:
    """Means over the seeds: both pair sets' contents, and where each DPO run ends against the start."""
    ps = [p for p in per_seed.values() if p['compare']['chapter_last'] and p['compare']['sft_last']]
    f = {'pairs': [mean(p['weak_pairs']['pairs'] for p in ps), mean(p['sft_pairs']['pairs'] for p in ps)],
         'chosen_read_first': [mean(p['weak_pairs']['chosen_read_first'] for p in ps),
                               mean(p['sft_pairs']['chosen_read_first'] for p in ps)],
         'groups': [mean(len(p['weak_pairs']['groups']) for p in ps), mean(len(p['sft_pairs']['groups']) for p in ps)],
         'invalid': [mean(p['compare']['chapter_last']['invalid'] for p in ps),
                     mean(p['compare']['sft_last']['invalid'] for p in ps)],
         'held': [mean(p['compare']['chapter_last']['held'] for p in ps), mean(p['compare']['sft_last']['held'] for p in ps)],
         'start': {k: mean(p['sft_pairs']['start'][k] for p in ps) for k in ('invalid', 'held', 'train')}, 'n': len(ps)}
    lines = [f"means over {len(ps)} seeds, 15.4's pairs vs the step-20 pairs: {f['pairs'][0]:.0f} vs {f['pairs'][1]:.0f} "
             f"pairs, chosen read first {f['chosen_read_first'][0]:.0%} vs {f['chosen_read_first'][1]:.0%}, groups "
             f"{f['groups'][0]:.1f} vs {f['groups'][1]:.1f}; at the last step invalid calls {f['invalid'][0]:.2f} vs "
             f"{f['invalid'][1]:.2f} (the step-20 start: {f['start']['invalid']:.2f}), held-out {f['held'][0]:.2f} vs "
             f"{f['held'][1]:.2f} (start {f['start']['held']:.2f})"]
    return rounded({**f, 'lines': lines})
