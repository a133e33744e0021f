"""Measuring a policy in the gym: pass rate, pass rate per bug family, and action entropy (section 15.2)."""
from __future__ import annotations

import torch

from ..env import BugFixEnv
from ..model import entropy_from_logits
from ..rollout import rollout_batch
from ..tasks import FAMILIES


def pass_rate(model, tasks, tok, n_samples=4, temperature=1.0, seed=0, reward='hidden'):
    """Sample n_samples episodes per task in lockstep -> (mean reward, list of Trajectory) (section 15.2)."""
    gen = torch.Generator().manual_seed(seed)
    batch_tasks = [t for t in tasks for _ in range(n_samples)]
    envs = [BugFixEnv(reward=reward) for _ in batch_tasks]
    trajs = rollout_batch(model, envs, batch_tasks, tok, temperature=temperature, generator=gen)
    return sum(t.reward for t in trajs) / len(trajs), trajs


def family_rates(trajs) -> dict:
    """Mean reward per bug family of some episodes -> {family: pass}, in ``FAMILIES`` order (families present only)."""
    out = {}
    for f in FAMILIES:
        rs = [t.reward for t in trajs if t.info['family'] == f]
        if rs:
            out[f] = sum(rs) / len(rs)
    return out


def family_pass(model, tasks, tok, n_samples=4, seed=0) -> dict:
    """Pass rate per family, ``n_samples`` episodes per task -> {family: pass} (families of ``tasks`` only).

    The same episodes as ``pass_rate(model, tasks, tok, n_samples, seed=seed)``. On the held-out tasks after
    oracle SFT this is section 15.2's transfer, family by family: the skill (read the source, pick the fix from
    its cue) carries over to unseen functions only if every family does.
    """
    return family_rates(pass_rate(model, tasks, tok, n_samples, seed=seed)[1])


def action_entropy(model, batch) -> float:
    """Mean next-token entropy over action tokens of a collate batch -> float (section 15.2)."""
    with torch.no_grad():
        lengths = batch.get('lengths')
        logits = model(batch['ids']) if lengths is None else model(batch['ids'], lengths=lengths)  # [B, T, V]
        ent = entropy_from_logits(logits[:, :-1])  # [B, T-1]
    return ((ent * batch['action_mask']).sum() / batch['action_mask'].sum()).item()
