"""Diagnostics of sections 15.5-15.6: how an RL policy plays, informative groups, template mismatch, a rendering check.

- ``probe``: how many RL groups would carry a learning signal (mixed pass and fail).
- ``reads_first``: how a policy goes about a task: by reading first (BugFix: the source), or by acting at once.
- ``strip_wrappers``: a demo pipeline that drops the template wrappers (the mismatch experiment).
- ``check_rendering``: the fix the chapter recommends, a token-level equality check of a demo
  pipeline's trajectories against the library's own renderer.
"""
from __future__ import annotations

import torch

from ..envs.protocol import DEFAULT_ENV, env_attr
from ..rendering.chat import replay
from ..rendering.trajectory import OWNER, Trajectory, collate
from ..runtime.threads import small_model_threads
from .evaluation import action_entropy, pass_rate
from .outcomes import DEFAULT_THRESHOLD, success_rate


def informative_fraction(rewards: torch.Tensor) -> float:
    """Share of groups (rows of ``rewards [tasks, G]``) whose rewards are not all equal."""
    return (rewards.std(1) > 0).float().mean().item()


def is_read(env=DEFAULT_ENV):
    """The environment's test of a call that only looks (``is_read_call``; BugFix: exactly ``read``), or one that
    says no to every call when the environment names none."""
    return env_attr(env, 'is_read_call') or (lambda call: False)


@small_model_threads
def probe(model, tasks, tok, group=8, seed=5, env=DEFAULT_ENV):
    """Sample ``group`` episodes per task in ``env`` -> (mean reward, informative-group fraction, action entropy) (15.6)."""
    return probe_episodes(model, tasks, tok, group, seed, env)[:3]


@small_model_threads
def probe_episodes(model, tasks, tok, group=8, seed=5, env=DEFAULT_ENV) -> tuple:
    """``probe``'s three figures and the episodes they come from -> (mean reward, informative, entropy, episodes)."""
    _, trajs = pass_rate(model, tasks, tok, group, seed=seed, env=env)
    rewards = torch.tensor([t.reward for t in trajs]).view(len(tasks), group)  # [tasks, G]
    return rewards.mean().item(), informative_fraction(rewards), action_entropy(model, collate(trajs, tok.pad_id)), trajs


def reads_first(trajs, env=DEFAULT_ENV) -> float:
    """Share of episodes whose first call only looks (BugFix: ``read``) (section 15.5's two RL recipes).

    A policy that edits at once has seen nothing but the issue text, so its fix can only follow the
    function's name, which tells nothing about a held-out function; one that reads first can pick the
    fix from the source's cue. RL from the weak base takes either road, depending on the seed.
    """
    trajs = list(trajs)
    if not trajs:
        raise ValueError('reads_first needs at least one episode, got none')
    read = is_read(env)
    return sum(bool(t.info['actions']) and read(t.info['actions'][0]) for t in trajs) / len(trajs)


@small_model_threads
def describe(model, train, heldout, tok, n=8, seed=0, by_group=False, env=DEFAULT_ENV,
             threshold=DEFAULT_THRESHOLD) -> dict:
    """Train and held-out pass, invalid calls per episode, share that reads, action entropy (section 15.2).

    Pass is the share of episodes whose return reaches ``threshold`` (``recipes.outcomes.success_rate``): with
    0/1 rewards, ``pass_rate``'s mean return; with partial credit, the wins only.

    ``by_group`` adds ``held_by_group``: held-out pass per task group (BugFix: bug family), from the same
    held-out episodes. ``reads``: the share of train episodes with a call that only looks (``is_read``).
    """
    _, trajs = pass_rate(model, train, tok, n, seed=seed, env=env)
    _, held = pass_rate(model, heldout, tok, n, seed=seed, env=env)
    read = is_read(env)
    out = {'train': success_rate(trajs, threshold), 'held': success_rate(held, threshold),
           'invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs),
           'reads': sum(any(map(read, t.info['actions'])) for t in trajs) / len(trajs),
           'entropy': action_entropy(model, collate(trajs, tok.pad_id))}
    if by_group:
        groups = {}
        for t in held:
            if t.info.get('group') is not None:
                groups.setdefault(t.info['group'], []).append(t)
        out['held_by_group'] = {g: success_rate(ts, threshold) for g, ts in groups.items()}
    return out


def strip_wrappers(traj: Trajectory) -> Trajectory:
    """Drop every template token but ``<bos>``: a demo pipeline that forgot the wrappers (section 15.6)."""
    keep = (traj.owner != OWNER['template']) | (torch.arange(len(traj.ids)) == 0)  # keep <bos>
    owner = traj.owner[keep]
    return Trajectory(traj.ids[keep], (owner[1:] == OWNER['policy']).float(), torch.zeros(int(keep.sum()) - 1),
                      traj.reward, traj.info, owner, traj.turn[keep], turn_rewards=traj.turn_rewards, vocab=traj.vocab)


def rerender(traj: Trajectory, tok, env=DEFAULT_ENV, tasks=None) -> Trajectory:
    """Replay ``traj``'s calls (``info['actions']``) in a fresh ``env`` through the library's renderer for ``tok``
    (``chat.replay``: the word-level layout for our tokenizer, a chat template for a ``ChatRenderer``).

    ``env``: a factory or Gymnasium id; ``tasks``: where to find the episode's task (``envs.protocol.find_task``)."""
    return replay(traj, tok, env, tasks)


def check_rendering(trajs, tok, env=DEFAULT_ENV, tasks=None) -> list:
    """Compare a demo pipeline's trajectories token by token with the library's rendering -> problems.

    Returns one string per trajectory that differs, naming the first differing position and the
    tokens on each side; an empty list means every trajectory matches (section 15.6, option c).
    Each episode is replayed in ``env`` (``rerender``; its task found in ``tasks`` or by name).

        >>> check_rendering([strip_wrappers(demo)], tok)
        ["minmax/clamp: token 7 is 'def' (yours) vs '<tool>' (rollout renderer)"]
    """
    problems = []
    for t in trajs:
        ref = rerender(t, tok, env, tasks)
        a, b = t.ids.tolist(), ref.ids.tolist()
        if a == b and torch.equal(t.owner, ref.owner):
            continue
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        mine = tok.vocab[a[i]] if i < len(a) else '<end>'
        theirs = tok.vocab[b[i]] if i < len(b) else '<end>'
        problems.append(f"{t.info['task']}: token {i} is {mine!r} (yours) vs {theirs!r} (rollout renderer)")
    return problems
