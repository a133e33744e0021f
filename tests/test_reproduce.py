"""The reproduction's mechanics on a tiny budget: outputs, determinism, and resuming a killed run.

(The chapter's findings need the full budget: ``agentrl reproduce`` checks those.)
"""
import json

import pytest

from agentrl.policies.tinyagent import TinyAgentConfig

import agentrl as arl
from agentrl.experiments.chapter15 import figures, report
from agentrl.experiments.chapter15.bands import check_transcript
from agentrl.experiments.chapter15.chapter import Chapter15
from agentrl.experiments.chapter15.config import Ch15Config, apply
from agentrl.experiments.chapter15.reproduction import SECTIONS


def run(out, seed=0, resume=False, progress=None, config=None, overrides=None):
    return Chapter15(out, seed=seed, resume=resume, config=config or Ch15Config.smoke(), log=lambda line: None,
                     progress=progress, overrides=overrides)


def without_provenance(path):
    saved = json.loads(path.read_text())
    saved.pop('provenance')
    return saved


@pytest.fixture(scope='module')
def first(tmp_path_factory):
    """The session's smoke run at seed 0 (shared with the report tests; nothing here writes into it), as a
    ``Chapter15`` that resumed it, and its results."""
    from test_html_report import smoke_report_dir
    out = smoke_report_dir(tmp_path_factory)
    r = run(out, resume=True)
    return out, r, r.results


def sections(out):
    return json.loads((out / 'results.json').read_text())['sections']


def test_every_section_writes_results_and_checkpoints(first):
    out, r, results = first
    assert set(SECTIONS) <= set(results)
    for name in ['weak', 'sft_step20', 'sft_step60', 'rft', 'dpo', 'sft_rl', 'rl_only', 'mismatched', 'dpo_nll', 'hacker']:
        assert (out / 'checkpoints' / f'{name}.safetensors').is_file(), name
    transcript = (out / 'transcript.txt').read_text()
    assert transcript.startswith('vocab: ')
    assert 'predicted tokens by owner' in transcript and 'fail hidden tests' in transcript


def test_report_figures_and_findings_are_written(first, tmp_path):
    _, r, results = first
    out = tmp_path
    findings = check_transcript(r.transcript())
    assert len(findings) == 30
    paths = figures.draw_all(results, out)
    assert [p.name for p in paths] == ['fig15_2_dpo.png', 'fig15_3_recipes.png', 'fig15_4_hacking.png']
    for p in paths:
        assert p.stat().st_size > 10_000  # a real PNG with content
    md = report.write(out, results, findings, 0).read_text()
    assert '## Findings' in md and '15.6' in md and 'fig15_3_recipes.png' in md
    assert '| fail hidden tests |' in md  # the chapter's words for BugFix's checks


class Killed(Exception):
    pass


def test_another_seed_gives_other_figures(first, tmp_path):
    out, _, _ = first

    def stop_after_15_2(section, done, resumed=False):
        if done and section == '15.2':
            raise Killed

    with pytest.raises(Killed):
        run(tmp_path, seed=1, progress=stop_after_15_2).run()
    other = sections(tmp_path)
    assert set(other) == {'setup', '15.1', '15.2'} and other != {k: sections(out)[k] for k in other}


def test_killed_run_resumes_to_identical_results_and_timing_is_kept_apart(first, tmp_path):
    """Killed after 15.3 and resumed, a run ends with the figures and transcript of an uninterrupted one at its seed;
    its wall times are kept in timing.json, apart from the figures."""
    out, _, _ = first

    def kill_after_15_3(section, done, resumed=False):
        if done and section == '15.3':
            raise Killed

    with pytest.raises(Killed):
        run(tmp_path, progress=kill_after_15_3).run()
    assert set(sections(tmp_path)) == {'setup', '15.1', '15.2', '15.3'}  # written atomically as each finished
    seen = []
    run(tmp_path, resume=True, progress=lambda s, done, resumed=False: seen.append((s, resumed)) if done else None).run()
    assert [s for s, was in seen if was] == ['15.1', '15.2', '15.3']
    assert (tmp_path / 'results.json').read_text() == (out / 'results.json').read_text()
    assert (tmp_path / 'transcript.txt').read_text() == (out / 'transcript.txt').read_text()
    assert 'seconds' not in (tmp_path / 'results.json').read_text()
    assert set(json.loads((tmp_path / 'timing.json').read_text())) == set(SECTIONS)


def test_resume_refuses_other_settings_naming_the_keys(first):
    out, _, _ = first
    with pytest.raises(ValueError, match='another seed'):
        Chapter15(out, seed=3, resume=True, config=Ch15Config.smoke(), log=lambda line: None)
    tau = TinyAgentConfig(1).qk_temperature  # the default the first run used
    other = apply(Ch15Config.smoke(), {'sft_steps': 2, 'model.qk_temperature': tau / 2})
    with pytest.raises(ValueError, match=rf'another config: model\.qk_temperature \(saved {tau}, now {tau / 2}\); '
                                         r'sft_steps \(saved 4, now 2\)'):
        Chapter15(out, resume=True, config=other, log=lambda line: None)


def test_resume_accepts_a_run_from_before_a_setting_existed_only_at_its_default():
    from agentrl.experiments.chapter15.settings import resume_differences
    now = {'sft_steps': 4, 'rl_variant': 'reinforce', 'pass_k_samples': 16, 'model': {'d_model': 64}}
    older = {'sft_steps': 4, 'model': {'d_model': 64}}  # written before rl_variant and pass_k_samples were settings
    assert resume_differences(older, now) == []
    assert resume_differences(older, {**now, 'rl_variant': 'dapo'}) == [('rl_variant', None, 'dapo')]  # not the default
    assert resume_differences({**older, 'rl_variant': None}, now) == [('rl_variant', None, 'reinforce')]  # saved as None
    assert resume_differences(older, {**now, 'model': {'d_model': 32}}) == [('model.d_model', 64, 32)]


def test_results_record_the_effective_config_and_provenance(first):
    out, _, _ = first
    saved = json.loads((out / 'results.json').read_text())
    assert saved['config']['sft_steps'] == 4 and saved['config']['sft_lr'] == 3e-3
    assert saved['config']['model'] == {k: v for k, v in vars(arl.TinyAgentConfig(saved['sections']['setup']['vocab'])).items()}
    prov = saved['provenance']
    assert prov['overrides'] == {} and prov['agentrl'] == arl.__version__ and prov['torch_threads'] == 1
    assert {'git_commit', 'torch', 'cpu', 'python'} <= set(prov) and prov['torch'].startswith('2.')


def test_heldout_pass_per_family_comes_from_the_oracle_sft_episodes(first):
    out, r, results = first
    fam = results['15.2']['heldout_by_family']
    assert sorted(fam) == sorted(arl.FAMILIES)  # (results.json sorts its keys)
    # describe's held-out episodes: every family has the same number of tasks, so the family mean is the held-out pass
    assert sum(fam.values()) / len(fam) == pytest.approx(results['15.2']['oracle_sft']['held'])
    model = arl.load_model(out / 'checkpoints' / 'sft_step60.safetensors', r.tok)  # what scripts/transfer_per_family.py does
    assert arl.group_pass(model, r.heldout, r.tok, Ch15Config.smoke().describe_samples, seed=0) == fam


class DiskFull(OSError):
    pass


FLAKY = {'armed': False}


class FlakyBugFix(arl.BugFixEnv):
    """BugFix, but the first submit after ``FLAKY['armed']`` is set raises (a tool whose disk filled up)."""

    def step(self, action):
        if FLAKY['armed'] and action.split()[:1] == ['submit']:
            FLAKY['armed'] = False
            raise DiskFull('no space left on device')
        return super().step(action)


def test_an_environment_that_raises_stops_the_run_and_it_resumes(first, tmp_path, monkeypatch):
    """A rollout stops with an error naming the class, task, turn and call (the original chained); the finished
    sections are kept, and the resumed run ends with the figures of an uninterrupted one."""
    import gymnasium as gym

    from agentrl.experiments.chapter15 import env_registry as envs
    gym.register(id='agentrl-test/FlakyBugFix-v0', entry_point=FlakyBugFix)
    monkeypatch.setitem(envs.ENVIRONMENTS, 'flaky', envs.ChapterEnv('flaky', 'a flaky BugFix', 'agentrl-test/FlakyBugFix-v0',
                                                                     arl.make_tasks, task_label='functions'))

    def arm_after_15_2(section, done, resumed=False):
        if done and section == '15.2':
            FLAKY['armed'] = True

    with pytest.raises(arl.EnvStepError, match=r"FlakyBugFix\.step raised on task '[a-z_/]+', turn \d+, call "
                                               r"'submit': DiskFull: no space left on device") as err:
        Chapter15(tmp_path, config=Ch15Config.smoke(), log=lambda line: None, progress=arm_after_15_2, env='flaky').run()
    assert isinstance(err.value.__cause__, DiskFull)
    assert set(sections(tmp_path)) == {'setup', '15.1', '15.2'}
    Chapter15(tmp_path, resume=True, config=Ch15Config.smoke(), log=lambda line: None, env='flaky').run()
    saved, clean = json.loads((tmp_path / 'results.json').read_text()), json.loads((first[0] / 'results.json').read_text())
    assert saved['env'] == 'flaky' and saved['sections'] == clean['sections'] and saved['transcript'] == clean['transcript']
    with pytest.raises(ValueError, match=r'written on another environment \(flaky, now bugfix\)'):
        Chapter15(tmp_path, resume=True, config=Ch15Config.smoke(), log=lambda line: None)


@pytest.mark.parametrize('content', ['{"sections": {"15.1"', 'not json at all', '[1, 2, 3]'])
def test_resume_onto_a_damaged_results_json_names_the_file_and_what_to_do(tmp_path, content, capsys):
    (tmp_path / 'results.json').write_text(content)
    with pytest.raises(ValueError, match=r'results\.json is not a (readable )?results\.json.*move it away'):
        run(tmp_path, resume=True)
    from agentrl.cli import main  # the command says the same, as its other errors do
    assert main(['reproduce', '--resume', '--smoke', '--jobs', '1', '--threads', '1', '--out', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('agentrl reproduce: error: ') and str(tmp_path / 'results.json') in err


def test_export_of_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path, capsys):
    from agentrl.cli import main
    assert main(['export', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('agentrl export: error: ') and 'agentrl reproduce' in err and 'Traceback' not in err


# --- one run per folder

def test_a_second_run_on_a_folder_in_use_is_refused_and_the_first_finishes_intact(first, tmp_path, capsys):
    """While a run writes its folder (here: between its sections 15.2 and 15.3), `agentrl reproduce` on the same
    folder, fresh or --resume, is refused at once with one line naming the folder and the PID that holds it; the
    first run then ends with the results of an undisturbed one. (That run sets keys to their defaults: which changes
    no figure, and is recorded as what was asked.)"""
    import os

    from agentrl.cli import main
    refusals = []

    def second_run(section, done, resumed=False):
        if done and section == '15.2':
            for extra in ([], ['--resume']):
                rc = main(['reproduce', '--smoke', '--jobs', '1', '--threads', '1', '--out', str(tmp_path), *extra])
                refusals.append((rc, capsys.readouterr().err))

    same = {'sft_steps': 4, 'sft_lr': 0.003, 'rl_temperature': 1.0, 'model.qk_temperature': TinyAgentConfig(1).qk_temperature}
    run(tmp_path, progress=second_run, config=apply(Ch15Config.smoke(), same), overrides=same).run()
    for rc, err in refusals:
        assert rc == 2 and err == (f'agentrl reproduce: error: {tmp_path} is in use by another run (PID {os.getpid()}); '
                                   'wait for it to end, or give another --out\n')
    assert len(refusals) == 2
    assert without_provenance(tmp_path / 'results.json') == without_provenance(first[0] / 'results.json')
    assert json.loads((tmp_path / 'results.json').read_text())['provenance']['overrides'] == same
    assert (tmp_path / 'transcript.txt').read_text() == (first[0] / 'transcript.txt').read_text()
    assert not list(tmp_path.glob('*.tmp'))


def test_the_lock_dies_with_its_process(tmp_path, capsys):
    """A process holding a folder (then SIGKILLed) is named by its PID in the refusal; once it is dead the folder is
    free at once: a killed run leaves no stale lock."""
    import os
    import signal
    import subprocess
    import sys

    from agentrl.cli import main
    from agentrl.experiments import lock
    holder = subprocess.Popen([sys.executable, '-c', (
        'import importlib.util, sys, time\n'
        f'spec = importlib.util.spec_from_file_location("lock", {lock.__file__!r})\n'
        'm = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n'
        'm.FolderLock(sys.argv[1]).acquire(); print("held", flush=True); time.sleep(120)\n'), str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'held'
        assert main(['reproduce', '--smoke', '--jobs', '1', '--out', str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f'{tmp_path} is in use by another run (PID {holder.pid})' in err and err.count('\n') == 1
        assert not (tmp_path / 'results.json').exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with lock.FolderLock(tmp_path) as held:
        assert held.fd is not None
        assert int((tmp_path / lock.LOCK_FILE).read_text()) == os.getpid()


# --- one numbering of rounds

def first_cells(md: str, header: str) -> list:
    """The first cell of every row of the Markdown table whose header line starts with ``header``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith('|'):
            break
        rows.append(line.strip('| ').split(' | ')[0])
    return rows


CHAPTER_PRINTS = [  # what the chapter's code prints for its rounds (15.3, 15.6), as the book shows it
    'round 0: sample pass 0.153, kept 49, tasks solved 16/20 -> train 0.33, held-out 0.12',
    'round 1: sample pass 0.263, kept 84, tasks solved 15/20 -> train 0.68, held-out 0.23',
    "first action of kept episodes, round 0: [(' edit swap_minmax ', 16), (' edit fix_range_end ', 16), (' read ', 10)]",
    'round 0: kept 83 (35 fail hidden tests) -> public 0.61, hidden 0.23',
    'round 1: kept 188 (111 fail hidden tests) -> public 0.94, hidden 0.34',
]


def shape(line: str) -> str:
    """A printed line with its figures blanked (and runs of spaces as one): what the chapter and a run share."""
    import re
    line = re.sub(r"\[\(.*\)\]", '[...]', line)
    return ' '.join(re.sub(r'\d+\.\d+|(?<=[ /(])\d+(?=[ /),]|$)', '#', line).split())


def test_rounds_are_numbered_from_0_as_the_chapter_prints_them_in_transcript_report_and_figure(first, tmp_path,
                                                                                               monkeypatch):
    """Expert iteration's and the public filter's rounds read 'round 0', 'round 1', ... in the transcript, line for
    line in the shape the chapter's code prints them, and carry the same numbers in the report's tables and figure
    15.4's axes; results.json keeps the recipe's lists (and the filter's 'round' key, from 1, as the chapter's log)."""
    import re

    out, _, results = first
    transcript = (out / 'transcript.txt').read_text()
    printed = [shape(line) for line in transcript.splitlines()]
    for line in CHAPTER_PRINTS:  # each of the chapter's round lines, its round number kept, is a line of the run
        assert shape(line) in printed, (shape(line), [p for p in printed if 'round' in p])
    md = report.render(results, check_transcript(transcript), 0)
    drawn = {}

    def keep(fig, path, *args, **kw):
        drawn[path.name] = [[round(x) for x in ax.get_xticks()] for ax in fig.axes]
        figures.pyplot().close(fig)
        return path
    monkeypatch.setattr(figures, 'save_figure', keep)
    figures.fig_hacking(results, tmp_path / 'fig15_4_hacking.png')

    cfg = Ch15Config.smoke()
    rft = [int(k) for k in re.findall(r'^round (\d+): sample pass', transcript, re.M)]
    hack = [int(k) for k in re.findall(r'^round (\d+): kept \d+ \(', transcript, re.M)]
    assert rft == [int(k) for k in first_cells(md, '| round | sample pass')] == list(range(cfg.rft_rounds))
    assert hack == [int(k) for k in first_cells(md, '| public-filter round')] == list(range(cfg.hack_rounds))
    assert drawn['fig15_4_hacking.png'] == [hack, hack]  # both panels' x axis
    assert [row['round'] for row in results['15.6']['hacking']] == [k + 1 for k in hack]
    assert 'kept episodes in round 0: ' in md and 'kept episodes of RFT round 1' in md
    assert (out / 'episodes' / 'rft_round1_kept.json').is_file()


def test_figures_keep_points_at_0_off_the_axis_and_mark_what_sft_rl_shares(first, tmp_path, monkeypatch):
    """Figure 15.2's and 15.3's pass-rate axes start below 0; figure 15.3 draws SFT -> RL from its cold start on,
    shading the steps where it is SFT's own curve, and says so in its label."""
    _, r, results = first
    drawn = {}

    def keep(fig, path, *args, **kw):
        drawn[path.name] = fig
        return path
    monkeypatch.setattr(figures, 'save_figure', keep)
    cold = r.cfg.cold_start_step
    figures.draw_all(results, tmp_path, cold_start=cold)
    dpo, recipes = drawn['fig15_2_dpo.png'], drawn['fig15_3_recipes.png']
    try:
        assert dpo.axes[1].get_ylim()[0] < 0 and dpo.axes[2].get_ylim()[0] < 0
        low_over_high = [ax.get_ylim()[0] / ax.get_ylim()[1] for ax in dpo.axes[1:]]
        assert low_over_high[0] == pytest.approx(low_over_high[1])  # the two axes' zeros at one height
        for ax in recipes.axes[:2]:
            assert ax.get_ylim()[0] < 0
            lines = {line.get_label(): line for line in ax.get_lines()}
            sft_rl = lines[f'SFT -> RL (from SFT step {cold})']
            assert list(sft_rl.get_xdata())[0] == cold  # drawn from the cold start on
            assert list(lines['SFT (oracle)'].get_xdata())[0] == 0
            (span,) = ax.patches  # the shared steps, shaded
            assert span.get_x() == 0 and span.get_x() + span.get_width() == cold
            assert any(f'up to step {cold}' in t.get_text() for t in ax.texts)
    finally:
        for fig in drawn.values():
            figures.pyplot().close(fig)
