"""Trajectories as compact JSON: for resumable runs and the report's episode browser."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..runtime.files import atomic_path
from .trajectory import Trajectory


def to_dict(t: Trajectory) -> dict:
    """A JSON-ready dict of a trajectory (ids, owner, turn, logprobs rounded to 1e-5, mask as ints, and
    ``turn_rewards`` when a reward was paid before the last call)."""
    d = {'ids': t.ids.tolist(), 'owner': t.owner.tolist(), 'turn': t.turn.tolist(),
         'action_mask': [int(x) for x in t.action_mask.tolist()],
         'logprobs': [round(x, 5) for x in t.logprobs.tolist()], 'reward': t.reward, 'info': t.info}
    if any(t.turn_rewards[:-1]):  # rewards before the last call (absent: the whole return is paid at the end)
        d['turn_rewards'] = t.turn_rewards
    return d


def from_dict(d: dict) -> Trajectory:
    return Trajectory(torch.tensor(d['ids'], dtype=torch.long), torch.tensor(d['action_mask'], dtype=torch.float),
                      torch.tensor(d['logprobs'], dtype=torch.float), float(d['reward']), dict(d['info']),
                      torch.tensor(d['owner'], dtype=torch.long), torch.tensor(d['turn'], dtype=torch.long),
                      turn_rewards=d.get('turn_rewards'))


def save_trajectories(path, trajs) -> None:
    """Write trajectories to ``path`` as JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps([to_dict(t) for t in trajs], separators=(',', ':')))


def load_trajectories(path) -> list:
    try:
        data = json.loads(Path(path).read_text())
        return [from_dict(d) for d in data]
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f'{path} is not a trajectory file written by save_trajectories: {e}') from None
