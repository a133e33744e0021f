"""DPO on agent episodes (sections 15.4 and 15.6).

An episode's log-likelihood ratio between the policy and a reference cancels every environment
term (both face the same environment), so each ratio is a sum over *action tokens only*:
``episode_logp`` masks exactly as ``sft_loss`` does. ``dpo_loss`` takes those summed log-probs; IPO takes each
episode's mean over its action tokens (``action_tokens`` counts them), as its authors and TRL define it.
"""
from __future__ import annotations

import math
import random
from contextlib import nullcontext

import torch
import torch.nn.functional as F

from ..loggers.protocol import as_reporter, merge_eval
from ..policies.scoring import sequence_log_probs
from ..rendering.trajectory import collate
from ..runtime.threads import small_model_threads
from .loop import RecipeLoop
from .optim import make_optimizer, make_scheduler, optimizer_step
from .monitors import batch_tokens, grad_norm, preference_metrics
from .outcomes import DEFAULT_MARGIN, check_margin, reaches, warn_no_signal
from .sft import sft_loss

LOSSES = ('sigmoid', 'ipo', 'ipo_sum', 'hinge')
"""``preference_loss``'s losses (``'ipo_sum'``: IPO on summed log-ratios, kept by that name only)."""


def episode_logp(model, batch) -> torch.Tensor:
    """Summed log-prob of each episode's action tokens: batch from collate -> [B] (section 15.4)."""
    mask = batch['action_mask']  # [B, T-1]
    return (sequence_log_probs(model, batch['ids'], batch.get('lengths'), mask=mask) * mask).sum(-1)  # [B]


def action_tokens(batch) -> torch.Tensor:
    """Each episode's number of action tokens: batch from collate -> [B] (what IPO averages over)."""
    return batch['action_mask'].sum(-1).float()  # [B]


def _check_pairs(policy_logp_chosen, policy_logp_rejected, ref_chosen, ref_rejected, beta):
    """Four tensors of one shape [B] (one entry per pair) and a finite beta > 0, else ValueError naming the culprit."""
    args = {'policy_logp_chosen': policy_logp_chosen, 'policy_logp_rejected': policy_logp_rejected,
            'ref_chosen': ref_chosen, 'ref_rejected': ref_rejected}
    for name, t in args.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f'{name} must be a tensor of summed log-probs [B], got {type(t).__name__}')
    shapes = {name: tuple(t.shape) for name, t in args.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError('dpo_loss needs one value per pair in each argument (all of shape [B]), got shapes '
                         + ', '.join(f'{k} {list(v)}' for k, v in shapes.items()))
    if not (isinstance(beta, (int, float)) and not isinstance(beta, bool) and math.isfinite(beta) and beta > 0):
        raise ValueError(f'beta must be a finite number > 0, got {beta!r}')


def dpo_loss(policy_logp_chosen, policy_logp_rejected, ref_chosen, ref_rejected, beta=0.1):
    """DPO loss from summed action log-probs, each [B] -> scalar; reference terms are constants (section 15.4)."""
    _check_pairs(policy_logp_chosen, policy_logp_rejected, ref_chosen, ref_rejected, beta)
    chosen_ratio = policy_logp_chosen - ref_chosen.detach()  # [B]
    rejected_ratio = policy_logp_rejected - ref_rejected.detach()  # [B]
    return -F.logsigmoid(beta * (chosen_ratio - rejected_ratio)).mean()


def preference_loss(policy_logp_chosen, policy_logp_rejected, ref_chosen, ref_rejected, beta=0.1, loss='sigmoid',
                    chosen_tokens=None, rejected_tokens=None):
    """A pairwise preference loss on log-ratio margins -> scalar. Each log-prob is an episode's sum over its action
    tokens ([B], ``episode_logp``); with ``m = (policy_c - ref_c) - (policy_r - ref_r)``:

    - ``'sigmoid'``: DPO, ``-log sigmoid(beta m)`` (Rafailov et al. 2023);
    - ``'ipo'``: IPO, ``(m' - 1 / (2 beta))^2`` where ``m'`` takes each episode's log-ratio as a mean over its action
      tokens, ``(policy_c - ref_c) / chosen_tokens - (policy_r - ref_r) / rejected_tokens`` (Azar et al. 2023; TRL's
      ``loss_type='ipo'``), so a beta from the paper means the same here and a long episode pulls no harder; the
      counts are each episode's action tokens (``action_tokens``);
    - ``'ipo_sum'``: the same regression on the summed margin ``m`` (not the paper's: named so it is not mistaken);
    - ``'hinge'``: ``relu(1 - beta m)`` (SLiC, Zhao et al. 2023).
    """
    if loss not in LOSSES:
        raise ValueError(f'unknown loss {loss!r}; valid losses are {list(LOSSES)}')
    _check_pairs(policy_logp_chosen, policy_logp_rejected, ref_chosen, ref_rejected, beta)
    if loss == 'sigmoid':
        return dpo_loss(policy_logp_chosen, policy_logp_rejected, ref_chosen, ref_rejected, beta)
    chosen_ratio = policy_logp_chosen - ref_chosen.detach()  # [B]
    rejected_ratio = policy_logp_rejected - ref_rejected.detach()  # [B]
    if loss == 'ipo':
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("loss='ipo' averages each episode's log-ratio over its action tokens (Azar et al. 2023): "
                             "pass chosen_tokens and rejected_tokens (action_tokens(batch)), or use loss='ipo_sum'")
        counts = [torch.as_tensor(c, dtype=chosen_ratio.dtype) for c in (chosen_tokens, rejected_tokens)]
        if any(c.shape != chosen_ratio.shape or bool((c <= 0).any()) for c in counts):
            raise ValueError(f'chosen_tokens and rejected_tokens must be positive counts, one per pair '
                             f'[{len(chosen_ratio)}], got shapes {[list(c.shape) for c in counts]}')
        margin = chosen_ratio / counts[0] - rejected_ratio / counts[1]  # [B]
        return ((margin - 1 / (2 * beta)) ** 2).mean()
    margin = chosen_ratio - rejected_ratio  # [B]
    if loss == 'ipo_sum':
        return ((margin - 1 / (2 * beta)) ** 2).mean()
    return F.relu(1 - beta * margin).mean()


def preference_step(policy, opt, chosen_b, rejected_b, ref_c, ref_r, beta=0.1, loss='sigmoid', nll_weight=0.0,
                    loggers=None, step=0, optim=None, scheduler=None):
    """One optimizer step of ``preference_loss`` (+ ``nll_weight`` x the chosen episodes' ``sft_loss``)
    on collated pairs -> (mean chosen log-ratio, mean rejected log-ratio, loss), measured before the step.

    ``loggers`` (a ``loggers.Reporter``, or what one accepts) get the step's dashboard at ``step``: ``loss``,
    ``grad_norm`` (before the update), ``monitors.preference_metrics`` of the log-probs the loss was computed from,
    and the pairs' tokens. The step is the same with or without them."""
    rep = as_reporter(loggers)
    started = rep.clock()
    pc, pr = episode_logp(policy, chosen_b), episode_logp(policy, rejected_b)  # [P], [P]
    total = preference_loss(pc, pr, ref_c, ref_r, beta, loss, action_tokens(chosen_b), action_tokens(rejected_b))
    if nll_weight:
        total = total + nll_weight * sft_loss(policy, chosen_b)
    opt.zero_grad()
    total.backward()
    norm = rep.measure(lambda: grad_norm(policy))
    optimizer_step(policy, opt, scheduler, optim)
    value = total.item()
    rep.log(step, lambda: {'loss': value, **preference_metrics(pc, pr, ref_c, ref_r, beta), 'grad_norm': norm},
            started=started, tokens=batch_tokens(chosen_b) + batch_tokens(rejected_b))
    return (pc - ref_c).mean().item(), (pr - ref_r).mean().item(), value


def make_pairs(sample, tasks, seed=0, margin=DEFAULT_MARGIN) -> list:
    """Pair episodes of the same task whose returns differ by at least ``margin`` -> list of (chosen, rejected)
    (section 15.4).

    Every episode with a rejected candidate (an episode of its task whose return is lower by ``margin`` or more,
    within ``RETURN_TOL``) is chosen once, against one candidate drawn at random with ``seed``. With the
    chapter's 0/1 rewards and the default margin 1.0 this pairs every success with a random failure of the same
    task. No pair at all warns (``recipes.outcomes.NoSignalWarning``), naming the margin and the returns seen.
    """
    margin = check_margin(margin)
    rng, pairs = random.Random(seed), []
    sample = list(sample)
    for task in tasks:
        episodes = [t for t in sample if t.info['task'] == task.name]
        for chosen in episodes:
            lower = [t for t in episodes if reaches(chosen.reward - t.reward, margin)]
            if lower:
                pairs.append((chosen, rng.choice(lower)))
    if not pairs and sample:
        warn_no_signal('make_pairs', f'no two episodes of a task have returns {margin:g} or more apart', sample)
    return pairs


@small_model_threads
def train_dpo(policy, pairs, tok, ref_model=None, steps=100, beta=0.1, lr=1e-3, nll_weight=0.0, loss='sigmoid',
              every=25, evaluate=None, monitor=None, loggers=None, batch_size=None, seed=0, checkpoint=None,
              progress=None, optim=None):
    """Full-batch DPO on ``pairs``, in place -> log, one dict per ``every`` steps (sections 15.4, 15.6).

    ``batch_size``: None (default) trains on every pair at every step, as the chapter does; a number draws that many
    pairs per step, with replacement, from a generator seeded with ``seed`` (for a pair set too large for one batch;
    the reference log-probs are still computed once, for every pair).

    The reference log-probs come from ``ref_model`` (default: ``policy`` as it is now; a policy with LoRA adapters
    trains a fresh adapter on top, and its reference is that adapter switched off, ``policies/lora.py``). With
    ``nll_weight > 0`` the chosen episodes' ``sft_loss`` is added (DPO + NLL, as in Iterative
    RPO). Each log row holds the step, the mean change of chosen and rejected log-probs from the
    reference (before that step's update, as the chapter logs them), and ``evaluate(policy)``.
    Pass a list as ``monitor`` to also get (step, d_chosen, d_rejected) at every step: the DPO
    dashboard's view, which the chapter's figure 15.2 sets beside what the policy does.

    ``loggers`` (``agentrl.loggers``) get that dashboard at every step (``loss``, ``grad_norm``, ``d_chosen``,
    ``d_rejected``, TRL's ``rewards/margins`` and ``rewards/accuracies`` ...), and ``evaluate``'s figures under
    ``eval/`` every ``every`` steps: pass an ``evaluate`` that counts invalid calls to watch them beside it
    (section 15.6). An ``evaluate`` key that is one of the row's own raises ValueError. ``checkpoint`` and
    ``progress``: ``recipes.loop``. ``optim`` (``recipes.optim.OptimConfig``): weight decay, clipping, warmup and
    schedule (default: the chapter's AdamW).
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError('train_dpo needs at least one (chosen, rejected) pair, got an empty list')
    for name, value in (('beta', beta), ('lr', lr)):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
            raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError(f'batch_size must be None (every pair, every step) or an int >= 1, got {batch_size!r}')
    chosen_b = collate([c for c, _ in pairs], tok.pad_id)
    rejected_b = collate([r for _, r in pairs], tok.pad_id)
    adapters = ref_model is None and getattr(policy, 'lora', None) is not None
    if adapters:  # LoRA: train a fresh adapter; the reference is the policy with it switched off (no second copy)
        policy.new_adapter(seed)
    with torch.no_grad(), (policy.adapter_off() if adapters else nullcontext()):
        ref = policy if ref_model is None else ref_model
        ref_c, ref_r = episode_logp(ref, chosen_b), episode_logp(ref, rejected_b)  # [P], [P]
    opt = make_optimizer(policy, lr, optim)
    scheduler = make_scheduler(opt, optim, steps)
    rep = as_reporter(loggers)
    gen = torch.Generator().manual_seed(seed) if batch_size is not None else None
    log = []
    loop = RecipeLoop('train_dpo', steps, policy, opt, streams={'batches': gen} if gen is not None else None,
                      outputs={'log': log, **({'monitor': monitor} if monitor is not None else {})},
                      checkpoint=checkpoint, progress=progress, scheduler=scheduler)
    for step in loop.steps():
        chosen, rejected, c_ref, r_ref = chosen_b, rejected_b, ref_c, ref_r
        if gen is not None:
            idx = torch.randint(len(pairs), (batch_size,), generator=gen)  # [b]
            chosen, rejected = (collate([pairs[i][side] for i in idx.tolist()], tok.pad_id) for side in (0, 1))
            c_ref, r_ref = ref_c[idx], ref_r[idx]
        d_chosen, d_rejected, _ = preference_step(policy, opt, chosen, rejected, c_ref, r_ref, beta, loss, nll_weight,
                                                  rep, step, optim, scheduler)
        if monitor is not None:
            monitor.append((step, d_chosen, d_rejected))
        if step % every == 0:
            row = {'step': step, 'd_chosen': d_chosen, 'd_rejected': d_rejected}
            if evaluate is not None:
                values = evaluate(policy)
                merge_eval(row, values, 'train_dpo')
                rep.log_eval(step, values)
            log.append(row)
    return log
