"""The chapter on the Wiring gym, at the smoke budget: the same sections, files, report, claims and tools."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from agentrl.experiments.chapter15.reproduction import SECTIONS


@pytest.fixture(scope='module')
def wiring_run(tmp_path_factory):
    """``agentrl reproduce --env wiring --smoke``, run as the command runs it (in this process, its output kept)."""
    from agentrl.cli import main
    out = tmp_path_factory.mktemp('wiring_run')
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(['reproduce', '--env', 'wiring', '--smoke', '--jobs', '1', '--threads', '1', '--out', str(out)]) == 0
    return out, printed.getvalue()


def test_reproduce_env_wiring_writes_the_chapters_files_and_ends_with_its_claims(wiring_run):
    out, stdout = wiring_run
    saved = json.loads((out / 'results.json').read_text())
    assert saved['env'] == 'wiring' and saved['groups'] == ['port', 'host', 'user', 'moved']
    assert set(saved['sections']) == {'setup', *SECTIONS}
    assert saved['sections']['setup']['train_tasks'] == 20 and saved['sections']['setup']['heldout_tasks'] == 8
    for name in ('report.md', 'transcript.txt', 'fig15_2_dpo.png', 'fig15_3_recipes.png', 'fig15_4_hacking.png',
                 'checkpoints/weak.safetensors', 'checkpoints/sft_step60.safetensors', 'episodes/weak.json'):
        assert (out / name).is_file(), name
    last = stdout.strip().splitlines()[-4:]  # rich wraps the summary line at 80 columns
    assert 'claims hold |' in ' '.join(last) and 'bands' not in ' '.join(last)
    report = (out / 'report.md').read_text()
    assert report.startswith('# Chapter 15 on the Wiring gym') and '## Claims' in report and '## Findings' not in report
    assert 'chapter 0.815' not in report  # BugFix's own figures stay off another environment's report
    assert '| fail hidden check |' in report and 'hidden tests' not in report  # Wiring has a check, not tests


def test_the_tools_read_a_wiring_run(wiring_run, tmp_path, capsys):
    from agentrl.cli import main
    out, _ = wiring_run
    for cmd, expect in [(['claims', str(out)], 'claims hold'), (['show', str(out), '--n', '1'], 'wire '),
                        (['report', str(out), '--out', str(tmp_path / 'r.html')], ''),
                        (['export', str(out), '--out', str(tmp_path / 'x'), '--no-check'], 'wrote ')]:
        assert main(cmd) == 0, cmd
        assert expect in capsys.readouterr().out, cmd
    page = (tmp_path / 'r.html').read_text()
    assert 'wire ' in page and 'moved/' in page
    first = json.loads((tmp_path / 'x' / 'episodes.jsonl').read_text().splitlines()[0])
    assert first['messages'][0]['content'].startswith('wire ')


def test_copy_or_recall_sorts_every_episode_by_where_its_answer_came_from(wiring_run, capsys):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location('copy_or_recall', Path(__file__).parent.parent / 'scripts' / 'copy_or_recall.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out, _ = wiring_run
    totals = script.main([str(out), '--checkpoint', 'sft_step60', '--samples', '2'])
    assert sum(totals['heldout'].values()) == 2 * 8 and sum(totals['train'].values()) == 2 * 20
    assert set(totals['heldout']) <= set(script.CATEGORIES)
    printed = capsys.readouterr().out
    assert 'heldout' in printed and 'recalled' in printed
    from agentrl.envs.wiring import WiringEnv, make_tasks, scripted_policy
    from agentrl.envs import play
    train_answers = {t.answer for t in make_tasks('train')}
    task = make_tasks('heldout')[0]

    class Episode:  # an oracle episode: its answer is read, so it is right
        info = {'actions': play(WiringEnv(), task, scripted_policy('oracle')).calls}
    assert script.classify(Episode, task, train_answers) == 'right'
    recalled = next(t.answer for t in make_tasks('train') if t.needs == task.needs and t.answer != task.answer)
    Episode.info = {'actions': [f'set {task.needs} {recalled}']}  # written without a look: recalled from training
    assert script.classify(Episode, task, train_answers) == 'recalled'
