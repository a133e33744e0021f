"""The optimizer every recipe shares, and its hygiene: weight decay, gradient clipping, warmup and a schedule.

``OptimConfig()`` is what the chapter's recipes have always done: AdamW with torch's defaults (weight decay 0.01 on
every weight), no clipping, a constant learning rate. Each knob moves one thing, under the name ``transformers``'
``TrainingArguments`` and TRL give it:

- ``weight_decay``, and ``decay_norms_and_biases=False`` to leave norms' weights and biases undecayed (every
  1-dimensional parameter), as ``transformers``' ``Trainer`` does;
- ``max_grad_norm``: the gradient's global L2 norm clipped to it before each step (``torch.nn.utils.clip_grad_norm_``);
- ``warmup_steps`` of linear warmup from 0, then ``lr_scheduler_type`` ``'constant'``, ``'linear'`` (to 0 at the last
  step) or ``'cosine'`` (half a cosine to 0).

``make_optimizer(model, lr, optim)`` and ``make_scheduler(opt, optim, steps)`` build them; ``optimizer_step(model,
opt, scheduler, optim)`` clips, steps and advances the schedule. Gradient accumulation is each recipe's own (its
``micro_batch``): the same update as one batch, in the memory of a few episodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SCHEDULES = ('constant', 'linear', 'cosine')


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its hygiene (see the module docstring); the defaults are the chapter's."""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay (torch's default, the chapter's)."""
    decay_norms_and_biases: bool = True
    """Decay every parameter (the chapter's); False leaves every 1-dimensional one (norms' weights, biases) undecayed."""
    max_grad_norm: float | None = None
    """Clip the gradient's global L2 norm to this before each step; None: no clipping (the chapter's)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warmup from a learning rate of 0."""
    lr_scheduler_type: str = 'constant'
    """After the warmup: ``'constant'`` (the chapter's), ``'linear'`` or ``'cosine'`` decay to 0 at the last step."""

    def __post_init__(self):
        if self.lr_scheduler_type not in SCHEDULES:
            raise ValueError(f'unknown lr_scheduler_type {self.lr_scheduler_type!r}; valid choices are {list(SCHEDULES)}')
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f'weight_decay must be a finite number >= 0, got {self.weight_decay!r}')
        if self.max_grad_norm is not None and not (isinstance(self.max_grad_norm, (int, float)) and self.max_grad_norm > 0):
            raise ValueError(f'max_grad_norm must be None (no clipping) or a number > 0, got {self.max_grad_norm!r}')
        if not isinstance(self.warmup_steps, int) or isinstance(self.warmup_steps, bool) or self.warmup_steps < 0:
            raise ValueError(f'warmup_steps must be an int >= 0, got {self.warmup_steps!r}')

    @property
    def plain(self) -> bool:
        """Whether this is the chapter's optimizer: no clipping, no schedule, every weight decayed."""
        return self == OptimConfig(weight_decay=self.weight_decay)


def make_optimizer(model, lr: float, optim: OptimConfig | None = None) -> torch.optim.AdamW:
    """AdamW over ``model``'s trainable parameters (with ``decay_norms_and_biases=False``: two groups)."""
    optim = optim or OptimConfig()
    if optim.decay_norms_and_biases:
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=optim.weight_decay)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': optim.weight_decay},
              {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
    return torch.optim.AdamW([g for g in groups if g['params']], lr=lr)


def lr_factor(step: int, steps: int, optim: OptimConfig) -> float:
    """The learning rate's factor at optimizer step ``step`` (0-based) of ``steps``: warmup, then the schedule."""
    if step < optim.warmup_steps:
        return (step + 1) / (optim.warmup_steps + 1)
    if optim.lr_scheduler_type == 'constant':
        return 1.0
    done = (step - optim.warmup_steps) / max(1, steps - optim.warmup_steps)  # 0 at the warmup's end, 1 at the last
    return max(0.0, 1.0 - done) if optim.lr_scheduler_type == 'linear' else 0.5 * (1.0 + math.cos(math.pi * min(done, 1.0)))


def make_scheduler(opt, optim: OptimConfig | None, steps: int):
    """A ``LambdaLR`` of ``lr_factor`` over ``steps`` optimizer steps, or None for a constant rate without warmup."""
    optim = optim or OptimConfig()
    if optim.warmup_steps == 0 and optim.lr_scheduler_type == 'constant':
        return None
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, steps, optim))


def optimizer_step(model, opt, scheduler=None, optim: OptimConfig | None = None) -> None:
    """Clip the gradient (``max_grad_norm``), take the optimizer's step, advance the schedule."""
    if optim is not None and optim.max_grad_norm:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], optim.max_grad_norm)
    opt.step()
    if scheduler is not None:
        scheduler.step()
