"""Scripted play at the level of text: no model, no tokens (for vocabularies, STaR's answers and the checker).

An environment may offer scripted players (``env.scripted_policy(kind, seed)``, see ``protocol``). These
helpers play them and return what was said, as text:

- ``play``: one episode of a task with a player -> an ``Episode`` (prompt, calls, replies, reward, info);
- ``oracle_calls``: the calls the scripted oracle makes on a task (STaR forces the answers among them);
- ``episode_texts``: every prompt, call and reply of the scripted players over some tasks (the text a
  word-level vocabulary is built from: ``tokenizer.build_tokenizer(tasks, env=...)``);
- ``ScriptedPlayer``: what a gym's scripted players share (the kinds, the checks, a seeded RNG per episode).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from .protocol import DEFAULT_ENV, checked_reset, checked_step, env_attr, env_name, make_env_factory


@dataclass
class Episode:
    """One episode as text: the prompt, each call and the reply to it (empty when there was none), the end."""
    prompt: str
    calls: list = field(default_factory=list)
    replies: list = field(default_factory=list)
    reward: float = 0.0
    info: dict = field(default_factory=dict)


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


def play(env, task, player) -> Episode:
    """Play one episode of ``task`` in the environment instance ``env`` with a scripted ``player`` -> Episode."""
    obs, info = checked_reset(env, task)
    player.reset(info.get('task', getattr(task, 'name', str(task))))
    episode = Episode(obs)
    turn = 0
    while True:
        turn += 1
        call = player(obs)
        obs, reward, terminated, truncated, info = checked_step(env, call, task, turn)
        episode.calls.append(call)
        episode.replies.append(obs)
        if terminated or truncated:
            episode.reward, episode.info = float(reward), info
            return episode


def scripted_player(env, kind: str, seed: int = 0):
    """The environment's scripted player of ``kind`` (``env``: a factory, a Gymnasium id or an instance)."""
    make = env_attr(env, 'scripted_policy')
    if make is None:
        raise ValueError(f'{env_name(env)} has no scripted players (a scripted_policy(kind, seed) static method); '
                         'see agentrl.envs.protocol')
    return make(kind, seed=seed)


def oracle_calls(task, env=DEFAULT_ENV) -> list:
    """The calls the environment's scripted oracle makes on ``task``, in order (played once in a fresh env)."""
    episode = play(make_env_factory(env)(), task, scripted_player(env, 'oracle'))
    if episode.reward != 1.0:
        raise ValueError(f"{env_name(env)}'s scripted oracle does not solve task {getattr(task, 'name', task)!r} "
                         f'(reward {episode.reward}); its calls are no answer to force')
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
