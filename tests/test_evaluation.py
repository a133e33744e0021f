"""pass@k (Chen et al. 2021's unbiased estimator), pass@k curves over tasks, and greedy decoding's pass."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

import agentrl as arl
from agentrl.recipes.evaluation import default_ks


@pytest.mark.parametrize('n, c, k, expected', [
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3, 2) / C(5, 2)
    (5, 2, 1, 2 / 5),  # pass@1 is the share of successes
    (10, 3, 4, 1 - 35 / 210),  # 1 - C(7, 4) / C(10, 4)
    (8, 1, 4, 1 - 35 / 70),  # 1 - C(7, 4) / C(8, 4): one success among 8, a pick of 4 holds it half the time
    (4, 1, 4, 1.0),  # a pick of all 4 holds the success
    (6, 3, 4, 1.0),  # 3 failures cannot fill a pick of 4
    (6, 0, 3, 0.0),  # no success, no pass
    (6, 6, 1, 1.0),
    (1, 0, 1, 0.0), (1, 1, 1, 1.0),
    (2000, 1, 1000, 0.5),  # 1 - C(1999, 1000) / C(2000, 1000) = 1 - 1000 / 2000; C(2000, 1000) overflows a float
])
def test_pass_at_k_worked_by_hand(n, c, k, expected):
    assert arl.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_grows_with_k_and_with_c():
    n = 16
    for c in range(n + 1):
        curve = [arl.pass_at_k(n, c, k) for k in range(1, n + 1)]
        assert curve == sorted(curve) and curve[0] == pytest.approx(c / n)
    assert [arl.pass_at_k(n, c, 4) for c in range(n + 1)] == sorted(arl.pass_at_k(n, c, 4) for c in range(n + 1))


@pytest.mark.parametrize('n, c, k, rule', [
    (5, 2, 6, r'k \(attempts\) must be in 1..n'), (5, 2, 0, r'k \(attempts\) must be in 1..n'),
    (5, 2, -1, 'k'), (5, 6, 2, r'c \(successes among the n samples\) must be in 0..n'), (5, -1, 2, 'c'),
    (0, 0, 1, r'n \(samples of the task\) must be >= 1'), (-3, 0, 1, 'n'),
    (5.0, 2, 2, 'whole numbers'), (5, 2, True, 'whole numbers'), (5, '2', 2, 'whole numbers'),
])
def test_pass_at_k_refuses_bad_input_naming_the_rule(n, c, k, rule):
    with pytest.raises(ValueError, match=rule):
        arl.pass_at_k(n, c, k)


def test_default_ks_double_up_to_n():
    assert default_ks(1) == [1]
    assert default_ks(2) == [1, 2]
    assert default_ks(6) == [1, 2, 4, 6]
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(9) == [1, 2, 4, 8, 9]


def episode(task, reward):
    """What pass@k reads of an episode: its task's name and its return."""
    return SimpleNamespace(info={'task': task}, reward=reward)


def test_pass_at_k_from_episodes_per_task_and_mean():
    # task a: 2 of 4 succeed, task b: 0 of 4, task c: 4 of 4 (task-major, as rollout_groups samples)
    trajs = [episode('a', r) for r in (1, 0, 1, 0)] + [episode('b', 0)] * 4 + [episode('c', 1)] * 4
    res = arl.pass_at_k_from_episodes(trajs, 4)
    assert res.tasks == ['a', 'b', 'c'] and res.successes == [2, 0, 4] and res.ks == [1, 2, 4]
    # task a: pass@1 = 2/4, pass@2 = 1 - C(2, 2)/C(4, 2) = 5/6, pass@4 = 1
    assert res.per_task[1] == pytest.approx([0.5, 0, 1])
    assert res.per_task[2] == pytest.approx([5 / 6, 0, 1])
    assert res.per_task[4] == pytest.approx([1, 0, 1])
    assert res.mean == pytest.approx({1: 1.5 / 3, 2: (5 / 6 + 1) / 3, 4: 2 / 3})
    assert json.loads(json.dumps(dataclasses.asdict(res)))['mean']['2'] == pytest.approx((5 / 6 + 1) / 3)
    assert arl.pass_at_k_from_episodes(trajs, 4, ks=[3, 1]).ks == [1, 3]


def test_pass_at_k_counts_wins_not_partial_credit():
    """A game that pays partial credit: a return of 0.6 is no success at the default threshold (1), one at 0.5."""
    trajs = [episode('g', r) for r in (0.6, 0.2, 1.0, 0.9999999999999999)]  # the last: ten steps of 0.1
    assert arl.pass_at_k_from_episodes(trajs, 4).successes == [2]
    assert arl.pass_at_k_from_episodes(trajs, 4, threshold=0.5).successes == [3]


def test_pass_at_k_from_episodes_refuses_bad_groups():
    trajs = [episode('a', 1), episode('a', 0), episode('b', 1), episode('b', 0)]
    with pytest.raises(ValueError, match="holds the tasks \\['a', 'b'\\]"):
        arl.pass_at_k_from_episodes(trajs[1:] + trajs[:1], 2)
    with pytest.raises(ValueError, match='n=3 episodes per task'):
        arl.pass_at_k_from_episodes(trajs, 3)
    for ks in ([0], [3], [1.5]):
        with pytest.raises(ValueError, match=r'every k must be an int in 1..n=2'):
            arl.pass_at_k_from_episodes(trajs, 2, ks=ks)
    with pytest.raises(ValueError, match='threshold'):
        arl.pass_at_k_from_episodes(trajs, 2, threshold=float('nan'))


def test_pass_at_k_curve_scores_pass_rates_episodes(trained_model, train_tasks, tok):
    """The curve's episodes are pass_rate's at the same seed: its successes are theirs, its pass@1 their share."""
    tasks = train_tasks[:5]
    res = arl.pass_at_k_curve(trained_model, tasks, tok, 6, seed=3)
    _, trajs = arl.pass_rate(trained_model, tasks, tok, 6, seed=3)
    assert res.tasks == [t.name for t in tasks] and res.ks == [1, 2, 4, 6]
    assert res.successes == [sum(t.reward == 1 for t in trajs[6 * i:6 * i + 6]) for i in range(5)]
    assert res.mean[1] == pytest.approx(arl.success_rate(trajs))
    assert arl.pass_at_k_curve(trained_model, tasks, tok, 6, seed=3) == res


def test_greedy_pass_is_one_argmax_episode_per_task(trained_model, tasks, tok):
    """One greedy episode per task, the same as rollout_batch's at temperature 0 with any generator."""
    tasks = tasks[16:24]
    rate, trajs = arl.greedy_pass(trained_model, tasks, tok)
    assert [t.info['task'] for t in trajs] == [t.name for t in tasks]
    assert 0 < rate < 1 and rate == sum(t.reward == 1 for t in trajs) / 8
    again = arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in tasks], tasks, tok, temperature=0,
                              generator=torch.Generator().manual_seed(4))
    assert all(torch.equal(a.ids, b.ids) for a, b in zip(trajs, again))
