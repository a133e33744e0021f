"""REINFORCE with a per-task group-mean baseline (section 15.5).

Each step samples ``group`` episodes for each of ``n_tasks`` tasks, subtracts each task's mean
reward from its episodes' rewards (the group baseline), and weights every action token's log-prob
by that advantage. A group whose episodes all pass or all fail has zero advantage everywhere: it
teaches nothing, which is why section 15.6 measures the fraction of informative groups.
"""
from __future__ import annotations

import random

import torch

from ..env import BugFixEnv
from ..model import sequence_log_probs
from ..render import collate
from ..rollout import rollout_batch


def reinforce_step(model, opt, tasks, tok, rng, gen, n_tasks=8, group=8) -> float:
    """One REINFORCE step with a per-task group-mean baseline -> mean batch reward (section 15.5)."""
    batch_tasks = [t for t in rng.sample(list(tasks), n_tasks) for _ in range(group)]
    trajs = rollout_batch(model, [BugFixEnv() for _ in batch_tasks], batch_tasks, tok, generator=gen)
    b = collate(trajs, tok.pad_id)
    rewards = b['rewards'].view(n_tasks, group)  # [tasks, G]
    advantages = (rewards - rewards.mean(1, keepdim=True)).view(-1, 1)  # [B, 1]
    logp = sequence_log_probs(model, b['ids'])  # [B, T-1]
    mask = b['action_mask']  # [B, T-1]
    pg_loss = -(advantages * logp * mask).sum() / mask.sum()
    opt.zero_grad()
    pg_loss.backward()
    opt.step()
    return rewards.mean().item()


def train_rl(model, tasks, tok, steps, start=0, lr=1e-3, seed=0, n_tasks=8, group=8, every=10, evaluate=None):
    """``steps`` REINFORCE steps on ``tasks``, in place -> history of (step, *evaluate(model)) (section 15.5).

    ``evaluate(model)`` returns a tuple (for example train and held-out pass); it runs before the
    first step and every ``every`` steps. ``start`` offsets the step numbers, so a cold-started
    run continues the x axis of its SFT phase.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    history = [(start, *evaluate(model))] if evaluate is not None else []
    for step in range(1, steps + 1):
        reinforce_step(model, opt, tasks, tok, rng, gen, n_tasks, group)
        if evaluate is not None and step % every == 0:
            history.append((start + step, *evaluate(model)))
    return history
