"""The adapters' parts that need neither GEM nor TextArena: tasks that are seeds, the isolation, a missing extra."""
from __future__ import annotations

import random
import socket
import subprocess
import sys

import numpy as np
import pytest

import agentrl as arl
from agentrl.envs.adapters import SeedTask, seed_splits, seed_tasks, task_seed
from agentrl.envs.adapters.isolation import GameRandomness, OfflineGameError, offline
from adapterkit import global_states


def test_seed_splits_are_disjoint_named_tasks():
    train, held = arl.seed_splits('guess', 5, 3, start=10)
    assert [t.name for t in train] == [f'guess/{s}' for s in range(10, 15)]
    assert [t.seed for t in held] == [15, 16, 17] and {t.split for t in held} == {'heldout'}
    assert task_seed('guess/17') == 17 and task_seed(SeedTask('a', 3)) == 3
    for bad in ('guess', 'guess/x', SeedTask('a', -1), 5):
        with pytest.raises(ValueError, match='int seed'):
            task_seed(bad)
    with pytest.raises(ValueError, match='repeat'):
        seed_tasks('g', [1, 1])
    with pytest.raises(ValueError, match='n_train'):
        seed_splits('g', -1, 2)


def test_a_game_draws_from_its_own_streams_and_the_callers_do_not_move():
    def game():  # what GEM's reset does, then draws
        random.seed(7), np.random.seed(7)
        return random.random(), float(np.random.rand())

    streams = GameRandomness(0)
    random.seed(1), np.random.seed(1)
    before = global_states()
    with streams.swapped():
        first = game()
        after_seed = random.random()
    assert global_states() == before
    with streams.swapped():
        assert random.random() != after_seed  # the game's stream went on where it stopped
    assert global_states() == before and first == game()  # (this call seeds the caller's: the case isolation prevents)


def test_offline_refuses_the_network_and_names_the_game():
    with pytest.raises(OfflineGameError, match='some-game needs data from the network'):
        with offline('some-game'):
            socket.create_connection(('localhost', 9))
    with offline('quiet-game') as attempts:  # a game that only checks for updates, and goes on
        try:
            socket.getaddrinfo('localhost', 80)
        except OSError:
            pass
    assert attempts and socket.getaddrinfo is not None
    socket.getaddrinfo('localhost', 80)  # restored afterwards


def test_importing_the_adapters_imports_no_game_library_and_a_missing_extra_says_which():
    code = ('import sys, agentrl as arl, agentrl.envs.adapters; '
            'print(any(m in sys.modules for m in ("gem", "textarena")))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == 'False'
    code = ('import sys; sys.modules["gem"] = None; import agentrl as arl\n'
            'try:\n    arl.from_gem("game:GuessTheNumber-v0-easy")\nexcept ImportError as e:\n    print(e)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'agentrl[gem]'" in out
