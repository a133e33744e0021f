"""A clipped group policy-gradient trainer: GRPO / PPO-style (beyond the chapter; section 15.5's "full trainer").

Section 15.5 writes the least RL that works, REINFORCE with a group baseline, and defers the full
trainer to chapter 9. This module is that trainer in the chapter's vocabulary. Each step:

1. **Sample** ``n_tasks`` tasks, ``group`` episodes each, with ``rollout_batch``; the trajectories
   record the behaviour log-prob ``logprobs`` of every sampled action token.
2. **Advantages per group:** ``A = R - mean(R)`` (``adv_norm='mean'``, the chapter's baseline)
   or ``A = (R - mean(R)) / (std(R) + eps)`` (``'std'``, GRPO; Shao et al. 2024). Every token of
   an episode shares its advantage. A group whose episodes all pass or all fail has ``A = 0``.
3. **Update** for ``epochs`` passes over ``minibatches`` shuffled minibatches, each with the PPO
   clipped surrogate on every action token (Schulman et al. 2017)::

       ratio   = exp(logp_new - logp_behaviour)
       pg_loss = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)

   aggregated ``'token'``-mean (every action token of the minibatch weighs the same) or
   ``'seq'``-mean (each episode's token mean, then the mean over episodes; section 15.3 and
   exercise 1 compare the two), plus ``kl_coef`` times the k3 estimate of KL(pi || pi_ref) to a
   frozen reference, minus ``ent_coef`` times the action-token entropy.

With ``epochs = minibatches = 1``, a clip too large to bind, ``adv_norm='mean'``, ``agg='token'``
and no KL or entropy term, the first (and only) pass has ``ratio = 1`` and the gradient is exactly
``recipes.reinforce``'s: ``d ratio = ratio * d logp``. The tests check this to 1e-6.

All log-probs (behaviour, new and reference) are taken at ``temperature``: the distribution the
episodes were actually drawn from, so the ratio is an exact importance weight.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..policies.scoring import entropy_from_logits
from ..rendering.trajectory import collate
from ..rollouts.engine import rollout_groups
from ..runtime.threads import small_model_threads
from .credit import check_credit, group_credit
from .diagnostics import informative_fraction
from .monitors import batch_tokens, first_evaluation, grad_norm, sample_metrics

ADV_NORMS = ('mean', 'std')
AGGS = ('token', 'seq')
STD_EPS = 1e-4
"""Added to a group's reward std before dividing (``adv_norm='std'``); an all-equal group has A = 0 anyway."""


@dataclass
class GRPOConfig:
    """Knobs of ``train_grpo``. Defaults match section 15.5's REINFORCE where the two overlap."""
    n_tasks: int = 8
    """Tasks sampled (without replacement) per step."""
    group: int = 8
    """Episodes per task: the group whose mean is the baseline."""
    lr: float = 1e-3
    """AdamW learning rate."""
    epochs: int = 2
    """Passes over each step's batch (PPO's reuse; 1 = on-policy)."""
    minibatches: int = 2
    """Minibatches per pass (one optimizer step each), shuffled every pass."""
    clip: float = 0.2
    """PPO clip range eps: ratios outside [1 - eps, 1 + eps] stop pushing."""
    adv_norm: str = 'mean'
    """``'mean'``: A = R - mean(R) per group; ``'std'``: also divide by the group's std (+ 1e-4)."""
    agg: str = 'token'
    """``'token'``: mean over every action token of a minibatch; ``'seq'``: each episode's token mean,
    then the mean over episodes."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the frozen reference (0: no reference is needed)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    temperature: float = 1.0
    """Sampling temperature; every log-prob of the update is taken at it too."""
    credit: str = 'episode'
    """``'episode'``: every action token of an episode shares its advantage (the chapter's); ``'turn'``: each
    token gets its turn's reward-to-go minus the group's leave-one-out baseline of it (``recipes.credit``)."""
    gamma: float = 1.0
    """The discount of turn credit's reward-to-go (1: undiscounted)."""
    seed: int = 0
    """Seeds task choice (``random.Random``), rollouts and minibatch shuffling (``torch.Generator``s)."""

    def __post_init__(self):
        if self.adv_norm not in ADV_NORMS:
            raise ValueError(f'unknown adv_norm {self.adv_norm!r}; valid choices are {list(ADV_NORMS)}')
        if self.agg not in AGGS:
            raise ValueError(f'unknown agg {self.agg!r}; valid choices are {list(AGGS)}')
        for name in ('n_tasks', 'group', 'epochs', 'minibatches'):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        if self.adv_norm == 'std' and self.group < 2:
            raise ValueError("adv_norm='std' needs group >= 2 (a group of one has no std)")
        if self.minibatches > self.n_tasks * self.group:
            raise ValueError(f'minibatches ({self.minibatches}) exceeds the batch size ({self.n_tasks * self.group})')
        for name in ('lr', 'clip', 'temperature'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)!r}')
        for name in ('kl_coef', 'ent_coef'):
            if not getattr(self, name) >= 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)!r}')
        check_credit(self.credit, self.gamma)


def aggregate(x: torch.Tensor, mask: torch.Tensor, agg: str = 'token') -> torch.Tensor:
    """Mean of per-token values ``x [B, T-1]`` over action tokens (``mask [B, T-1]``) -> scalar.

    ``'token'``: ``(x * mask).sum() / mask.sum()``, every action token weighs the same, so long
    episodes weigh more. ``'seq'``: each episode's mean over its own action tokens, then the mean
    over episodes, so every episode weighs the same (exercise 1).
    """
    if agg not in AGGS:
        raise ValueError(f'unknown agg {agg!r}; valid choices are {list(AGGS)}')
    if agg == 'token':
        return (x * mask).sum() / mask.sum()
    return ((x * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()


def group_advantages(rewards: torch.Tensor, adv_norm: str = 'mean') -> torch.Tensor:
    """Group-baseline advantages: ``rewards [tasks, G]`` -> ``[tasks, G]`` (``'mean'`` or ``'std'``)."""
    if adv_norm not in ADV_NORMS:
        raise ValueError(f'unknown adv_norm {adv_norm!r}; valid choices are {list(ADV_NORMS)}')
    advantages = rewards - rewards.mean(1, keepdim=True)  # [tasks, G]
    if adv_norm == 'std':
        advantages = advantages / (rewards.std(1, keepdim=True) + STD_EPS)  # unbiased std, as TRL
    return advantages


def token_logp_entropy(model, ids: torch.Tensor, temperature: float = 1.0, entropy_grad: bool = True, lengths=None):
    """Log-prob of each next token and the next-token entropy at ``temperature``: ids [B, T] -> ([B, T-1], [B, T-1]).

    ``entropy_grad=False`` computes the entropy off the graph (for logging only). ``lengths`` [B]
    (optional, ``collate``'s): each row's real tokens, passed on to the model.
    """
    logits = (model(ids) if lengths is None else model(ids, lengths=lengths))[:, :-1] / temperature  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)  # [B, T-1]
    return logp, entropy_from_logits(logits if entropy_grad else logits.detach())


def grpo_loss(model, mb, mb_advantages, cfg: GRPOConfig, ref_model=None):
    """The clipped surrogate on one minibatch -> (loss, stats dict of floats).

    ``mb`` is a ``collate`` batch of sampled trajectories (its ``logprobs [b, T-1]`` are the
    behaviour log-probs), ``mb_advantages`` their advantages: ``[b]`` (one per episode) or ``[b, T-1]`` (one
    per token, turn credit). Every term (surrogate, entropy,
    KL) is aggregated with ``cfg.agg``. ``stats`` holds ``pg_loss``,
    ``entropy``, ``clip_frac`` (share of action tokens whose ratio left the clip range),
    ``approx_kl`` (token mean of ``(ratio - 1) - log ratio``, KL(behaviour || new)) and, with a
    ``ref_model``, ``kl`` (the k3 estimate of KL(new || ref), token mean).
    """
    mask = mb['action_mask']  # [b, T-1], 1 on action tokens
    mb_old_logp = mb['logprobs']  # [b, T-1], behaviour log-probs (0 off the action tokens)
    mb_logp, mb_entropy = token_logp_entropy(model, mb['ids'], cfg.temperature, entropy_grad=cfg.ent_coef > 0,
                                             lengths=mb.get('lengths'))  # [b, T-1] each
    log_ratio = (mb_logp - mb_old_logp) * mask  # [b, T-1], 0 off the action tokens
    ratio = log_ratio.exp()  # [b, T-1]
    A = mb_advantages[:, None] if mb_advantages.dim() == 1 else mb_advantages  # [b, 1] or [b, T-1]
    pg_losses = -A * ratio  # [b, T-1]
    pg_losses_clipped = -A * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)  # [b, T-1]
    pg_loss = aggregate(torch.max(pg_losses, pg_losses_clipped), mask, cfg.agg)
    entropy = aggregate(mb_entropy, mask, cfg.agg)
    loss = pg_loss - cfg.ent_coef * entropy if cfg.ent_coef else pg_loss
    stats = {}
    if ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logp_entropy(ref_model, mb['ids'], cfg.temperature, entropy_grad=False,
                                             lengths=mb.get('lengths'))  # [b, T-1]
        log_r = (ref_logp - mb_logp) * mask  # [b, T-1], log pi_ref / pi
        kl = aggregate(log_r.exp() - 1 - log_r, mask, cfg.agg)  # k3: unbiased, always >= 0 (Schulman 2020)
        if cfg.kl_coef:
            loss = loss + cfg.kl_coef * kl
        stats['kl'] = kl.item()
    with torch.no_grad():
        n_tokens = mask.sum()
        stats.update(pg_loss=pg_loss.item(), entropy=entropy.item(),
                     clip_frac=((((ratio - 1).abs() > cfg.clip).float() * mask).sum() / n_tokens).item(),
                     approx_kl=((((ratio - 1) - log_ratio) * mask).sum() / n_tokens).item())
    return loss, stats


@small_model_threads
def train_grpo(model, tasks, tok, steps, cfg: GRPOConfig | None = None, evaluate=None, every=10, ref_model=None,
               start=0, env=DEFAULT_ENV, loggers=None):
    """``steps`` clipped group-policy-gradient steps on ``tasks``, in place -> (history, logs).

    ``history`` is as ``recipes.reinforce.train_rl``'s: ``(start + step, *evaluate(model))`` before
    the first step and every ``every`` steps (empty without ``evaluate``). ``logs`` has one dict
    per step: ``step``, ``reward`` (mean sampled reward), ``informative`` (share of groups with
    mixed outcomes), and the means over the step's minibatch updates of ``pg_loss``,
    ``entropy``, ``clip_frac``, ``approx_kl`` and, when there is a reference, ``kl``.

    The reference is ``ref_model`` if given (its KL is then logged even at ``kl_coef=0``), else a
    frozen copy of ``model`` taken before the first step when ``cfg.kl_coef > 0``, else none. Episodes are
    sampled in ``env`` (a factory or Gymnasium id, one fresh environment per episode).

    ``loggers`` (``agentrl.loggers``) get every step's ``logs`` row under TRL's names (``loss``, ``pg_loss``,
    ``entropy``, ``clip_ratio/region_mean``, ``approx_kl``, ``kl``, ``grad_norm``: means over the step's
    updates), what its sample shows (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``invalid_calls`` ...)
    and the token counts, and each evaluation under ``eval/`` (as ``train_rl``'s).
    """
    cfg = cfg or GRPOConfig()
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f'steps must be a non-negative int, got {steps!r}')
    tasks = list(tasks)
    if cfg.n_tasks > len(tasks):
        raise ValueError(f'n_tasks ({cfg.n_tasks}) exceeds the {len(tasks)} tasks given')
    if ref_model is None and cfg.kl_coef > 0:
        ref_model = copy.deepcopy(model)
    if ref_model is not None:
        ref_model.eval()
        for p in ref_model.parameters():
            p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    rng, gen = random.Random(cfg.seed), torch.Generator().manual_seed(cfg.seed)  # as train_rl: the same first batch
    shuffle_gen = torch.Generator().manual_seed(cfg.seed + 1)  # minibatch order, apart from the rollouts' stream
    rep = as_reporter(loggers)
    history = first_evaluation(model, evaluate, start, rep)
    logs = []
    for step in range(1, steps + 1):
        started = rep.clock()
        # 1. sample n_tasks x group episodes with the current (behaviour) policy
        trajs = rollout_groups(model, rng.sample(tasks, cfg.n_tasks), tok, cfg.group, env=env,
                               temperature=cfg.temperature, generator=gen)
        b_rewards = torch.tensor([t.reward for t in trajs]).view(cfg.n_tasks, cfg.group)  # [tasks, G]
        # 2. group advantages: one per episode, or (turn credit) one per token of each turn
        b_advantages = group_advantages(b_rewards, cfg.adv_norm).view(-1)  # [B]
        if cfg.credit == 'turn':
            full = collate(trajs, tok.pad_id)
            b_turn = group_credit(full, cfg.group, 'turn', cfg.gamma)  # [B, T-1]
            if cfg.adv_norm == 'std':  # the same scale as episode credit's: the group's return std
                b_turn = b_turn / (b_rewards.std(1) + STD_EPS).repeat_interleave(cfg.group)[:, None]
        # 3. epochs x minibatches of clipped updates
        B = len(trajs)
        step_stats, watched = [], []  # the logs' stats per update, and its (loss, grad norm, tokens) for the loggers
        for _ in range(cfg.epochs):
            order = torch.randperm(B, generator=shuffle_gen) if cfg.minibatches > 1 else torch.arange(B)
            for mb_idx in order.chunk(cfg.minibatches):
                mb = collate([trajs[i] for i in mb_idx.tolist()], tok.pad_id)
                mb_adv = b_advantages[mb_idx] if cfg.credit == 'episode' else b_turn[mb_idx][:, :mb['ids'].shape[1] - 1]
                loss, stats = grpo_loss(model, mb, mb_adv, cfg, ref_model)
                opt.zero_grad()
                loss.backward()
                watched.append((loss.item(), rep.measure(lambda: grad_norm(model)), batch_tokens(mb)))
                opt.step()
                step_stats.append(stats)
        row = {'step': start + step, 'reward': b_rewards.mean().item(), 'informative': informative_fraction(b_rewards)}
        row.update({k: sum(s[k] for s in step_stats) / len(step_stats) for k in step_stats[0]})
        logs.append(row)
        rep.log(start + step, lambda: _step_metrics(row, watched, trajs, cfg.group, env), started=started,
                tokens=sum(w[2] for w in watched), episodes=len(trajs))
        if evaluate is not None and step % every == 0:
            values = evaluate(model)
            history.append((start + step, *values))
            rep.log_eval(start + step, values)
    return history, logs


_TRL_NAMES = {'clip_frac': 'clip_ratio/region_mean'}
"""``logs`` keys whose logged name is TRL's (the others keep theirs)."""


def _step_metrics(row, watched, trajs, group, env) -> dict:
    """A step's logged monitors: its ``logs`` row under TRL's names, the mean loss and grad norm of its
    updates (``watched``: (loss, grad norm, tokens) each), and what its sample (in ``env``) shows."""
    out = sample_metrics(trajs, group, env)
    out.update({_TRL_NAMES.get(k, k): v for k, v in row.items() if k != 'step'})  # reward, informative: the row's
    out['loss'] = sum(w[0] for w in watched) / len(watched)
    out['grad_norm'] = sum(w[1] for w in watched) / len(watched)
    return out
