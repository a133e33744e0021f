"""Measuring a policy in an environment: pass rate, pass rate per task group, and action entropy (section 15.2).

Every evaluator takes the environment as ``env=``: a factory or Gymnasium id (``envs.protocol``),
the BugFix gym by default. One fresh environment is built per episode.
"""
from __future__ import annotations

import torch

from ..envs.protocol import DEFAULT_ENV
from ..policies.scoring import entropy_from_logits
from ..rollouts.engine import rollout_groups
from ..runtime.threads import small_model_threads


@small_model_threads
def pass_rate(model, tasks, tok, n_samples=4, temperature=1.0, seed=0, reward='hidden', env=DEFAULT_ENV):
    """Sample n_samples episodes per task in lockstep -> (mean return, list of Trajectory) (section 15.2).

    ``env``: the environment factory or Gymnasium id; ``reward='public'`` builds it with its public reward.
    The first value is the mean of the episodes' returns: with the chapter's 0/1 rewards, the share that
    pass. With partial credit it is the mean return, not a success rate: ``recipes.outcomes.success_rate``
    (of the episodes returned) gives that.
    """
    gen = torch.Generator().manual_seed(seed)
    trajs = rollout_groups(model, tasks, tok, n_samples, env=env, reward=reward, temperature=temperature, generator=gen)
    return sum(t.reward for t in trajs) / len(trajs), trajs


def group_rates(trajs) -> dict:
    """Mean return per task group of some episodes (``info['group']``; BugFix: the bug family) -> {group: pass}.

    Groups appear in the order their first episode does (BugFix's tasks come in ``FAMILIES`` order);
    episodes without a group are left out."""
    out = {}
    for t in trajs:
        group = t.info.get('group')
        if group is not None:
            out.setdefault(group, []).append(t.reward)
    return {g: sum(rs) / len(rs) for g, rs in out.items()}


@small_model_threads
def group_pass(model, tasks, tok, n_samples=4, seed=0, env=DEFAULT_ENV) -> dict:
    """Pass rate per task group, ``n_samples`` episodes per task -> {group: pass} (groups of ``tasks`` only).

    The same episodes as ``pass_rate(model, tasks, tok, n_samples, seed=seed, env=env)``. On BugFix's held-out tasks
    after oracle SFT this is section 15.2's transfer, family by family: the skill (read the source, pick the fix from
    its cue) carries over to unseen functions only if every family does.
    """
    return group_rates(pass_rate(model, tasks, tok, n_samples, seed=seed, env=env)[1])


@small_model_threads
def action_entropy(model, batch) -> float:
    """Mean next-token entropy over action tokens of a collate batch -> float (section 15.2)."""
    with torch.no_grad():
        lengths, mask = batch.get('lengths'), batch['action_mask']
        if hasattr(model, 'masked_logits'):  # a policy that computes its output layer only where asked (hf.HFPolicy)
            ent = entropy_from_logits(model.masked_logits(batch['ids'], mask, lengths)).cpu()  # [n]
            return ((ent * mask[mask != 0]).sum() / mask.sum()).item()
        logits = model(batch['ids']) if lengths is None else model(batch['ids'], lengths=lengths)  # [B, T, V]
        ent = entropy_from_logits(logits[:, :-1])  # [B, T-1]
    return ((ent * mask).sum() / mask.sum()).item()
