"""Scripted play: the one episode loop, and what is said in it, as text (vocabularies, STaR's answers, the checker).

An environment may offer scripted players (``env.scripted_policy(kind, seed)``, see ``protocol``). These
helpers play them and return what was said, as text:

- ``play``: one episode of a task with a player -> an ``Episode`` (prompt, calls, replies, per-turn rewards,
  return, info), a turn at a time (``EpisodeState.step``, every rollout's turn): a renderer records the same
  loop as tokens (``render.render_play``: scripted rollouts, and replays of an episode's calls);
- ``Replay``: a player that makes a recorded episode's calls again;
- ``oracle_calls``: the calls the scripted oracle makes on a task (STaR forces the answers among them);
- ``episode_texts``: every prompt, call and reply of the scripted players over some tasks (the text a
  word-level vocabulary is built from: ``tokenizer.build_tokenizer(tasks, env=...)``);
- ``ScriptedPlayer``: what a gym's scripted players share (the kinds, the checks, a seeded RNG per episode);
- ``HUMAN_FAULTS`` and ``human_fault``: the faults of a gym's ``'human'`` player, a good but imperfect demonstrator.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from .protocol import DEFAULT_ENV, RETURN_TOL, checked_reset, checked_step, env_attr, env_name, make_env_factory


@dataclass
class Episode:
    """One episode as text: the prompt, each call, the reply to it (empty when there was none) and the reward its
    step paid, then the return (the sum of ``rewards``), the final info, and whether the environment truncated
    it (cut it off at a budget) rather than ending it. An episode that ended has that also in its info,
    ``info['truncated']`` (the library's entry, which its trajectory keeps)."""
    prompt: str
    calls: list = field(default_factory=list)
    replies: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    reward: float = 0.0
    info: dict = field(default_factory=dict)
    truncated: bool = False


class ScriptedPlayer:
    """The bookkeeping of a gym's scripted player; a subclass writes ``reset(task_name)`` and ``__call__(obs) -> call``.

    Its randomness is seeded per episode from ``(kind, seed, task, episode number)`` (``episode_rng``), so a
    rollout is reproducible and two tasks never share a sequence of guesses.
    """
    KINDS = ('oracle', 'blind', 'random')

    def __init__(self, kind: str, seed: int = 0):
        if kind not in self.KINDS:
            raise ValueError(f'unknown policy kind {kind!r}; valid kinds are {list(self.KINDS)}')
        if not isinstance(seed, int):
            raise TypeError(f'seed must be an int, got {type(seed).__name__}')
        self.kind, self.seed = kind, seed
        self.episodes = 0

    def episode_rng(self, task_name: str) -> random.Random:
        """A fresh RNG for the next episode of ``task_name``; counts the episode."""
        rng = random.Random(f'{self.kind}:{self.seed}:{task_name}:{self.episodes}')
        self.episodes += 1
        return rng


HUMAN_FAULTS = {'no_read': 0.15, 'wrong_fix': 0.10, 'exploit': 0.10}
"""How often a gym's ``'human'`` player (exercise 7's demonstrator) makes each fault, per episode; the rest (0.65) are
the oracle's episodes. ``no_read``: it acts on the prompt alone, a guess like blind play's (which a train task
sometimes passes: the hurried person's shortcut, and the commonest fault); ``wrong_fix``: it reads, then writes a
fix that is not the one the cue calls for (a careless slip); ``exploit``: it reads, then games the public check (a
person who makes the visible tests pass). Each is frequent enough to be learned from 2,000 demonstrations (at
least 200 episodes of each), and together they leave a third of the demonstrations wrong in some way: good, not
perfect, which is what the design review is about."""


def human_fault(rng: random.Random, faults: dict = HUMAN_FAULTS):
    """The fault of a ``'human'`` player's next episode, drawn from ``rng``: a key of ``faults``, or None (clean)."""
    u = rng.random()
    for fault, p in faults.items():
        if u < p:
            return fault
        u -= p
    return None


class EpisodeState:
    """One episode in play (its ``Episode`` so far, ``done`` once ended); ``step`` is the one turn of every loop over
    episodes: ``play``, the lockstep sampler (``rollouts.engine``) and the benchmark's ``generate`` loop."""

    def __init__(self, env, task):
        obs, info = checked_reset(env, task)
        self.env, self.task, self.episode, self.done = env, task, Episode(obs, info=info), False

    def step(self, call: str) -> str:
        """Send ``call`` (the text the environment receives) -> its reply ('' for none). The call, reply and step reward
        join the episode, whose ``reward`` is the return so far (the sum of its step rewards) and ``info`` the last."""
        ep = self.episode
        obs, reward, terminated, truncated, info = checked_step(self.env, call, self.task, len(ep.calls) + 1)
        ep.calls.append(call)
        ep.replies.append(obs)
        ep.rewards.append(float(reward))
        ep.reward, ep.info = float(sum(ep.rewards)), info
        if terminated or truncated:
            self.done, ep.truncated = True, bool(truncated) and not terminated
            ep.info = {**info, 'truncated': ep.truncated}  # a copy: the trajectory's record (mask_truncated_completions)
        return obs


def play(env, task, player, recorder=None) -> Episode:
    """Play one episode of ``task`` in the environment instance ``env`` with ``player`` -> Episode.

    ``player(observation) -> call`` sees the prompt first, then each reply; it may have ``reset(task_name)``
    (called once, before the first call) and may return None to stop before the episode ends (a replay that
    has run out of calls). Every step's reward is kept: the return is their sum, whenever they are paid.
    ``recorder`` (optional) is told the episode as it goes: ``prompt(text)``, then per step ``call(text) ->
    text`` (what the environment receives: a renderer writes the call as tokens and may cut it at its limit)
    and ``reply(text, final)`` for a non-empty reply.
    """
    state = EpisodeState(env, task)
    obs, info = state.episode.prompt, state.episode.info
    reset = getattr(player, 'reset', None)
    if reset is not None:
        reset(info.get('task', getattr(task, 'name', str(task))))
    if recorder is not None:
        recorder.prompt(obs)
    while not state.done:
        call = player(obs)
        if call is None:
            break
        if recorder is not None:
            call = recorder.call(call)
        obs = state.step(call)
        if recorder is not None and obs:
            recorder.reply(obs, state.done)
    return state.episode


class Replay:
    """A player that makes ``calls`` again, in order (whitespace normalised), then stops: replays an episode's
    ``info['actions']``."""

    def __init__(self, calls):
        self.calls = [' '.join(str(c).split()) for c in calls]
        self.next = 0

    def __call__(self, observation):
        if self.next >= len(self.calls):
            return None
        self.next += 1
        return self.calls[self.next - 1]


def scripted_player(env, kind: str, seed: int = 0):
    """The environment's scripted player of ``kind`` (``env``: a factory, a Gymnasium id or an instance)."""
    make = env_attr(env, 'scripted_policy')
    if make is None:
        raise ValueError(f'{env_name(env)} has no scripted players (a scripted_policy(kind, seed) static method); '
                         'see agentrl.envs.protocol')
    return make(kind, seed=seed)


def oracle_calls(task, env=DEFAULT_ENV, threshold: float = 1.0) -> list:
    """The calls the environment's scripted oracle makes on ``task``, in order (played once in a fresh env).

    The oracle's episode must reach ``threshold`` (its return: the sum of its rewards), or its calls are no
    answer: ``ValueError`` names the return it got."""
    episode = play(make_env_factory(env)(), task, scripted_player(env, 'oracle'))
    if episode.reward < threshold - RETURN_TOL:
        raise ValueError(f"{env_name(env)}'s scripted oracle does not solve task {getattr(task, 'name', task)!r}: "
                         f'its return {episode.reward:g} is below the threshold {threshold:g}; its calls are no '
                         'answer to force')
    return episode.calls


def episode_texts(tasks, env=DEFAULT_ENV, kinds=None, seeds=range(4)) -> list:
    """Every prompt, call and reply of the environment's scripted players on ``tasks`` -> list of str.

    ``kinds``: the players to use (default: every kind in ``env.scripted_kinds``); each plays every task
    once per seed. The texts cover what scripted play shows; a word a model writes that no player did
    (a misspelt call) is not among them."""
    make = make_env_factory(env)
    kinds = tuple(kinds if kinds is not None else env_attr(env, 'scripted_kinds', ('oracle',)))
    texts = []
    for kind in kinds:
        for seed in seeds:
            player = scripted_player(env, kind, seed)
            for task in tasks:
                episode = play(make(), task, player)
                texts += [episode.prompt, *episode.calls, *episode.replies]
    return texts
