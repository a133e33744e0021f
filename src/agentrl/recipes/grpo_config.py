"""``GRPOConfig``: the settings of the clipped trainer (``recipes.grpo.train_grpo``), under TRL's names.

Every variant the field uses (Dr. GRPO, DAPO, GSPO, CISPO, RLOO, truncated importance sampling) is a setting here,
its formula in ``recipes.pg_losses``; the trainer's hygiene (weight decay, clipping, warmup, a schedule, gradient
accumulation) too, as every recipe has it (``recipes.optim``). The variants' table is in docs/variants.md.
"""
from __future__ import annotations

import math
from dataclasses import InitVar, dataclass, fields

from .credit import check_credit
from .optim import SCHEDULES, OptimConfig
from .pg_losses import (ESTIMATORS, IS_LEVELS, IS_MODES, LOSS_TYPES, OLD_LOSS_NAMES, OLD_SCALE_NAMES, SCALE_REWARDS,
                        check_choice)

OLD_NAMES = {'group': 'num_generations', 'lr': 'learning_rate', 'epochs': 'num_iterations', 'clip': 'epsilon',
             'agg': 'loss_type', 'adv_norm': 'scale_rewards', 'kl_coef': 'beta', 'ent_coef': 'entropy_coef',
             'vllm_importance_sampling_cap': 'vllm_importance_sampling_clip_max'}
"""``GRPOConfig``'s former (agentrl's, or TRL's deprecated) names -> the names it has now."""
_OLD_VALUES = {'agg': OLD_LOSS_NAMES, 'adv_norm': OLD_SCALE_NAMES}


@dataclass
class GRPOConfig:
    """Knobs of ``train_grpo``, under TRL's names (``trl.GRPOConfig`` 1.16) with TRL's meanings where TRL has the knob.

    Defaults give the trainer of before (section 15.5's REINFORCE where the two overlap); where they differ from
    TRL's, the field says so. The former names still work, mapped to the new: ``group`` (``num_generations``),
    ``lr`` (``learning_rate``), ``epochs`` (``num_iterations``), ``clip`` (``epsilon``), ``agg``
    (``loss_type``: ``'token'`` is ``'bnpo'``, ``'seq'`` is ``'grpo'``), ``adv_norm`` (``scale_rewards``:
    ``'mean'`` is ``'none'``, ``'std'`` is ``'group'``), ``kl_coef`` (``beta``), ``ent_coef`` (``entropy_coef``)
    and TRL's deprecated ``vllm_importance_sampling_cap`` (``vllm_importance_sampling_clip_max``). The
    variants' settings are tabled in the docs (docs/variants.md).
    """
    n_tasks: int = 8
    """Tasks sampled (without replacement) per step."""
    num_generations: int = 8
    """Episodes per task: the group whose mean is the baseline (TRL's name)."""
    learning_rate: float = 1e-3
    """AdamW learning rate (TRL's default: 1e-6)."""
    num_iterations: int = 2
    """Passes over each step's batch, PPO's reuse (TRL's mu; its default: 1, on-policy)."""
    minibatches: int = 2
    """Minibatches per pass, one optimizer step each, shuffled every pass (TRL: ``steps_per_generation`` with no
    gradient accumulation)."""
    epsilon: float = 0.2
    """The clip's lower range: ratios below ``1 - epsilon`` stop pushing down."""
    epsilon_high: float | None = None
    """The clip's upper range (None: ``epsilon``); DAPO's clip-higher, e.g. 0.28. With ``loss_type='cispo'``: the
    cap of the importance weight itself (ScaleRL's epsilon_max, about 5)."""
    delta: float | None = None
    """Caps the unclipped ratio as well, ``min(ratio, delta)`` (INTELLECT-2's two-sided clip; None: off). Above 1."""
    importance_sampling_level: str = 'token'
    """``'token'``: one ratio per token; ``'sequence'``: GSPO's, one per episode (its mean log-ratio)."""
    loss_type: str = 'bnpo'
    """The aggregation (``pg_losses.aggregate``): ``'grpo'`` (each episode's token mean, then the mean),
    ``'bnpo'`` (token mean of the minibatch), ``'dr_grpo'`` (constant normaliser), ``'dapo'`` (token mean of the
    step's batch), or ``'cispo'`` (CISPO's objective, aggregated as ``'dapo'``). TRL's default: ``'dapo'``."""
    max_completion_length: int = 256
    """``'dr_grpo'``'s constant: the loss is the token sum over (episodes x this). TRL's name and default; there it
    also caps generation, here the environment's budgets cap an episode (the chapter's gyms: ``max_tokens=256``)."""
    scale_rewards: str = 'none'
    """``'none'``: A = R - baseline (Dr. GRPO, the chapter's); ``'group'``: also divided by the group's reward std
    (+ 1e-4; GRPO); ``'batch'``: by the whole batch's. TRL's ``True`` / ``False`` are ``'group'`` / ``'none'``. TRL's
    default: ``'group'``."""
    advantage_estimator: str = 'grpo'
    """The baseline: ``'grpo'``, the group's mean; ``'rloo'``, the mean of the group's other episodes (RLOO). Not a
    knob of TRL's GRPOConfig (its RLOOTrainer is the latter); OpenRLHF's name. Turn credit is always leave-one-out."""
    mask_truncated_completions: bool = False
    """Leave episodes the environment truncated (its turn or token budget; ``info['truncated']``) out of the loss."""
    beta: float = 0.0
    """Weight of the k3 KL estimate to the frozen reference (0: no reference is needed)."""
    use_bias_correction_kl: bool = False
    """Multiply the per-token KL by the ratio (DeepSeek-V3.2's unbiased KL gradient). TRL's default: True."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus: the mean action-token entropy, for every ``loss_type``, subtracted from the loss."""
    max_grad_norm: float | None = None
    """Clip the gradient's L2 norm to this before each optimizer step (None or 0: never). TRL's default: 1.0."""
    weight_decay: float = 0.01
    """AdamW's weight decay (torch's default, the trainer of before; TRL's: 0.0)."""
    decay_norms_and_biases: bool = True
    """Decay every parameter (the trainer of before); False leaves norms' weights and biases undecayed, as
    ``transformers``' Trainer does (``recipes.optim``)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warmup from 0 (TRL's name and default)."""
    lr_scheduler_type: str = 'constant'
    """The learning rate after the warmup: ``'constant'``, ``'linear'`` or ``'cosine'`` decay to 0 at the last
    optimizer step (TRL's default: ``'linear'``)."""
    micro_batch: int = 0
    """Episodes forwarded at a time within a minibatch, their gradients added into its one optimizer step (the same
    update, every loss normalised by the whole minibatch's episodes or tokens): a pretrained model's minibatch of
    dozens in the memory of a few. 0: the whole minibatch at once. TRL's per-device batch and gradient accumulation,
    counted in episodes."""
    temperature: float = 1.0
    """Sampling temperature; every log-prob of the update is taken at it too (see the module docstring)."""
    credit: str = 'episode'
    """``'episode'``: every action token of an episode shares its advantage (the chapter's); ``'turn'``: each
    token gets its turn's reward-to-go minus the group's leave-one-out baseline of it (``recipes.credit``)."""
    gamma: float = 1.0
    """The discount of turn credit's reward-to-go (1: undiscounted)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: draw batches of ``n_tasks`` groups until ``n_tasks`` groups with unequal returns are
    found (or ``max_num_gen_batches`` batches were drawn); train on those. Its draws advance the run's streams."""
    max_num_gen_batches: int = 4
    """Dynamic sampling's cap: batches drawn per step, the first included (verl's name). At the cap, the batch
    is filled up with the uninformative groups."""
    vllm_importance_sampling_correction: bool = False
    """Weight each token by the trainer's probability over the sampler's (truncated importance sampling; TIS):
    the episodes' ``logprobs`` are the sampler's, the ratio's old policy is the trainer's own before the step's
    updates. TRL's name (its sampler is vLLM; its default: True)."""
    vllm_importance_sampling_mode: str = 'token_truncate'
    """``'token_truncate'`` (TIS: ``min(pi_train / pi_sample, clip_max)`` per token), ``'token_mask'``,
    ``'sequence_truncate'``, ``'sequence_mask'`` (``pg_losses.sampler_weights``). TRL 1.16's default:
    ``'sequence_mask'`` (its own docstring says ``'token_truncate'``)."""
    vllm_importance_sampling_clip_min: float | None = None
    """The weight's floor (truncate modes) or the ratio below which a token is dropped (mask modes); None: none."""
    vllm_importance_sampling_clip_max: float | None = 3.0
    """The weight's cap C (truncate modes) or the ratio above which a token is dropped (mask modes)."""
    seed: int = 0
    """Seeds task choice (``random.Random``), rollouts and minibatch shuffling (``torch.Generator``s)."""
    group: InitVar[int | None] = None
    lr: InitVar[float | None] = None
    epochs: InitVar[int | None] = None
    clip: InitVar[float | None] = None
    agg: InitVar[str | None] = None
    adv_norm: InitVar[str | None] = None
    kl_coef: InitVar[float | None] = None
    ent_coef: InitVar[float | None] = None
    vllm_importance_sampling_cap: InitVar[float | None] = None

    def __post_init__(self, *old_values):
        self._take_old_names(dict(zip(OLD_NAMES, old_values)))
        if isinstance(self.scale_rewards, bool):
            self.scale_rewards = 'group' if self.scale_rewards else 'none'
        for name, valid in (('loss_type', LOSS_TYPES), ('importance_sampling_level', IS_LEVELS),
                            ('scale_rewards', SCALE_REWARDS), ('advantage_estimator', ESTIMATORS),
                            ('vllm_importance_sampling_mode', IS_MODES)):
            check_choice(name, getattr(self, name), valid)
        check_choice('lr_scheduler_type', self.lr_scheduler_type, SCHEDULES)
        for name in ('warmup_steps', 'micro_batch'):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f'{name} must be an int >= 0, got {value!r}')
        _check_number(self, 'weight_decay', 0, strict=False)
        for name in ('n_tasks', 'num_generations', 'num_iterations', 'minibatches', 'max_completion_length',
                     'max_num_gen_batches'):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        for name in ('mask_truncated_completions', 'use_bias_correction_kl', 'dynamic_sampling', 'decay_norms_and_biases',
                     'vllm_importance_sampling_correction'):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f'{name} must be True or False, got {getattr(self, name)!r}')
        needs_two = [why for why, on in (("scale_rewards='group'", self.scale_rewards == 'group'),
                                         ("advantage_estimator='rloo'", self.advantage_estimator == 'rloo'),
                                         ('dynamic_sampling', self.dynamic_sampling)) if on]
        if needs_two and self.num_generations < 2:
            raise ValueError(f'{needs_two[0]} needs num_generations >= 2 (a group of one has no spread)')
        if self.minibatches > self.n_tasks * self.num_generations:
            raise ValueError(f'minibatches ({self.minibatches}) exceeds the batch size '
                             f'({self.n_tasks * self.num_generations})')
        for name in ('learning_rate', 'epsilon', 'temperature'):
            _check_number(self, name, 0)
        for name in ('epsilon_high', 'vllm_importance_sampling_clip_min', 'vllm_importance_sampling_clip_max'):
            _check_number(self, name, 0, optional=True)
        for name in ('beta', 'entropy_coef'):
            _check_number(self, name, 0, strict=False)
        _check_number(self, 'delta', 1, optional=True)
        _check_number(self, 'max_grad_norm', 0, strict=False, optional=True)
        low, high = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if low is not None and high is not None and low >= high:
            raise ValueError(f'vllm_importance_sampling_clip_min ({low}) must be below '
                             f'vllm_importance_sampling_clip_max ({high})')
        if low is None and high is None and self.vllm_importance_sampling_mode.endswith('truncate'):
            raise ValueError('a *_truncate vllm_importance_sampling_mode needs vllm_importance_sampling_clip_min or '
                             'vllm_importance_sampling_clip_max')
        check_credit(self.credit, self.gamma)

    def optim(self) -> OptimConfig:
        """The optimizer's hygiene these settings ask for (``recipes.optim``)."""
        return OptimConfig(weight_decay=self.weight_decay, decay_norms_and_biases=self.decay_norms_and_biases,
                           max_grad_norm=self.max_grad_norm or None, warmup_steps=self.warmup_steps,
                           lr_scheduler_type=self.lr_scheduler_type)

    def _take_old_names(self, given: dict) -> None:
        """Move what came under a former name to its new name (``OLD_NAMES``); both at once is an error."""
        defaults = {f.name: f.default for f in fields(self)}
        for old, value in given.items():
            if value is None:
                continue
            new = OLD_NAMES[old]
            if getattr(self, new) != defaults[new]:
                raise ValueError(f'{old} is the former name of {new}: give one of them, not both')
            if old in _OLD_VALUES:
                if value not in _OLD_VALUES[old]:
                    said = ', '.join(f'{a!r} is {b!r}' for a, b in _OLD_VALUES[old].items())
                    raise ValueError(f'unknown {old} {value!r}; valid choices are {list(_OLD_VALUES[old])} '
                                     f'({old} is the former name of {new}: {said})')
                value = _OLD_VALUES[old][value]
            setattr(self, new, value)


def _check_number(cfg, name: str, bound: float, strict: bool = True, optional: bool = False) -> None:
    """``ValueError`` unless ``cfg.name`` is a finite number above ``bound`` (at least it, ``strict=False``), or None
    where ``optional``."""
    value = getattr(cfg, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not (value > bound if strict else value >= bound):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {bound}"
                         f"{' (or None)' if optional else ''}, got {value!r}")
