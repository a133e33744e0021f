"""Gradient isolation, shared by the recipe tests on TinyAgent and on HFPolicy: a loss may train only the
positions that predict a policy token (section 15.1's mask), whatever the model."""
from __future__ import annotations

import torch

import agentrl as arl

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
        return self

    def __exit__(self, *exc):
        del self.model.forward


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
