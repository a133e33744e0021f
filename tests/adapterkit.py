"""What the GEM and TextArena adapter tests share: the global random states, and the checks every adapted game passes."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

import agentrl as arl
from agentrl.envs import play
from agentrl.rendering.trajectory import Trajectory

HAS_TURN_REWARDS = any(f.name == 'turn_rewards' for f in dataclasses.fields(Trajectory))


def global_states():
    """Python's, NumPy's and torch's global random states, comparable with ``==``."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return random.getstate(), (kind, tuple(keys.tolist()), pos, has_gauss, gauss), torch.get_rng_state().tolist()


class Fixed:
    """A scripted player that makes given calls in turn (then repeats the last)."""

    def __init__(self, calls):
        self.calls = list(calls)

    def reset(self, task_name):
        self.i = 0

    def __call__(self, observation):
        call = self.calls[min(self.i, len(self.calls) - 1)]
        self.i += 1
        return call


def assert_isolated(factory, task, calls):
    """Building the factory's environment, ``reset`` and every ``step`` leave the three global states as they were."""
    random.seed(123), np.random.seed(456), torch.manual_seed(789)
    before = global_states()
    env = factory()
    assert global_states() == before, 'construction moved a global random state'
    env.reset(options={'task': task})
    assert global_states() == before, 'reset moved a global random state'
    for call in calls:
        _, _, terminated, truncated, _ = env.step(call)
        assert global_states() == before, f'step({call!r}) moved a global random state'
        if terminated or truncated:
            break


def assert_reproducible(factory, tasks, kinds):
    """Each scripted player's episode on a task is the same however the caller's global generators stand."""
    for kind in kinds:
        for task in tasks:
            episodes = []
            for caller_seed in (1, 2):
                random.seed(caller_seed), np.random.seed(caller_seed), torch.manual_seed(caller_seed)
                ep = play(factory(), task, factory().scripted_policy(kind, 0))
                episodes.append((ep.prompt, ep.calls, ep.replies, ep.reward, ep.info))
            assert episodes[0] == episodes[1], (kind, task)


def assert_random_agent_runs(factory, tasks):
    """A random TinyAgent's rollouts run through the adapter, fit ``max_tokens``, and repeat under one seed."""
    tok = arl.build_tokenizer(tasks, env=factory)
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size, block_size=max(factory().max_tokens, 64))
    runs = [arl.pass_rate(model, tasks, tok, 3, seed=7, env=factory) for _ in range(2)]
    (rate, trajs), (rate2, trajs2) = runs
    assert rate == rate2 and [t.info['actions'] for t in trajs] == [t.info['actions'] for t in trajs2]
    assert len(trajs) == 3 * len(tasks)
    for t in trajs:
        assert len(t) <= factory().max_tokens
        assert t.info['task'] in {task.name for task in tasks} and len(t.info['actions']) >= 1
    return trajs


turn_rewards = pytest.mark.xfail(not HAS_TURN_REWARDS, strict=True,
                                 reason='Trajectory.turn_rewards (one reward per call) is not in this core yet')


def assert_turn_rewards(factory, task, player, tok, game_rewards):
    """A scripted rollout's trajectory keeps each call's reward (the game's own) and their sum as its return."""
    traj = arl.scripted_rollout(player, factory(), task, tok)
    assert traj.turn_rewards == pytest.approx(game_rewards)
    assert traj.reward == pytest.approx(sum(game_rewards))


def skip_if_nltk_has_its_words(what: str) -> None:
    """Skip (saying why) where NLTK's word list is on this machine: there ``what`` builds offline and cannot show
    the download it needs elsewhere."""
    nltk = pytest.importorskip('nltk')
    try:
        nltk.data.find('corpora/words')
    except LookupError:
        return
    pytest.skip(f"NLTK's word list is on this machine: {what} offline here")
