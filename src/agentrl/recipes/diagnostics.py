"""Diagnostics of sections 15.5-15.6: how an RL policy plays, informative groups, template mismatch, a rendering check.

- ``probe``: how many RL groups would carry a learning signal (mixed pass and fail).
- ``reads_first``: how a policy goes about a task: by reading the source first, or by editing at once.
- ``strip_wrappers``: a demo pipeline that drops the template wrappers (the mismatch experiment).
- ``check_rendering``: the fix the chapter recommends, a token-level equality check of a demo
  pipeline's trajectories against the library's own renderer.
"""
from __future__ import annotations

import torch

from ..env import BugFixEnv
from ..render import OWNER, EpisodeBuilder, Trajectory, collate
from ..tasks import make_tasks
from .evaluation import action_entropy, family_rates, pass_rate


def informative_fraction(rewards: torch.Tensor) -> float:
    """Share of groups (rows of ``rewards [tasks, G]``) whose rewards are not all equal."""
    return (rewards.std(1) > 0).float().mean().item()


def probe(model, tasks, tok, group=8, seed=5):
    """Sample ``group`` episodes per task -> (mean reward, informative-group fraction, action entropy) (section 15.6)."""
    _, trajs = pass_rate(model, tasks, tok, group, seed=seed)
    rewards = torch.tensor([t.reward for t in trajs]).view(len(tasks), group)  # [tasks, G]
    return rewards.mean().item(), informative_fraction(rewards), action_entropy(model, collate(trajs, tok.pad_id))


def reads_first(trajs) -> float:
    """Share of episodes whose first call is ``read`` (section 15.5's two RL recipes).

    A policy that edits at once has seen nothing but the issue text, so its fix can only follow the
    function's name, which tells nothing about a held-out function; one that reads first can pick the
    fix from the source's cue. RL from the weak base takes either road, depending on the seed.
    """
    trajs = list(trajs)
    if not trajs:
        raise ValueError('reads_first needs at least one episode, got none')
    return sum(t.info['actions'][:1] == [' read '] for t in trajs) / len(trajs)


def describe(model, train, heldout, tok, n=8, seed=0, by_family=False) -> dict:
    """Train and held-out pass, invalid calls per episode, share that reads, action entropy (section 15.2).

    ``by_family`` adds ``held_by_family``: held-out pass per bug family, from the same held-out episodes.
    """
    rate_train, trajs = pass_rate(model, train, tok, n, seed=seed)
    rate_held, held = pass_rate(model, heldout, tok, n, seed=seed)
    out = {'train': rate_train, 'held': rate_held,
           'invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs),
           'reads': sum(' read ' in t.info['actions'] for t in trajs) / len(trajs),
           'entropy': action_entropy(model, collate(trajs, tok.pad_id))}
    if by_family:
        out['held_by_family'] = family_rates(held)
    return out


def strip_wrappers(traj: Trajectory) -> Trajectory:
    """Drop every template token but ``<bos>``: a demo pipeline that forgot the wrappers (section 15.6)."""
    keep = (traj.owner != OWNER['template']) | (torch.arange(len(traj.ids)) == 0)  # keep <bos>
    owner = traj.owner[keep]
    return Trajectory(traj.ids[keep], (owner[1:] == OWNER['policy']).float(), torch.zeros(int(keep.sum()) - 1),
                      traj.reward, traj.info, owner, traj.turn[keep])


def rerender(traj: Trajectory, tok, env=None) -> Trajectory:
    """Replay ``traj``'s calls (``info['actions']``) in a fresh env through the library's renderer."""
    by_name = {t.name: t for t in make_tasks('all')}
    task = by_name[traj.info['task']]
    env = env or BugFixEnv()
    obs, _ = env.reset(options={'task': task})
    episode = EpisodeBuilder(tok)
    episode.prompt(obs)
    reward, info = 0.0, {}
    for call in traj.info['actions']:
        episode.call((tok.encode(call) + [tok.stop_id])[:env.max_call_tokens])  # a capped call has no stop
        obs, reward, terminated, truncated, info = env.step(call)
        if obs:
            episode.reply(obs)
        if terminated or truncated:
            break
    return episode.build(reward, info)


def check_rendering(trajs, tok) -> list:
    """Compare a demo pipeline's trajectories token by token with the library's rendering -> problems.

    Returns one string per trajectory that differs, naming the first differing position and the
    tokens on each side; an empty list means every trajectory matches (section 15.6, option c).

        >>> check_rendering([strip_wrappers(demo)], tok)
        ["minmax/clamp: token 7 is 'def' (yours) vs '<tool>' (rollout renderer)"]
    """
    problems = []
    for t in trajs:
        ref = rerender(t, tok)
        a, b = t.ids.tolist(), ref.ids.tolist()
        if a == b and torch.equal(t.owner, ref.owner):
            continue
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        mine = tok.vocab[a[i]] if i < len(a) else '<end>'
        theirs = tok.vocab[b[i]] if i < len(b) else '<end>'
        problems.append(f"{t.info['task']}: token {i} is {mine!r} (yours) vs {theirs!r} (rollout renderer)")
    return problems
