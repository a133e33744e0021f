"""A clipped group policy-gradient trainer: GRPO and its variants, PPO-style (beyond the chapter; 15.5's "full trainer").

Section 15.5 writes the least RL that works, REINFORCE with a group baseline, and defers the full
trainer to chapter 9. This module is that trainer in the chapter's vocabulary; the field's variants
(Dr. GRPO, DAPO, GSPO, CISPO, RLOO, truncated importance sampling) are settings of ``GRPOConfig`` under
TRL's names, their formulas in ``recipes.pg_losses``. Each step:

1. **Sample** ``n_tasks`` tasks, ``num_generations`` episodes each, with ``rollout_groups``; the
   trajectories record the sampler's log-prob ``logprobs`` of every sampled action token. With
   ``dynamic_sampling`` (DAPO), groups whose returns are all equal are set aside and more batches are drawn
   until ``n_tasks`` informative groups are found or ``max_num_gen_batches`` batches were drawn.
2. **Advantages per group** (``pg_losses.group_advantages``): ``A = R - mean(R)`` (``scale_rewards='none'``,
   the chapter's baseline), divided by the group's reward std (``'group'``, GRPO; Shao et al. 2024) or the
   batch's (``'batch'``); ``advantage_estimator='rloo'`` takes the leave-one-out mean instead. Every token of an
   episode shares its advantage (``credit='turn'``: its turn's, ``recipes.credit``). A group whose episodes
   all pass or all fail has ``A = 0``.
3. **Update** for ``num_iterations`` passes over ``minibatches`` shuffled minibatches, one optimizer step
   each, with ``pg_losses.policy_loss``: PPO's clipped surrogate on every action token (Schulman et al. 2017)::

       ratio   = exp(logp_new - logp_behaviour)
       pg_loss = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)

   aggregated as ``loss_type`` says (``'bnpo'``: every action token of the minibatch weighs the same;
   ``'grpo'``: every episode), plus ``beta`` times the k3 estimate of KL(pi || pi_ref) to a frozen
   reference, minus ``entropy_coef`` times the mean action-token entropy.

**Temperature.** Every log-prob of an update (the behaviour's, the new policy's, the reference's) is taken
at the sampling temperature ``T``, as TRL does: the update follows the policy gradient of the tempered
policy ``pi_T = softmax(logits / T)``, the distribution the episodes were drawn from, so the ratio is an
exact importance weight. With ``num_iterations = minibatches = 1``, a clip that does not bind,
``scale_rewards='none'`` (mean advantages), ``loss_type='bnpo'`` (token aggregation) and no KL or entropy
term, the first (and only) pass has ``ratio = 1`` and, since ``d ratio = ratio * d log pi_T``, its gradient
is exactly REINFORCE's with the group baseline on the tempered policy, ``-(1/N) sum_t A_t d log pi_T(a_t)``,
at any temperature. The tests check this to 1e-6 at T = 0.7, 1 and 1.5.
"""
from __future__ import annotations

import copy
import random

import torch

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..policies.scoring import entropy_from_logits, log_probs_and_logits
from ..rendering.trajectory import collate
from ..rollouts.engine import rollout_groups
from ..runtime.threads import small_model_threads
from .credit import check_credit, group_credit
from .diagnostics import informative_fraction
from .monitors import batch_tokens, first_evaluation, grad_norm, sample_metrics
from .grpo_config import OLD_NAMES, GRPOConfig  # noqa: F401  (arl.GRPOConfig, and its former names)
from .loop import RecipeLoop
from .optim import make_optimizer, make_scheduler, optimizer_step
from .pg_losses import (CLIP_MONITORS, aggregate, clip_ratios, group_advantages, kl_k3, loss_mask, masked_mean,
                        policy_loss, reward_scale, sampler_gap, sampler_weights, weight_stats)

def token_logp_entropy(model, ids: torch.Tensor, temperature: float = 1.0, entropy_grad: bool = True, lengths=None,
                       mask=None):
    """Log-prob of each next token and the next-token entropy at ``temperature``: ids [B, T] -> ([B, T-1], [B, T-1]).

    ``entropy_grad=False`` computes the entropy off the graph (for logging only). ``lengths`` [B]
    (optional, ``collate``'s): each row's real tokens, passed on to the model. ``mask`` [B, T-1] (optional, the
    action mask): a policy that computes its output layer only where asked (``hf.HFPolicy``, through
    ``scoring.log_probs_and_logits``) computes both there and returns 0 elsewhere, a sixth of an episode's
    positions on SmolLM2; any other policy (the TinyAgent) computes every position, as without it.
    """
    if mask is not None and hasattr(model, 'masked_log_probs_and_logits'):
        logp, logits = log_probs_and_logits(model, ids, lengths, mask, temperature)  # [B, T-1], [n, V]
        where = (mask != 0).to(logits.device)  # [B, T-1]
        ent = entropy_from_logits(logits if entropy_grad else logits.detach())  # [n]
        entropy = torch.zeros(where.shape, dtype=ent.dtype, device=ent.device).masked_scatter(where, ent)  # [B, T-1]
        return logp, entropy.to(logp.device)
    logits = (model(ids) if lengths is None else model(ids, lengths=lengths))[:, :-1] / temperature  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)  # [B, T-1]
    return logp, entropy_from_logits(logits if entropy_grad else logits.detach())


def grpo_loss(model, mb, mb_advantages, cfg: GRPOConfig, ref_model=None, num_items_in_batch=None, norm=None):
    """The trainer's loss on one minibatch -> (loss, stats dict of floats).

    ``mb`` is a ``collate`` batch of sampled trajectories: its ``logprobs [b, T-1]`` are the sampler's log-probs,
    the behaviour. ``mb_advantages``: ``[b]`` (one per episode) or ``[b, T-1]`` (one per token, turn credit).
    With ``cfg.vllm_importance_sampling_correction``, the ratio's old policy is ``mb['old_logprobs']`` (the
    trainer's log-probs before the step's updates; ``train_grpo`` sets them) or, absent, the current ones
    detached (a first pass), and each token's loss is weighted by ``pg_losses.sampler_weights``.
    ``num_items_in_batch``: for ``'dapo'`` and ``'cispo'``, the action tokens of the step's batch per
    minibatch (None: this minibatch's own). ``norm``: ``(episodes, tokens)`` of the minibatch ``mb`` is a part of
    (gradient accumulation, ``micro_batch``): the losses of the parts add up to the minibatch's
    (``pg_losses.aggregate``).

    ``stats``: ``pg_loss`` (the policy term alone), ``entropy`` (mean action-token entropy, TRL's), ``clip_frac``
    (agentrl's: share of action tokens whose per-token ratio lies outside ``[1 - epsilon, 1 + epsilon_high]``),
    ``approx_kl`` (token mean of ``(ratio - 1) - log ratio``, KL(behaviour || new)), TRL's clip monitors
    (``pg_losses.clip_ratios``) and, with a ``ref_model``, ``kl`` (TRL's: token mean of the k3 estimate of
    KL(new || ref), times the ratio with ``use_bias_correction_kl``).
    """
    mask = loss_mask(mb, cfg)  # [b, T-1], 1 on the action tokens the loss reads
    sampler_logp = mb['logprobs']  # [b, T-1], 0 off the action tokens
    mb_logp, mb_entropy = token_logp_entropy(model, mb['ids'], cfg.temperature, entropy_grad=cfg.entropy_coef > 0,
                                             lengths=mb.get('lengths'), mask=mb['action_mask'])  # [b, T-1] each
    weight = None
    old_logp = sampler_logp
    if cfg.vllm_importance_sampling_correction:
        old_logp = mb.get('old_logprobs')
        old_logp = mb_logp.detach() if old_logp is None else old_logp  # [b, T-1]
        weight = sampler_weights(old_logp, sampler_logp, mask, cfg.vllm_importance_sampling_mode,
                                 cfg.vllm_importance_sampling_clip_min, cfg.vllm_importance_sampling_clip_max)
    A = mb_advantages[:, None] if mb_advantages.dim() == 1 else mb_advantages  # [b, 1] or [b, T-1]
    pg_loss, coef_1 = policy_loss(mb_logp, old_logp, A, mask, cfg, weight, num_items_in_batch, norm)
    entropy = aggregate(mb_entropy, mask, 'bnpo', norm=norm)  # the mean over tokens, for every loss_type (TRL's)
    loss = pg_loss - cfg.entropy_coef * entropy if cfg.entropy_coef else pg_loss
    stats = {}
    if ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logp_entropy(ref_model, mb['ids'], cfg.temperature, entropy_grad=False,
                                             lengths=mb.get('lengths'), mask=mb['action_mask'])  # [b, T-1]
        per_token_kl = kl_k3(mb_logp, ref_logp, mask)  # [b, T-1]
        if cfg.use_bias_correction_kl:
            per_token_kl = per_token_kl * coef_1
        if cfg.beta:
            loss = loss + cfg.beta * aggregate(per_token_kl, mask, cfg.loss_type, cfg.max_completion_length,
                                               num_items_in_batch, norm)
        stats['kl'] = masked_mean(per_token_kl.detach(), mask).item()
    with torch.no_grad():
        n_tokens = mask.sum().clamp(min=1)
        log_ratio = (mb_logp - old_logp) * mask  # [b, T-1], per token whatever the level
        ratio = log_ratio.exp()
        high = cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high
        outside = ((ratio - 1) > high) | ((1 - ratio) > cfg.epsilon)  # [b, T-1]
        stats.update(pg_loss=pg_loss.item(), entropy=entropy.item(),
                     clip_frac=((outside.float() * mask).sum() / n_tokens).item(),
                     approx_kl=((((ratio - 1) - log_ratio) * mask).sum() / n_tokens).item())
        stats.update(clip_ratios(coef_1, A, mask, cfg))
        if weight is not None:
            stats.update(weight_stats(weight, mask))
    return loss, stats


def _sample(model, tasks, tok, cfg: GRPOConfig, rng, gen, env) -> tuple:
    """A step's episodes -> (the batch to train on, task-major; every episode sampled; batches drawn).

    Without ``dynamic_sampling``: one batch of ``n_tasks`` groups, both. With it (DAPO): batches of ``n_tasks``
    groups until ``n_tasks`` informative groups (returns not all equal) are found or ``max_num_gen_batches``
    batches were drawn; the first ``n_tasks`` informative groups, filled up at the cap with uninformative ones."""
    G = cfg.num_generations
    draw = lambda: rollout_groups(model, rng.sample(tasks, cfg.n_tasks), tok, G, env=env,
                                  temperature=cfg.temperature, generator=gen)
    trajs = draw()
    if not cfg.dynamic_sampling:
        return trajs, trajs, 1
    sampled, informative, dull, batches = [], [], [], 0
    while True:
        batches += 1
        sampled += trajs
        for k in range(0, len(trajs), G):
            group = trajs[k:k + G]
            (informative if len({float(t.reward) for t in group}) > 1 else dull).append(group)
        if len(informative) >= cfg.n_tasks or batches >= cfg.max_num_gen_batches:
            break
        trajs = draw()
    return [t for group in (informative + dull)[:cfg.n_tasks] for t in group], sampled, batches


def _trainer_logprobs(model, trajs, tok, cfg: GRPOConfig, width: int) -> torch.Tensor:
    """The trainer's log-probs of every episode's tokens before the step's updates, at the temperature -> ``[B, width]``
    (0-padded; 0 off the action tokens on a policy that scores only those), computed in ``cfg.minibatches`` chunks
    (a training minibatch's memory) or, with ``cfg.micro_batch``, that many episodes at a time, off the graph."""
    out = torch.zeros(len(trajs), width)
    chunks = torch.arange(len(trajs)).split(cfg.micro_batch) if cfg.micro_batch \
        else torch.arange(len(trajs)).chunk(cfg.minibatches)
    with torch.no_grad():
        for idx in chunks:
            chunk = collate([trajs[i] for i in idx.tolist()], tok.pad_id)
            logp, _ = token_logp_entropy(model, chunk['ids'], cfg.temperature, entropy_grad=False,
                                         lengths=chunk.get('lengths'), mask=chunk['action_mask'])  # [b, T_chunk-1]
            out[idx, :logp.shape[1]] = logp.float()
    return out


@small_model_threads
def train_grpo(model, tasks, tok, steps, cfg: GRPOConfig | None = None, evaluate=None, every=10, ref_model=None,
               start=0, env=DEFAULT_ENV, loggers=None, checkpoint=None, progress=None):
    """``steps`` clipped group-policy-gradient steps on ``tasks``, in place -> (history, logs).

    ``history`` is as ``recipes.reinforce.train_rl``'s: ``(start + step, *evaluate(model))`` before
    the first step and every ``every`` steps (empty without ``evaluate``). ``logs`` has one dict
    per step: ``step``, ``reward`` (mean sampled reward), ``informative`` (share of sampled groups with
    mixed outcomes), the means over the step's updates of ``pg_loss``, ``entropy``, ``clip_frac``,
    ``approx_kl`` and, when there is a reference, ``kl``; with CISPO ``cispo_clip_ratio``; with
    ``vllm_importance_sampling_correction`` the sampler's gap (``pg_losses.sampler_gap``) and weights
    (``pg_losses.weight_stats``); with ``dynamic_sampling``, ``dynamic_sampling/episodes`` (episodes sampled
    this step, every batch drawn) and ``dynamic_sampling/batches``.

    The reference is ``ref_model`` if given (its KL is then logged even at ``beta=0``), else a
    frozen copy of ``model`` taken before the first step when ``cfg.beta > 0``, else none. Episodes are
    sampled in ``env`` (a factory or Gymnasium id, one fresh environment per episode).

    ``loggers`` (``agentrl.loggers``) get every step's ``logs`` row, TRL's clip monitors (``clip_ratio/low_mean``,
    ``high_mean``, ``region_mean``, ``low_min``, ``high_max``, as TRL computes them), the sampler's gap every
    step, ``loss`` and ``grad_norm`` (means over the step's updates), what its sample shows (``reward``,
    ``reward_std``, ``frac_reward_zero_std``, ``invalid_calls`` ...) and the token counts, and each evaluation
    under ``eval/`` (as ``train_rl``'s). ``checkpoint`` and ``progress``: ``recipes.loop`` (a step of the loop is a
    sampled batch and its updates; the reference, copied before the first step, is the starting policy's on resume too).
    """
    cfg = cfg or GRPOConfig()
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f'steps must be a non-negative int, got {steps!r}')
    tasks = list(tasks)
    if cfg.n_tasks > len(tasks):
        raise ValueError(f'n_tasks ({cfg.n_tasks}) exceeds the {len(tasks)} tasks given')
    if ref_model is None and cfg.beta > 0:
        ref_model = copy.deepcopy(model)
    if ref_model is not None:
        ref_model.eval()
        for p in ref_model.parameters():
            p.requires_grad_(False)
    optim = cfg.optim()
    opt = make_optimizer(model, cfg.learning_rate, optim)
    scheduler = make_scheduler(opt, optim, steps * cfg.num_iterations * cfg.minibatches)
    rng, gen = random.Random(cfg.seed), torch.Generator().manual_seed(cfg.seed)  # as train_rl: the same first batch
    shuffle_gen = torch.Generator().manual_seed(cfg.seed + 1)  # minibatch order, apart from the rollouts' stream
    rep = as_reporter(loggers)
    history, logs = [], []
    loop = RecipeLoop('train_grpo', steps, model, opt, streams={'tasks': rng, 'rollouts': gen, 'minibatches': shuffle_gen},
                      outputs={'history': history, 'logs': logs}, checkpoint=checkpoint, progress=progress,
                      scheduler=scheduler)
    if not loop.resumed:
        history += first_evaluation(model, evaluate, start, rep)
    G = cfg.num_generations
    for step in loop.steps():
        started = rep.clock()
        # 1. sample n_tasks x G episodes with the current (behaviour) policy; dynamic sampling draws more
        trajs, sampled, batches = _sample(model, tasks, tok, cfg, rng, gen, env)
        b_rewards = torch.tensor([t.reward for t in trajs]).view(-1, G)  # [tasks, G]
        full = collate(trajs, tok.pad_id)
        # 2. group advantages: one per episode, or (turn credit) one per token of each turn
        b_advantages = group_advantages(b_rewards, cfg.scale_rewards, cfg.advantage_estimator).view(-1)  # [B]
        if cfg.credit == 'turn':
            b_turn = group_credit(full, G, 'turn', cfg.gamma)  # [B, T-1]
            scale = reward_scale(b_rewards, cfg.scale_rewards)  # the same scale as episode credit's
            if scale is not None:
                b_turn = b_turn / scale.expand(-1, G).reshape(-1)[:, None]
        # the trainer's own log-probs before the updates: the old policy of TIS, else only for the sampler's gap
        width = full['ids'].shape[1] - 1
        b_old = _trainer_logprobs(model, trajs, tok, cfg, width) if cfg.vllm_importance_sampling_correction \
            else None
        gap = sampler_gap(b_old, full['logprobs'], loss_mask(full, cfg)) if b_old is not None else \
            rep.measure(lambda: sampler_gap(_trainer_logprobs(model, trajs, tok, cfg, width), full['logprobs'],
                                            loss_mask(full, cfg)))
        num_items = loss_mask(full, cfg).sum() / cfg.minibatches if cfg.loss_type in ('dapo', 'cispo') else None
        # 3. num_iterations x minibatches of clipped updates
        B = len(trajs)
        step_stats, watched = [], []  # the logs' stats per update, and its (loss, grad norm, tokens) for the loggers
        for _ in range(cfg.num_iterations):
            order = torch.randperm(B, generator=shuffle_gen) if cfg.minibatches > 1 else torch.arange(B)
            for mb_idx in order.chunk(cfg.minibatches):
                # parts in task order: a group's episodes share a part, where a policy that runs identical rows once
                # (hf.HFPolicy) runs a settled group's copies once; the parts add up to the minibatch whatever the split
                parts = mb_idx.sort().values.split(cfg.micro_batch) if cfg.micro_batch and len(mb_idx) > cfg.micro_batch \
                    else [mb_idx]
                norm = None
                if len(parts) > 1:  # the minibatch's counts divide every part's loss: the parts add up to its loss
                    whole = collate([trajs[i] for i in mb_idx.tolist()], tok.pad_id)
                    norm = (len(mb_idx), int(loss_mask(whole, cfg).sum()))
                opt.zero_grad()
                loss_value, tokens, part_stats = 0.0, 0, []
                for part in parts:
                    mb = collate([trajs[i] for i in part.tolist()], tok.pad_id)
                    T1 = mb['ids'].shape[1] - 1
                    mb_adv = b_advantages[part] if cfg.credit == 'episode' else b_turn[part][:, :T1]
                    if b_old is not None:
                        mb['old_logprobs'] = b_old[part][:, :T1]
                    loss, stats = grpo_loss(model, mb, mb_adv, cfg, ref_model, num_items, norm)
                    loss.backward()
                    loss_value += loss.item()
                    tokens += batch_tokens(mb)
                    part_stats.append((int(loss_mask(mb, cfg).sum()), stats))
                watched.append((loss_value, rep.measure(lambda: grad_norm(model)), tokens))
                optimizer_step(model, opt, scheduler, optim)
                step_stats.append(part_stats[0][1] if len(part_stats) == 1 else _weighted(part_stats))
        means = {k: sum(s[k] for s in step_stats) / len(step_stats) for k in step_stats[0]}
        sampled_rewards = torch.tensor([t.reward for t in sampled]).view(-1, G)  # [sampled tasks, G]
        row = {'step': start + step, 'reward': sampled_rewards.mean().item(),
               'informative': informative_fraction(sampled_rewards)}
        row.update({k: v for k, v in means.items() if k not in CLIP_MONITORS})  # the rows' figures of before
        if cfg.vllm_importance_sampling_correction:
            row.update(gap)
        if cfg.dynamic_sampling:
            row.update({'dynamic_sampling/episodes': len(sampled), 'dynamic_sampling/batches': batches})
        logs.append(row)
        rep.log(start + step, lambda: _step_metrics(row, means, gap, watched, sampled, G, env), started=started,
                tokens=sum(w[2] for w in watched), episodes=len(sampled))
        if evaluate is not None and step % every == 0:
            values = evaluate(model)
            history.append((start + step, *values))
            rep.log_eval(start + step, values)
    return history, logs


def _weighted(part_stats) -> dict:
    """The stats of a minibatch's parts as one: each figure's mean over the parts weighted by their tokens."""
    total = sum(n for n, _ in part_stats) or 1
    return {k: sum(n * s[k] for n, s in part_stats) / total for k in part_stats[0][1]}


def _step_metrics(row, means, gap, watched, trajs, group, env) -> dict:
    """A step's logged monitors: what its sample (in ``env``) shows, its ``logs`` row, TRL's clip monitors
    (``means``: the updates' mean stats), the sampler's ``gap``, and the mean loss and grad norm of its updates
    (``watched``: (loss, grad norm, tokens) each)."""
    out = sample_metrics(trajs, group, env)
    out.update({k: v for k, v in row.items() if k != 'step'})  # reward, informative: the row's
    out.update({k: v for k, v in means.items() if k in CLIP_MONITORS})
    out.update(gap or {})
    out['loss'] = sum(w[0] for w in watched) / len(watched)
    out['grad_norm'] = sum(w[1] for w in watched) / len(watched)
    return out
