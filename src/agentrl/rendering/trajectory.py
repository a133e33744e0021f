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

import math
from array import array
from dataclasses import dataclass, field

import torch

from ..envs.play import play
from ..envs.protocol import RETURN_TOL
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
        reward: the episode's return: the sum of its per-turn rewards (undiscounted; a discount is the
            learner's choice, ``recipes.credit``).
        info: the environment's final info (``task``, ``family``, ``actions``, ``n_invalid``, ...).
        owner: ``[T]`` ``OWNER`` code of each token.
        turn: ``[T]`` turn of each token (0 = prompt, k = the k-th call and its reply).
        turn_rewards: (keyword, optional) the reward each call's step paid, in order: one float per call.
            Rollouts always record it. Built without it (as ``Trajectory(ids, mask, logprobs, reward, info,
            owner, turn)``), the whole return is paid at the last call: the chapter's one reward at the end.
            A list that does not sum to ``reward`` is refused.
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
    turn_rewards: list | None = field(default=None, repr=False, compare=False, kw_only=True)
    vocab: list | None = field(default=None, repr=False, compare=False, kw_only=True)

    def __post_init__(self):
        n_calls = int(self.turn.max()) if len(self.turn) else 0
        if self.turn_rewards is None:
            self.turn_rewards = [0.0] * (n_calls - 1) + [float(self.reward)] if n_calls else []
            return
        self.turn_rewards = [float(r) for r in self.turn_rewards]
        if len(self.turn_rewards) != n_calls:
            raise ValueError(f'turn_rewards has {len(self.turn_rewards)} entries for an episode of {n_calls} calls '
                             '(one reward per call)')
        if not math.isclose(sum(self.turn_rewards), float(self.reward), rel_tol=1e-9, abs_tol=RETURN_TOL):
            raise ValueError(f'reward {self.reward!r} is not the sum of turn_rewards {self.turn_rewards} '
                             '(the reward is the episode\'s return)')

    def __len__(self):
        return len(self.ids)

    def _repr_html_(self):
        return trajectory_html(self)


class TrajectoryBuilder:
    """What every renderer's episode builder shares: tokens with their owners, turns and behaviour log-probs,
    one reward per call, and ``build`` -> ``Trajectory`` (the action mask derived here, once).

    A renderer's builder (``EpisodeBuilder`` for the word-level layout, ``chat.ChatEpisode`` for a chat
    template) writes ``prompt(text)`` and ``reply(text, final=False)``; ``call`` and ``build`` are these.
    """

    def __init__(self, vocab=None):
        self.vocab = vocab
        self.ids, self.owner, self.turn, self.logprobs = [], [], [], []
        self.turn_no = 0

    def _add(self, ids, owner, logprobs=None):
        self.ids += ids
        self.owner += [owner] * len(ids) if isinstance(owner, int) else owner
        self.turn += [self.turn_no] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)
        return ids

    def call(self, ids, logprobs=None) -> list[int]:
        """The policy's call tokens, kept as given (normally ending in the stop token); starts a new turn -> the ids."""
        self.turn_no += 1
        return self._add(list(ids), _POLICY, logprobs)

    def build(self, reward: float, info: dict, turn_rewards=None) -> Trajectory:
        """The episode as a ``Trajectory``: ``reward`` its return, ``turn_rewards`` (optional) each call's reward."""
        mask = [1.0 if o == _POLICY else 0.0 for o in self.owner[1:]]
        return Trajectory(_tensor('q', self.ids), _tensor('f', mask), _tensor('f', self.logprobs[1:]),
                          float(reward), dict(info), _tensor('q', self.owner), _tensor('q', self.turn),
                          turn_rewards=turn_rewards, vocab=self.vocab)

    def finish(self, episode) -> Trajectory:
        """The played ``episode`` (an ``envs.play.Episode``) as a ``Trajectory``: its return, info and step rewards."""
        return self.build(episode.reward, episode.info, episode.rewards)


class EpisodeBuilder(TrajectoryBuilder):
    """The word-level layout: ``<bos> prompt``, calls, replies wrapped in ``<tool> ... </tool>``."""

    def __init__(self, tok):
        super().__init__(tok.vocab)
        self.tok = tok

    def prompt(self, text: str) -> list[int]:
        """``<bos> prompt`` -> the ids added."""
        tok = self.tok
        words = tok.encode(text)
        return self._add([tok.bos_id, *words], [_TEMPLATE, *[_PROMPT] * len(words)])

    def reply(self, text: str, final: bool = False) -> list[int]:
        """A tool reply, ``<tool> reply </tool>`` -> the ids added (every reply closes the same way, so
        ``final`` changes nothing here)."""
        tok = self.tok
        words = tok.encode(text)
        return self._add([tok.tool_id, *words, tok.end_tool_id], [_TEMPLATE, *[_TOOL] * len(words), _TEMPLATE])


class _Recorder:
    """Writes the episode ``envs.play.play`` plays into a renderer's builder: each call as the renderer encodes
    it, cut at its limit, and the text the environment receives for those ids."""

    def __init__(self, builder, renderer, call_limit: int):
        self.builder, self.renderer, self.limit = builder, renderer, call_limit

    def prompt(self, text):
        self.builder.prompt(text)

    def call(self, text):
        ids = self.renderer.encode_call(text)[:self.limit]  # the cap a model's call has too
        self.builder.call(ids)
        return self.renderer.call_text(ids)

    def reply(self, text, final):
        self.builder.reply(text, final=final)


def render_play(env, task, player, renderer) -> Trajectory:
    """Play one episode of ``task`` in the environment instance ``env`` with a scripted ``player``, rendered by
    ``renderer`` (a renderer: ``policy.as_renderer``) -> Trajectory (section 15.1).

    The loop is ``envs.play.play``'s; each call is written as ``renderer.encode_call(text)``, cut at
    ``renderer.call_limit(env)``, and the environment receives ``renderer.call_text`` of those ids, exactly as
    it would receive a model's call of the same tokens. Every step's reward is kept (``turn_rewards``)."""
    builder = renderer.new_episode(env)
    return builder.finish(play(env, task, player, recorder=_Recorder(builder, renderer, renderer.call_limit(env))))


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
        action_mask ``[B, T-1]`` float (1 where the next token is the policy's), rewards ``[B]`` (each
        episode's return), turn_rewards ``[B, K]`` (each call's reward, K the most calls, padded with 0; with
        ``turn`` they give each token's reward-to-go: ``recipes.credit``),
        owner ``[B, T]`` and turn ``[B, T]`` (padded with -1), logprobs ``[B, T-1]`` (padded with 0),
        lengths ``[B]`` (the real tokens of each row), truncated ``[B]`` bool (the environment cut the episode at
        a budget, ``info['truncated']``; False where the info does not say).

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
    K = max(len(t.turn_rewards) for t in trajs)
    turn_rewards = torch.tensor([t.turn_rewards + [0.0] * (K - len(t.turn_rewards)) for t in trajs])  # [B, K]
    truncated = torch.tensor([bool(t.info.get('truncated', False)) for t in trajs])  # [B]
    return {'ids': ids, 'attention_mask': attention_mask, 'action_mask': action_mask, 'rewards': rewards,
            'turn_rewards': turn_rewards, 'owner': owner, 'turn': turn, 'logprobs': logprobs, 'lengths': lengths,
            'truncated': truncated}
