"""REINFORCE with a per-task group-mean baseline (section 15.5), and section 15.6's two RL-side remedies.

Each step samples ``group`` episodes for each of ``n_tasks`` tasks, subtracts each task's mean
reward from its episodes' rewards (the group baseline), and weights every action token's log-prob
by that advantage. A group whose episodes all pass or all fail has zero advantage everywhere: it
teaches nothing, which is why section 15.6 measures the fraction of informative groups.

Section 15.6 lists what helps when SFT has left the policy nearly deterministic: (b) a hotter
rollout (``temperature``), and (c) an entropy bonus (``entropy_bonus``: its weight times the mean action-token
entropy is subtracted from the loss).

**Temperature.** Episodes sampled at ``T`` are drawn from the tempered policy ``pi_T = softmax(logits / T)``, and
every log-prob of the update is taken there too: the step is an unbiased estimate of the policy gradient of
``pi_T``'s expected return, which moves the same weights as ``pi``'s (the gradient flows through ``logits / T``).
The clipped trainer (``recipes.grpo``) and TRL (``integrations.trl``, whose trainer scores at its sampling
temperature) do the same, so the three estimate one thing; at ``T = 1`` it is the chapter's REINFORCE.
"""
from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..policies.scoring import entropy_from_logits
from ..rendering.trajectory import collate
from ..rollouts.engine import rollout_groups
from ..runtime.threads import small_model_threads
from .credit import check_credit, group_credit
from .loop import RecipeLoop
from .optim import make_optimizer, make_scheduler, optimizer_step
from .monitors import batch_tokens, first_evaluation, grad_norm, logp_and_entropy, sample_metrics


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check(n_tasks, group, temperature, entropy_bonus, lr=1.0):
    for name, value in (('n_tasks', n_tasks), ('group', group)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f'{name} must be a positive int, got {value!r}')
    for name, value in (('temperature', temperature), ('lr', lr)):
        if not (_finite(value) and value > 0):
            raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
    if not (_finite(entropy_bonus) and entropy_bonus >= 0):
        raise ValueError(f'entropy_bonus must be a finite number >= 0, got {entropy_bonus!r}')


@small_model_threads
def reinforce_step(model, opt, tasks, tok, rng, gen, n_tasks=8, group=8, temperature=1.0, entropy_bonus=0.0,
                   env=DEFAULT_ENV, credit='episode', gamma=1.0, loggers=None, step=0, micro_batch=None, optim=None,
                   scheduler=None) -> float:
    """One REINFORCE step with a per-task group-mean baseline -> mean batch return (section 15.5).

    Episodes are sampled at ``temperature`` in ``env`` (a factory or Gymnasium id, one fresh environment
    per episode) and scored at it (the module docstring says what the step then estimates); ``entropy_bonus`` > 0
    subtracts that weight times the mean action-token entropy from the loss (section 15.6, remedies b and c).
    ``credit='episode'`` (the chapter's estimator) weights every action token by its episode's return minus the group
    mean; ``credit='turn'`` by its turn's reward-to-go (discounted by ``gamma``) minus the group's leave-one-out
    baseline of it (``recipes.credit``).

    ``micro_batch``: None (the chapter's) forwards every episode at once; a number forwards that many at a time and
    adds their gradients into the one update (the loss's denominator is the whole batch's token count), leaving out
    the episodes whose advantage is zero at every token (a group that all passed or all failed: they add nothing to
    the gradient) unless an entropy bonus reads them. The same update to float rounding, in the memory of a few
    episodes: what a pretrained model needs for batches of dozens.

    ``loggers`` (a ``loggers.Reporter``, or what one accepts) get the step's monitors at ``step``: ``loss``,
    ``grad_norm`` (before the update), ``entropy`` of the update's logits, the gap between the sampler's and the
    trainer's log-probs of the episodes' action tokens (``sampling/sampling_logp_difference/mean``: they differ where the
    sampler rounds otherwise, as a pretrained model's bfloat16 sampling path does), what the sample shows
    (``monitors.sample_metrics``) and the token and episode counts. The step is the same with or without them.
    """
    _check(n_tasks, group, temperature, entropy_bonus)
    check_credit(credit, gamma)
    if micro_batch is not None and (not isinstance(micro_batch, int) or isinstance(micro_batch, bool) or micro_batch < 1):
        raise ValueError(f'micro_batch must be None (every episode at once) or a positive int, got {micro_batch!r}')
    rep = as_reporter(loggers)
    started = rep.clock()
    trajs = rollout_groups(model, rng.sample(list(tasks), n_tasks), tok, group, env=env, temperature=temperature,
                           generator=gen)
    b = collate(trajs, tok.pad_id)
    advantages = group_credit(b, group, credit, gamma)  # [B, 1] (episode credit) or [B, T-1] (turn credit)
    mask = b['action_mask']  # [B, T-1]
    opt.zero_grad()
    if micro_batch is None:
        pg_loss, entropy, gap = _pg_loss(model, b, advantages, mask.sum(), temperature, entropy_bonus, rep)
        pg_loss.backward()
        pg_loss = pg_loss.item()
    else:
        pg_loss, entropy, gap = _accumulated(model, b, advantages, temperature, entropy_bonus, rep, micro_batch)
    norm = rep.measure(lambda: grad_norm(model))
    optimizer_step(model, opt, scheduler, optim)
    rep.log(step, lambda: {**sample_metrics(trajs, group, env), 'loss': pg_loss, 'grad_norm': norm,
                           'entropy': entropy, 'sampling/sampling_logp_difference/mean': gap}, started=started,
            tokens=batch_tokens(b), episodes=len(trajs))
    return b['rewards'].view(n_tasks, group).mean().item()


def _pg_loss(model, b, advantages, n_tokens, temperature, entropy_bonus, rep):
    """REINFORCE's loss on the episodes of the collate batch ``b`` -> (loss, entropy, sampler gap): the loss's sum over
    their action tokens divided by ``n_tokens``, the entropy a float (with a bonus: a tensor, and in the loss) or None
    when nothing listens, the sampler gap's sum over their action tokens (a float, or None when nothing listens)."""
    mask = b['action_mask']  # [B, T-1]
    if entropy_bonus:
        logits = model(b['ids'], lengths=b['lengths'])[:, :-1]  # [B, T-1, V]
        if temperature != 1:
            logits = logits / temperature  # the distribution the episodes were drawn from (see the module docstring)
        logp = -F.cross_entropy(logits.transpose(1, 2), b['ids'][:, 1:], reduction='none')  # [B, T-1]
        entropy = (entropy_from_logits(logits) * mask).sum() / n_tokens
    else:
        logp, entropy = logp_and_entropy(model, b, rep, temperature)  # [B, T-1], float or None
    loss = -(advantages * logp * mask).sum() / n_tokens
    if entropy_bonus:
        loss = loss - entropy_bonus * entropy
    gap = rep.measure(lambda: ((logp.detach() - b['logprobs']).abs() * mask).sum().item() / float(n_tokens))
    return loss, entropy, gap


def _accumulated(model, b, advantages, temperature, entropy_bonus, rep, micro_batch):
    """``reinforce_step``'s update over micro-batches of ``micro_batch`` episodes, their gradients added -> (loss, entropy,
    sampler gap) of the whole batch, as floats (entropy and gap over the episodes forwarded; None if nothing listens)."""
    mask = b['action_mask']  # [B, T-1]
    n_tokens = mask.sum()
    per_row = (advantages * mask).abs().sum(1) if advantages.dim() == 2 else advantages.abs().view(-1)  # [B]
    rows = torch.arange(len(mask)) if entropy_bonus else (per_row > 0).nonzero().view(-1)  # the episodes forwarded
    loss, entropy, gap, seen = 0.0, 0.0, 0.0, 0
    for chunk in rows.split(micro_batch) if len(rows) else ():
        T = int(b['lengths'][chunk].max())
        sub = {'ids': b['ids'][chunk, :T], 'lengths': b['lengths'][chunk], 'action_mask': mask[chunk, :T - 1],
               'logprobs': b['logprobs'][chunk, :T - 1]}
        adv = advantages[chunk] if advantages.dim() == 1 or advantages.shape[1] == 1 else advantages[chunk, :T - 1]
        part, ent, g = _pg_loss(model, sub, adv, n_tokens, temperature, entropy_bonus, rep)
        part.backward()
        loss += part.item()
        w = int(sub['action_mask'].sum())
        if ent is not None:  # a token-weighted mean over the chunks
            ent = float(ent.detach()) if torch.is_tensor(ent) else float(ent)
            entropy += ent * float(n_tokens) if entropy_bonus else ent * w
        gap = None if g is None else gap + g
        seen += w
    if not rep.active:
        return loss, None, None
    entropy = entropy / float(n_tokens) if entropy_bonus else (entropy / seen if seen else 0.0)
    return loss, entropy, None if gap is None else gap * float(n_tokens) / max(seen, 1)


@small_model_threads
def train_rl(model, tasks, tok, steps, start=0, lr=1e-3, seed=0, n_tasks=8, group=8, every=10, evaluate=None,
             temperature=1.0, entropy_bonus=0.0, env=DEFAULT_ENV, credit='episode', gamma=1.0, loggers=None,
             checkpoint=None, progress=None, micro_batch=None, optim=None):
    """``steps`` REINFORCE steps on ``tasks``, in place -> history of (step, *evaluate(model)) (section 15.5).

    ``evaluate(model)`` returns a tuple (for example train and held-out pass); it runs before the
    first step and every ``every`` steps. ``start`` offsets the step numbers, so a cold-started
    run continues the x axis of its SFT phase. ``temperature``, ``entropy_bonus``, ``env``, ``credit`` and
    ``gamma``: see ``reinforce_step``.

    ``loggers`` (``agentrl.loggers``) get every step's ``loss``, ``grad_norm``, ``entropy`` and what its sample
    shows (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``informative``, ``invalid_calls``,
    ``reads_first`` ...), on the step axis ``start + step``, and each evaluation under ``eval/`` (a tuple's
    entries as ``eval/0``, ``eval/1`` ..., a named tuple's by their names). ``micro_batch``: ``reinforce_step``'s.
    ``optim`` (``recipes.optim.OptimConfig``): weight decay, clipping, warmup and schedule (default: the chapter's).
    ``checkpoint`` and ``progress``:
    ``recipes.loop`` (a resumed run skips the evaluation before its first step: its history holds it).
    """
    _check(n_tasks, group, temperature, entropy_bonus, lr)
    check_credit(credit, gamma)
    if n_tasks > len(list(tasks)):
        raise ValueError(f'n_tasks ({n_tasks}) exceeds the {len(list(tasks))} tasks given')
    opt = make_optimizer(model, lr, optim)
    scheduler = make_scheduler(opt, optim, steps)
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    rep = as_reporter(loggers)
    history = []
    loop = RecipeLoop('train_rl', steps, model, opt, streams={'tasks': rng, 'rollouts': gen},
                      outputs={'history': history}, checkpoint=checkpoint, progress=progress, scheduler=scheduler)
    if not loop.resumed:
        history += first_evaluation(model, evaluate, start, rep)
    for step in loop.steps():
        reinforce_step(model, opt, tasks, tok, rng, gen, n_tasks, group, temperature, entropy_bonus, env, credit, gamma,
                       rep, start + step, micro_batch, optim, scheduler)
        if evaluate is not None and step % every == 0:
            values = evaluate(model)
            history.append((start + step, *values))
            rep.log_eval(start + step, values)
    return history
