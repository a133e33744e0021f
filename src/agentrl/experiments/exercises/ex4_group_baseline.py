"""Exercise 4: RFT with a group baseline (section 15.3; ``recipes.rft_baseline``).

**The identity.** In a group of G episodes of one task with mean reward ``R`` (0/1 rewards), the baseline policy
gradient weighs episode i by ``R_i - R``: successes ``1 - R``, failures ``-R``. Divided by ``1 - R``, successes weigh
1 (RFT's weight) and failures ``-R / (1 - R)``: the weighted SFT loss with those weights has exactly the gradient of
the baseline policy-gradient loss times ``1 / (1 - R)`` (same token normalizer). The exercise checks it group by
group on expert iteration's first sample, and over the whole sample, where each group has its own scale (and an
all-pass group keeps RFT's weight 1), measures how close the two directions are (cosine).

**The plateau.** The chapter's expert iteration (15.3) against the same rounds, samples, steps and seeds with the
failures trained too. A group whose episodes all fail weighs nothing either way, so the baseline adds no signal on
the tasks the base never solves: it can change how fast RFT climbs, not what it can reach.

**The collapse at lr 3e-3.** Trained as written (``clip=None``), the failures' term ``+w log pi`` has no lower
bound: over the round's 15 SFT steps the loss keeps falling by pushing the failures' log-probs down, and the tokens
they share with successes go down with them. The run records, on round 0's sample, the action log-prob per token of
its successes and failures before and after round 0, and the invalid calls after it. The fix is a trust region
(``clip=0.2``): a failure stops being pushed once its probability has fallen to 0.8 of the sampling policy's.
"""
from __future__ import annotations

import copy
import warnings

import torch
import torch.nn.functional as F

from ...policies.scoring import sequence_log_probs
from ...recipes.outcomes import NoSignalWarning, is_success
from ...recipes.rft_baseline import group_baseline_weights, rft_baseline_iteration
from ...rendering.trajectory import collate
from .answers import Answer, Undecided
from .pooling import mean, rounded, spread
from .ex1_aggregation import flat_grad

NEEDS = ('15.2', '15.3')
CHECKPOINTS = ('weak',)
CLIP = 0.2
"""The trust region of the fixed run: a failure is pushed down until its probability is 0.8 of the sampler's."""
TOLERANCE = 1e-6


def group_identity(model, trajs, success, tok) -> dict:
    """Per group with a success and a failure: the gap between the weighted loss's gradient and the baseline policy
    gradient's times ``1 / (1 - R)``; over the whole sample, the cosine of the two gradients."""
    tasks, group = success.shape
    weights = group_baseline_weights(success)  # [tasks, G]
    gaps, rel = [], []

    def losses(idx):
        batch = collate([trajs[i] for i in idx], tok.pad_id)
        logp = sequence_log_probs(model, batch['ids'], batch['lengths'])  # [b, T-1]
        mask = batch['action_mask']
        per_episode = (logp * mask).sum(1)  # [b]
        r = success.view(-1)[idx]  # [b]
        centred = r - torch.stack([success[i // group].mean() for i in idx])  # [b], R_i - R of its group
        w = weights.view(-1)[idx]  # [b]
        return -(w * per_episode).sum() / mask.sum(), -(centred * per_episode).sum() / mask.sum()

    for k in range(tasks):
        r_bar = success[k].mean().item()
        if r_bar in (0.0, 1.0):
            continue
        weighted, baseline = losses(list(range(k * group, (k + 1) * group)))
        g_w, g_b = flat_grad(weighted, model), flat_grad(baseline, model)
        gap = (g_w - g_b / (1 - r_bar)).abs().max().item()
        gaps.append(gap)
        rel.append(gap / g_w.abs().max().item())
    everything = [i for i in range(tasks * group) if weights.view(-1)[i] != 0]  # the recipe's pool
    weighted, _ = losses(everything)
    _, baseline = losses(list(range(tasks * group)))
    cosine = F.cosine_similarity(flat_grad(weighted, model), flat_grad(baseline, model), 0).item()
    return {'groups': len(gaps), 'gap': max(gaps, default=None), 'relative_gap': max(rel, default=None),
            'cosine': cosine, 'min_weight': weights.min().item()}


def action_logp(model, trajs, tok) -> float:
    """Mean action log-prob per action token of some episodes under ``model``."""
    if not trajs:
        return float('nan')
    batch = collate(trajs, tok.pad_id)
    with torch.no_grad():
        logp = sequence_log_probs(model, batch['ids'], batch['lengths'])  # [B, T-1]
    return ((logp * batch['action_mask']).sum() / batch['action_mask'].sum()).item()


def run(x) -> None:
    ch, s, c = x.ch, x.seed, x.ch.cfg
    weak = x.chapter_model('weak')
    _, sample = ch.pass_rate(weak, ch.train, c.rft_samples, 100 + s)  # rft_baseline_iteration's round 0 sample
    success = torch.tensor([float(is_success(t)) for t in sample]).view(len(ch.train), c.rft_samples)  # [tasks, G]
    wins, fails = [t for t in sample if is_success(t)], [t for t in sample if not is_success(t)]

    def identity():
        out = group_identity(weak, sample, success, ch.tok)
        if out['groups']:
            x.say(f"round 0 sample: {out['groups']} groups with a success and a failure; weighted gradient = baseline "
                  f"policy gradient / (1 - R) in each, max gap {out['gap']:.1e}; over the whole sample the two "
                  f"directions have cosine {out['cosine']:.3f}; the smallest failure weight {out['min_weight']:.2f}")
        return out

    def iterate(clip):
        def work():
            model = copy.deepcopy(weak)
            before = {'wins': action_logp(weak, wins, ch.tok), 'fails': action_logp(weak, fails, ch.tok)}
            hist, seen = [(0, *ch.evaluate(weak), invalid(weak))], {}

            def after_round(m):
                if not seen:  # round 0: what its SFT did to its own sample
                    seen.update(wins=action_logp(m, wins, ch.tok), fails=action_logp(m, fails, ch.tok))
                hist.append((c.rft_steps * len(hist), *ch.evaluate(m), invalid(m)))
                return {'train': hist[-1][1], 'held': hist[-1][2]}

            with warnings.catch_warnings():  # a round that keeps nothing is reported below, by its figures
                warnings.simplefilter('ignore', NoSignalWarning)
                rows = rft_baseline_iteration(model, ch.train, ch.tok, rounds=c.rft_rounds, n_samples=c.rft_samples,
                                              steps=c.rft_steps, sample_seed=100 + s, sft_seed=0 + s, lr=c.sft_lr,
                                              batch_size=c.sft_batch_size, evaluate=after_round, env=ch.env.env_id,
                                              clip=clip)
            out = {'hist': hist, 'solved': [r['solved'] for r in rows], 'n_neg': [r['n_neg'] for r in rows],
                   'n_pos': [r['n_pos'] for r in rows],
                   'round1_logp': {'before': before, 'after': seen}}
            name = 'no clip' if clip is None else f'clip {clip:g}'
            x.say(f"RFT + group baseline ({name}, lr {c.sft_lr:g}): " + ' '.join(
                f'{k}:{a:.2f}/{b:.2f}' for k, a, b, _ in hist) + f" (train/held); invalid calls per episode "
                f"{hist[1][3]:.2f} after round 0, {hist[-1][3]:.2f} at the end; successes kept per round {out['n_pos']}")
            x.say(f"  round 0's own sample, action log-prob per token before -> after its SFT: successes "
                  f"{before['wins']:.2f} -> {seen['wins']:.2f}, failures {before['fails']:.2f} -> {seen['fails']:.2f}")
            return out
        return work

    def invalid(model):
        _, trajs = ch.pass_rate(model, ch.train, c.eval_samples, s)
        return sum(t.info['n_invalid'] for t in trajs) / len(trajs)

    x.part('identity', identity)
    x.part('no_clip', iterate(None))
    x.part('clip', iterate(CLIP))

    def compare():
        rft = x.chapter_results('15.3')
        ever = set().union(*(r['solved'] for r in rft['rounds']))
        clipped = x.parts['clip']
        ever_b = set().union(*map(set, clipped['solved']))
        out = {'rft_hist': rft['hist_rft'], 'rft_ever': sorted(ever), 'baseline_ever': sorted(ever_b),
               'n_train': len(ch.train)}
        x.say(f"RFT (15.3) ends at train {rft['hist_rft'][-1][1]:.2f}, {len(ever)} tasks ever solved; with the baseline "
              f"(clip {CLIP:g}) {clipped['hist'][-1][1]:.2f}, {len(ever_b)}; tasks only the baseline solved "
              f'{sorted(ever_b - ever) or "none"}')
        return out

    x.part('compare', compare)


def _identity(p):
    r = p['identity']
    if not r['groups']:
        raise Undecided('no group with both a success and a failure')
    return r['gap'] <= TOLERANCE, f"{r['groups']} groups, max gap {r['gap']:.1e}; whole-sample cosine {r['cosine']:.3f}"


def _collapse(p):
    h = p['no_clip']['hist']
    low, worst = min(row[1] for row in h[1:]), max(row[3] for row in h[1:])
    return (low <= 0.05 and worst >= h[0][3] + 0.5,
            f"train pass {h[0][1]:.2f} -> as low as {low:.2f}; invalid calls {h[0][3]:.2f} -> up to {worst:.2f} per "
            f'episode; after round 0: train {h[1][1]:.2f}, invalid {h[1][3]:.2f}')


def _drags(p):
    r = p['no_clip']['round1_logp']
    b, a = r['before'], r['after']
    return (a['fails'] < b['fails'] and a['wins'] < b['wins'],
            f"per action token: failures {b['fails']:.2f} -> {a['fails']:.2f}, successes {b['wins']:.2f} -> {a['wins']:.2f}")


def _clip_learns(p):
    h = p['clip']['hist']
    return h[-1][1] >= h[0][1] + 0.25, f'train {h[0][1]:.2f} -> {h[-1][1]:.2f} with the trust region'


def _clip_format(p):
    h = p['clip']['hist']
    return h[-1][3] <= h[0][3] + 0.5, f'invalid calls per episode {h[0][3]:.2f} -> {h[-1][3]:.2f} at the end'


def _plateau(p):
    r, h = p['compare'], p['clip']['hist']
    rft = r['rft_hist'][-1][1]
    return (h[-1][1] <= rft + 0.05,
            f"final train: RFT {rft:.2f}, with the baseline {h[-1][1]:.2f}; tasks ever solved {len(r['rft_ever'])} vs "
            f"{len(r['baseline_ever'])}")


HEADLINE = 'plateau-stays'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('baseline-identity', 'Weighting failures by -R/(1-R) is the baseline policy gradient times 1/(1-R), group by '
           'group.', f'max |g_weighted - g_baseline / (1 - R)| <= {TOLERANCE:g} over the mixed groups', _identity),
    Answer('no-clip-collapses', 'Trained as written at lr 3e-3, the baseline collapses RFT: the train pass falls to '
           'nothing and the format breaks.', "train pass <= 0.05 after some round, and invalid calls up by >= 0.5 per "
           'episode', _collapse),
    Answer('failures-drag-successes', "The cause: the failures' term has no lower bound, and pushing the failures down "
           "pushes the successes' shared tokens down too.", "round 0's own successes and failures both lose log-prob "
           'in its SFT', _drags),
    Answer('clip-learns', 'A trust region on the failures (stop pushing an episode once its probability is 0.8 of the '
           "sampler's) removes the collapse: RFT with a baseline learns.", "final train pass >= the weak base's + 0.25",
           _clip_learns),
    Answer('clip-keeps-format', 'With the trust region the format holds to the end.',
           "final invalid calls per episode <= the weak base's + 0.5", _clip_format),
    Answer('plateau-stays', 'The baseline does not move the plateau up: it adds no signal on the tasks no sample solves.',
           "final train pass with the baseline (clip) <= RFT's + 0.05", _plateau),
)


def pooled(per_seed: dict, out) -> dict:
    """Over the seeds: the identity's largest gap and the whole-sample cosine; the collapse; the trust region's runs."""
    ps = list(per_seed.values())
    r1 = [p['no_clip']['round1_logp'] for p in ps]
    f = {'gap': max(p['identity']['gap'] for p in ps if p['identity']['groups']),
         'cosine': spread(p['identity']['cosine'] for p in ps),
         'no_clip_invalid_round1': mean(p['no_clip']['hist'][1][3] for p in ps),
         'round1_logp': {'wins': [mean(r['before']['wins'] for r in r1), mean(r['after']['wins'] for r in r1)],
                         'fails': [mean(r['before']['fails'] for r in r1), mean(r['after']['fails'] for r in r1)]},
         'final_train': {'rft': mean(p['compare']['rft_hist'][-1][1] for p in ps),
                         'clip': mean(p['clip']['hist'][-1][1] for p in ps),
                         'weak': mean(p['clip']['hist'][0][1] for p in ps)},
         'final_invalid_clip': spread(p['clip']['hist'][-1][3] for p in ps), 'n': len(ps)}
    w, fl = f['round1_logp']['wins'], f['round1_logp']['fails']
    lines = [f"over {len(ps)} seeds: identity gap at most {f['gap']:.1e}, whole-sample cosine {f['cosine'][0]:.2f} to "
             f"{f['cosine'][1]:.2f}; without a trust region, round 0 leaves {f['no_clip_invalid_round1']:.2f} invalid "
             f"calls per episode and moves the action log-prob per token of its successes {w[0]:.2f} -> {w[1]:.2f}, of "
             f"its failures {fl[0]:.2f} -> {fl[1]:.2f}; with it, final train {f['final_train']['clip']:.2f} against "
             f"RFT's {f['final_train']['rft']:.2f} (weak base {f['final_train']['weak']:.2f})"]
    return rounded({**f, 'lines': lines})
