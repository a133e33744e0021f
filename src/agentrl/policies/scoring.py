"""Scoring tokens under any policy: each next token's log-prob, and the entropy of a distribution (sections 15.1, 15.2).

The recipes' losses and monitors read a policy through these, whatever it is: the TinyAgent (every position's
logits) or an ``hf.HFPolicy`` (its output layer only at the positions a mask asks for).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def sequence_log_probs(model: nn.Module, ids: torch.Tensor, lengths=None, mask=None) -> torch.Tensor:
    """Log-prob of each next token under ``model``: ids (B, T) -> (B, T-1) (section 15.1).

    ``lengths`` (B,), optional: each row's real tokens (``collate``'s ``batch['lengths']``), passed on as
    ``model(ids, lengths=lengths)``; without it the model finds the padding itself (see ``TinyAgent.forward``).
    Entries past a row's length are meaningless. ``mask`` (B, T-1), optional: the positions the caller reads (a
    recipe's action mask); a policy with ``masked_log_probs_and_logits`` (``hf.HFPolicy``) then computes its output
    layer only there and returns 0 elsewhere, any other (the TinyAgent) every position, as without it."""
    return log_probs_and_logits(model, ids, lengths, mask)[0]


def log_probs_and_logits(model: nn.Module, ids: torch.Tensor, lengths=None, mask=None, temperature: float = 1.0) -> tuple:
    """``sequence_log_probs`` and the logits it took them from -> (logp (B, T-1), logits): (B, T-1, V), or (n, V)
    at the ``mask``'s positions (row-major) from a policy that computes only those. A monitor reads the logits a
    loss's log-probs came from (``recipes.monitors.action_entropy_of``) with no second forward pass.

    ``temperature``: the log-probs (and logits) of softmax(logits / temperature), the distribution a rollout at that
    temperature samples from (the policy-gradient recipes score their episodes there)."""
    if mask is not None and hasattr(model, 'masked_log_probs_and_logits'):
        if temperature != 1:
            return model.masked_log_probs_and_logits(ids, mask, lengths, temperature=temperature)
        return model.masked_log_probs_and_logits(ids, mask, lengths)
    logits = (model(ids) if lengths is None else model(ids, lengths=lengths))[:, :-1]  # (B, T-1, V)
    if temperature != 1:
        logits = logits / temperature
    B, T1, V = logits.shape
    return -F.cross_entropy(logits.reshape(B * T1, V), ids[:, 1:].reshape(B * T1), reduction='none').view(B, T1), logits


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) over the last dim, (..., V) -> (...) (section 15.2).

    Stable for very peaked logits, and never NaN: tokens with zero probability (including ``-inf``
    logits) contribute exactly 0, and a row with no finite logit has entropy 0.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    ent = -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)
    return torch.nan_to_num(ent, nan=0.0)
