"""The monitors, logged per step (section 15.6): one callback protocol for every recipe, its documented names,
evaluation kept apart under eval/, the JSON Lines file surviving a kill, TensorBoard event files read back with
TensorBoard's own reader, and the logged figures equal to what the recipes return."""
from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest
import torch

import agentrl as arl
from agentrl.loggers import (CONDITIONAL, METRICS, RECIPE_METRICS, JsonlLogger, LoggerSet, MemoryLogger, Reporter,
                             jsonl_header, open_run, read_jsonl, run_name, series)
from agentrl.loggers.protocol import flatten
from agentrl.recipes.evaluation import action_entropy
from agentrl.recipes.rft_baseline import weighted_sft_train

from conftest import script_main

ROOT = Path(__file__).resolve().parent.parent
NAMES = {m.name for m in METRICS}
EVAL = {'grad_norm': 123.0, 'reward': -5.0}
"""An evaluation whose names are also recipe metrics: logged under eval/, they must not touch the recipe's."""
Eval = namedtuple('Eval', ['grad_norm', 'reward'])


@pytest.fixture(scope='module')
def few(train_tasks):
    return train_tasks[:6]


@pytest.fixture(scope='module')
def pairs(trained_model, few, tok, train_oracle_demos):
    _, sample = arl.pass_rate(trained_model, few, tok, 8, seed=1)
    return arl.make_pairs(sample, few) or [(train_oracle_demos[0], sample[0])]


def _runs(few, tok, demos, pairs):
    """recipe -> run(model, loggers): a few steps of each, with an evaluation where the recipe takes one."""
    ev = lambda m: dict(EVAL)
    return {
        'sft_train': lambda m, L: arl.sft_train(m, demos, tok, steps=3, batch_size=8, loggers=L),
        'weighted_sft_train': lambda m, L: weighted_sft_train(m, demos[:6], [1.0, -0.5, 1.0, 1.0, -0.25, 1.0], tok,
                                                              steps=3, batch_size=4, loggers=L),
        'expert_iteration': lambda m, L: arl.expert_iteration(m, few, tok, rounds=2, n_samples=4, steps=2,
                                                              reward='public', evaluate=ev, loggers=L),
        'star_iteration': lambda m, L: arl.star_iteration(m, few, tok, rounds=2, n_samples=4, steps=2, evaluate=ev,
                                                          loggers=L),
        'rft_baseline_iteration': lambda m, L: arl.rft_baseline_iteration(m, few, tok, rounds=2, n_samples=4, steps=2,
                                                                          evaluate=ev, loggers=L),
        'train_dpo': lambda m, L: arl.train_dpo(m, pairs, tok, steps=3, every=1, evaluate=ev, loggers=L),
        'train_online_dpo': lambda m, L: arl.train_online_dpo(m, few, tok, steps=4, regen_every=2, n_samples=4,
                                                              every=2, evaluate=ev, loggers=L),
        'train_rl': lambda m, L: arl.train_rl(m, few, tok, steps=3, n_tasks=2, group=4, every=1,
                                              evaluate=lambda m: Eval(**EVAL), loggers=L),
        'train_grpo': lambda m, L: arl.train_grpo(m, few, tok, steps=2, cfg=arl.GRPOConfig(n_tasks=2, group=4),
                                                  evaluate=lambda m: Eval(**EVAL), every=1, loggers=L),
        'select_sft_checkpoint': lambda m, L: arl.select_sft_checkpoint(m, demos, tok, few[:3], steps=4, every=2,
                                                                        group=4, loggers=L)[1:3],
    }


def _plain(x):
    """A recipe's return value with its trajectories reduced to what identifies them (for ==)."""
    if isinstance(x, arl.Trajectory):
        return ('traj', tuple(x.ids.tolist()), x.reward)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


@pytest.mark.parametrize('recipe', sorted(RECIPE_METRICS))
def test_every_recipe_reports_its_documented_names_and_returns_what_it_returns_without(
        recipe, trained_model, few, tok, train_oracle_demos, pairs):
    run = _runs(few, tok, train_oracle_demos, pairs)[recipe]
    quiet, watched, log = copy.deepcopy(trained_model), copy.deepcopy(trained_model), MemoryLogger()
    torch.manual_seed(11)
    plain = run(quiet, None)
    torch.manual_seed(11)
    logged = run(watched, log)
    assert _plain(logged) == _plain(plain)  # the return value, unchanged by logging
    assert all(torch.equal(a, b) for a, b in zip(quiet.parameters(), watched.parameters()))  # and every weight
    if recipe in ('sft_train', 'weighted_sft_train'):  # the logged loss is the one the run without a logger took
        assert [v for _, v in log.series('loss')] == plain
    names = log.names()
    assert set(RECIPE_METRICS[recipe]) <= names, f'missing {set(RECIPE_METRICS[recipe]) - names}'
    own = {n for n in names if not n.startswith('eval/')}
    assert own <= NAMES, f'undocumented: {own - NAMES}'
    steps = [step for step, _ in log.records]
    assert steps == sorted(steps)  # one step axis, never going back (W&B requires it)
    if recipe not in ('sft_train', 'weighted_sft_train', 'select_sft_checkpoint'):
        # the evaluation comes under its own prefix; the recipe's own grad_norm and reward are never its values
        assert log.series('eval/grad_norm') and all(v == 123.0 for _, v in log.series('eval/grad_norm'))
        assert all(v != 123.0 for _, v in log.series('grad_norm'))
        assert all(v != -5.0 for _, v in log.series('reward'))


def test_an_evaluation_key_that_is_a_rows_own_is_refused(trained_model, few, tok):
    with pytest.raises(ValueError, match=r"\['rate'\].*eval/"):
        arl.expert_iteration(copy.deepcopy(trained_model), few, tok, rounds=1, n_samples=2, steps=1,
                             evaluate=lambda m: {'rate': 0.0})


def test_dpo_log_and_rows_agree(trained_model, tok, pairs, tmp_path):
    path = tmp_path / 'dpo.jsonl'
    monitor = []
    with JsonlLogger(path) as log:
        rows = arl.train_dpo(copy.deepcopy(trained_model), pairs, tok, steps=4, every=2, monitor=monitor, loggers=log)
    records = read_jsonl(path)
    assert [s for s, _ in series(records, 'd_chosen')] == [1, 2, 3, 4]
    for name, k in (('d_chosen', 1), ('d_rejected', 2)):
        logged = dict(series(records, name))
        assert [logged[row['step']] for row in rows] == [row[name] for row in rows]
        assert list(logged.values()) == [m[k] for m in monitor]
    beta = 0.1
    for r in records:
        m = r['metrics']
        assert m['rewards/margins'] == pytest.approx(m['rewards/chosen'] - m['rewards/rejected'], abs=1e-5)
        assert m['rewards/chosen'] == pytest.approx(beta * m['d_chosen'], rel=1e-5)
        assert 0 <= m['rewards/accuracies'] <= 1


def test_expert_iteration_logs_the_hacks_its_history_counts(trained_model, few, tok):
    log = MemoryLogger()
    rows = arl.expert_iteration(copy.deepcopy(trained_model), few, tok, rounds=2, n_samples=4, steps=2,
                                reward='public', loggers=log)
    assert [v for _, v in log.series('filter/hacks')] == [row['hacks'] for row in rows]
    assert [v for _, v in log.series('filter/kept')] == [len(row['kept']) for row in rows]
    assert [v for _, v in log.series('reward')] == [row['rate'] for row in rows]
    assert [s for s, _ in log.series('round')] == [0, 2]  # round k's sample at step k * steps


def test_train_rl_logs_the_sample_it_trained_on(trained_model, few, tok):
    log = MemoryLogger()
    arl.train_rl(copy.deepcopy(trained_model), few, tok, steps=3, n_tasks=2, group=4, start=20, loggers=log)
    assert [s for s, _ in log.series('reward')] == [21, 22, 23]  # the step axis continues from start
    for _, m in log.records:
        assert m['frac_reward_zero_std'] == pytest.approx(1 - m['informative'])
        assert (m['grad_norm'] > 0) == (m['informative'] > 0)  # a group baseline learns from mixed groups only
        assert m['entropy'] > 0 and m['episodes_per_second'] > 0
    tokens = [v for _, v in log.series('num_tokens')]
    assert tokens == sorted(tokens) and tokens[0] > 0  # a running total


def test_an_sft_steps_logged_monitors_are_read_off_its_loss(trained_model, tok, train_oracle_demos):
    """Step 1's loss, gradient norm and entropy: ``sft_loss``'s on the batch it drew, at the weights before it."""
    before, log = copy.deepcopy(trained_model), MemoryLogger()
    arl.sft_train(copy.deepcopy(trained_model), train_oracle_demos, tok, steps=1, batch_size=8, loggers=log)
    idx = torch.randint(len(train_oracle_demos), (8,), generator=torch.Generator().manual_seed(0))
    batch = arl.collate([train_oracle_demos[i] for i in idx.tolist()], tok.pad_id)
    loss = arl.sft_loss(before, batch)
    loss.backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in before.parameters() if p.grad is not None])
    (_, logged), = log.records
    assert logged['loss'] == pytest.approx(loss.item(), rel=1e-6)
    assert logged['grad_norm'] == pytest.approx(norm.item(), rel=1e-5)
    assert logged['entropy'] == pytest.approx(action_entropy(before, batch), rel=1e-6)


def test_a_reporter_calls_a_monitor_only_when_something_listens():
    never = lambda: 1 / 0  # noqa: E731
    assert Reporter().measure(never) is None
    Reporter().log(1, never)
    log = MemoryLogger()
    assert Reporter(log).measure(lambda: 2.5) == 2.5
    Reporter(log).log(3, lambda: {'loss': torch.tensor(0.5)})
    assert log.records == [(3, {'loss': 0.5})]


def test_monitors_consume_no_random_numbers(trained_model, few, tok):
    """The global RNG and the recipe's own generators are where they would be without a logger."""
    states = []
    for loggers in (None, MemoryLogger()):
        torch.manual_seed(5)
        arl.train_rl(copy.deepcopy(trained_model), few, tok, steps=2, n_tasks=2, group=4, loggers=loggers)
        states.append(torch.get_rng_state())
    assert torch.equal(*states)


def test_flatten_names_what_an_evaluation_returns():
    Pair = namedtuple('Pair', 'train held')
    assert flatten((0.5, 0.25), 'eval') == {'eval/0': 0.5, 'eval/1': 0.25}
    assert flatten(Pair(0.5, 0.25), 'eval') == {'eval/train': 0.5, 'eval/held': 0.25}
    assert flatten({'train': 1, 'family': {'init': 0.0, 'off': 1.0}, 'kept': [object()], 'name': 'x', 'ok': True},
                   'eval') == {'eval/train': 1.0, 'eval/family/init': 0.0, 'eval/family/off': 1.0, 'eval/ok': 1.0}


def test_loggers_are_checked():
    with pytest.raises(TypeError, match='log\\(metrics, step\\)'):
        Reporter('runs/')
    with pytest.raises(TypeError, match='log\\(metrics, step\\)'):
        Reporter([MemoryLogger(), 'runs/'])
    with pytest.raises(TypeError, match='not a number'):
        Reporter(MemoryLogger()).log(1, {'loss': 'high'})
    assert not Reporter().active and not Reporter([]).active
    assert not Reporter(LoggerSet()).active  # an empty set of loggers: a harness run without --logdir


def test_a_jsonl_file_cut_short_reads_back_its_complete_records(tmp_path):
    path = tmp_path / 'run' / 'metrics.jsonl'
    with JsonlLogger(path, run='sft/seed0') as log:
        for step in range(1, 6):
            log.log({'loss': 1.0 / step, 'eval/train': float('nan')}, step)
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])  # the last record, cut mid-line
    records = read_jsonl(path)
    assert [r['step'] for r in records] == [1, 2, 3, 4]
    assert records[0]['metrics'] == {'loss': 1.0, 'eval/train': None}  # JSON has no NaN
    assert jsonl_header(path)['run'] == 'sft/seed0'
    with JsonlLogger(path) as log:  # a resumed run appends after the damage; the cut line stays damaged
        log.log({'loss': 0.1}, 6)
    with pytest.raises(ValueError, match='line 6 is not JSON'):
        read_jsonl(path)


def test_a_killed_run_leaves_a_readable_jsonl_file(tmp_path):
    path = tmp_path / 'metrics.jsonl'
    code = ('import sys, itertools; sys.path.insert(0, sys.argv[2]);\n'
            'from agentrl.loggers.jsonl import JsonlLogger\n'
            'log = JsonlLogger(sys.argv[1])\n'
            'for step in itertools.count(1):\n'
            '    log.log({f"m{i}": step * 0.5 for i in range(50)}, step)\n')
    proc = subprocess.Popen([sys.executable, '-c', code, str(path), str(ROOT / 'src')])
    deadline = time.time() + 60
    while time.time() < deadline and (not path.exists() or path.stat().st_size < 200_000):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    records = read_jsonl(path)
    assert len(records) > 50
    assert [r['step'] for r in records] == list(range(1, len(records) + 1))
    assert all(len(r['metrics']) == 50 for r in records)


def test_runs_are_named_for_tensorboards_run_selector(tmp_path):
    assert run_name('expert_iteration', seed=3, label='public reward') == 'expert_iteration/public_reward/seed3'
    with pytest.raises(ValueError, match='no folder name'):
        run_name('..')
    with open_run(tmp_path, 'train_rl', seed=0) as loggers:
        loggers.log({'reward': 0.5}, 1)
    assert read_jsonl(tmp_path / 'train_rl' / 'seed0' / 'metrics.jsonl')[0]['metrics'] == {'reward': 0.5}


def test_the_loggers_package_needs_no_torch():
    code = 'import sys, agentrl.loggers; assert "torch" not in sys.modules, "torch was imported"'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr


def test_tensorboard_event_files_read_back_with_tensorboards_own_reader(trained_model, few, tok, tmp_path):
    pytest.importorskip('tensorboard', reason="the extra agentrl[tensorboard] is not installed "
                                              "(pip install -e '.[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    steps = 3
    with open_run(tmp_path, 'train_rl', seed=0, tensorboard=True) as loggers:
        arl.train_rl(copy.deepcopy(trained_model), few, tok, steps=steps, n_tasks=2, group=4, every=1,
                     evaluate=lambda m: Eval(**EVAL), loggers=loggers)
    acc = EventAccumulator(str(tmp_path / 'train_rl' / 'seed0'), size_guidance={'scalars': 0})
    acc.Reload()
    tags = set(acc.Tags()['scalars'])
    records = read_jsonl(tmp_path / 'train_rl' / 'seed0' / 'metrics.jsonl')
    for name in RECIPE_METRICS['train_rl'] + ('invalid_calls',):
        assert name in tags, f'{name} not among the event file tags {sorted(tags)}'
        points = acc.Scalars(name)
        assert [p.step for p in points] == [1, 2, 3]  # one point per step logged
        assert [p.value for p in points] == pytest.approx([v for _, v in series(records, name)], rel=1e-6)
    assert [p.step for p in acc.Scalars('eval/grad_norm')] == [0, 1, 2, 3]  # before the first step, then every step


def test_the_docs_page_shows_every_monitor():
    page = (ROOT / 'docs' / 'watching.md').read_text()
    missing = [m.name for m in METRICS if f'`{m.name}`' not in page]
    assert not missing, f'docs/watching.md lacks {missing}'
    for m in METRICS:
        if m.trl:
            assert f'`{m.trl}`' in page
    assert set(CONDITIONAL) <= NAMES


def test_the_overhead_script_compares_runs_with_and_without_a_logger(trained_model, tok, tmp_path, capsys):
    arl.save_checkpoint(trained_model, tmp_path / 'checkpoints' / 'sft_step20.safetensors', tok)
    main = script_main('logging_overhead')
    assert main(['--run', str(tmp_path), '--repeats', '1', '--budget', 'rl_cold_steps=1', 'rl_tasks=2',
                 'rl_group=2']) == 0
    out = capsys.readouterr().out
    assert 'CPU median' in out and 'same weights with and without the logger: True' in out
