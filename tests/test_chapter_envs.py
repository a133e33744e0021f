"""The chapter on a user's environment: a ``ChapterEnv`` by import path or entry point, and claims that do not apply.

``--env examples.mailroom:CHAPTER`` runs the chapter on the Mailroom with nothing added to the library;
``--env plainroom:PLAIN`` (``tests/plainroom.py``) on a Mailroom with no public check and no read call,
whose claims that need them are reported as not applicable, with the reason, by reproduce, claims,
report, sweep and compare. Every run is at the smoke budget, in this process (a sweep's seed in its worker).
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.experiments.chapter15 import env_registry as envs
from agentrl.experiments.chapter15.claims import CLAIMS, check_claims
from agentrl.experiments.chapter15.findings import tally

ROOT = Path(__file__).resolve().parent.parent
NEED_READ = {c.key for c in CLAIMS if 'read call' in c.needs}
NEED_PUBLIC = {c.key for c in CLAIMS if 'public check' in c.needs}


@contextlib.contextmanager
def in_repo():
    """Run from the repository's root, as a user of a fresh clone does; what ``--env`` adds to ``sys.path`` is undone."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        mp.setattr(sys, 'path', [p for p in sys.path if p not in ('', str(ROOT))])
        yield


def run_cli(argv) -> tuple:
    """``agentrl ARGV`` in this process -> (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope='module')
def mailroom_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('mailroom_run')
    with in_repo():
        code, stdout, _ = run_cli(['reproduce', '--env', 'examples.mailroom:CHAPTER', '--smoke', '--jobs', '1',
                                   '--threads', '1', '--out', str(out)])
    assert code == 0
    return out, stdout


@pytest.fixture(scope='module')
def plain_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('plain_run')
    code, stdout, _ = run_cli(['reproduce', '--env', 'plainroom:PLAIN', '--smoke', '--jobs', '1', '--threads', '1',
                               '--out', str(out)])
    assert code == 0
    return out, stdout


def last_lines(stdout, n=3) -> str:
    return ' '.join(' '.join(stdout.strip().splitlines()[-n:]).split())  # rich wraps at 80 columns


def test_the_chapter_runs_on_the_mailroom_by_import_path(mailroom_run):
    out, stdout = mailroom_run
    saved = json.loads((out / 'results.json').read_text())
    assert saved['env'] == 'examples.mailroom:CHAPTER' and saved['groups'] == ['ground', 'upper']
    assert saved['sections']['setup']['train_tasks'] == 18 and saved['sections']['setup']['heldout_tasks'] == 6
    assert 'chapter 15 on the Mailroom (Mailroom): 18 train and 6 held-out tasks' in stdout
    assert 'Chapter 15 claims on the Mailroom' in stdout and 'bands' not in last_lines(stdout)
    held, m, na = tally(check_claims(saved['sections'], envs.get_env(saved['env'])))
    assert f'{held} of {m} claims hold |' in last_lines(stdout) and (m, na) == (len(CLAIMS), 0)  # it has everything
    report = (out / 'report.md').read_text()
    assert report.startswith('# Chapter 15 on the Mailroom') and '## Findings' not in report and 'chapter 0.815' not in report


def test_the_probe_labels_its_checkpoints_by_the_runs_steps(mailroom_run):
    """15.6 names the SFT checkpoints it probes by the config's steps (smoke: 2 and 4), and so do the reports."""
    out, _ = mailroom_run
    saved = json.loads((out / 'results.json').read_text())
    config, probe = saved['config'], saved['sections']['15.6']['probe']
    assert list(probe) == ['SFT step 2', 'SFT step 4', 'weak base']  # sorted keys
    assert (config['cold_start_step'], config['sft_steps']) == (2, 4)
    rows = {f.key: (f.verdict, f.measured) for f in check_claims(saved['sections'], envs.get_env(saved['env']))}
    assert 'SFT step 2' in rows['signal-gap'][1] and 'SFT step 4' in rows['signal-gap'][1]
    sections = json.loads(json.dumps(saved['sections']))
    sections['15.6']['probe'] = {'weak base': probe['weak base'], 'SFT step 4': probe['SFT step 4']}  # cold start = last
    rows = {f.key: (f.verdict, f.measured) for f in check_claims(sections, envs.get_env(saved['env']))}
    assert rows['signal-gap'][0] is None and rows['signal-gap'][1].startswith('n/a: the cold start is the last SFT step')
    assert rows['entropy-falls'][0] is None


def test_the_environments_budgets_come_from_its_chapter_env():
    from agentrl.experiments.chapter15.settings import resolve
    with in_repo():
        env = envs.get_env('examples.mailroom:CHAPTER')
        config, overrides = resolve(env=env)
        assert (config.sft_steps, config.rl_cold_steps, overrides) == (40, 30, {})
        config, _ = resolve(sets=['sft_steps=50'], env=env)  # --set wins over the environment's own
        assert config.sft_steps == 50


def test_claims_an_environment_cannot_decide_are_not_applicable_with_the_reason(plain_run):
    out, stdout = plain_run
    saved = json.loads((out / 'results.json').read_text())
    assert saved['env'] == 'plainroom:PLAIN' and saved['sections']['15.6']['hacking'] == []
    assert not (out / 'checkpoints' / 'hacker.safetensors').exists()  # no public filter was trained
    rows = {f.key: (f.verdict, f.measured) for f in check_claims(saved['sections'], envs.get_env('plainroom:PLAIN'))}
    na = {k for k, (ok, _) in rows.items() if ok is None}
    assert na == NEED_READ | NEED_PUBLIC and len(na) == 5
    assert rows['acts-first'][1] == 'n/a: PlainMailroom has no call that only reads (no is_read_call)'
    assert rows['filter-gamed'][1].startswith('n/a: PlainMailroom has no public check beside the hidden one')
    held = sum(ok for ok, _ in rows.values() if ok is not None)
    assert f'{held} of {len(CLAIMS) - 5} claims hold (5 not applicable) |' in last_lines(stdout)
    assert stdout.count('n/a') >= 5
    report = (out / 'report.md').read_text()
    assert f'**{held} of {len(CLAIMS) - 5} claims hold (5 not applicable)**' in report
    assert '| n/a |' in report and 'No public-filter rounds: PlainMailroom has no public check' in report


def test_the_tools_read_a_run_on_a_users_environment(plain_run, tmp_path):
    out, _ = plain_run
    code, stdout, _ = run_cli(['claims', str(out)])
    assert code == 0 and '(5 not applicable)' in ' '.join(stdout.split())
    code, stdout, _ = run_cli(['report', str(out), '--out', str(tmp_path / 'r.html')])
    page = (tmp_path / 'r.html').read_text()
    assert code == 0 and 'not applicable' in page and 'href="#claims"' in page and 'id="findings"' not in page
    code, stdout, _ = run_cli(['show', '--env', 'plainroom:PLAIN'])
    assert code == 0 and 'oracle demo on the plain Mailroom' in stdout


def test_a_sweeps_workers_find_the_environment_by_its_import_path(plain_run, tmp_path):
    """The seed runs in a worker process of the local pool, which resolves ``plainroom:PLAIN`` itself; the claims
    that do not apply have no hold rate, and ``compare`` shows them as n/a."""
    out = tmp_path / 'sweep'
    code, stdout, _ = run_cli(['sweep', '--env', 'plainroom:PLAIN', '--seeds', '0', '--workers', '1', '--smoke',
                               '--out', str(out)])
    assert code == 0
    sweep = json.loads((out / 'sweep.json').read_text())
    assert sweep['env'] == 'plainroom:PLAIN' and sweep['n'] == 1 and sweep['findings'] == {} and not sweep['bands']
    seed = json.loads((out / 'seed0' / 'results.json').read_text())
    assert seed['env'] == 'plainroom:PLAIN' and seed['sections']['15.6']['hacking'] == []
    na = {k for k, c in sweep['claims'].items() if c['hold_rate'] is None}
    assert na == NEED_READ | NEED_PUBLIC
    assert all(sweep['claims'][k]['n'] == 0 and sweep['claims'][k]['why'].startswith('n/a: ') for k in na)
    assert '(5 not applicable)' in ' '.join(stdout.split())
    assert '5 not applicable' in (out / 'sweep.md').read_text()
    code, stdout, _ = run_cli(['claims', str(out)])
    assert code == 0 and 'claims hold at every seed (5 not applicable)' in ' '.join(stdout.split())
    code, stdout, _ = run_cli(['compare', str(plain_run[0]), str(out), '--out', str(tmp_path / 'cmp')])
    assert code == 0
    result = json.loads((tmp_path / 'cmp' / 'compare.json').read_text())
    rows = {r['finding']: r for r in result['findings']}
    assert rows['claim: acts-first']['stats'] == [None, None] and rows['claim: acts-first']['not_applicable'] == [1, 1]
    assert '| claim: acts-first | n/a | n/a |' in (tmp_path / 'cmp' / 'compare.md').read_text()


@pytest.mark.parametrize('spec, says', [
    ('no_such_module_xyz:CHAPTER', "no module named 'no_such_module_xyz'"),
    ('examples.mailroom:NOPE', "has no attribute 'NOPE'; its ChapterEnv objects: CHAPTER"),
    ('plainroom:NOT_A_CHAPTER_ENV', 'is a type, not a ChapterEnv'),
    ('examples.mailroom:', 'an import path is MODULE:NAME'),
    ('calc', "unknown environment 'calc'; valid environments are bugfix, wiring"),
])
def test_a_wrong_env_is_one_line_and_exit_2(spec, says):
    with in_repo():
        for command in (['reproduce', '--smoke'], ['sweep', '--smoke', '--seeds', '0']):
            code, stdout, stderr = run_cli([*command, '--env', spec, '--out', '/nonexistent/never-written'])
            assert code == 2, (command, stderr)
            assert stderr.startswith(f'agentrl {command[0]}: error: ') and says in stderr, stderr
            assert stderr.count('\n') == 1 and 'Traceback' not in stderr + stdout
        code, _, stderr = run_cli(['show', '--env', spec])
        assert code == 2 and stderr.startswith('agentrl show: error: ') and says in stderr


def test_a_module_that_raises_is_named_with_its_line(tmp_path, monkeypatch):
    (tmp_path / 'broken_env.py').write_text('x = 1\nraise RuntimeError("oops")\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'path', list(sys.path))
    with pytest.raises(ValueError, match=r'importing broken_env failed: RuntimeError: oops \(.*broken_env.py, line 2\)'):
        envs.get_env('broken_env:CHAPTER')


def test_a_package_declares_its_chapter_env_by_entry_point(tmp_path, monkeypatch):
    """An installed distribution's ``agentrl.chapter_envs`` entry point is an ``--env`` name; the run records that
    name, so a resume and the workers find the environment again."""
    dist = tmp_path / 'mailroom_chapter-1.0.dist-info'
    dist.mkdir()
    (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: mailroom-chapter\nVersion: 1.0\n')
    (dist / 'entry_points.txt').write_text(f'[{envs.ENTRY_POINTS}]\nmailroom = examples.mailroom:CHAPTER\n'
                                           'wrong = examples.mailroom:Mailroom\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with in_repo():
        env = envs.get_env('mailroom')
        assert env.name == 'mailroom' and env.title == 'the Mailroom' and env.budgets['sft_steps'] == 40
        with pytest.raises(ValueError, match=r'--env wrong \(entry point examples.mailroom:Mailroom\) is a type, not a ChapterEnv'):
            envs.get_env('wrong')
        with pytest.raises(ValueError, match=r'the entry points mailroom, wrong \(agentrl.chapter_envs\)'):
            envs.get_env('calc')
        code, _, stderr = run_cli(['reproduce', '--env', 'wrong', '--smoke'])
        assert code == 2 and stderr.startswith('agentrl reproduce: error: --env wrong')


def test_help_names_the_import_path_form():
    import argparse
    from agentrl.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ('reproduce', 'sweep', 'show'):
        text = ' '.join(sub.choices[command].format_help().split())
        assert 'MODULE:NAME' in text and 'agentrl.chapter_envs' in text, command


def test_what_each_built_in_environment_has():
    assert envs.get_env('bugfix').lacks() == {} and envs.DEFAULT == 'bugfix'
    assert set(envs.get_env('wiring').lacks()) == {'bands'}
    assert envs.get_env('wiring').groups() == ['port', 'host', 'user', 'moved']
