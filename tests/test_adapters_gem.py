"""GEM's games through ``arl.from_gem``: Guess The Number, seeded (needs the ``agentrl[gem]`` extra; skips without it).

Checked: episodes repeat from the task's seed whatever the caller's random state; every step's reward is the
game's own (the same calls on a bare GEM game with the same seed); construction, ``reset`` and ``step`` leave
Python's, NumPy's and torch's global random states as they were; ``check_text_env`` passes; the oracle
finds every number; a random TinyAgent's rollouts run; a game that downloads data is refused offline.
"""
from __future__ import annotations

import pytest

gem = pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]' (gem-llm)")

import agentrl as arl  # noqa: E402
from agentrl.envs import play  # noqa: E402
from agentrl.envs.adapters import OfflineGameError, SeedTask, seed_splits  # noqa: E402
from agentrl.envs.adapters.guess_the_number import call  # noqa: E402
from agentrl.envs.adapters.isolation import GameRandomness  # noqa: E402
from adapterkit import (Fixed, assert_isolated, assert_random_agent_runs, assert_reproducible,  # noqa: E402
                        assert_turn_rewards, skip_if_nltk_has_its_words, turn_rewards)

GAME = 'game:GuessTheNumber-v0-easy'
FACTORY = arl.from_gem(GAME)
TRAIN, HELD = seed_splits('guess', 12, 6)
CALLS = [call(5), 'no number here', call(3)]  # a guess, then a call GEM cannot parse (it ends the game)


def bare_game_rewards(seed, calls):
    """The rewards a bare GEM game pays for ``calls`` on ``seed`` (its own globals, isolated here as well)."""
    randomness = GameRandomness(seed)
    with randomness.swapped():
        game = gem.make(GAME)
        game.reset(seed=seed)
        rewards = []
        for c in calls:
            _, reward, terminated, truncated, _ = game.step(c)
            rewards.append(reward)
            if terminated or truncated:
                break
    return rewards


def test_the_factory_declares_the_protocol_budgets():
    env = FACTORY()
    assert (env.max_turns, env.max_call_tokens) == (4, 2)  # the game's 4 turns; one word and the stop token
    prompt, info = env.reset(options={'task': TRAIN[0]})
    assert 'between 1 and 10' in prompt and info['task'] == 'guess/0'
    assert env.max_tokens == 1 + len(prompt.split()) + 4 * 18


def test_trajectories_repeat_from_the_seed_whatever_the_callers_random_state():
    assert_reproducible(FACTORY, TRAIN[:4], FACTORY().scripted_kinds)
    dealt = {play(FACTORY(), t, FACTORY().scripted_policy('oracle')).calls[-1] for t in TRAIN + HELD}
    assert len(dealt) > 3  # the seeds deal different numbers


def test_each_steps_reward_is_the_games_own():
    for task in TRAIN[:6]:
        for player in (Fixed(CALLS), FACTORY().scripted_policy('blind', 1), FACTORY().scripted_policy('oracle')):
            env, rewards = FACTORY(), []
            obs, _ = env.reset(options={'task': task})
            player.reset(task.name)
            calls = []
            while True:
                calls.append(player(obs))
                obs, reward, terminated, truncated, info = env.step(calls[-1])
                rewards.append(reward)
                if terminated or truncated:
                    break
            assert rewards == bare_game_rewards(task.seed, calls), (task, calls)
    # the game's partial credit and its penalty come through as they are
    assert bare_game_rewards(0, CALLS)[-1] == -0.1


def test_construction_reset_and_step_leave_the_global_random_states_alone():
    assert_isolated(FACTORY, TRAIN[3], [call(5), call(7), call(9), call(1)])
    assert_isolated(lambda: arl.from_gem(GAME)(), SeedTask('x/5', 5), CALLS)  # building a factory too


def test_check_text_env_passes_and_the_vocabulary_covers_held_out_play():
    tok = arl.build_tokenizer(TRAIN, env=FACTORY, texts=FACTORY.spec.texts)  # train tasks only
    summary = arl.check_text_env(FACTORY, TRAIN + HELD, tok=tok)
    assert summary['unknown_words'] == [] and summary['env'] == 'GemEnv'


def test_the_oracle_finds_every_number_and_the_weak_players_do_not():
    oracle = [play(FACTORY(), t, FACTORY().scripted_policy('oracle')) for t in TRAIN + HELD]
    assert all(ep.reward == 1.0 and ep.info['hidden_pass'] for ep in oracle)
    blind = [play(FACTORY(), t, FACTORY().scripted_policy('blind', s)) for t in TRAIN for s in range(3)]
    assert sum(ep.info['hidden_pass'] for ep in blind) < len(blind) / 2
    assert any(0 < ep.reward < 1 for ep in blind)  # partial credit when the turns run out
    assert any(ep.info['n_invalid'] for ep in blind)  # a repeated guess is refused, and counted


def test_a_call_gem_cannot_parse_is_counted_invalid_and_ends_the_episode():
    env = FACTORY()
    env.reset(options={'task': TRAIN[0]})
    reply, reward, terminated, _, info = env.step('seven')
    assert terminated and reward == -0.1 and info['n_invalid'] == 1 and info['actions'] == ['seven']
    assert 'did not provide a valid guess' in reply


def test_the_public_check_is_weaker_than_the_hidden_one():
    hidden = [play(FACTORY(), t, FACTORY().scripted_policy('blind', 2)) for t in TRAIN]
    public = [play(FACTORY(reward='public'), t, FACTORY().scripted_policy('blind', 2)) for t in TRAIN]
    assert [ep.calls for ep in hidden] == [ep.calls for ep in public]
    assert all(p.reward == float(p.info['public_pass']) for p in public)
    assert sum(p.reward for p in public) > sum(h.info['hidden_pass'] for h in hidden)


def test_a_random_tiny_agent_rollout_runs():
    trajs = assert_random_agent_runs(FACTORY, TRAIN[:4])
    assert all(t.reward in (-0.1, 0.0) or t.info['submitted'] for t in trajs)


@turn_rewards
def test_a_trajectory_keeps_every_steps_reward():
    tok = arl.build_tokenizer(TRAIN, env=FACTORY)
    for task in TRAIN[:4]:
        calls = play(FACTORY(), task, FACTORY().scripted_policy('blind', 0)).calls
        # a fresh player, as play's: a player's guesses depend on how many episodes it has played
        assert_turn_rewards(FACTORY, task, FACTORY().scripted_policy('blind', 0), tok, bare_game_rewards(task.seed, calls))


def test_unknown_ids_and_games_that_download_are_refused_with_a_message():
    with pytest.raises(ValueError, match='valid game ids include'):
        arl.from_gem('game:GuessTheNumbr-v0')
    skip_if_nltk_has_its_words('Wordle builds')
    with pytest.raises(OfflineGameError, match='needs data from the network'):
        arl.from_gem('game:Wordle-v0-easy')
