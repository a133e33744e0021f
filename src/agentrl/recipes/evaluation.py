"""Measuring a policy in an environment: pass rate, pass rate per task group, action entropy (section 15.2), and
what papers report: pass@k from n samples per task (Chen et al. 2021) and greedy decoding's pass.

Every evaluator takes the environment as ``env=``: a factory or Gymnasium id (``envs.protocol``),
the BugFix gym by default. One fresh environment is built per episode. pass@k and greedy pass count
successes (``recipes.outcomes``: a return that reaches ``threshold``), so a game that pays partial
credit counts its wins, not its mean return.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..envs.protocol import DEFAULT_ENV
from ..policies.scoring import entropy_from_logits
from ..rollouts.engine import rollout_groups
from ..runtime.threads import small_model_threads
from .outcomes import DEFAULT_THRESHOLD, check_threshold, is_success, success_rate


@small_model_threads
def pass_rate(model, tasks, tok, n_samples=4, temperature=1.0, seed=0, reward='hidden', env=DEFAULT_ENV):
    """Sample n_samples episodes per task in lockstep -> (mean return, list of Trajectory) (section 15.2).

    ``env``: the environment factory or Gymnasium id; ``reward='public'`` builds it with its public reward.
    The first value is the mean of the episodes' returns: with the chapter's 0/1 rewards, the share that
    pass. With partial credit it is the mean return, not a success rate: ``recipes.outcomes.success_rate``
    (of the episodes returned) gives that. ``temperature=0`` decodes greedily (``greedy_pass``).
    """
    gen = torch.Generator().manual_seed(seed)
    trajs = rollout_groups(model, tasks, tok, n_samples, env=env, reward=reward, temperature=temperature, generator=gen)
    return sum(t.reward for t in trajs) / len(trajs), trajs


def group_rates(trajs) -> dict:
    """Mean return per task group of some episodes (``info['group']``; BugFix: the bug family) -> {group: pass}.

    Groups appear in the order their first episode does (BugFix's tasks come in ``FAMILIES`` order);
    episodes without a group are left out."""
    out = {}
    for t in trajs:
        group = t.info.get('group')
        if group is not None:
            out.setdefault(group, []).append(t.reward)
    return {g: sum(rs) / len(rs) for g, rs in out.items()}


@small_model_threads
def group_pass(model, tasks, tok, n_samples=4, seed=0, env=DEFAULT_ENV) -> dict:
    """Pass rate per task group, ``n_samples`` episodes per task -> {group: pass} (groups of ``tasks`` only).

    The same episodes as ``pass_rate(model, tasks, tok, n_samples, seed=seed, env=env)``. On BugFix's held-out tasks
    after oracle SFT this is section 15.2's transfer, family by family: the skill (read the source, pick the fix from
    its cue) carries over to unseen functions only if every family does.
    """
    return group_rates(pass_rate(model, tasks, tok, n_samples, seed=seed, env=env)[1])


@small_model_threads
def action_entropy(model, batch) -> float:
    """Mean next-token entropy over action tokens of a collate batch -> float (section 15.2)."""
    with torch.no_grad():
        lengths, mask = batch.get('lengths'), batch['action_mask']
        if hasattr(model, 'masked_logits'):  # a policy that computes its output layer only where asked (hf.HFPolicy)
            ent = entropy_from_logits(model.masked_logits(batch['ids'], mask, lengths)).cpu()  # [n]
            return ((ent * mask[mask != 0]).sum() / mask.sum()).item()
        logits = model(batch['ids']) if lengths is None else model(batch['ids'], lengths=lengths)  # [B, T, V]
        ent = entropy_from_logits(logits[:, :-1])  # [B, T-1]
    return ((ent * mask).sum() / mask.sum()).item()


# --- pass@k and greedy decoding --------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of a task, ``c`` of them successes -> float in [0, 1].

    pass@k is the chance that at least one of k attempts succeeds. Of the C(n, k) ways to pick k of the n
    samples, C(n - c, k) pick failures only, so 1 - C(n - c, k) / C(n, k) is unbiased (Chen et al. 2021,
    "Evaluating large language models trained on code"), where the plug-in 1 - (1 - c / n)**k is biased low.
    It is computed as their product 1 - prod_{i = n - c + 1}^{n} (1 - k / i), which never forms the binomials
    (a float overflows on C(n, k) past n of about 1,030).
    """
    for name, v in (('n', n), ('c', c), ('k', k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f'pass_at_k needs whole numbers n, c, k; got {name}={v!r}')
    if n < 1:
        raise ValueError(f'n (samples of the task) must be >= 1, got n={n}')
    if not 0 <= c <= n:
        raise ValueError(f'c (successes among the n samples) must be in 0..n, got c={c} with n={n}')
    if not 1 <= k <= n:
        raise ValueError(f'k (attempts) must be in 1..n: the estimator picks k of the n samples; got k={k} with n={n}')
    if n - c < k:  # every pick of k holds a success
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def default_ks(n: int) -> list:
    """The k's a pass@k curve reports from n samples: 1, 2, 4, ... below n, then n (n=6: [1, 2, 4, 6])."""
    return [2 ** j for j in range(n.bit_length()) if 2 ** j < n] + [n]


@dataclass(frozen=True)
class PassAtK:
    """pass@k of a policy on some tasks, from ``n`` episodes per task (``pass_at_k_curve``). ``dataclasses.asdict``
    of it is plain JSON (its int keys become strings)."""
    n: int
    """Episodes sampled per task."""
    ks: list
    """The k's, increasing (by default 1, 2, 4, ... and n)."""
    tasks: list
    """The tasks' names, in the order of the episodes."""
    successes: list
    """Per task (aligned with ``tasks``): how many of its n episodes succeeded."""
    per_task: dict
    """k -> per task (aligned with ``tasks``) the unbiased pass@k (``pass_at_k``); for plots per task."""
    mean: dict
    """k -> the mean over tasks of ``per_task[k]``: the pass@k a paper reports. ``mean[1]`` is the success rate."""
    threshold: float
    """The return a success reaches (``recipes.outcomes.is_success``)."""


def pass_at_k_from_episodes(trajs, n: int, ks=None, threshold: float = DEFAULT_THRESHOLD) -> PassAtK:
    """pass@k of episodes already sampled: ``n`` per task, task-major (``rollout_groups``' and ``pass_rate``'s
    order) -> PassAtK.

    So a run that samples n episodes per task for its pass rate gets pass@k from the same episodes. ``ks``
    (default ``default_ks(n)``): the k's, each in 1..n. Raises ``ValueError`` if the episodes do not come in
    groups of n of one task each.
    """
    trajs = list(trajs)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f'n (episodes per task) must be an int >= 1, got {n!r}')
    if not trajs or len(trajs) % n:
        raise ValueError(f'pass@k needs n={n} episodes per task, task-major: got {len(trajs)} episodes')
    ks = default_ks(n) if ks is None else sorted(set(ks))
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise ValueError(f'every k must be an int in 1..n={n} (pass@k picks k of the n episodes), got {k!r}')
    threshold = check_threshold(threshold)
    groups = [trajs[i:i + n] for i in range(0, len(trajs), n)]
    tasks = []
    for g in groups:
        names = {t.info['task'] for t in g}
        if len(names) != 1:
            raise ValueError(f'pass@k needs n={n} episodes per task, task-major: a group of {n} holds the tasks '
                             f'{sorted(names)}')
        tasks.append(names.pop())
    successes = [sum(is_success(t, threshold) for t in g) for g in groups]
    per_task = {k: [pass_at_k(n, c, k) for c in successes] for k in ks}
    return PassAtK(n=n, ks=ks, tasks=tasks, successes=successes, per_task=per_task,
                   mean={k: sum(v) / len(v) for k, v in per_task.items()}, threshold=threshold)


@small_model_threads
def pass_at_k_curve(model, tasks, tok, n: int, ks=None, env=DEFAULT_ENV, seed: int = 0, temperature: float = 1.0,
                    reward: str = 'hidden', threshold: float = DEFAULT_THRESHOLD) -> PassAtK:
    """Sample ``n`` episodes per task once and estimate pass@k for every k of ``ks`` from them -> PassAtK.

    ``ks`` defaults to 1, 2, 4, ... and n. The episodes are ``pass_rate(model, tasks, tok, n, temperature, seed,
    reward, env)``'s; each k's estimate is unbiased (``pass_at_k``), and its mean over tasks is the curve papers
    plot, pass@1 the share of successes. A success is a return that reaches ``threshold`` (default 1: the
    chapter's 0/1 reward; a game that pays partial credit counts only its wins).
    """
    _, trajs = pass_rate(model, tasks, tok, n, temperature=temperature, seed=seed, reward=reward, env=env)
    return pass_at_k_from_episodes(trajs, n, ks, threshold)


@small_model_threads
def greedy_pass(model, tasks, tok, env=DEFAULT_ENV, reward: str = 'hidden', threshold: float = DEFAULT_THRESHOLD):
    """One greedy episode per task (temperature 0: the most likely token at every step) -> (share of tasks whose
    episode succeeds, list of Trajectory).

    Greedy decoding draws nothing, so there is no seed: the same model and tasks give the same episodes. Their
    ``logprobs`` are the chosen tokens' log-probs under the policy at temperature 1. A success is a return that
    reaches ``threshold`` (``recipes.outcomes``), as in ``pass_at_k_curve``.
    """
    threshold = check_threshold(threshold)
    trajs = rollout_groups(model, tasks, tok, 1, env=env, reward=reward, temperature=0)
    return success_rate(trajs, threshold), trajs
