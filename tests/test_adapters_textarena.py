"""TextArena's games through ``arl.from_textarena``: Mastermind, seeded (needs ``agentrl[textarena]``; skips without it).

Checked: episodes repeat from the task's seed whatever the caller's random state; every step's reward is the
game's own (0 until the end, then what ``close()`` pays, on a bare TextArena game with the same seed and
calls); construction, ``reset`` and ``step`` leave Python's, NumPy's and torch's global random states as
they were; ``check_text_env`` passes; the oracle cracks every code; the game's invalid-move signal fills
``n_invalid``; a random TinyAgent's rollouts run.
"""
from __future__ import annotations

import pytest

ta = pytest.importorskip('textarena', reason="TextArena is not installed: pip install 'agentrl[textarena]'")

import agentrl as arl  # noqa: E402
from agentrl.envs import play  # noqa: E402
from agentrl.envs.adapters import seed_splits  # noqa: E402
from agentrl.envs.adapters.isolation import GameRandomness  # noqa: E402
from adapterkit import (Fixed, assert_isolated, assert_random_agent_runs, assert_reproducible,  # noqa: E402
                        assert_turn_rewards, turn_rewards)

GAME, SETTINGS = 'Mastermind-v0', dict(code_length=3, num_numbers=5, max_turns=5)
FACTORY = arl.from_textarena(GAME, **SETTINGS)
TRAIN, HELD = seed_splits('mastermind', 12, 6)
CALLS = ['[1 2 3]', 'guess', '[2 3 4]', '[3 4 5]', '[4 5 1]', '[5 1 2]', '[1 3 5]', '[2 4 1]']


def bare_game_rewards(seed, calls):
    """The rewards of ``calls`` on a bare TextArena game of ``seed``: 0 per step, then ``close()``'s at the end."""
    randomness = GameRandomness(seed)
    with randomness.swapped():
        game = ta.make(GAME + '-raw', **SETTINGS)
        game.reset(num_players=1, seed=seed)
        rewards = []
        for c in calls:
            done, _ = game.step(c)
            if done:
                rewards.append(float(game.close()[0][0]))
                break
            rewards.append(0.0)
    return rewards


def test_the_factory_declares_the_protocol_budgets():
    env = FACTORY()
    assert env.max_turns == 2 * (5 + 1)  # six guesses, each after at most one refused move
    assert env.max_call_tokens == 4  # '[2', '1', '4]' and the stop token
    prompt, info = env.reset(options={'task': HELD[0]})
    assert '3 digits long, each digit from 1 to 5' in prompt and info['task'] == 'mastermind/12'
    assert 1 + len(prompt.split()) < env.max_tokens <= 320  # fits TinyAgent's default block


def test_trajectories_repeat_from_the_seed_whatever_the_callers_random_state():
    assert_reproducible(FACTORY, TRAIN[:4], FACTORY().scripted_kinds)
    codes = {play(FACTORY(), t, FACTORY().scripted_policy('oracle')).calls[-1] for t in TRAIN + HELD}
    assert len(codes) > 5  # the seeds deal different codes


def test_each_steps_reward_is_the_games_own():
    for task in TRAIN[:6]:
        for player in (Fixed(CALLS), Fixed(['x']), FACTORY().scripted_policy('random', 1)):
            env, rewards, calls = FACTORY(), [], []
            obs, _ = env.reset(options={'task': task})
            player.reset(task.name)
            while True:
                calls.append(player(obs))
                obs, reward, terminated, truncated, info = env.step(calls[-1])
                rewards.append(reward)
                if terminated or truncated:
                    break
            assert terminated and rewards == bare_game_rewards(task.seed, calls), (task, calls)


def test_construction_reset_and_step_leave_the_global_random_states_alone():
    assert_isolated(FACTORY, TRAIN[2], CALLS)
    assert_isolated(lambda: arl.from_textarena(GAME, **SETTINGS)(), HELD[1], CALLS)


def test_check_text_env_passes_and_the_vocabulary_covers_held_out_play():
    tok = arl.build_tokenizer(TRAIN, env=FACTORY, texts=FACTORY.spec.texts)  # train tasks only
    summary = arl.check_text_env(FACTORY, TRAIN + HELD, tok=tok)
    assert summary['unknown_words'] == [] and summary['env'] == 'TextArenaEnv'


def test_the_oracle_cracks_every_code_and_the_weak_players_mostly_do_not():
    oracle = [play(FACTORY(), t, FACTORY().scripted_policy('oracle')) for t in TRAIN + HELD]
    assert all(ep.reward == 1.0 and ep.info['hidden_pass'] for ep in oracle)
    weak = [play(FACTORY(), t, FACTORY().scripted_policy(k, s)) for k in ('random', 'blind') for t in TRAIN
            for s in range(2)]
    assert sum(ep.info['hidden_pass'] for ep in weak) < len(weak) / 2
    assert any(0 < ep.reward < 1 for ep in weak)  # partial credit for the last guess's pegs


def test_the_games_invalid_move_signal_fills_n_invalid():
    env = FACTORY()
    env.reset(options={'task': TRAIN[0]})
    reply, reward, terminated, _, info = env.step('guess')
    assert not terminated and info['n_invalid'] == 1 and 'invalid move' in reply
    reply, reward, terminated, _, info = env.step('[1 2 3]')
    assert info['n_invalid'] == 1 and 'Feedback' in reply
    env.step('[1 1 1]')  # a digit twice: refused
    reply, reward, terminated, _, info = env.step('[9 9 9]')  # a second refusal in a row ends the game
    assert terminated and info['n_invalid'] == 3 and info['actions'] == ['guess', '[1 2 3]', '[1 1 1]', '[9 9 9]']
    assert reward == bare_game_rewards(TRAIN[0].seed, info['actions'])[-1]


def test_a_random_tiny_agent_rollout_runs():
    assert_random_agent_runs(FACTORY, TRAIN[:4])


@turn_rewards
def test_a_trajectory_keeps_every_steps_reward():
    tok = arl.build_tokenizer(TRAIN, env=FACTORY)
    for task in TRAIN[:4]:
        calls = play(FACTORY(), task, FACTORY().scripted_policy('random', 0)).calls
        assert_turn_rewards(FACTORY, task, FACTORY().scripted_policy('random', 0), tok,
                            bare_game_rewards(task.seed, calls))


def test_unknown_ids_and_games_for_several_players_are_refused_with_a_message():
    with pytest.raises(ValueError, match='valid ids include'):
        arl.from_textarena('Mastermnd-v0')
    with pytest.raises(ValueError, match='not a single-player game'):
        arl.from_textarena('TicTacToe-v0')
