"""``arl.check_text_env`` and the rollouts reject a broken environment with its class and the rule it breaks.

Each broken environment below is the worked example's Mailroom with one thing wrong.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest
import torch

import agentrl as arl
from ownenv import mailroom

M = mailroom()
ENV, PARCELS = M.Mailroom, M.make_parcels()


class FourValues(ENV):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info  # Gymnasium's old four-value API


class TokenObservation(ENV):
    def step(self, action):
        obs, *rest = super().step(action)
        return obs.split(), *rest  # a list of words instead of the text


class NaNReward(ENV):
    def step(self, action):
        obs, reward, *rest = super().step(action)
        return obs, math.nan, *rest


class TextReward(ENV):
    def step(self, action):
        obs, reward, *rest = super().step(action)
        return obs, str(reward), *rest


class NeverEnds(ENV):
    max_turns = 3

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step('label')  # ignores drop, never truncates
        return obs, reward, False, False, info


class MissingInfo(ENV):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info.pop('n_invalid')
        return obs, reward, terminated, truncated, info


class RaisesOnJunk(ENV):
    def act(self, verb, args):
        if verb not in ('label', 'go', 'drop'):
            raise KeyError(verb)  # instead of InvalidCall: a junk call crashes the episode
        return super().act(verb, args)


class Moody(ENV):
    def start(self, parcel):
        return super().start(parcel) + random.choice(['', ' please'])  # not seeded from the task


class BadReset(ENV):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed, options=options)[0]  # the prompt alone


class NoTurnLimit(ENV):
    max_turns = 0


@dataclass(frozen=True)
class Nameless:
    room: str = 'r1'
    name: str = ''


BROKEN = [
    (FourValues, PARCELS, 'step returns five values'),
    (TokenObservation, PARCELS, 'the observation is a str'),
    (NaNReward, PARCELS, 'the reward is a finite number'),
    (TextReward, PARCELS, 'the reward is a finite number'),
    (NeverEnds, PARCELS, 'every episode ends within max_turns'),
    (MissingInfo, PARCELS, 'the end info has task, actions and n_invalid'),
    (RaisesOnJunk, PARCELS, 'calls are answered, never raised'),
    (Moody, PARCELS, 'the same calls give the same episode'),
    (BadReset, PARCELS, 'reset returns (observation, info)'),
    (NoTurnLimit, PARCELS, 'max_turns is a positive int'),
    (ENV, [Nameless()], 'a task has a name'),
    (ENV, PARCELS + PARCELS[:1], 'task names are unique'),
]


@pytest.mark.parametrize('env, tasks, rule', BROKEN, ids=[f'{e.__name__}-{r}' for e, _, r in BROKEN])
def test_check_text_env_names_the_class_and_the_rule(env, tasks, rule):
    random.seed(1)
    with pytest.raises(arl.EnvProtocolError) as err:
        arl.check_text_env(env, tasks)
    name = 'Nameless' if tasks and isinstance(tasks[0], Nameless) else env.__name__
    assert err.value.rule == rule and err.value.env == name
    assert str(err.value).startswith(f'{name} breaks the text-env protocol ({rule}): ')


def test_check_text_env_passes_the_gyms_and_takes_an_instance_a_class_or_an_id():
    assert arl.check_text_env(ENV(), PARCELS)['episodes'] > 0
    bugfix = arl.make_tasks('all')[:3]
    assert arl.check_text_env('agentrl/BugFix-v0', bugfix)['env'] == 'BugFixEnv'
    assert arl.check_text_env(arl.BugFixEnv, bugfix)['tasks'] == 3


def test_words_the_vocabulary_lacks_are_listed_and_encode_as_unk():
    tok = arl.build_tokenizer(texts=['deliver parcel label go drop'])
    with pytest.warns(UserWarning, match='not in the vocabulary and encode as <unk>'):
        summary = arl.check_text_env(ENV, PARCELS, tok=tok)
    assert 'amber' in summary['unknown_words'] and 'label' not in summary['unknown_words']
    assert tok.encode('deliver parcel amber') == [tok.token_to_id['deliver'], tok.token_to_id['parcel'], tok.unk_id]


@pytest.mark.parametrize('env, rule', [(FourValues, 'step returns five values'),
                                       (TokenObservation, 'the observation is a str'),
                                       (NaNReward, 'the reward is a finite number'),
                                       (NeverEnds, 'every episode ends within max_turns'),
                                       (BadReset, 'reset returns (observation, info)')])
def test_rollouts_refuse_a_broken_environment_by_rule(env, rule):
    tok = arl.build_tokenizer(PARCELS, env=ENV)
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(arl.EnvProtocolError, match=f'{env.__name__} breaks the text-env protocol') as err:
        arl.pass_rate(model, PARCELS[:2], tok, 2, env=env)
    assert err.value.rule == rule
    with pytest.raises(arl.EnvProtocolError):
        arl.scripted_rollout(M.Courier('oracle'), env(), PARCELS[0], tok)


def test_env_factories_are_checked():
    with pytest.raises(TypeError, match='pass the class, e.g. env=Mailroom'):
        arl.pass_rate(None, PARCELS, None, env=ENV())
    with pytest.raises(ValueError, match='unknown environment'):
        arl.make_env_factory('agentrl/NoSuch-v0')
    with pytest.raises(ValueError, match="does not take reward='public'"):
        arl.make_env_factory(lambda: ENV(), reward='public')
    with pytest.raises(ValueError, match='unknown reward mode'):
        arl.make_env_factory(ENV, reward='secret')
    assert arl.make_env_factory(ENV, reward='public')().reward_mode == 'public'
    assert type(arl.make_env_factory()()).__name__ == 'BugFixEnv'  # the default: BugFix, by its Gymnasium id
