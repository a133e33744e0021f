"""``agentrl reproduce --logdir``: every recipe run of the chapter writes its monitors, and logging changes no figure.

One smoke run at seed 0 with a log folder, beside the session's smoke run without one: the same ``results.json``,
a run folder per recipe call (``RECIPE/LABEL/seed0``) with ``metrics.jsonl`` and TensorBoard event files that
TensorBoard's own reader finds every documented tag in, and the figures 15.6 prints equal to what the logs hold.
"""
from __future__ import annotations

import json

import pytest

from agentrl.experiments.chapter15 import html_report
from agentrl.experiments.chapter15.chapter import Chapter15
from agentrl.experiments.chapter15.config import Ch15Config
from agentrl.experiments.chapter15.probes import probe_labels
from conftest import once_per_session, one_thread
from agentrl.loggers import METRICS_FILE, RECIPE_METRICS, read_jsonl, series, tensorboard_available

RUNS = {  # the chapter's recipe runs (not --extended): folder -> recipe
    'sft_train/weak_base': 'sft_train', 'sft_train/oracle': 'sft_train', 'sft_train/mismatched': 'sft_train',
    'expert_iteration/hidden': 'expert_iteration', 'expert_iteration/public': 'expert_iteration',
    'train_dpo/dpo': 'train_dpo', 'train_dpo/dpo_nll': 'train_dpo',
    'train_rl/sft_rl': 'train_rl', 'train_rl/rl_only': 'train_rl', 'probe/sft_checkpoints': None,
}


def logged_run_dir(tmp_path_factory):
    """A smoke run at seed 0 with a log folder (``DIR/logs``) and its ``report.html``; made once per test session
    (``conftest.once_per_session``) and shared with test_browser."""
    def make(out):
        with one_thread():
            Chapter15(out, config=Ch15Config.smoke(), log=lambda line: None, logdir=out / 'logs').run()
            html_report.build(out)

    return once_per_session(tmp_path_factory, 'logged_smoke_run', make)


@pytest.fixture(scope='module')
def logged(tmp_path_factory):
    """The logged smoke run -> (its folder, its log folder, its results)."""
    out = logged_run_dir(tmp_path_factory)
    return out, out / 'logs', json.loads((out / 'results.json').read_text())['sections']


def records(logdir, run):
    return read_jsonl(logdir / run / 'seed0' / METRICS_FILE)


def test_every_recipe_run_writes_its_documented_metrics(logged):
    _, logdir, _ = logged
    found = sorted(str(p.parent.parent.relative_to(logdir)) for p in logdir.rglob(METRICS_FILE))
    assert found == sorted(RUNS)
    for run, recipe in RUNS.items():
        recs = records(logdir, run)
        assert recs, run
        names = {k for r in recs for k in r['metrics']}
        if recipe is not None:
            assert set(RECIPE_METRICS[recipe]) <= names, (run, set(RECIPE_METRICS[recipe]) - names)
    assert {'eval/train', 'eval/held'} <= {k for r in records(logdir, 'sft_train/oracle') for k in r['metrics']}


@pytest.mark.skipif(not tensorboard_available(), reason="needs the tensorboard extra: pip install -e '.[tensorboard]'")
def test_tensorboard_reads_every_tag_with_a_point_per_logged_step(logged):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    _, logdir, _ = logged
    for run, recipe in RUNS.items():
        acc = EventAccumulator(str(logdir / run / 'seed0'), size_guidance={'scalars': 0})
        acc.Reload()
        tags = set(acc.Tags()['scalars'])
        recs = records(logdir, run)
        logged_names = {k for r in recs for k in r['metrics']}
        assert tags == logged_names, run
        if recipe is not None:
            assert set(RECIPE_METRICS[recipe]) <= tags, run
        for tag in tags:
            points = [(e.step, e.value) for e in acc.Scalars(tag)]
            want = series(recs, tag)
            assert [s for s, _ in points] == [s for s, _ in want], (run, tag)
            assert [v for _, v in points] == pytest.approx([v for _, v in want], rel=1e-6, nan_ok=True), (run, tag)


def test_the_figures_15_6_prints_are_the_logged_ones(logged):
    _, logdir, results = logged
    cfg = Ch15Config.smoke()
    # the informative-group shares of the weak base and the two SFT checkpoints, at their SFT steps
    probe = results['15.6']['probe']
    logged_probe = dict(series(records(logdir, 'probe/sft_checkpoints'), 'probe/informative'))
    steps = [0, cfg.cold_start_step, cfg.sft_steps]
    labels = [label for label, _ in probe_labels(cfg.cold_start_step, cfg.sft_steps)]  # weak base, cold start, last
    assert [logged_probe[k] for k in steps] == pytest.approx([probe[label]['signal'] for label in labels])
    # the public filter's kept hacks per round
    hacks = [r['metrics']['filter/hacks'] for r in records(logdir, 'expert_iteration/public') if 'filter/hacks' in r['metrics']]
    assert hacks == [row['hacks'] for row in results['15.6']['hacking']]
    # DPO's last logged row: d_chosen and d_rejected at that step
    last = results['15.4']['log'][-1]
    dpo = records(logdir, 'train_dpo/dpo')
    at = {r['step']: r['metrics'] for r in dpo if 'd_chosen' in r['metrics']}
    assert at[last['step']]['d_chosen'] == pytest.approx(last['d_chosen'])
    assert at[last['step']]['d_rejected'] == pytest.approx(last['d_rejected'])


def test_results_equal_a_run_without_a_log_folder(logged, tmp_path_factory):
    from test_html_report import smoke_report_dir
    out, _, _ = logged
    plain = smoke_report_dir(tmp_path_factory)  # the same settings and seed, no log folder
    assert json.loads((out / 'results.json').read_text())['sections'] == \
        json.loads((plain / 'results.json').read_text())['sections']


def test_a_section_run_again_replaces_its_runs(logged, tmp_path):
    out, logdir, _ = logged
    import shutil
    copy = tmp_path / 'run'
    shutil.copytree(out, copy)
    n = len(records(copy / 'logs', 'train_dpo/dpo'))
    run = Chapter15(copy, resume=True, config=Ch15Config.smoke(), log=lambda line: None, logdir=copy / 'logs')
    run.results.pop('15.4')
    with run.session():
        run.run_here()
    assert len(records(copy / 'logs', 'train_dpo/dpo')) == n


def test_the_report_draws_the_monitors_from_the_logs(logged):
    from test_html_report import parsed
    out, logdir, _ = logged
    page = (out / 'report.html').read_text(encoding='utf-8')
    assert 'id="monitors"' in page and 'tensorboard --logdir' in page
    assert len(parsed(page).tables['monitor-runs']) == len(RUNS) + 1  # and its header row


def test_report_without_logs_has_no_monitors_section(tmp_path_factory):
    from test_html_report import smoke_report_dir
    page = (smoke_report_dir(tmp_path_factory) / 'report.html').read_text(encoding='utf-8')
    assert 'id="monitors"' not in page
