"""Schedules for feeding trajectories through a key/value cache in chunks, shared by the cache tests of
TinyAgent and HFPolicy: at turn boundaries, one token at a time, or in ragged chunks."""
from __future__ import annotations


def turn_chunks(traj):
    """Split a trajectory's ids at turn boundaries -> list of (start, end)."""
    turn = traj.turn.tolist()
    bounds = [0] + [i for i in range(1, len(turn)) if turn[i] != turn[i - 1]] + [len(turn)]
    return list(zip(bounds[:-1], bounds[1:]))


def feed_schedules(trajs, mode, rng):
    """Per row, the list of (start, end) chunks to feed: at turn boundaries, one token at a time, or ragged."""
    out = []
    for t in trajs:
        if mode == 'turns':
            out.append(turn_chunks(t))
        elif mode == 'tokens':
            out.append([(i, i + 1) for i in range(len(t))])
        else:
            chunks, i = [], 0
            while i < len(t):
                j = min(len(t), i + rng.randint(1, 9))
                chunks.append((i, j))
                i = j
            out.append(chunks)
    return out
