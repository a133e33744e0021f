"""Exercise 1: aggregation and the gradient identity (section 15.3).

RFT keeps the episodes whose reward is 1 and runs SFT on them. In a sample of B episodes, let ``log pi[i, t]`` be the
log-probs, ``m[i, t]`` the action mask, ``n_i = sum_t m[i, t]`` episode i's action tokens, ``R_i`` in {0, 1} its
reward and K the kept episodes (``R_i = 1``).

**Token averaging** (every action token of the batch weighs the same; ``sft_loss`` does this)::

    L_pg  = -sum_i R_i sum_t m log pi / sum_i n_i          L_sft = -sum_{i in K} sum_t m log pi / sum_{i in K} n_i

The numerators are the same sum (``R_i = 1`` exactly on K), so ``grad L_pg = (N_K / N) grad L_sft`` with
``N_K = sum_{i in K} n_i`` the kept action tokens and ``N = sum_i n_i`` all of them.

**Sequence averaging** (every episode weighs the same, its tokens averaged within it)::

    L_pg  = -(1/B) sum_i R_i (1/n_i) sum_t m log pi        L_sft = -(1/|K|) sum_{i in K} (1/n_i) sum_t m log pi

so ``grad L_pg = (|K| / B) grad L_sft``: the factor is the sample's success rate.

An SFT step of rate eta on ``L_sft`` is a policy-gradient step of rate ``eta / factor``. With sequence averaging the
factor is ``|K| / B`` whatever the lengths. With token averaging it is ``N_K / N = (|K| / B) (nbar_K / nbar)``: the
success rate times the kept episodes' mean length over the sample's, so the same successes give RFT another
effective step when the kept episodes are longer or shorter than the rest. The exercise checks both identities on
the chapter's own sample (15.3's, whose token factor is 15.3's ``token ratio``), then measures the dependence on a
larger sample (expert iteration's first round): its failures with the shorter half of its kept episodes, and with
the longer half. Section 15.3's ``kept 6 of 80 | token ratio 0.0605`` is the token factor.
"""
from __future__ import annotations

import torch

from ...policies.scoring import sequence_log_probs
from ...recipes.outcomes import is_success
from ...rendering.trajectory import collate
from .answers import Answer, Undecided
from .pooling import rounded, spread

NEEDS = ('15.2', '15.3')
CHECKPOINTS = ('weak',)
TOLERANCE = 1e-6
"""The largest gradient gap (max abs over every parameter) an identity may show: float rounding, not algebra."""


def flat_grad(loss, model) -> torch.Tensor:
    """The gradient of ``loss`` over every parameter, flattened -> [P]."""
    trained = [p for p in model.parameters() if p.requires_grad]  # a LoRA policy's adapters; the TinyAgent's every weight
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, trained, retain_graph=True)])


def aggregate_losses(logp, mask, rewards) -> dict:
    """The four losses of the exercise: (0/1 policy gradient, SFT on the kept) x (token, sequence averaging).

    ``logp``, ``mask``: [B, T-1]; ``rewards``: [B] in {0, 1} -> {name: scalar}."""
    per_episode = (logp * mask).sum(1)  # [B], each episode's summed action log-prob
    n = mask.sum(1)  # [B], its action tokens
    kept = rewards == 1  # [B]
    return {'pg_token': -(rewards * per_episode).sum() / n.sum(),
            'sft_token': -per_episode[kept].sum() / n[kept].sum(),
            'pg_sequence': -(rewards * per_episode / n).mean(),
            'sft_sequence': -(per_episode[kept] / n[kept]).mean()}


def factors(mask, rewards) -> dict:
    """The two predicted factors: token (kept action tokens / all) and sequence (kept episodes / all)."""
    n, kept = mask.sum(1), rewards == 1
    return {'token': (n[kept].sum() / n.sum()).item(), 'sequence': kept.float().mean().item()}


def identities(model, trajs, tok) -> dict:
    """Both identities on ``trajs``: each aggregation's factor, its largest gradient gap, and that gap relative to
    the largest policy-gradient entry."""
    batch = collate(trajs, tok.pad_id)
    rewards = torch.tensor([float(is_success(t)) for t in trajs])  # [B]
    logp = sequence_log_probs(model, batch['ids'], batch['lengths'])  # [B, T-1]
    losses = aggregate_losses(logp, batch['action_mask'], rewards)
    f = factors(batch['action_mask'], rewards)
    out = {'kept': int(rewards.sum()), 'episodes': len(trajs)}
    if not out['kept']:  # no success: both gradients are zero or undefined, nothing to compare
        return out
    for agg in ('token', 'sequence'):
        g_pg, g_sft = flat_grad(losses[f'pg_{agg}'], model), flat_grad(losses[f'sft_{agg}'], model)
        gap = (g_pg - f[agg] * g_sft).abs().max().item()
        out[agg] = {'factor': f[agg], 'gap': gap, 'relative_gap': gap / g_pg.abs().max().item()}
    return out


def action_tokens(traj) -> int:
    """The action tokens of one episode (its mask's sum)."""
    return int(traj.action_mask.sum())


def run(x) -> None:
    ch, s = x.ch, x.seed
    weak = x.chapter_model('weak')

    def identity():
        _, sample = ch.pass_rate(weak, ch.train, ch.cfg.eval_samples, 7 + s)  # 15.3's own sample
        out = identities(weak, sample, ch.tok)
        if not out['kept']:
            x.say(f"kept 0 of {out['episodes']}: no success to check the identities on")
            return out
        out['chapter_token_ratio'] = x.chapter_results('15.3')['token_ratio']
        x.say(f"15.3's sample: kept {out['kept']} of {out['episodes']}")
        for agg, name in (('token', 'kept action tokens / all action tokens'), ('sequence', 'kept episodes / all episodes')):
            r = out[agg]
            x.say(f"  {agg}-averaged: grad L_pg = {r['factor']:.4f} x grad L_sft ({name}); max gap {r['gap']:.1e} "
                  f"({r['relative_gap']:.1e} of the largest entry)")
        return out

    def length():
        _, sample = ch.pass_rate(weak, ch.train, ch.cfg.rft_samples, 100 + s, temperature=ch.cfg.sample_temperature)
        kept = sorted((t for t in sample if is_success(t)), key=action_tokens)  # expert iteration's round 0 keeps these
        failed = [t for t in sample if not is_success(t)]
        lengths = [action_tokens(t) for t in kept]
        out = {'kept': len(kept), 'episodes': len(sample), 'kept_lengths': lengths,
               'mean_length_all': sum(map(action_tokens, sample)) / len(sample)}
        half = len(kept) // 2
        if half == 0 or sum(lengths[:half]) == sum(lengths[-half:]):
            x.say(f'round 0 sample: kept {len(kept)} of {len(sample)}, too few or all of one length to compare')
            return out
        for name, chosen in (('short', kept[:half]), ('long', kept[-half:])):
            r = identities(weak, failed + chosen, ch.tok)
            out[name] = {'mean_length': sum(map(action_tokens, chosen)) / half, **r}
        t_short, t_long = out['short']['token']['factor'], out['long']['token']['factor']
        q_short, q_long = out['short']['sequence']['factor'], out['long']['sequence']['factor']
        x.say(f"round 0 sample: kept {len(kept)} of {len(sample)}, {min(lengths)} to {max(lengths)} action tokens "
              f"(all episodes: {out['mean_length_all']:.1f} on average); {len(failed)} failures with the {half} "
              'shortest or the longest kept:')
        x.say(f"  kept {out['short']['mean_length']:.1f} vs {out['long']['mean_length']:.1f} action tokens: token factor "
              f'{t_short:.4f} vs {t_long:.4f} (x{t_long / t_short:.2f}), sequence factor {q_short:.4f} vs {q_long:.4f}')
        x.say(f'  an SFT step of lr {ch.cfg.sft_lr:g} is a policy-gradient step of lr {ch.cfg.sft_lr / t_short:.3g} vs '
              f'{ch.cfg.sft_lr / t_long:.3g} (token averaging), {ch.cfg.sft_lr / q_short:.3g} either way (sequence)')
        return out

    x.part('identity', identity)
    x.part('length', length)


def _identity(agg):
    def check(p):
        r = p['identity']
        if not r['kept']:
            raise Undecided('no kept episode in the sample')
        g = r[agg]
        return g['gap'] <= TOLERANCE, f"factor {g['factor']:.4f}, max gap {g['gap']:.1e}"
    return check


def _length(p):
    r = p['length']
    if 'short' not in r:
        raise Undecided(f"{r['kept']} kept episodes, too few or all of one length")
    t = r['long']['token']['factor'] / r['short']['token']['factor']
    q = r['long']['sequence']['factor'] / r['short']['sequence']['factor']
    return (abs(t - 1) >= 0.01 and abs(q - 1) <= 1e-12,
            f"long / short kept: token factor x{t:.3f}, sequence factor x{q:.3f} "
            f"({r['short']['mean_length']:.1f} vs {r['long']['mean_length']:.1f} action tokens)")


HEADLINE = 'token-step-depends-on-length'
"""The answer the README's table gives for this exercise."""
ANSWERS = (
    Answer('token-identity', 'With token averaging, the 0/1 policy gradient is the SFT gradient on the kept episodes '
           'times (kept action tokens) / (all action tokens).', f'max |g_pg - factor g_sft| <= {TOLERANCE:g}',
           _identity('token')),
    Answer('sequence-identity', 'With sequence averaging, the factor is (kept episodes) / (all episodes): the '
           "sample's success rate.", f'max |g_pg - factor g_sft| <= {TOLERANCE:g}', _identity('sequence')),
    Answer('token-step-depends-on-length', "Token averaging makes RFT's effective step depend on episode length: "
           'the same successes, longer, give another factor; sequence averaging does not.',
           'failures + longest half of the kept vs + shortest half: token factor moves >= 1%, sequence factor not at all',
           _length),
)


def pooled(per_seed: dict, out) -> dict:
    """The largest gaps over the seeds, and how far the token factor moved between the short and the long kept."""
    ident = [p['identity'] for p in per_seed.values() if p['identity']['kept']]
    moves = [p['length']['long']['token']['factor'] / p['length']['short']['token']['factor']
             for p in per_seed.values() if 'short' in p['length']]
    figures = {'token_gap': max(r['token']['gap'] for r in ident), 'sequence_gap': max(r['sequence']['gap'] for r in ident),
               'token_move': spread(moves)}
    lines = [f"largest gradient gap over {len(ident)} seeds: token {figures['token_gap']:.1e}, sequence "
             f"{figures['sequence_gap']:.1e}; the long kept half moves the token factor x{moves and min(moves):.2f} to "
             f"x{moves and max(moves):.2f}, the sequence factor x1.00"]
    return rounded({**figures, 'lines': lines}, 12)
