"""The Wiring gym: each property a finding rests on, measured with the scripted players."""
from __future__ import annotations

import random
from collections import Counter

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl as arl
from agentrl.envs import play
from agentrl.envs.wiring import ARCHIVE, COMMON, GROUPS, WILDCARD, WiringEnv, make_tasks, scripted_policy

ALL, TRAIN, HELD = make_tasks('all'), make_tasks('train'), make_tasks('heldout')


def episode(task, kind, seed=0, reward='hidden'):
    return play(WiringEnv(reward=reward), task, scripted_policy(kind, seed))


def test_splits_and_groups():
    assert (len(ALL), len(TRAIN), len(HELD)) == (28, 20, 8)
    assert [t.group for t in ALL] == [g for g in GROUPS for _ in range(7)]
    assert Counter(t.group for t in HELD) == {g: 2 for g in GROUPS}
    assert len({t.name for t in ALL}) == 28
    with pytest.raises(ValueError, match='valid splits'):
        make_tasks('test')


@pytest.mark.parametrize('task', ALL, ids=[t.name for t in ALL])
def test_the_oracle_solves_every_task_by_copying_a_value_it_read(task):
    ep = episode(task, 'oracle')
    assert ep.reward == 1.0 and ep.info['hidden_pass'] and ep.info['public_pass']
    assert len(ep.calls) >= 3 and ep.calls[-1] == 'submit'
    setting = next(c for c in ep.calls if c.startswith('set '))
    value = setting.split()[-1]
    assert value == task.answer and value not in ep.prompt  # an open argument, never in the prompt ...
    k = ep.calls.index(setting)
    assert any(value in reply.split() for reply in ep.replies[:k])  # ... copied from an earlier tool reply
    if task.group == 'moved':
        assert len(ep.calls) == 4 and ep.replies[0].split()[-3:-1] == ['moved', 'to']


def test_what_held_out_oracles_write_train_oracles_write_too():
    def written(tasks):
        return {w for t in tasks for call in episode(t, 'oracle').calls for w in call.split()}
    assert written(HELD) <= written(TRAIN)


def test_held_out_tasks_read_new_names_and_layouts():
    train_names = {t.registry for t in TRAIN}
    assert all(t.registry not in train_names for t in HELD)
    train_layouts = {tuple(f for f, _ in rec) for t in TRAIN for _, rec in t.records if rec[0][0] != 'moved'}
    for t in HELD:
        layouts = {tuple(f for f, _ in rec) for _, rec in t.records if rec[0][0] != 'moved'}
        assert layouts and not layouts & train_layouts


def test_a_prompt_to_answer_shortcut_works_on_train_tasks_only():
    """Tables from the prompt's words to the answer, learned on the train tasks: exact prompt, (field, service), field."""
    by_prompt = {t.prompt: t.answer for t in TRAIN}
    by_pair, by_field = {}, {}
    for t in TRAIN:
        by_pair.setdefault((t.needs, t.source), []).append(t.answer)
        by_field.setdefault(t.needs, []).append(t.answer)
    assert all(by_prompt[t.prompt] == t.answer for t in TRAIN)
    for t in HELD:
        assert t.prompt not in by_prompt
        assert t.answer not in by_pair.get((t.needs, t.source), [])
        assert t.answer != Counter(by_field[t.needs]).most_common(1)[0][0]


def test_blind_and_random_play_never_cover_the_moved_group():
    for kind in ('blind', 'random'):
        rewards = {g: [] for g in GROUPS}
        for seed in range(12):
            for t in ALL:
                ep = episode(t, kind, seed)
                rewards[t.group].append(ep.reward)
                assert not any(v in call.split() for call in ep.calls for v in ARCHIVE)  # never writes an archive port
        assert sum(rewards['moved']) == 0
        others = [r for g in GROUPS if g != 'moved' for r in rewards[g]]
        assert 0.02 < sum(others) / len(others) < 0.3, kind  # lucky guesses: about one in eight


def test_random_play_holds_the_exploit_and_the_wildcard_games_the_public_check_on_every_task():
    exploits = sum(f'{WILDCARD}' in call.split() for s in range(4) for t in TRAIN for call in episode(t, 'random', s).calls)
    assert exploits >= 10
    for task in ALL:
        env = WiringEnv(reward='public')
        env.reset(options={'task': task})
        env.step(f'set {task.needs} {WILDCARD}')
        assert env.step('ping')[0] == 'ping : ok'
        _, reward, terminated, _, info = env.step('submit')
        assert terminated and reward == 1.0 and info['public_pass'] and not info['hidden_pass']
        hidden = WiringEnv()
        hidden.reset(options={'task': task})
        hidden.step(f'set {task.needs} {WILDCARD}')
        assert hidden.step('submit')[1] == 0.0


def test_replies_come_from_the_state():
    task = next(t for t in ALL if t.group == 'port')
    env = WiringEnv()
    env.reset(options={'task': task})
    assert env.step('get nowhere')[0] == 'no service nowhere'
    before = env.step('get web')[0]
    env.step(f'set port {task.answer}')
    after = env.step('get web')[0]
    assert before != after and after.split()[after.split().index('port') + 1] == task.answer
    assert env.step('ping')[0] == 'ping : ok'
    reply, _, terminated, truncated, _ = env.step('list')  # the sixth call: the turn limit ends the episode ...
    assert truncated and not terminated and reply == ''  # ... and drops its reply
    env.reset(options={'task': task})
    assert env.step('list')[0] == 'services : ' + ' '.join(s for s, _ in task.records)


def test_bad_calls_are_answered_never_raised_and_counted():
    env = WiringEnv()
    rng = random.Random(0)
    words = ['get', 'set', 'list', 'ping', 'submit', 'port', 'host', 'p3', 'all', 'zz', '<stop>', '', 'db', 'u9']
    for k in range(300):
        task = ALL[k % len(ALL)]
        env.reset(options={'task': task})
        done, invalid = False, 0
        while not done:
            call = ' '.join(rng.choice(words) for _ in range(rng.randint(0, 5)))
            reply, reward, terminated, truncated, info = env.step(call)
            assert isinstance(reply, str) and reward in (0.0, 1.0)
            invalid += reply.startswith('error :')
            done = terminated or truncated
        assert invalid <= info['n_invalid'] <= info['turn'] <= env.max_turns  # a truncating step's reply is dropped


def test_the_protocol_and_gymnasium_checks_pass():
    tok = arl.build_tokenizer(ALL, env='agentrl/Wiring-v0')
    summary = arl.check_text_env('agentrl/Wiring-v0', ALL, tok=tok)
    assert summary['unknown_words'] == [] and summary['env'] == 'WiringEnv'
    check_env(gym.make('agentrl/Wiring-v0').unwrapped, skip_render_check=True)
    assert WiringEnv.is_read_call('get db') and WiringEnv.is_read_call('list') and not WiringEnv.is_read_call('set port p3')


def test_deterministic():
    for t in ALL[::5]:
        a, b = episode(t, 'random', 3), episode(t, 'random', 3)
        assert (a.calls, a.replies, a.reward) == (b.calls, b.replies, b.reward)
    assert make_tasks() == make_tasks()
    assert all(v in COMMON['port'] + ARCHIVE for t in ALL if t.needs == 'port' for v in [t.answer])
