"""Gradient isolation, shared by the recipe tests on TinyAgent and on HFPolicy: a loss may train only the
positions that predict a policy token (section 15.1's mask), whatever the model."""
from __future__ import annotations

import random

import torch

from agentrl.rollouts.engine import rollout_groups

import agentrl as arl
from agentrl.recipes import reinforce as reinforce_module

POLICY = arl.OWNER['policy']


class LogitGrads:
    """Keeps every logits tensor the model returns during a loss, to read its gradient afterwards."""

    def __init__(self, model):
        self.model, self.seen = model, []
        self.forward = model.forward

    def __enter__(self):
        def forward(ids, *args, **kwargs):
            out = self.forward(ids, *args, **kwargs)  # (B, T, V)
            if out.requires_grad:
                out.retain_grad()
                self.seen.append(out)
            return out
        self.model.forward = forward
        if hasattr(type(self.model), 'masked_log_probs_and_logits'):  # through the plain forward: its logits seen
            def masked(ids, mask, lengths=None):
                logits = forward(ids)[:, :-1]  # (B, T-1, V)
                return -torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction='none'), logits
            self.model.masked_log_probs_and_logits = masked
        return self

    def __exit__(self, *exc):
        del self.model.forward
        self.model.__dict__.pop('masked_log_probs_and_logits', None)


def assert_only_policy_positions(logits_grads, trajs):
    """Position t of row b predicts token t+1: its logits may get gradient only if that token is the policy's."""
    assert logits_grads, 'the loss never called the model'
    for out in logits_grads:
        assert out.grad is not None
        B, T, _ = out.shape
        assert B == len(trajs)
        trained = torch.zeros(B, T, dtype=torch.bool)
        for b, t in enumerate(trajs):
            trained[b, :len(t.owner) - 1] = t.owner[1:] == POLICY
        per_pos = out.grad.abs().sum(-1)  # (B, T)
        assert per_pos[~trained].max().item() == 0.0
        assert per_pos[trained].max().item() > 0.0


def reinforce_step_logit_grads(model, tasks, tok, monkeypatch, n_tasks=10, group=8, env=arl.envs.DEFAULT_ENV):
    """One real ``reinforce_step`` (lr 0: the backward runs, the weights stay) -> (logits seen, sampled episodes).

    The step's own rollouts are kept (by wrapping ``rollout_batch``), so the gradient can be checked against
    the episodes it was computed on."""
    sampled = []

    def rollout_and_keep(*args, **kwargs):
        trajs = rollout_groups(*args, **kwargs)
        sampled.extend(trajs)
        return trajs

    monkeypatch.setattr(reinforce_module, 'rollout_groups', rollout_and_keep)
    with LogitGrads(model) as g:
        arl.reinforce_step(model, torch.optim.SGD(model.parameters(), lr=0.0), tasks, tok, random.Random(0),
                           torch.Generator().manual_seed(0), n_tasks=n_tasks, group=group, env=env)
    return g.seen, sampled
