"""The BugFix gym's tasks, ops and scripted play: the properties the chapter rests on."""
from __future__ import annotations

from collections import Counter

import pytest

import agentrl as arl
from agentrl.envs.bugfix.ops import OPS, apply_op
from agentrl.envs.bugfix.players import cue_op
from agentrl.envs.bugfix.sandbox import run_tests

ALL = arl.make_tasks('all')
IDS = [t.name for t in ALL]


# --- splits and families

def test_split_sizes_and_families():
    assert arl.FAMILIES == ['minmax', 'range', 'compare', 'zero', 'init']
    train, held, every = arl.make_tasks('train'), arl.make_tasks('heldout'), arl.make_tasks('all')
    assert (len(train), len(held), len(every)) == (20, 10, 30)
    assert {t.name for t in train} | {t.name for t in held} == {t.name for t in every}
    assert len({t.name for t in every}) == 30
    per_train, per_held = Counter(t.family for t in train), Counter(t.family for t in held)
    for family in arl.FAMILIES:
        assert per_train[family] == 4, family
        assert per_held[family] == 2, family
    assert set(per_train) == set(per_held) == set(arl.FAMILIES)
    assert all(t.split == 'train' for t in train) and all(t.split == 'heldout' for t in held)


def test_heldout_function_names_are_unseen():
    train_funcs = {t.func for t in arl.make_tasks('train')}
    held_funcs = {t.func for t in arl.make_tasks('heldout')}
    assert len(held_funcs) == 10
    assert not held_funcs & train_funcs


def test_task_name_is_family_slash_function():
    for t in ALL:
        assert t.name == f'{t.family}/{t.func}'
        assert t.family in arl.FAMILIES


@pytest.mark.parametrize('task', ALL, ids=IDS)
def test_prompt_names_function_never_family(task):
    words = task.prompt.split()
    assert task.func in words
    for family in arl.FAMILIES:
        assert family not in words


@pytest.mark.parametrize('task', ALL, ids=IDS)
def test_source_shows_family_cue(task):
    assert cue_op(' '.join(task.source)) == task.fix


# --- ops against real tests

@pytest.mark.parametrize('task', ALL, ids=IDS)
def test_only_the_fix_op_passes_hidden_tests(task):
    source = list(task.source)
    assert run_tests(task, source) == (False, False), 'the buggy source must fail public and hidden tests'
    fixed = apply_op(task.fix, source, task.public_tests)
    assert run_tests(task, fixed) == (True, True)
    assert list(task.source) == source, 'apply_op must not modify its input'
    for op in OPS:
        if op == task.fix:
            continue
        public, hidden = run_tests(task, apply_op(op, source, task.public_tests))
        assert not hidden, f'{op} passes the hidden tests of {task.name}'


@pytest.mark.parametrize('task', ALL, ids=IDS)
def test_hardcode_tests_games_public_not_hidden(task):
    hacked = apply_op('hardcode_tests', list(task.source), task.public_tests)
    assert run_tests(task, hacked) == (True, False)


# --- scripted play

@pytest.mark.parametrize('mode', ['hidden', 'public'])
def test_oracle_solves_all_30(mode, tok):
    for task in ALL:
        traj = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(reward=mode), task, tok)
        assert traj.reward == 1.0, task.name
        assert traj.info['hidden_pass'] and traj.info['public_pass'] and traj.info['submitted']
        assert traj.info['actions'] == [' read ', f' edit {task.fix} ', ' submit ']
        assert traj.info['n_invalid'] == 0


@pytest.mark.parametrize('task', ALL, ids=IDS)
def test_public_reward_exploit(task):
    env = arl.BugFixEnv(reward='public')
    env.reset(options={'task': task})
    reply, reward, terminated, truncated, info = env.step('edit hardcode_tests')
    assert reward == 0.0 and not terminated and not truncated
    assert 'pass' in reply.split()
    _, reward, terminated, truncated, info = env.step('submit')
    assert terminated and not truncated
    assert reward == 1.0
    assert info['hidden_pass'] is False
    assert info['public_pass'] is True


def test_exploit_earns_nothing_under_hidden_reward():
    for task in ALL:
        env = arl.BugFixEnv(reward='hidden')
        env.reset(options={'task': task})
        env.step('edit hardcode_tests')
        _, reward, terminated, _, info = env.step('submit')
        assert terminated and reward == 0.0 and info['hidden_pass'] is False


def test_blind_play_band(blind_trajs):
    assert len(blind_trajs) == 80
    mean = sum(t.reward for t in blind_trajs) / len(blind_trajs)
    assert 0.12 <= mean <= 0.28, mean
    init = [t for t in blind_trajs if t.info['family'] == 'init']
    assert len(init) == 16
    assert not any(t.reward for t in init)
    assert not any(t.info['hidden_pass'] for t in init)
    # blind never reads: its first call is an edit
    assert all(t.info['actions'][0].split()[0] == 'edit' for t in blind_trajs)
    assert all(' edit fix_init ' not in t.info['actions'] for t in blind_trajs)


def test_random_play_uses_exploit_and_reads(random_trajs):
    n = len(random_trajs)
    assert n == 80
    hack = sum(' edit hardcode_tests ' in t.info['actions'] for t in random_trajs) / n
    reads = sum(' read ' in t.info['actions'] for t in random_trajs) / n
    assert hack >= 0.05, hack
    assert 0.20 <= reads <= 0.60, reads
    assert all(t.info['n_invalid'] == 0 for t in random_trajs), 'random play is well formed'
    assert all(' edit fix_init ' not in t.info['actions'] for t in random_trajs)


def test_scripted_policies_are_reproducible(train_tasks, tok):
    def play(kind, seed):
        return [arl.scripted_rollout(arl.scripted_policy(kind, seed=seed), arl.BugFixEnv(), t, tok).info['actions']
                for t in train_tasks]
    assert play('random', 3) == play('random', 3)
    assert play('random', 3) != play('random', 4)
    assert play('blind', 1) == play('blind', 1)
