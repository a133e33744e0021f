"""Trajectory SFT with the action mask (sections 15.1-15.2).

The log-likelihood of a demo is the sum of its policy tokens' log-probs plus terms the policy's
parameters do not touch (the prompt, the tools' replies). So maximum likelihood on demos *is* the
masked objective: ``sft_loss`` averages the negative log-prob over action tokens only.
"""
from __future__ import annotations

import math

import torch

from ..loggers.protocol import as_reporter
from ..policies.scoring import sequence_log_probs
from ..rendering.trajectory import collate
from ..runtime.threads import small_model_threads
from .loop import RecipeLoop
from .optim import make_optimizer, make_scheduler, optimizer_step
from .monitors import batch_tokens, grad_norm, logp_and_entropy


def sft_loss(model, batch) -> torch.Tensor:
    """Masked NLL on policy tokens: batch from collate (ids [B, T], action_mask [B, T-1]) -> scalar (section 15.1)."""
    logp = sequence_log_probs(model, batch['ids'], batch.get('lengths'), mask=batch['action_mask'])  # [B, T-1]
    return masked_nll(logp, batch['action_mask'])


def masked_nll(logp, mask) -> torch.Tensor:
    """``sft_loss`` from the log-probs: ``logp [B, T-1]``, ``mask [B, T-1]`` (1 on policy tokens) -> scalar."""
    return -(logp * mask).sum() / mask.sum()


@small_model_threads
def sft_train(model, trajs, tok, steps=100, lr=3e-3, batch_size=32, seed=0, hook=None, every=10, loggers=None,
              checkpoint=None, progress=None, optim=None):
    """Minibatch SFT on trajectories with sft_loss; hook(step) runs every `every` steps -> list of losses (section 15.2).

    Each step samples ``batch_size`` trajectories with replacement (seeded by ``seed``), takes one
    AdamW step on ``sft_loss``, and calls ``hook(step)`` every ``every`` steps, so an experiment can
    evaluate or snapshot the model without restarting the optimizer. ``loggers`` (a logger or a list,
    ``agentrl.loggers``) get ``loss``, ``grad_norm``, ``entropy`` and the token counts at every step
    (``loggers.names.RECIPE_METRICS['sft_train']``); the steps are ``sft_step``'s either way.

    ``checkpoint`` (``recipes.loop.Checkpoint``) saves the run's state every N steps and resumes from it (a killed run
    continues to the same weights and losses); ``progress`` is told each step (``recipes.loop``). ``optim``
    (``recipes.optim.OptimConfig``): weight decay, clipping, warmup and schedule (default: the chapter's AdamW).
    """
    trajs = list(trajs)
    if not trajs:
        raise ValueError('sft_train needs at least one trajectory, got an empty list')
    for name, value in (('steps', steps), ('batch_size', batch_size), ('every', every)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == 'steps' else 1):
            raise ValueError(f'{name} must be a positive int, got {value!r}')
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr > 0):
        raise ValueError(f'lr must be a finite number > 0, got {lr!r}')
    opt = make_optimizer(model, lr, optim)
    scheduler = make_scheduler(opt, optim, steps)
    gen = torch.Generator().manual_seed(seed)
    rep = as_reporter(loggers)
    losses = []
    loop = RecipeLoop('sft_train', steps, model, opt, streams={'batches': gen}, outputs={'losses': losses},
                      checkpoint=checkpoint, progress=progress, scheduler=scheduler)
    for step in loop.steps():
        started = rep.clock()
        idx = torch.randint(len(trajs), (min(batch_size, len(trajs)),), generator=gen)
        batch = collate([trajs[i] for i in idx.tolist()], tok.pad_id)
        metrics = sft_step(model, opt, batch, rep, optim=optim, scheduler=scheduler)
        losses.append(metrics['loss'])
        rep.log(step, metrics, started=started, tokens=batch_tokens(batch))
        if hook is not None and step % every == 0:
            hook(step)
    return losses


def sft_step(model, opt, batch, rep, nll=masked_nll, optim=None, scheduler=None) -> dict:
    """One ``opt`` step on ``nll(logp, action_mask)`` of a collate batch (default ``masked_nll``: ``sft_loss``) ->
    the step's monitors: ``loss`` (a float), ``grad_norm`` and ``entropy`` (floats when ``rep`` listens, else None).

    The loss is computed the same way whether or not anything listens; the entropy is read off its logits and the
    gradient's norm before the step, both only for a listening ``rep`` (``monitors.logp_and_entropy``)."""
    logp, entropy = logp_and_entropy(model, batch, rep)  # [B, T-1], float or None
    loss = nll(logp, batch['action_mask'])
    opt.zero_grad()
    loss.backward()
    norm = rep.measure(lambda: grad_norm(model))
    optimizer_step(model, opt, scheduler, optim)
    return {'loss': loss.item(), 'grad_norm': norm, 'entropy': entropy}
