"""The field's policy-gradient variants by name: each a set of ``GRPOConfig`` settings (``recipes.grpo_config``).

``VARIANTS[name]`` is the settings a variant changes from the clipped trainer's defaults, under TRL's names, so
``GRPOConfig(**VARIANTS['dapo'], n_tasks=8, num_generations=8)`` is DAPO and the same keys move to TRL's
``GRPOConfig`` unchanged (but agentrl's own ``advantage_estimator`` and ``dynamic_sampling``). ``'reinforce'`` is
no setting of the clipped trainer: it names section 15.5's REINFORCE (``recipes.reinforce.train_rl``), the
baseline a comparison measures every variant against. The table with each variant's paper is in docs/variants.md.

This module imports nothing (not torch): the command line checks a variant's name against it in milliseconds.
"""
from __future__ import annotations

REINFORCE = 'reinforce'
"""The chapter's REINFORCE with the group-mean baseline (``train_rl``): not a setting of the clipped trainer."""

VARIANTS = {
    REINFORCE: None,
    'clipped': {},  # the clipped trainer at its defaults: PPO's surrogate, bnpo, advantages R - mean(R)
    'grpo': {'loss_type': 'grpo', 'scale_rewards': 'group'},  # Shao et al. 2024 (DeepSeekMath)
    'dr_grpo': {'loss_type': 'dr_grpo', 'scale_rewards': 'none'},  # Liu et al. 2025, Understanding R1-Zero-Like Training
    'clip_higher': {'epsilon': 0.2, 'epsilon_high': 0.28},  # Yu et al. 2025 (DAPO)
    'dapo': {'loss_type': 'dapo', 'epsilon': 0.2, 'epsilon_high': 0.28, 'dynamic_sampling': True,
             'mask_truncated_completions': True},  # Yu et al. 2025 (DAPO): all four of its changes
    'dynamic_sampling': {'dynamic_sampling': True},  # DAPO's dynamic sampling alone
    'cispo': {'loss_type': 'cispo', 'epsilon_high': 5.0},  # MiniMax-M1, 2025
    'gspo': {'importance_sampling_level': 'sequence', 'loss_type': 'grpo', 'epsilon': 3e-4,
             'epsilon_high': 4e-4},  # Zheng et al. 2025 (GSPO)
    'rloo': {'advantage_estimator': 'rloo'},  # Kool et al. 2019; Ahmadian et al. 2024
    'batch_std': {'scale_rewards': 'batch'},  # Liu et al. 2025, Tricks or Traps?
    'turn_credit': {'credit': 'turn'},  # per-turn reward-to-go, leave-one-out baseline (docs/rewards.md)
}
"""Variant name -> the ``GRPOConfig`` settings it changes (None: REINFORCE, not the clipped trainer)."""


def variant_settings(name: str) -> dict | None:
    """A variant's ``GRPOConfig`` settings (a copy), or None for ``'reinforce'``; ValueError naming the valid ones."""
    if name not in VARIANTS:
        raise ValueError(f'unknown policy-gradient variant {name!r}; valid variants are {list(VARIANTS)}')
    settings = VARIANTS[name]
    return None if settings is None else dict(settings)
