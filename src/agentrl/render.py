"""The one renderer: episodes -> token sequences with owners, and ``collate`` (sections 15.1, 15.6).

An episode renders as::

    <bos> fix clamp : tests fail  read <stop>  <tool> def clamp ( ... </tool>  edit swap_minmax <stop>  ...  submit <stop>  <tool> submitted </tool>
    |---- bos + prompt ---------|  |policy-|   |---------- tool reply ----|  |------ policy ------|       |policy--|    |---- final reply ----|

Template tokens (``<bos>`` and the ``<tool> ... </tool>`` wrappers) mark whose turn it is: every
reply is wrapped, so a policy turn always starts right after ``</tool>`` (or after the prompt).

Every token carries its ``owner`` (who produced it: ``OWNER``) and its ``turn`` (0 for the prompt,
k for the k-th call and its reply). Scripted demos and model rollouts both go through
``EpisodeBuilder``, so the same calls give token-identical trajectories; section 15.6 shows what
breaks when two pipelines render differently. The action mask is derived here, once:
``action_mask[i] = 1`` exactly when token ``i + 1`` is policy-owned.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import torch

from .owners import OWNER
from .viewer import trajectory_html

_TEMPLATE, _PROMPT, _POLICY, _TOOL = OWNER['template'], OWNER['prompt'], OWNER['policy'], OWNER['tool']


@dataclass
class Trajectory:
    """One rendered episode.

    Fields (positional, in this order):
        ids: ``[T]`` token ids.
        action_mask: ``[T-1]`` float, 1 where the *next* token (``ids[i+1]``) is policy-owned.
        logprobs: ``[T-1]`` behaviour log-prob of each sampled next token, 0 elsewhere.
        reward: the episode's scalar reward.
        info: the environment's final info (``task``, ``family``, ``actions``, ``n_invalid``, ...).
        owner: ``[T]`` ``OWNER`` code of each token.
        turn: ``[T]`` turn of each token (0 = prompt).
        vocab: (keyword, optional) the token strings of the vocabulary ``ids`` index, which the renderer
            that built the episode sets, so that a notebook shows its words (``_repr_html_``).
    """
    ids: torch.Tensor
    action_mask: torch.Tensor
    logprobs: torch.Tensor
    reward: float
    info: dict
    owner: torch.Tensor
    turn: torch.Tensor
    vocab: list | None = field(default=None, repr=False, compare=False, kw_only=True)

    def __len__(self):
        return len(self.ids)

    def _repr_html_(self):
        return trajectory_html(self)


class EpisodeBuilder:
    """Accumulates one episode's tokens, owners and turns; ``build`` makes the ``Trajectory``."""

    def __init__(self, tok):
        self.tok = tok
        self.ids, self.owner, self.turn, self.logprobs = [], [], [], []
        self.turn_no = 0

    def _add(self, ids, owner, logprobs=None):
        self.ids += ids
        self.owner += [owner] * len(ids) if isinstance(owner, int) else owner
        self.turn += [self.turn_no] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)
        return ids

    def prompt(self, text: str) -> list[int]:
        """``<bos> prompt`` -> the ids added."""
        tok = self.tok
        words = tok.encode(text)
        return self._add([tok.bos_id, *words], [_TEMPLATE, *[_PROMPT] * len(words)])

    def call(self, ids, logprobs=None) -> list[int]:
        """The policy's call tokens (normally ending in ``<stop>``); starts a new turn -> the ids added."""
        self.turn_no += 1
        return self._add(list(ids), _POLICY, logprobs)

    def reply(self, text: str) -> list[int]:
        """A tool reply, ``<tool> reply </tool>`` -> the ids added."""
        tok = self.tok
        words = tok.encode(text)
        return self._add([tok.tool_id, *words, tok.end_tool_id], [_TEMPLATE, *[_TOOL] * len(words), _TEMPLATE])

    def build(self, reward: float, info: dict) -> Trajectory:
        mask = [1.0 if o == _POLICY else 0.0 for o in self.owner[1:]]
        return Trajectory(_tensor('q', self.ids), _tensor('f', mask), _tensor('f', self.logprobs[1:]),
                          float(reward), dict(info), _tensor('q', self.owner), _tensor('q', self.turn), vocab=self.tok.vocab)


def _tensor(code: str, values: list) -> torch.Tensor:
    """A 1-D int64 (``'q'``) or float32 (``'f'``) tensor of ``values``: through a C array, 3x faster than
    ``torch.tensor`` on a list (a rollout of 320 episodes builds 1,600 of them); the same values."""
    if not values:
        return torch.zeros(0, dtype=torch.long if code == 'q' else torch.float)
    return torch.frombuffer(array(code, values), dtype=torch.long if code == 'q' else torch.float)


def collate(trajs, pad_id: int) -> dict:
    """Right-pad a list of trajectories into a batch (the mask is built here, once; section 15.1).

    Returns a dict of tensors:
        ids ``[B, T]`` (padded with ``pad_id``), attention_mask ``[B, T]`` (1 on real tokens),
        action_mask ``[B, T-1]`` float (1 where the next token is the policy's), rewards ``[B]``,
        owner ``[B, T]`` and turn ``[B, T]`` (padded with -1), logprobs ``[B, T-1]`` (padded with 0),
        lengths ``[B]`` (the real tokens of each row).

    The model needs no more than the ids to skip the padding: with our tokenizer's ``pad_id``
    (always 0, ``tokenizer.PAD_ID``), ``TinyAgent`` reads each row's length off its trailing 0s.
    Pass ``lengths`` too (``sequence_log_probs(model, batch['ids'], batch['lengths'])``, as the
    recipes do) when a row's own tokens may end in id 0 (a sampled ``<pad>``) or ``pad_id`` is
    not 0.

    Example: two episodes of 5 and 3 tokens, ``P`` marking policy tokens::

        ids          owner              action_mask (next token is P?)
        b u f P P    T T pr P P         0 0 1 1
        b u P . .    T T P  - -         0 1 0 0      ('.' = pad_id, '-' = -1)
    """
    trajs = list(trajs)
    if not trajs:
        raise ValueError('collate needs at least one trajectory, got an empty list')
    if not all(isinstance(t, Trajectory) for t in trajs):
        bad = next(type(t).__name__ for t in trajs if not isinstance(t, Trajectory))
        raise TypeError(f'collate takes Trajectory objects, got {bad}')
    if not isinstance(pad_id, int):
        raise TypeError(f'pad_id must be an int, got {type(pad_id).__name__}')
    lengths = torch.tensor([len(t.ids) for t in trajs])
    if int(lengths.min()) < 2:
        raise ValueError('every trajectory needs at least 2 tokens to predict one')
    B, T = len(trajs), int(lengths.max())
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    owner = torch.full((B, T), -1, dtype=torch.long)
    turn = torch.full((B, T), -1, dtype=torch.long)
    action_mask = torch.zeros(B, T - 1)
    logprobs = torch.zeros(B, T - 1)
    for b, t in enumerate(trajs):
        n = len(t.ids)
        ids[b, :n], owner[b, :n], turn[b, :n] = t.ids, t.owner, t.turn
        action_mask[b, :n - 1], logprobs[b, :n - 1] = t.action_mask, t.logprobs
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # [B, T]
    rewards = torch.tensor([float(t.reward) for t in trajs])
    return {'ids': ids, 'attention_mask': attention_mask, 'action_mask': action_mask, 'rewards': rewards,
            'owner': owner, 'turn': turn, 'logprobs': logprobs, 'lengths': lengths}
