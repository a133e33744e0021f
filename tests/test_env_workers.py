"""Slow environments: ``rollout_batch(env_workers=N)`` steps the live episodes in a thread pool, same trajectories."""
import time

import pytest
import torch

import agentrl as arl
from agentrl.envs.protocol import with_env_workers
from test_rewards import CODES, Keypad


class SlowKeypad(Keypad):
    """Keypad whose reset and step wait, as a subprocess or a service would."""
    delay = 0.003

    def reset(self, **kw):
        time.sleep(self.delay)
        return super().reset(**kw)

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)


class Breaks(Keypad):
    def step(self, action):
        if self.task.name == 'code/789' and self.turn == 0:  # its first call
            raise OSError('the sandbox died')
        return super().step(action)


@pytest.fixture(scope='module')
def setup():
    tok = arl.build_tokenizer(CODES)
    torch.manual_seed(0)
    return tok, arl.TinyAgent(tok.vocab_size)


def _rollout(model, tok, env, n, workers):
    tasks = [CODES[i % len(CODES)] for i in range(n)]
    return arl.rollout_batch(model, [env() for _ in tasks], tasks, tok, generator=torch.Generator().manual_seed(1),
                             env_workers=workers)


def _same(a, b):
    return all(torch.equal(x.ids, y.ids) and torch.equal(x.logprobs, y.logprobs) and torch.equal(x.owner, y.owner)
               and x.turn_rewards == y.turn_rewards and x.reward == y.reward and x.info == y.info for x, y in zip(a, b))


def test_the_pool_gives_the_serial_trajectories(setup):
    tok, model = setup
    serial = _rollout(model, tok, SlowKeypad, 40, 1)
    for workers in (2, 8):
        assert _same(serial, _rollout(model, tok, SlowKeypad, 40, workers))


def test_an_environment_declares_its_workers(setup):
    tok, model = setup
    make = with_env_workers(SlowKeypad, 4)
    env = make()
    assert env.env_workers == 4 and isinstance(env, SlowKeypad)
    assert _same(_rollout(model, tok, SlowKeypad, 16, 1), _rollout(model, tok, make, 16, None))
    with pytest.raises(ValueError, match='env_workers must be a positive int'):
        _rollout(model, tok, SlowKeypad, 4, 0)


def test_a_worker_that_raises_names_the_class_task_turn_and_call(setup):
    tok, model = setup
    with pytest.raises(arl.EnvStepError, match=r"Breaks.step raised on task 'code/789', turn 1, call '.*': "
                                               r'OSError: the sandbox died') as e:
        _rollout(model, tok, Breaks, 12, 4)
    assert isinstance(e.value.__cause__, OSError)
