"""Credit: how much each action token's log-prob is pushed, from the rewards of its episode and its group (15.5).

The chapter's policy gradient gives every action token of an episode the same weight, its advantage
``A_i = R_i - mean_group(R)``, where ``R_i`` is the episode's return (``credit='episode'``). With rewards paid
at every step, a token of turn ``k`` cannot have caused the rewards of turns before ``k``; weighting it by the
*reward-to-go* from its own turn removes that noise (``credit='turn'``, the REINFORCE "causality" estimator,
Williams 1992; Sutton and Barto 2018, 13.3)::

    G_{i,k} = sum_{j >= k} gamma^(j - k) r_{i,j}          (episode i's reward-to-go from turn k)
    A_{i,k} = G_{i,k} - b_{i,k}                             (every action token of turn k gets A_{i,k})

**The baseline of turn credit** is the mean of the same quantity over the *other* episodes of the group that
reached turn ``k`` (leave-one-out), or 0 when none did::

    b_{i,k} = mean { G_{j,k} : j != i in i's group, episode j made a k-th call }

Why leave-one-out: a baseline leaves the gradient unbiased only if it does not depend on the episode's own
actions. Episodes of one group end after different numbers of turns, so a per-turn-index group mean that
includes the episode itself weighs it by ``1 / n_k``, where ``n_k`` (how many episodes reached turn ``k``)
itself depends on what the episodes did: a bias that grows at late turns, where few episodes remain. Leaving
the episode out makes ``b_{i,k}`` a function of the other, independent episodes only, for any numbers of
turns. For the chapter's gyms, which pay one reward at the end, ``G_{i,k} = R_i`` at every turn; with every
episode alive at every turn, turn credit is episode credit times ``G / (G - 1)``.

``credit='episode'`` is exactly the chapter's estimator (the 15.3 gradient identity holds for it).
"""
from __future__ import annotations

import math

import torch

CREDITS = ('episode', 'turn')


def check_credit(credit: str, gamma) -> None:
    """``ValueError`` naming the valid choices for an unknown ``credit`` or a ``gamma`` outside (0, 1]."""
    if credit not in CREDITS:
        raise ValueError(f'unknown credit {credit!r}; valid choices are {list(CREDITS)}')
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) \
            or not 0 < gamma <= 1:
        raise ValueError(f'gamma must be a number in (0, 1] (the discount of turn credit), got {gamma!r}')


def rewards_to_go(turn_rewards: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Reward-to-go of each turn: ``turn_rewards [B, K]`` (0-padded) -> ``G [B, K]``, ``G[:, k] = sum_{j>=k}
    gamma^(j-k) r[:, j]``."""
    G = torch.zeros_like(turn_rewards)  # [B, K]
    running = torch.zeros(turn_rewards.shape[0], dtype=turn_rewards.dtype)  # [B]
    for k in range(turn_rewards.shape[1] - 1, -1, -1):
        running = turn_rewards[:, k] + gamma * running
        G[:, k] = running
    return G


def turn_advantages(turn_rewards: torch.Tensor, n_turns: torch.Tensor, group: int, gamma: float = 1.0) -> torch.Tensor:
    """Turn-credit advantages ``A [B, K]`` of ``B = tasks * group`` episodes (task-major; ``n_turns [B]`` calls each).

    ``A[i, k] = G[i, k] - b[i, k]``: the reward-to-go minus the leave-one-out mean of the group's other episodes
    that reached turn k (0 if none did); 0 at turns an episode did not reach (see the module docstring)."""
    B, K = turn_rewards.shape
    if B % group:
        raise ValueError(f'{B} episodes do not split into groups of {group}')
    G = rewards_to_go(turn_rewards, gamma).view(B // group, group, K)  # [tasks, G, K]
    alive = (torch.arange(K)[None, :] < n_turns[:, None]).to(G.dtype).view(B // group, group, K)  # [tasks, G, K]
    total, count = (G * alive).sum(1, keepdim=True), alive.sum(1, keepdim=True)  # [tasks, 1, K] each
    others = (count - alive).clamp(min=1)  # [tasks, G, K]: how many other episodes reached turn k
    baseline = torch.where(count - alive > 0, (total - G * alive) / others, torch.zeros_like(G))  # [tasks, G, K]
    return ((G - baseline) * alive).view(B, K)  # [B, K]


def token_weights(batch: dict, per_turn: torch.Tensor) -> torch.Tensor:
    """Spread per-turn values ``[B, K]`` onto the tokens: ``[B, T-1]``, entry t the value of the turn of token
    t + 1 (the token it predicts), 0 on prompt and padding positions (callers multiply by the action mask)."""
    turn = batch['turn'][:, 1:]  # [B, T-1], 0 = prompt, k = the k-th call and its reply, -1 = padding
    index = (turn - 1).clamp(min=0)  # [B, T-1]
    weights = per_turn.gather(1, index.clamp(max=per_turn.shape[1] - 1))  # [B, T-1]
    return torch.where(turn > 0, weights, torch.zeros_like(weights))


def group_credit(batch: dict, group: int, credit: str = 'episode', gamma: float = 1.0) -> torch.Tensor:
    """The weight of every next-token log-prob of a collated group batch (task-major, ``group`` episodes per task).

    ``'episode'``: ``[B, 1]``, ``R_i - mean_group(R)`` (the chapter's group baseline, section 15.5).
    ``'turn'``: ``[B, T-1]``, each token's ``turn_advantages`` (off the action tokens: whatever, the
    losses multiply by the action mask)."""
    check_credit(credit, gamma)
    if credit == 'episode':
        rewards = batch['rewards'].view(-1, group)  # [tasks, G]
        return (rewards - rewards.mean(1, keepdim=True)).view(-1, 1)  # [B, 1]
    n_turns = batch['turn'].max(1).values.clamp(min=0)  # [B]: calls per episode
    return token_weights(batch, turn_advantages(batch['turn_rewards'], n_turns, group, gamma))  # [B, T-1]
