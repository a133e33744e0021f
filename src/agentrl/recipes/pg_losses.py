"""The policy-gradient variants of the clipped trainer, as pure functions of tensors (``recipes.grpo`` runs them).

Each function takes per-token tensors of a collated batch (``[B, T-1]``: one entry per next-token position, the
action ``mask`` 1 on the policy's tokens) and returns what its paper writes, under TRL's names (``trl.GRPOConfig``
1.16: ``loss_type``, ``epsilon``, ``epsilon_high``, ``delta``, ``importance_sampling_level``, ``scale_rewards``,
``vllm_importance_sampling_*``) with TRL's meanings, so a setting moves between the two unchanged:

- **advantages** (``group_advantages``): the group-mean baseline (GRPO, Shao et al. 2024) or the leave-one-out
  baseline (RLOO, Kool et al. 2019; Ahmadian et al. 2024), then no scaling, the group's std (GRPO) or the batch's
  (``scale_rewards='batch'``, Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM Reasoning");
- **ratios** (``importance_weights``): per token (PPO, Schulman et al. 2017), or one per sequence, the exponent
  of its mean log-ratio (GSPO, Zheng et al. 2025);
- **the per-token objective**: PPO's clipped surrogate with clip-higher (``epsilon_high``, DAPO, Yu et al. 2025)
  and an optional cap on the unclipped ratio (``delta``, INTELLECT-2, 2025) (``clipped_surrogate``), or CISPO's
  clipped, stop-gradient importance weight times A log pi (MiniMax-M1, 2025) (``cispo_surrogate``);
- **aggregation** (``aggregate``): GRPO's mean of each sequence's token mean, BNPO's token mean over the
  minibatch, Dr. GRPO's constant normaliser (Liu et al. 2025, "Understanding R1-Zero-Like Training"), DAPO's
  token mean over the whole step's batch;
- **truncation** (``loss_mask``): episodes the environment cut at a budget left out of the loss (DAPO's overlong
  filtering; TRL's ``mask_truncated_completions``);
- **the sampler's gap** (``sampler_weights``, ``sampler_gap``): truncated importance sampling against log-probs
  the sampler recorded (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
  training"), and how far the sampler is from the trainer;
- **monitors as TRL computes them** (``clip_ratios``, ``masked_mean``).

Every function is deterministic and draws no random number.
"""
from __future__ import annotations

import math

import torch

LOSS_TYPES = ('grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo')
"""TRL 1.16's ``loss_type`` values agentrl has (TRL also has ``'sapo'``, ``'luspo'`` and ``'vespo'``)."""
CLIPPED = ('grpo', 'bnpo', 'dr_grpo', 'dapo')
"""The loss types whose objective is PPO's clipped surrogate (the rest: CISPO)."""
IS_LEVELS = ('token', 'sequence')
SCALE_REWARDS = ('none', 'group', 'batch')
ESTIMATORS = ('grpo', 'rloo')
IS_MODES = ('token_truncate', 'token_mask', 'sequence_truncate', 'sequence_mask')
STD_EPS = 1e-4
"""Added to a reward std before dividing (TRL's); an all-equal group has A = 0 anyway."""
GAP_BAND = (0.8, 1.25)
"""``sampler_gap``'s band of trainer / sampler probability ratios (``sampler_gap/outside_share``)."""
OLD_LOSS_NAMES = {'token': 'bnpo', 'seq': 'grpo'}
"""agentrl's former ``agg`` values -> TRL's ``loss_type``."""
OLD_SCALE_NAMES = {'mean': 'none', 'std': 'group'}
"""agentrl's former ``adv_norm`` values -> TRL's ``scale_rewards``."""
CLIP_MONITORS = ('clip_ratio/low_mean', 'clip_ratio/high_mean', 'clip_ratio/region_mean', 'clip_ratio/low_min',
                 'clip_ratio/high_max')
"""TRL's clip monitors of a clipped loss type (``clip_ratios``)."""


def check_choice(name: str, value, valid) -> None:
    """``ValueError`` naming the valid choices unless ``value`` is one of them."""
    if value not in valid:
        raise ValueError(f'unknown {name} {value!r}; valid choices are {list(valid)}')


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the mask's tokens -> scalar, as TRL's monitors take it (its ``global_masked_mean``):
    ``x [B, T-1]`` over the tokens where ``mask [B, T-1]`` is 1, or ``x [B, 1]`` (one value per sequence) over the
    sequences. 0 when the mask is empty."""
    x = x.float()
    if x.shape[1] == 1:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1)


def loss_mask(mb: dict, cfg) -> torch.Tensor:
    """The tokens the loss reads: ``mb``'s action mask ``[b, T-1]``, without the rows of truncated episodes when
    ``cfg.mask_truncated_completions`` (``collate``'s ``truncated [b]``)."""
    mask = mb['action_mask']  # [b, T-1]
    if not cfg.mask_truncated_completions:
        return mask
    if 'truncated' not in mb:
        raise ValueError("mask_truncated_completions needs the batch's 'truncated' [b] (collate sets it from each "
                         "episode's info['truncated'])")
    return mask * (~mb['truncated'].bool()).to(mask.dtype)[:, None]


# --- advantages -------------------------------------------------------------------------------------------------

def reward_scale(rewards: torch.Tensor, scale_rewards: str = 'none') -> torch.Tensor | None:
    """What ``scale_rewards`` divides the advantages of ``rewards [tasks, G]`` by -> ``[tasks, 1]``, ``[1, 1]`` or
    None (``'none'``): each group's reward std (``'group'``, unbiased, as TRL) or the whole batch's (``'batch'``),
    plus ``STD_EPS``. A batch of one episode has std 0."""
    check_choice('scale_rewards', scale_rewards, SCALE_REWARDS)
    if scale_rewards == 'none':
        return None
    if scale_rewards == 'group':
        return rewards.std(1, keepdim=True) + STD_EPS  # [tasks, 1]
    std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())
    return (std + STD_EPS).view(1, 1)


def group_advantages(rewards: torch.Tensor, scale_rewards: str = 'none', advantage_estimator: str = 'grpo'
                     ) -> torch.Tensor:
    """One advantage per episode: ``rewards [tasks, G]`` (task-major groups) -> ``[tasks, G]``.

    ``advantage_estimator='grpo'``: ``A_i = R_i - mean_j R_j`` over the group (the chapter's baseline; GRPO,
    Shao et al. 2024). ``'rloo'``: ``A_i = R_i - mean_{j != i} R_j``, the leave-one-out baseline (Kool et al.
    2019; Ahmadian et al. 2024; TRL's ``RLOOTrainer``), ``G / (G - 1)`` times the former, unbiased because the
    baseline does not depend on episode i. Then divided by ``reward_scale(rewards, scale_rewards)``:
    ``'none'`` (Dr. GRPO), ``'group'`` (GRPO) or ``'batch'``. agentrl's former ``adv_norm`` values are taken too
    (``'mean'`` is ``'none'``, ``'std'`` is ``'group'``), as are TRL's ``True`` / ``False``.
    """
    if isinstance(scale_rewards, bool):
        scale_rewards = 'group' if scale_rewards else 'none'
    scale_rewards = OLD_SCALE_NAMES.get(scale_rewards, scale_rewards)
    check_choice('scale_rewards', scale_rewards, SCALE_REWARDS)
    check_choice('advantage_estimator', advantage_estimator, ESTIMATORS)
    if advantage_estimator == 'grpo':
        advantages = rewards - rewards.mean(1, keepdim=True)  # [tasks, G]
    else:
        G = rewards.shape[1]
        if G < 2:
            raise ValueError("advantage_estimator='rloo' needs groups of 2 or more (a group of one has no others)")
        advantages = rewards - (rewards.sum(1, keepdim=True) - rewards) / (G - 1)  # [tasks, G]
    scale = reward_scale(rewards, scale_rewards)
    return advantages if scale is None else advantages / scale


# --- ratios and the per-token objective -----------------------------------------------------------------------

def importance_weights(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str = 'token'
                       ) -> torch.Tensor:
    """The ratio pi / pi_old the objective clips -> ``[B, T-1]`` (``'token'``) or ``[B, 1]`` (``'sequence'``).

    ``'token'``: ``exp(logp - old_logp)`` per action token, 1 elsewhere (PPO). ``'sequence'``: GSPO's
    ``s_i = exp(mean_t (logp - old_logp))`` over the sequence's action tokens (Zheng et al. 2025), one weight
    whose gradient reaches every token of the sequence: TRL's ``importance_sampling_level``.
    """
    check_choice('importance_sampling_level', level, IS_LEVELS)
    log_ratio = (logp - old_logp) * mask  # [B, T-1], 0 off the action tokens
    if level == 'sequence':
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)  # [B, 1]
    return log_ratio.exp()


def clipped_surrogate(coef_1: torch.Tensor, advantages: torch.Tensor, epsilon: float, epsilon_high=None,
                      delta=None) -> torch.Tensor:
    """PPO's clipped surrogate per token, negated to a loss (Schulman et al. 2017) -> ``coef_1``'s shape broadcast
    with ``advantages``'s::

        loss_t = -min(r_t A_t, clip(r_t, 1 - epsilon, 1 + epsilon_high) A_t)

    ``epsilon_high`` (None: ``epsilon``) raises the upper bound alone, DAPO's clip-higher (Yu et al. 2025), so a
    rare token can grow; ``delta`` (None: off) caps the unclipped ratio too, ``min(r_t, delta)``, INTELLECT-2's
    two-sided clip (TRL's ``delta``). A token whose clip binds for the sign of its advantage gets no gradient.
    """
    high = epsilon if epsilon_high is None else epsilon_high
    coef_2 = coef_1.clamp(1 - epsilon, 1 + high)
    if delta is not None:
        coef_1 = coef_1.clamp(max=delta)
    return torch.max(-advantages * coef_1, -advantages * coef_2)


def cispo_surrogate(coef_1: torch.Tensor, advantages: torch.Tensor, logp: torch.Tensor, epsilon_high: float
                    ) -> torch.Tensor:
    """CISPO's per-token loss (MiniMax-M1, 2025) -> ``[B, T-1]``::

        loss_t = -sg(min(r_t, epsilon_high)) A_t log pi(a_t)

    The importance weight is clipped and its gradient stopped, so every token keeps a gradient ``A_t w_t d log pi``
    (PPO's clip drops the tokens where it binds). ``epsilon_high`` is the weight's cap itself, not ``1 + eps``:
    TRL's meaning (ScaleRL's epsilon_max, about 5), so set it; TRL leaves it at ``epsilon`` otherwise.
    """
    return -coef_1.clamp(max=epsilon_high).detach() * advantages * logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Schulman's (2020) k3 estimate of KL(pi || pi_ref) per token -> ``[B, T-1]``, 0 off the mask: with
    ``d = log pi_ref - log pi``, ``exp(d) - 1 - d`` (unbiased, never below 0; TRL's ``per_token_kl``)."""
    log_r = (ref_logp - logp) * mask  # [B, T-1]
    return log_r.exp() - 1 - log_r


def aggregate(x: torch.Tensor, mask: torch.Tensor, loss_type: str = 'bnpo', max_completion_length=None,
              num_items=None, norm=None) -> torch.Tensor:
    """Per-token losses ``x [B, T-1]`` (or ``[B, 1]``, broadcast) over the action tokens (``mask [B, T-1]``) ->
    scalar, as ``loss_type`` says (TRL's ``_compute_loss``):

    - ``'grpo'``: each sequence's mean over its own tokens, then the mean over sequences (Shao et al. 2024): every
      episode weighs the same, so a long episode's tokens weigh less each;
    - ``'bnpo'``: the mean over every action token of the minibatch (agentrl's default; every token weighs the same);
    - ``'dr_grpo'``: the token sum over ``B * max_completion_length``, a constant: no length division at all
      (Liu et al. 2025, Dr. GRPO);
    - ``'dapo'`` / ``'cispo'``: the token sum over ``num_items``, the action tokens of the whole step's batch per
      optimizer step (DAPO, Yu et al. 2025; TRL's ``num_items_in_batch`` spread over the steps of a generation
      batch); None: this minibatch's own tokens (it is the batch), which is ``'bnpo'``.

    agentrl's former ``agg`` names are taken too (``'token'`` is ``'bnpo'``, ``'seq'`` is ``'grpo'``).

    ``norm``: ``(episodes, tokens)`` of the minibatch these rows are part of (gradient accumulation): every count above
    is the minibatch's instead of these rows', so the parts' losses add up to the minibatch's.
    """
    loss_type = OLD_LOSS_NAMES.get(loss_type, loss_type)
    check_choice('loss_type', loss_type, LOSS_TYPES)
    total = x * mask  # [B, T-1]
    if norm is not None:  # a part of a minibatch: divide by the minibatch's counts
        episodes, tokens = norm
        if loss_type == 'grpo':
            return (total.sum(1) / mask.sum(1).clamp(min=1)).sum() / episodes
        if loss_type == 'dr_grpo':
            return total.sum() / (episodes * max_completion_length)
        if loss_type in ('dapo', 'cispo') and num_items is not None:
            return total.sum() / torch.as_tensor(num_items, dtype=total.dtype).clamp(min=1)
        return total.sum() / max(float(tokens), 1.0)
    if loss_type == 'grpo':
        return (total.sum(1) / mask.sum(1).clamp(min=1)).mean()
    if loss_type == 'bnpo':
        return total.sum() / mask.sum().clamp(min=1)
    if loss_type == 'dr_grpo':
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length (its constant normaliser)")
        return total.sum() / (x.shape[0] * max_completion_length)
    n = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=total.dtype)
    return total.sum() / n.clamp(min=1)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg,
                sampler_weight=None, num_items=None, norm=None) -> tuple:
    """The policy term of the loss -> (scalar, ``coef_1``: the ratio it clipped, ``[B, T-1]`` or ``[B, 1]``).

    ``logp`` (with its graph), ``old_logp`` (the behaviour's, no graph) and ``mask`` are ``[B, T-1]``;
    ``advantages`` ``[B, 1]`` (one per episode) or ``[B, T-1]`` (per token, turn credit); ``cfg`` a ``GRPOConfig``
    (its ``loss_type``, ``epsilon``, ``epsilon_high``, ``delta``, ``importance_sampling_level``,
    ``max_completion_length``). ``sampler_weight`` (optional, ``sampler_weights``) multiplies every token's loss:
    truncated importance sampling against a sampler that is not the trainer. ``num_items`` and ``norm``:
    ``aggregate``'s.
    """
    coef_1 = importance_weights(logp, old_logp, mask, cfg.importance_sampling_level)
    if cfg.loss_type == 'cispo':
        per_token = cispo_surrogate(coef_1, advantages, logp, _high(cfg))
    else:
        per_token = clipped_surrogate(coef_1, advantages, cfg.epsilon, cfg.epsilon_high, cfg.delta)
    if sampler_weight is not None:
        per_token = per_token * sampler_weight
    return aggregate(per_token, mask, cfg.loss_type, cfg.max_completion_length, num_items, norm), coef_1


def _high(cfg) -> float:
    return cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high


# --- the sampler that is not the trainer ----------------------------------------------------------------------

def sampler_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                    mode: str = 'token_truncate', clip_min=None, clip_max=3.0) -> torch.Tensor:
    """Truncated importance sampling's weight of each token (Yao et al. 2025) -> ``[B, T-1]`` or ``[B, 1]``.

    The episodes were drawn by a sampler (the lean bfloat16 path, a stale policy) whose log-probs
    ``sampler_logp`` differ from the trainer's, ``trainer_logp`` (no graph); the weight corrects for it, as
    TRL's ``vllm_importance_sampling_mode``: ``'token_truncate'``, ``min(pi_train / pi_sample, clip_max)`` per
    token (TIS; ``clip_min`` a floor); ``'token_mask'``, the ratio, 0 outside ``[clip_min, clip_max]``;
    ``'sequence_*'``, the same with one ratio per sequence, the product over its tokens.
    """
    check_choice('vllm_importance_sampling_mode', mode, IS_MODES)
    diff = (trainer_logp - sampler_logp) * mask  # [B, T-1]
    if mode.startswith('sequence'):
        diff = diff.sum(-1, keepdim=True)  # [B, 1]
    ratio = diff.exp()
    if mode.endswith('truncate'):
        return ratio.clamp(min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def sampler_gap(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> dict:
    """How far the sampler's log-probs are from the trainer's on the action tokens -> dict of floats:
    ``sampling/sampling_logp_difference/mean`` and ``/max`` (TRL's: the mean and max of ``|log pi_train -
    log pi_sample|``) and ``sampler_gap/outside_share`` (agentrl's: the share of tokens whose ratio
    ``pi_train / pi_sample`` lies outside ``GAP_BAND``, [0.8, 1.25])."""
    with torch.no_grad():
        d = (trainer_logp - sampler_logp)[mask != 0]  # [n]
        if not len(d):
            return {'sampling/sampling_logp_difference/mean': 0.0, 'sampling/sampling_logp_difference/max': 0.0,
                    'sampler_gap/outside_share': 0.0}
        ratio = d.exp()
        return {'sampling/sampling_logp_difference/mean': d.abs().mean().item(),
                'sampling/sampling_logp_difference/max': d.abs().max().item(),
                'sampler_gap/outside_share': ((ratio < GAP_BAND[0]) | (ratio > GAP_BAND[1])).float().mean().item()}


def weight_stats(weight: torch.Tensor, mask: torch.Tensor) -> dict:
    """TRL's ``sampling/importance_sampling_ratio/min``, ``/mean``, ``/max`` of ``sampler_weights``'s output (over the
    action tokens, or over the sequences for a sequence mode)."""
    with torch.no_grad():
        w = weight.flatten() if weight.shape[1] == 1 else weight[mask != 0]
        if not len(w):
            w = weight.new_zeros(1)
        return {'sampling/importance_sampling_ratio/min': w.min().item(),
                'sampling/importance_sampling_ratio/mean': w.mean().item(),
                'sampling/importance_sampling_ratio/max': w.max().item()}


# --- TRL's clip monitors --------------------------------------------------------------------------------------

def clip_ratios(coef_1: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg) -> dict:
    """TRL's clip monitors of one update -> dict of floats (TRL's ``_compute_loss``, its names).

    A token counts only where the clip binds for the sign of its advantage: ``low`` where ``r < 1 - epsilon`` and
    ``A < 0``, ``high`` where ``r > 1 + epsilon_high`` and ``A > 0`` (``r`` capped at ``delta`` first, as TRL).
    ``clip_ratio/low_mean``, ``high_mean``, ``region_mean`` (low or high): their share of the action tokens (of the
    sequences, for sequence-level ratios); ``clip_ratio/low_min``: the least per-sequence share of low clips,
    ``clip_ratio/high_max``: the greatest of high clips. CISPO: ``cispo_clip_ratio``, the share of tokens with
    ``r > epsilon_high`` and ``A > 0``.
    """
    with torch.no_grad():
        if cfg.loss_type == 'cispo':
            return {'cispo_clip_ratio': masked_mean((coef_1 > _high(cfg)) & (advantages > 0), mask).item()}
        if cfg.delta is not None:
            coef_1 = coef_1.clamp(max=cfg.delta)
        low = (coef_1 < 1 - cfg.epsilon) & (advantages < 0)
        high = (coef_1 > 1 + _high(cfg)) & (advantages > 0)
        return {'clip_ratio/low_mean': masked_mean(low, mask).item(),
                'clip_ratio/high_mean': masked_mean(high, mask).item(),
                'clip_ratio/region_mean': masked_mean(low | high, mask).item(),
                'clip_ratio/low_min': _skip_nan(_per_sequence(low, mask), torch.min),
                'clip_ratio/high_max': _skip_nan(_per_sequence(high, mask), torch.max)}


def _per_sequence(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each sequence's mean of ``x`` over its tokens -> ``[B]`` (NaN for a sequence with none)."""
    x = x.float()
    return x.squeeze(1) if x.shape[1] == 1 else (x * mask).sum(-1) / mask.sum(-1)


def _skip_nan(x: torch.Tensor, reduce) -> float:
    """``reduce`` over the entries of ``x`` that are not NaN, NaN if none is (TRL's ``nanmin`` / ``nanmax``)."""
    x = x[~x.isnan()]
    return reduce(x).item() if len(x) else math.nan
