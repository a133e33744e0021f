"""``arl.check_text_env`` and the rollouts reject a broken environment with its class and the rule it breaks.

Each broken environment below is the worked example's Mailroom with one thing wrong. The checker also says, in a
``CheckWarning``, what it could not check (no scripted players), episodes cut by ``max_tokens`` (their share) and
returns outside [0, 1]; on the gyms, the example and Guess The Number it says nothing.
"""
from __future__ import annotations

import math
import random
import re
import warnings
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


# --- what check_text_env says it could not check (CheckWarning)

class Penalised(ENV):
    """The Mailroom paying 2 for a delivery and -0.5 for anything else: returns outside [0, 1]."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated or truncated:
            reward = 2.0 if reward == 1.0 else -0.5
        return obs, reward, terminated, truncated, info


def check_quietly(env, tasks):
    """``check_text_env``'s summary, with any CheckWarning raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', arl.envs.CheckWarning)
        return arl.check_text_env(env, tasks)


def test_the_gyms_the_example_and_guess_the_number_are_checked_in_silence():
    from agentrl.envs.wiring.tasks import make_tasks as wiring_tasks
    assert check_quietly('agentrl/BugFix-v0', arl.make_tasks('all'))['truncated'] == 0
    assert check_quietly('agentrl/Wiring-v0', wiring_tasks('all'))['truncated'] == 0
    assert check_quietly(ENV, PARCELS)['returns'] == [0.0, 1.0]
    pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]' (gem-llm)")
    train, held = arl.seed_splits('guess', 12, 6)
    summary = check_quietly(arl.from_gem('game:GuessTheNumber-v0-easy'), train + held)
    assert summary['truncated'] == 0 and 0 <= min(summary['returns']) < max(summary['returns']) == 1.0


def test_a_game_without_scripted_players_is_named_with_the_keyword_that_adds_them():
    pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]' (gem-llm)")
    game = arl.from_gem('game:Minesweeper-v0-easy')
    with pytest.warns(arl.envs.CheckWarning) as caught:
        summary = arl.check_text_env(game, arl.seed_tasks('mines', range(3)))
    said = [str(w.message) for w in caught]
    assert re.fullmatch(r"GemEnv \(gem:game:Minesweeper-v0-easy\) has no scripted players, so check_text_env only "
                        r"played malformed calls and the prompt's quoted calls: .*; pass players=\(kind, seed\) -> "
                        r'player to from_gem/from_textarena .*', said[0])
    assert summary['players'][0] == "the prompt's quoted calls" and summary['players'][1].startswith('fuzz')
    # its board fills max_tokens=320 within two calls: that is said too
    assert len(said) == 2 and 'truncated by max_tokens=320 before max_turns=25 calls' in said[1]


def test_episodes_cut_by_max_tokens_are_counted_and_their_share_said():
    pytest.importorskip('textarena', reason="TextArena is not installed: pip install 'agentrl[textarena]'")
    game, tasks = arl.from_textarena('Minesweeper-v0-small'), arl.seed_tasks('mines', range(3))
    with pytest.warns(arl.envs.CheckWarning) as caught:
        summary = arl.check_text_env(game, tasks)
    said = [str(w.message) for w in caught if 'truncated by max_tokens' in str(w.message)]
    assert len(said) == 1 and 'before max_turns=202 calls' in said[0] and 'max_tokens=320' in said[0]
    cut, played, share = re.search(r'(\d+) of (\d+) episodes \((\d+)%', said[0]).groups()
    assert int(cut) == summary['truncated'] > 0 and int(played) == summary['episodes']
    assert int(share) == round(100 * int(cut) / int(played))
    # the same cut, seen without the checker: the prompt's calls, played to the budget, stop before max_turns
    episode = arl.envs.play(game(), tasks[0], arl.envs.check._Quoted())
    assert episode.truncated and len(episode.calls) < game().max_turns and not episode.info['submitted']


def test_returns_outside_0_1_say_that_pass_rate_is_a_mean_return():
    with pytest.warns(arl.envs.CheckWarning, match=r'returns of its players\' episodes run from -0.5 to 2, outside '
                      r"\[0, 1\].*pass_rate's first value is then the mean return.*success_rate"):
        summary = arl.check_text_env(Penalised, PARCELS)
    assert summary['returns'] == [-0.5, 2.0]
