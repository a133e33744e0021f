"""The chapter's monitors, computed where a recipe already has the data (section 15.6; exercise 7).

Section 15.6's advice is about what to watch while training: the share of groups with reward variance
(not the loss) to choose an SFT checkpoint by, the filter's gap to an independent check every round,
invalid calls while DPO's own metric improves. Every function here reads what a recipe has at hand
(its sample, its kept set, its logits, its gradients): none samples, none draws a random number, none
changes a gradient. A recipe computes its loss the same way whether or not a logger listens and hands these to
its reporter as callables (``loggers.Reporter.measure``, or the metrics ``Reporter.log`` takes), which only a
listening reporter calls. ``loggers.names.METRICS`` names and explains each figure.
"""
from __future__ import annotations

import torch

from ..policies.scoring import entropy_from_logits, log_probs_and_logits
from .diagnostics import informative_fraction, is_read
from .outcomes import DEFAULT_THRESHOLD, mean_return, success_rate


def logp_and_entropy(model, batch, rep, temperature: float = 1.0):
    """The log-probs a loss reads off a collate batch, and the mean action-token entropy of the same logits taken
    when ``rep`` listens -> (logp [B, T-1], float or None).

    The log-probs are ``sequence_log_probs(model, ids, lengths, mask=action_mask)``'s, by the same function
    (``log_probs_and_logits``), at ``temperature``; the entropy is read off its detached logits (``rep.measure``), so
    a run without a logger computes the loss alone and a run with one adds no forward pass."""
    mask = batch['action_mask']  # [B, T-1]
    logp, logits = log_probs_and_logits(model, batch['ids'], batch.get('lengths'), mask,
                                        temperature)  # [B, T-1], [.., V]
    return logp, rep.measure(lambda: action_entropy_of(logits, mask))


def action_entropy_of(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean next-token entropy over the action tokens: ``logits [B, T-1, V]`` (or ``[n, V]``, already at the ``mask``'s
    positions: ``log_probs_and_logits`` of a policy that computes only those), ``mask [B, T-1]`` -> float.

    Computed on the action positions only (a few of every episode's tokens), off the graph; 0 if there are none."""
    with torch.no_grad():
        where = mask != 0  # [B, T-1]
        weights = mask[where]  # [n]
        if not len(weights):
            return 0.0
        rows = logits.detach() if logits.dim() == 2 else logits.detach()[where.to(logits.device)]  # [n, V]
        return ((entropy_from_logits(rows).cpu() * weights).sum() / weights.sum()).item()


def grad_norm(model) -> float:
    """L2 norm of all of ``model``'s gradients together, as they are now (read, never scaled) -> float."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return torch.nn.utils.get_total_norm(grads).item() if grads else 0.0


def first_evaluation(model, evaluate, start: int, rep) -> list:
    """A policy-gradient trainer's history before its first step: ``[(start, *evaluate(model))]``, reported under
    ``eval/`` at ``start`` (``rep``: the trainer's reporter), or ``[]`` without ``evaluate``."""
    if evaluate is None:
        return []
    values = evaluate(model)
    rep.log_eval(start, values)
    return [(start, *values)]


def batch_tokens(batch) -> int:
    """Non-padding tokens of a collate batch (what TRL's ``num_tokens`` counts)."""
    return int(batch['lengths'].sum())


def sample_metrics(trajs, group: int | None = None, env=None, threshold: float = DEFAULT_THRESHOLD,
                   read=None) -> dict:
    """What a sample of episodes shows (sections 15.2-15.6): ``reward``, ``success_rate``, ``reads_first``,
    ``completions/mean_length``, ``invalid_calls`` (when the episodes count them) and, for a task-major
    sample of ``group`` episodes per task, ``reward_std``, ``frac_reward_zero_std`` and ``informative``.

    ``read``: the environment's test of a looking call (``diagnostics.is_read(env)``; pass it to resolve it once)."""
    trajs = list(trajs)
    if read is None:
        read = is_read(env) if env is not None else (lambda call: False)
    out = {'reward': mean_return(trajs), 'success_rate': success_rate(trajs, threshold),
           'reads_first': sum(bool(t.info.get('actions')) and bool(read(t.info['actions'][0])) for t in trajs)
           / len(trajs),
           'completions/mean_length': sum(float(t.action_mask.sum()) for t in trajs) / len(trajs)}
    if all('n_invalid' in t.info for t in trajs):
        out['invalid_calls'] = sum(t.info['n_invalid'] for t in trajs) / len(trajs)
    if group is not None and len(trajs) % group == 0:
        grouped = torch.tensor([float(t.reward) for t in trajs]).view(-1, group)  # [tasks, G]
        informative = informative_fraction(grouped)
        std = grouped.std(1) if group > 1 else torch.zeros(grouped.shape[0])  # [tasks]
        out.update({'reward_std': std.mean().item(), 'informative': informative,
                    'frac_reward_zero_std': 1.0 - informative})
    return out


def filter_metrics(kept, sample=None, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """What a filter kept (sections 15.3, 15.6): ``filter/kept``, ``filter/kept_distinct`` (share of distinct
    (task, action sequence)), ``filter/tasks_solved``; when the episodes report the hidden check
    (``info['hidden_pass']``), ``filter/hacks`` (kept episodes that fail it), ``filter/hack_share`` and, given
    the ``sample`` the filter saw, ``filter/pass_gap``: its share of successes minus the hidden check's."""
    kept = list(kept)
    distinct = {(t.info['task'], tuple(t.info['actions'])) for t in kept}
    out = {'filter/kept': len(kept), 'filter/kept_distinct': len(distinct) / len(kept) if kept else 0.0,
           'filter/tasks_solved': len({t.info['task'] for t in kept})}
    if all('hidden_pass' in t.info for t in kept):
        hacks = sum(not t.info['hidden_pass'] for t in kept)
        out['filter/hacks'] = hacks
        if kept:
            out['filter/hack_share'] = hacks / len(kept)
    if sample and all('hidden_pass' in t.info for t in sample):
        out['filter/pass_gap'] = success_rate(sample, threshold) - sum(bool(t.info['hidden_pass']) for t in sample) \
            / len(sample)
    return out


def round_metrics(k: int, sample, kept, group: int, threshold: float = DEFAULT_THRESHOLD, env=None) -> dict:
    """A round of a sample-and-filter recipe (expert iteration, STaR, RFT with a baseline): ``round``, what its
    ``sample`` of ``group`` episodes per task in ``env`` shows (``sample_metrics``) and what its filter ``kept``
    (``filter_metrics``)."""
    return {'round': k, **sample_metrics(sample, group, env, threshold), **filter_metrics(kept, sample, threshold)}


def preference_metrics(pc, pr, ref_c, ref_r, beta: float) -> dict:
    """DPO's dashboard (sections 15.4, 15.6) from summed log-probs ``[P]`` each (policy and reference, chosen
    and rejected): the chapter's ``d_chosen`` / ``d_rejected`` and TRL's ``rewards/*`` and ``logps/*``."""
    with torch.no_grad():
        dc, dr = pc - ref_c, pr - ref_r  # [P], [P]
        return {'d_chosen': dc.mean().item(), 'd_rejected': dr.mean().item(),
                'rewards/chosen': (beta * dc).mean().item(), 'rewards/rejected': (beta * dr).mean().item(),
                'rewards/margins': (beta * (dc - dr)).mean().item(),
                'rewards/accuracies': (dc > dr).float().mean().item(),
                'logps/chosen': pc.mean().item(), 'logps/rejected': pr.mean().item()}
