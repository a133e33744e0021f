"""Rejection sampling with a group baseline: RFT that also trains on failures (exercise 4; section 15.3).

Section 15.3 shows that RFT on fresh samples is the 0/1 policy gradient with no negative
signal. With a baseline ``b`` the policy gradient of one group is

    sum_i (R_i - b) grad log pi(tau_i) = (1 - b) sum_succ grad log pi - b sum_fail grad log pi,

so taking the group mean ``b = R_bar`` and dividing by ``1 - R_bar`` gives every success weight 1
(RFT's) and every failure weight ``-R_bar / (1 - R_bar)``:

    w_i = (R_i - R_bar) / (1 - R_bar).

``weighted_sft_loss`` with these weights therefore has *exactly* the baseline policy gradient of a
group times ``1 / (1 - R_bar)`` (the tests check this to 1e-6). Across groups the factor differs
per group: each group's advantages are rescaled so that its successes weigh 1, as in RFT.

Groups with ``R_bar`` in {0, 1}:

- all fail (``R_bar = 0``): every failure gets ``-0 / 1 = 0``. Nothing to learn, as in RFT and in
  the baseline policy gradient.
- all pass (``R_bar = 1``): there is no failure, so the failure weight is never used. Its
  successes keep weight 1 by default (``keep_all_pass=True``): RFT's imitation of them, which the
  exercise's "RFT plus failures" asks for. The baseline policy gradient gives them 0 instead
  (``(R - R_bar) = 0``); ``keep_all_pass=False`` gives that.

Note the failure weight grows without bound as ``R_bar -> 1`` (a group of 8 with 7 successes
weighs its one failure -7): the push-down on a rare failure is as strong as the seven pulls up.

**Many steps on one sample.** The identity holds at the policy that sampled the episodes. RFT then takes ``steps``
SFT steps on the same pool, which is harmless for the successes (their NLL is bounded below by 0) but not for the
failures: ``+w log pi`` with ``w < 0`` has no lower bound, so once the successes are learned the loss keeps falling
by pushing the failures' log-probs towards minus infinity, and the tokens failures share with successes (call
verbs, arguments, the stop token) go down with them. At the chapter's learning rate (3e-3, 15 steps a round) that
breaks the format within one round (exercise 4 measures it). ``clip=eps`` is the trust region that stops it, at the
level of whole episodes: a failure stops being pushed once its probability has fallen below ``1 - eps`` times its
probability under the policy that sampled it (the policy at the start of the round's SFT), as PPO's clipped
objective stops a negative advantage (here on the sequence ratio). Successes are trained as RFT trains them.
"""
from __future__ import annotations

import copy
import math
from functools import partial

import torch

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..policies.scoring import sequence_log_probs
from ..rendering.trajectory import collate
from ..runtime.threads import small_model_threads
from .diagnostics import informative_fraction
from .evaluation import pass_rate
from .monitors import batch_tokens, round_metrics
from .outcomes import DEFAULT_THRESHOLD, check_threshold, is_success, warn_no_signal
from .rounds import run_rounds
from .sft import sft_step


def group_baseline_weights(rewards: torch.Tensor, keep_all_pass: bool = True) -> torch.Tensor:
    """Per-episode weights ``(R - R_bar) / (1 - R_bar)`` of each group: ``rewards [tasks, G]`` (0/1) -> ``[tasks, G]``.

    Successes get 1, failures ``-R_bar / (1 - R_bar)`` (0 in an all-fail group); an all-pass
    group's successes get 1 with ``keep_all_pass`` (RFT), else 0 (the baseline policy gradient).
    """
    if rewards.dim() != 2:
        raise ValueError(f'rewards must be [tasks, G], got shape {tuple(rewards.shape)}')
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError('group_baseline_weights needs 0/1 rewards')
    r_bar = rewards.mean(1, keepdim=True)  # [tasks, 1]
    fail_weight = -r_bar / (1 - r_bar).clamp(min=1e-12)  # [tasks, 1]; unused where r_bar = 1 (no failure)
    weights = torch.where(rewards == 1, torch.ones_like(rewards), fail_weight.expand_as(rewards))  # [tasks, G]
    if not keep_all_pass:
        weights = weights.masked_fill(r_bar == 1, 0.0)
    return weights


def weighted_sft_loss(model, batch, weights: torch.Tensor, old_logp: torch.Tensor | None = None,
                      clip: float | None = None) -> torch.Tensor:
    """Token-mean NLL over action tokens, each episode's tokens weighted: weights [B] -> scalar.

    ``-(w * logp * mask).sum() / mask.sum()``: ``sft_loss`` when every weight is 1, the 0/1 policy
    gradient loss when ``w = R``, and the baseline policy gradient when ``w = R - b``. With ``clip`` (and
    ``old_logp [B, T-1]``, the sampling policy's log-probs) an episode of negative weight whose sequence ratio
    ``pi / pi_old`` is below ``1 - clip`` carries no gradient (the module docstring says why).
    """
    logp = sequence_log_probs(model, batch['ids'], batch.get('lengths'), mask=batch['action_mask'])  # [B, T-1]
    return _weighted_nll(logp, batch['action_mask'], weights, old_logp, clip)


def _weighted_nll(logp, mask, weights, old_logp=None, clip=None) -> torch.Tensor:
    """``weighted_sft_loss`` from the log-probs: ``logp [B, T-1]``, ``mask [B, T-1]``, ``weights [B]`` -> scalar."""
    w = weights.to(logp.dtype)  # [B]
    if clip is not None:
        log_ratio = ((logp.detach() - old_logp) * mask).sum(1)  # [B], log pi(tau) / pi_old(tau)
        w = torch.where((w < 0) & (log_ratio < math.log1p(-clip)), torch.zeros_like(w), w)  # pushed far enough
    return -(w[:, None] * logp * mask).sum() / mask.sum()


def check_clip(clip) -> float | None:
    """``clip`` is None or a number in (0, 1); ValueError otherwise."""
    if clip is None:
        return None
    if not (isinstance(clip, (int, float)) and not isinstance(clip, bool) and 0 < clip < 1):
        raise ValueError(f'clip must be None or a number in (0, 1), got {clip!r}')
    return float(clip)


@small_model_threads
def weighted_sft_train(model, trajs, weights, tok, steps=100, lr=3e-3, batch_size=32, seed=0, loggers=None,
                       clip=None) -> list:
    """``sft_train`` with a weight per trajectory: minibatches drawn with replacement, AdamW -> losses.

    With every weight 1 it takes exactly ``sft_train``'s steps (same draws from ``seed``). ``loggers`` get
    what ``sft_train``'s do, every step. ``clip``: the trust region on negative weights (``weighted_sft_loss``),
    measured against ``model`` as it is when called (a frozen copy gives each minibatch's old log-probs).
    """
    trajs, weights = list(trajs), torch.as_tensor(weights, dtype=torch.float).view(-1)  # [N]
    if not trajs:
        raise ValueError('weighted_sft_train needs at least one trajectory, got an empty list')
    if len(weights) != len(trajs):
        raise ValueError(f'one weight per trajectory: got {len(weights)} weights for {len(trajs)} trajectories')
    clip = check_clip(clip)
    frozen = copy.deepcopy(model).eval() if clip is not None else None  # the sampling policy
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    rep = as_reporter(loggers)
    losses = []
    for step in range(1, steps + 1):
        started = rep.clock()
        idx = torch.randint(len(trajs), (min(batch_size, len(trajs)),), generator=gen)  # [b]
        batch = collate([trajs[i] for i in idx.tolist()], tok.pad_id)
        old = None
        if frozen is not None:
            with torch.no_grad():
                old = sequence_log_probs(frozen, batch['ids'], batch['lengths'])  # [b, T-1]
        nll = partial(_weighted_nll, weights=weights[idx], old_logp=old, clip=clip)  # weighted_sft_loss of the logp
        metrics = sft_step(model, opt, batch, rep, nll)
        losses.append(metrics['loss'])
        rep.log(step, metrics, started=started, tokens=batch_tokens(batch))
    return losses


@small_model_threads
def rft_baseline_iteration(model, tasks, tok, rounds=4, n_samples=16, steps=15, sample_seed=100, sft_seed=0,
                           reward='hidden', keep_all_pass=True, lr=3e-3, batch_size=32, evaluate=None, env=DEFAULT_ENV,
                           threshold=DEFAULT_THRESHOLD, loggers=None, clip=None):
    """Expert iteration with a group baseline: sample -> weight -> weighted SFT, in place -> one dict per round.

    As ``recipes.rejection.expert_iteration`` (same seeds: round k samples with ``sample_seed + k``
    and trains with ``sft_seed + k``), but every sampled episode is weighted by
    ``group_baseline_weights`` of its success (a return that reaches ``threshold``: 1, else 0; a task's
    ``n_samples`` episodes are its group) and trained on.
    Episodes of weight 0 (all-fail groups, and all-pass ones without ``keep_all_pass``) carry no
    gradient and are left out of the pool, so, like RFT's dropped failures, they do not dilute the
    token mean. Each dict holds ``round``, ``rate`` (sample pass), ``n_pos`` and ``n_neg``
    (episodes trained with positive and negative weight), ``min_weight``, ``solved`` (task names
    with a success), ``informative`` (share of mixed groups) and ``evaluate(model)`` (a dict). Episodes are
    sampled in ``env`` (a factory or Gymnasium id). A round with no success warns and trains on nothing.
    ``clip``: the trust region on the failures (``weighted_sft_train``); None (default) trains the failures
    without one, which at the chapter's learning rate breaks the format (the module docstring says why).

    ``loggers`` (``agentrl.loggers``) get, each round, what its sample shows (``reward``, ``informative`` ...),
    ``filter/kept`` (the successes trained with weight > 0), ``rft/negatives`` and ``rft/min_weight``, then every
    weighted SFT step's ``loss``, ``grad_norm``, ``entropy``, and ``evaluate``'s under ``eval/``
    (``recipes.rounds``).
    """
    threshold, clip = check_threshold(threshold), check_clip(clip)
    tasks = list(tasks)
    rep = as_reporter(loggers)

    def one_round(k):
        started = rep.clock()
        rate, sample = pass_rate(model, tasks, tok, n_samples, seed=sample_seed + k, reward=reward, env=env)
        success = torch.tensor([float(is_success(t, threshold)) for t in sample]).view(len(tasks), n_samples)  # [tasks, G]
        weights = group_baseline_weights(success, keep_all_pass).view(-1)  # [B]
        pool = [(t, w) for t, w in zip(sample, weights.tolist()) if w != 0]
        row = {'round': k, 'rate': rate, 'n_pos': sum(w > 0 for _, w in pool), 'n_neg': sum(w < 0 for _, w in pool),
               'min_weight': min((w for _, w in pool), default=0.0),
               'solved': sorted({t.info['task'] for t, ok in zip(sample, success.view(-1).tolist()) if ok}),
               'informative': informative_fraction(success)}
        positive = [t for t, w in pool if w > 0]  # the successes it trains, as RFT's filter keeps them
        rep.log(k * steps, lambda: {**round_metrics(k, sample, positive, n_samples, threshold, env),
                                    'rft/negatives': row['n_neg'], 'rft/min_weight': row['min_weight']},
                started=started, episodes=len(sample))
        if not pool:
            why = (f'no episode reached the threshold {threshold:g}' if not success.any() else
                   'every group passed, and keep_all_pass=False gives an all-pass group no weight')
            warn_no_signal(f'rft_baseline_iteration round {k}', why, sample)
            return row, None
        return row, lambda: weighted_sft_train(model, [t for t, _ in pool], [w for _, w in pool], tok, steps=steps,
                                               lr=lr, batch_size=batch_size, seed=sft_seed + k,
                                               loggers=rep.shifted(k * steps), clip=clip)

    return run_rounds(model, rounds, one_round, evaluate, rep, steps, 'rft_baseline_iteration')
