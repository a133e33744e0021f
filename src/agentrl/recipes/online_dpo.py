"""Online (iterative) DPO: regenerate the pairs from the current policy (section 15.6, option b; exercise 5).

Section 15.4's DPO trains on pairs sampled once from the weak base, and section 15.6 diagnoses its
failure as off-policy drift: the loss only constrains the fixed pairs, so the policy moves
probability onto sequences no pair evaluates, and the further it moves the less the pairs say
about what it now does. Iterative DPO (Xu et al. 2023; Iterative RPO, Pang et al. 2024) samples
fresh pairs from the current policy every ``regen_every`` steps and makes that policy the new
reference, so every round starts at margin 0 on the policy's own behaviour::

    for step = 1 .. steps:
        if a round starts (every regen_every steps):
            sample n_samples episodes per task from the policy       (fresh, on-policy)
            pairs = make_pairs(sample)                                (success vs failure, same task)
            ref   = the policy now                                    (frozen log-probs of the pairs)
        loss = preference_loss(pairs, ref, beta, loss) + nll_weight * sft_loss(chosen)
        one AdamW step on every pair (full batch)

One AdamW optimizer runs through all rounds. A round whose sample has no pair (every task all
pass or all fail) takes no update until the next regeneration.
"""
from __future__ import annotations

import torch

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter, merge_eval
from ..rendering.trajectory import collate
from ..runtime.threads import small_model_threads
from .dpo import LOSSES, episode_logp, make_pairs, preference_step
from .evaluation import pass_rate
from .monitors import sample_metrics


@small_model_threads
def train_online_dpo(policy, tasks, tok, steps=100, regen_every=25, n_samples=16, beta=0.1, lr=1e-3, nll_weight=0.0,
                     loss='sigmoid', seed=0, evaluate=None, every=25, env=DEFAULT_ENV, margin=1.0, loggers=None) -> list:
    """Iterative DPO on ``tasks`` in ``env`` (a factory or Gymnasium id), in place -> log, one dict per ``every`` steps.

    Round r (starting at step ``r * regen_every + 1``) samples with seed ``seed + r`` and pairs
    with ``make_pairs(..., seed=seed + r)``. ``loss`` is ``'sigmoid'`` (DPO), ``'ipo'`` or
    ``'hinge'`` (``recipes.dpo.preference_loss``). Each log row holds ``step``, ``round``,
    ``pairs`` (this round's pair count), ``sample_pass`` and ``invalid`` (pass rate and invalid
    calls per episode of this round's fresh sample: the policy's own behaviour when the round
    began), ``d_chosen`` / ``d_rejected`` (mean change of chosen / rejected log-probs from this
    round's reference, before the step's update; 0 without pairs), ``loss``, and
    ``evaluate(policy)`` (a dict, e.g. train and held-out pass). ``margin``: the least return gap of a pair
    (``make_pairs``; 1.0 pairs the chapter's successes with failures).

    ``loggers`` (``agentrl.loggers``) get, at each round's first step, what its fresh sample shows (``reward``,
    ``invalid_calls``, ``informative`` ...) and ``pairs``; at every step with pairs, ``train_dpo``'s dashboard;
    every ``every`` steps, ``evaluate``'s figures under ``eval/`` (a key that is one of the row's own raises
    ValueError).
    """
    if loss not in LOSSES:
        raise ValueError(f'unknown loss {loss!r}; valid losses are {list(LOSSES)}')
    for name, value in (('steps', steps), ('regen_every', regen_every), ('n_samples', n_samples), ('every', every)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == 'steps' else 1):
            raise ValueError(f'{name} must be a positive int, got {value!r}')
    tasks = list(tasks)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr)
    rep = as_reporter(loggers)
    log = []
    for step in range(1, steps + 1):
        if (step - 1) % regen_every == 0:  # a new round: fresh pairs, and the policy becomes the reference
            started = rep.clock()
            r = (step - 1) // regen_every
            sample_pass, sample = pass_rate(policy, tasks, tok, n_samples, seed=seed + r, env=env)
            invalid = sum(t.info['n_invalid'] for t in sample) / len(sample)
            pairs = make_pairs(sample, tasks, seed=seed + r, margin=margin)
            if pairs:
                chosen_b = collate([c for c, _ in pairs], tok.pad_id)
                rejected_b = collate([rj for _, rj in pairs], tok.pad_id)
                with torch.no_grad():
                    ref_c, ref_r = episode_logp(policy, chosen_b), episode_logp(policy, rejected_b)  # [P], [P]
            rep.log(step - 1, lambda: {'round': r, 'pairs': len(pairs), **sample_metrics(sample, n_samples, env)},
                    started=started, episodes=len(sample))
        d_chosen = d_rejected = loss_value = 0.0
        if pairs:
            d_chosen, d_rejected, loss_value = preference_step(policy, opt, chosen_b, rejected_b, ref_c, ref_r, beta,
                                                               loss, nll_weight, rep, step)
        if step % every == 0:
            row = {'step': step, 'round': r, 'pairs': len(pairs), 'sample_pass': sample_pass, 'invalid': invalid,
                   'd_chosen': d_chosen, 'd_rejected': d_rejected, 'loss': loss_value}
            if evaluate is not None:
                values = evaluate(policy)
                merge_eval(row, values, 'train_online_dpo')
                rep.log_eval(step, values)
            log.append(row)
    return log
