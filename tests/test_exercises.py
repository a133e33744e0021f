"""The chapter's seven exercises (``agentrl exercise N``): their algebra, exercise 7's demonstrator, the command.

The measured answers themselves are a sweep's business (docs/exercises.md quotes their hold rates from recorded
runs); here every exercise runs end to end on the smoke budget from a smoke reproduction (``--from``), resumes to the
figures of an uninterrupted run, and refuses what it cannot use with one line.
"""
from __future__ import annotations

import copy
import json
import math
import os

import pytest
import torch

import agentrl as arl
from agentrl.cli import main
from agentrl.envs.bugfix import BugFixEnv
from agentrl.envs.bugfix import make_tasks as bugfix_tasks
from agentrl.envs.play import HUMAN_FAULTS
from agentrl.envs.wiring import WiringEnv
from agentrl.envs.wiring import make_tasks as wiring_tasks
from agentrl.experiments.exercises import ex1_aggregation, ex4_group_baseline, ex7_design_review
from agentrl.experiments.exercises.catalog import EXERCISES
from agentrl.experiments.lock import FolderLock
from agentrl.recipes.outcomes import is_success
from conftest import exit_code
from test_html_report import smoke_report_dir

GYMS = {'bugfix': (BugFixEnv, bugfix_tasks), 'wiring': (WiringEnv, wiring_tasks)}


# --- exercise 7's demonstrator: its stated fault rates, measured on its own episodes

@pytest.mark.parametrize('gym', list(GYMS))
def test_the_human_demonstrators_fault_rates_are_the_stated_ones(gym):
    env, tasks = GYMS[gym]
    train = tasks('train')
    read = env.is_read_call
    tok = arl.build_tokenizer(tasks('all'))
    player = env.scripted_policy('human', seed=0)
    n = 3000
    episodes = [arl.scripted_rollout(player, env(), train[i % len(train)], tok) for i in range(n)]
    faults = [ex7_design_review.demo_fault(t, read) for t in episodes]
    for fault, rate in HUMAN_FAULTS.items():
        share = faults.count(fault) / n
        assert abs(share - rate) <= 4 * math.sqrt(rate * (1 - rate) / n), (fault, share, rate)
    clean = 1 - sum(HUMAN_FAULTS.values())
    assert abs(faults.count(None) / n - clean) <= 4 * math.sqrt(clean * (1 - clean) / n)
    # a clean episode is the oracle's: it reads, then passes the hidden tests
    assert all(is_success(t) for t, f in zip(episodes, faults) if f is None)
    # the same seed plays the same demonstrations
    player = env.scripted_policy('human', seed=0)
    again = [arl.scripted_rollout(player, env(), train[i % len(train)], tok) for i in range(40)]
    assert [t.info['actions'] for t in again] == [t.info['actions'] for t in episodes[:40]]


def test_the_demonstrator_is_a_kind_of_both_gyms_and_refuses_unknown_kinds():
    for env, _ in GYMS.values():
        assert 'human' in env.scripted_kinds
        with pytest.raises(ValueError, match="valid kinds are .*'human'"):
            env.scripted_policy('expert')


# --- exercise 1: both aggregations' identities, and which depends on length

def test_both_aggregation_identities_hold_and_only_token_averaging_sees_length(trained_model, trained_rollouts, tok):
    model = trained_model
    trajs = trained_rollouts[:24]
    rewards = torch.tensor([1.0 if k % 3 == 0 else 0.0 for k in range(len(trajs))])
    trajs = [arl.Trajectory(t.ids, t.action_mask, t.logprobs, float(r), t.info, t.owner, t.turn, vocab=t.vocab)
             for t, r in zip(trajs, rewards.tolist())]
    out = ex1_aggregation.identities(model, trajs, tok)
    assert out['kept'] == 8
    assert out['token']['gap'] < 1e-6 and out['sequence']['gap'] < 1e-6  # float32 rounding
    n = torch.tensor([float(t.action_mask.sum()) for t in trajs])
    assert out['token']['factor'] == pytest.approx((n * rewards).sum().item() / n.sum().item())
    assert out['sequence']['factor'] == pytest.approx(8 / 24)


# --- exercise 4: the weighted loss is the baseline policy gradient times 1 / (1 - R), group by group

def test_group_baseline_identity_group_by_group(trained_model, trained_rollouts, tok):
    model = trained_model
    trajs = trained_rollouts[:24]  # 6 groups of 4
    success = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 1]])
    out = ex4_group_baseline.group_identity(model, trajs, success, tok)
    assert out['groups'] == 4  # the all-fail and all-pass groups have no failure weight to check
    assert out['gap'] < 1e-6  # float32 rounding
    assert out['min_weight'] == pytest.approx(-3.0)  # 3 of 4 pass: the failure weighs -0.75 / 0.25
    assert 0.5 < out['cosine'] <= 1.0


def test_the_clipped_failures_stop_at_the_trust_region(trained_model, blind_trajs, tok):
    """A failure whose sequence ratio to the sampler fell below 1 - clip carries no gradient; above it, the unclipped one."""
    from agentrl.recipes.rft_baseline import weighted_sft_loss
    model = copy.deepcopy(trained_model)
    batch = arl.collate(blind_trajs[:4], tok.pad_id)
    weights = torch.tensor([1.0, -0.5, -0.5, 1.0])
    with torch.no_grad():
        now = arl.sequence_log_probs(model, batch['ids'], batch['lengths'])  # [4, T-1]
    old = now.clone()
    old[1] += 1.0 * batch['action_mask'][1] / batch['action_mask'][1].sum()  # episode 1 already fell by e
    grads = {}
    for name, kw in (('none', {}), ('clip', {'old_logp': old, 'clip': 0.2}), ('keep', {'old_logp': now, 'clip': 0.2})):
        model.zero_grad()
        weighted_sft_loss(model, batch, weights, **kw).backward()
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad()
    weighted_sft_loss(model, batch, torch.tensor([1.0, 0.0, -0.5, 1.0])).backward()
    without_1 = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert torch.allclose(grads['keep'], grads['none'])
    assert torch.allclose(grads['clip'], without_1)
    with pytest.raises(ValueError, match=r'clip must be None or a number in \(0, 1\)'):
        arl.rft_baseline_iteration(model, bugfix_tasks('train')[:2], tok, rounds=1, n_samples=2, steps=1, clip=1.5)


def test_minibatch_dpo_draws_its_pairs_from_its_seed(trained_model, blind_trajs, tok):
    pairs = list(zip(blind_trajs[:6], blind_trajs[6:12]))
    logs = []
    for _ in range(2):
        model = copy.deepcopy(trained_model)
        logs.append(arl.train_dpo(model, pairs, tok, steps=4, every=2, batch_size=3, seed=5))
    assert logs[0] == logs[1] and len(logs[0]) == 2
    with pytest.raises(ValueError, match='batch_size must be None'):
        arl.train_dpo(copy.deepcopy(trained_model), pairs, tok, steps=1, batch_size=0)


# --- exercise 7: when a metric separates the winner

def test_separation_is_the_first_step_from_which_the_winner_stays_on_one_side():
    steps = [15, 30, 45, 60]
    traces = {'a': [0.5, 0.9, 0.9, 0.8], 'b': [0.6, 0.4, 0.3, 0.2], 'c': [0.1, 0.2, 0.5, 0.6]}
    assert ex7_design_review.separation(traces, 'a', steps) == (30, 1)
    assert ex7_design_review.separation(traces, 'c', steps) == (None, 0)
    assert ex7_design_review.separation({'a': [1, 0, 0, 0], 'b': [2, 1, 1, 1], 'c': [3, 2, 2, 2]}, 'a', steps) == (15, -1)


# --- the command, end to end on the smoke budget

@pytest.fixture(scope='module')
def chapter(tmp_path_factory):
    """A smoke reproduction (every section and checkpoint) to start the exercises from."""
    return smoke_report_dir(tmp_path_factory)


@pytest.fixture()
def few_demos(monkeypatch):
    monkeypatch.setattr(ex7_design_review, 'N_DEMOS', 80)


@pytest.mark.parametrize('number', list(EXERCISES))
def test_every_exercise_runs_from_a_reproduction_and_writes_its_answers(number, chapter, tmp_path, capsys, few_demos):
    out = tmp_path / 'ex'
    assert exit_code(main, ['exercise', str(number), '--smoke', '--from', str(chapter), '--out', str(out)]) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / 'results.json').read_text())
    assert record['exercise'] == number and record['from'] == str(chapter) and record['seed'] == 0
    module = EXERCISES[number].load()
    assert [a['key'] for a in record['answers']] == [a.key for a in module.ANSWERS]
    assert record['summary'] in printed and EXERCISES[number].title in printed
    for name in record['figures']:
        assert (out / name).stat().st_size > 0
    assert not (chapter / 'exercise').exists() and not (out / 'chapter').exists()  # --from is read, never written


def test_a_resumed_exercise_ends_with_the_figures_of_an_uninterrupted_one(chapter, tmp_path, capsys):
    whole, cut = tmp_path / 'whole', tmp_path / 'cut'
    for out in (whole, cut):
        assert exit_code(main, ['exercise', '3', '--smoke', '--from', str(chapter), '--out', str(out), '--quiet']) == 0
    record = json.loads((cut / 'results.json').read_text())
    for key in ('answers', 'figures', 'summary'):
        record.pop(key)
    record['parts'].pop('trained')  # killed during its last part
    (cut / 'results.json').write_text(json.dumps(record))
    assert exit_code(main, ['exercise', '3', '--smoke', '--from', str(chapter), '--out', str(cut), '--resume']) == 0
    assert 'STaR, forced tokens masked' in capsys.readouterr().out  # the finished parts' lines again
    a, b = (json.loads((o / 'results.json').read_text()) for o in (whole, cut))
    assert a['parts'] == b['parts'] and a['answers'] == b['answers']


def test_without_from_the_exercise_trains_the_chapters_sections_it_reads(tmp_path, capsys):
    out = tmp_path / 'ex'
    assert exit_code(main, ['exercise', '1', '--smoke', '--out', str(out), '--seed', '2']) == 0
    assert "the chapter's sections 15.2, 15.3 first" in capsys.readouterr().out
    chapter = json.loads((out / 'chapter' / 'results.json').read_text())
    assert set(chapter['sections']) == {'setup', '15.2', '15.3'} and chapter['seed'] == 2


def test_bad_input_is_refused_in_one_line(chapter, tmp_path, capsys):
    cases = [
        (['exercise', '9'], 'no exercise 9; the exercises are 1, 2, 3, 4, 5, 6, 7'),
        (['exercise'], 'give the exercise number, 1 to 7'),
        (['exercise', '1', '--smoke', '--from', str(chapter), '--seed', '3'], 'ran at seed 0, not 3'),
        (['exercise', '1', '--smoke', '--from', str(chapter), '--env', 'wiring'], 'ran on bugfix, not wiring'),
        (['exercise', '1', '--from', str(chapter)], 'was run with other settings: '),
        (['exercise', '1', '--smoke', '--from', str(tmp_path)], 'has no results.json'),
        (['exercise', '1', '--smoke', '--set', 'rft_rounds=1'], 'rft_rounds must be an int >= 2'),
        (['exercise', '1', '--seed', '1', '--seeds', '0-2'], 'give --seed (one run) or --seeds (a sweep), not both'),
    ]
    for argv, said in cases:
        assert exit_code(main, argv + ['--out', str(tmp_path / 'x')]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith('agentrl exercise: error: ') and said in err and err.count('\n') == 1, (argv, err)


def test_a_second_run_on_a_folder_in_use_is_refused_and_the_first_is_intact(chapter, tmp_path, capsys):
    out = tmp_path / 'ex'
    assert exit_code(main, ['exercise', '1', '--smoke', '--from', str(chapter), '--out', str(out), '--quiet']) == 0
    before = (out / 'results.json').read_bytes()
    with FolderLock(out):
        assert exit_code(main, ['exercise', '1', '--smoke', '--from', str(chapter), '--out', str(out)]) == 2
    assert capsys.readouterr().err.endswith(f'{out} is in use by another run (PID {os.getpid()}); wait for it to end, '
                                            'or give another --out\n')
    assert (out / 'results.json').read_bytes() == before


def test_an_exercise_over_seeds_gives_every_answer_a_hold_rate(chapter, tmp_path, capsys):
    sweep = tmp_path / 'sweep'  # an agentrl sweep folder of one seed: the smoke reproduction as seed 0
    sweep.mkdir()
    (sweep / 'seed0').symlink_to(chapter, target_is_directory=True)
    out = tmp_path / 'ex'
    argv = ['exercise', '1', '--smoke', '--seeds', '0', '--from', str(sweep), '--out', str(out), '--workers', '1']
    assert exit_code(main, argv) == 0
    summary = json.loads((out / 'exercise.json').read_text())
    assert summary['n'] == 1 and summary['seeds'] == [0] and summary['env'] == 'bugfix'
    for a in summary['answers'].values():
        assert set(a['per_seed']) == {'0'} and a['n'] == sum(r['holds'] is not None for r in a['per_seed'].values())
    assert '| answer | decided by | hold rate |' in (out / 'exercise.md').read_text()
    assert exit_code(main, argv + ['--resume']) == 0  # a finished seed is skipped, the summary written again
    assert json.loads((out / 'exercise.json').read_text())['answers'] == summary['answers']
    assert exit_code(main, ['exercise', '1', '--smoke', '--seeds', '0-1', '--from', str(sweep), '--out',
                            str(tmp_path / 'x')]) == 2
    assert 'has no finished run for seed 1' in capsys.readouterr().err


def test_list_shows_the_seven_questions(capsys):
    assert exit_code(main, ['exercise', '--list']) == 0
    printed = capsys.readouterr().out
    assert all(f'{n}. {s.title}' in printed for n, s in EXERCISES.items())
