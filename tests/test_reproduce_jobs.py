"""``agentrl reproduce --jobs N``: the sections after 15.2 in worker processes give the figures of ``--jobs 1``
at the same thread count, resume per section, and a bad ``--jobs`` fails fast (smoke budget)."""
import itertools
import json
import shutil
import subprocess
import sys
import time

import pytest
from conftest import exit_code

from agentrl.cli import main
from agentrl.experiments.chapter15 import parallel
from agentrl.experiments.chapter15.chapter import Chapter15
from agentrl.experiments.chapter15.config import Ch15Config
from agentrl.experiments.chapter15.reproduction import SECTIONS, dependencies

LATER = ('15.3', '15.4', '15.5', '15.6')


def run(out, jobs, resume=False, progress=None):
    return Chapter15(out, resume=resume, config=Ch15Config.smoke(), log=lambda line: None, progress=progress,
                     jobs=jobs, worker_threads=1)


def saved(out):
    return json.loads((out / 'results.json').read_text())


def episodes(out):
    return {p.name: p.read_text() for p in sorted((out / 'episodes').glob('*.json'))}


@pytest.fixture(scope='module')
def serial(tmp_path_factory):
    """The reference: every section in one process, on one torch thread: the session's smoke run at seed 0 (shared
    with the report tests; read only here). Its episodes are the run's own: at seed 0 the weak base leaves preference
    pairs, so no scripted pairs replace its dpo_pairs.json."""
    from test_html_report import smoke_report_dir
    return smoke_report_dir(tmp_path_factory)


def test_cli_jobs_2_gives_the_figures_of_jobs_1(serial, tmp_path, capsys):
    assert exit_code(main, ['reproduce', '--smoke', '--quiet', '--threads', '1', '--jobs', '2', '--out', str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    assert saved(tmp_path)['sections'] == saved(serial)['sections']
    assert (tmp_path / 'transcript.txt').read_text() == (serial / 'transcript.txt').read_text()
    assert episodes(tmp_path) == episodes(serial)  # written by the workers, from the same checkpoints
    prov = saved(tmp_path)['provenance']
    assert prov['jobs'] == 2 and prov['worker_torch_threads'] == 1 and prov['torch_threads'] == 1
    assert saved(serial)['provenance']['jobs'] == 1 and 'worker_torch_threads' not in saved(serial)['provenance']
    assert set(json.loads((tmp_path / 'timing.json').read_text())) == set(SECTIONS)
    out = ' '.join(stdout.split())  # rich wraps long lines
    for section in LATER:  # each later section says where it ran, when it starts and when it is done
        assert f'{section} ' in out and 'started on worker' in out
    assert 'done on worker 1 in' in out and 'done on worker 2 in' in out and 'bands hold' in out


def test_probe_recipes_figures_equal_the_reproductions(serial, tmp_path):
    """scripts/probe_recipes.py reruns part of a reproduction: its four figures are that run's, to the bit."""
    from pathlib import Path  # a subprocess: the script's seeds run in a process pool, which must import the script
    script = Path(__file__).resolve().parents[1] / 'scripts' / 'probe_recipes.py'
    res = subprocess.run([sys.executable, str(script), '--smoke', '--seeds', '0', '--jobs', '1', '--json',
                          str(tmp_path / 'probe.json')], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert 'holds SFT step 20' in res.stdout and 'RL only' in res.stdout
    (probe,) = json.loads((tmp_path / 'probe.json').read_text())['seeds']
    ref, cold_start = saved(serial)['sections'], Ch15Config.smoke().cold_start_step
    step20 = [row[1:] for row in ref['15.2']['hist_sft'] if row[0] == cold_start]
    assert [probe['sft_step20']] == step20
    assert probe['families'] == ref['15.2']['heldout_by_family']
    assert probe['sft_rl'] == ref['15.5']['curves']['SFT -> RL'][-1][1:]
    assert probe['rl_only'] == ref['15.5']['curves']['RL only'][-1][1:]


def test_cli_jobs_default_threads_are_the_same_in_every_process(tmp_path, monkeypatch):
    """Without --threads, 15.1 and 15.2 run on the workers' thread count too, so every section runs on one count. (The
    run stops as it starts: what is checked is the count it starts on and the provenance it would write.)"""
    import torch

    class Started(Exception):
        pass

    seen = {}

    def started(self):
        seen.update(here=torch.get_num_threads(), provenance=self.provenance)
        raise Started
    monkeypatch.setattr(Chapter15, 'run', started)
    monkeypatch.setattr(parallel, 'prestart', lambda: None)  # no forkserver for workers that never start
    before = torch.get_num_threads()
    torch.set_num_threads(parallel.worker_threads(2) + 1)  # not the workers' count: the command must set it
    try:
        with pytest.raises(Started):
            main(['reproduce', '--smoke', '--quiet', '--jobs', '2', '--out', str(tmp_path)])
    finally:
        torch.set_num_threads(before)
    prov = seen['provenance']
    assert prov['jobs'] == 2 and prov['torch_threads'] == prov['worker_torch_threads'] == seen['here'] == parallel.worker_threads(2)


class Killed(Exception):
    pass


def test_interrupted_parallel_run_resumes_per_section(serial, tmp_path):
    finished = []

    def kill_after_first(section, done, resumed=False, worker=None, seconds=None):
        if done and worker is not None:
            finished.append(section)
            raise Killed  # like Ctrl-C: the other worker is ended, mid-section

    with pytest.raises(Killed):
        run(tmp_path, jobs=2, progress=kill_after_first).run()
    assert len(finished) == 1 and finished[0] in LATER
    assert set(saved(tmp_path)['sections']) == {'setup', '15.1', '15.2', finished[0]}  # written as it finished
    assert not list(tmp_path.glob('*.tmp'))
    seen = []
    run(tmp_path, jobs=2, resume=True,
        progress=lambda s, done, resumed=False, worker=None, seconds=None: seen.append((s, resumed, worker)) if done else None).run()
    assert [s for s, was, _ in seen if was] == ['15.1', '15.2', finished[0]]
    assert sorted(s for s, _, w in seen if w) == sorted(set(LATER) - {finished[0]})  # only the rest ran again
    assert saved(tmp_path)['sections'] == saved(serial)['sections']
    assert (tmp_path / 'transcript.txt').read_text() == (serial / 'transcript.txt').read_text()


@pytest.mark.parametrize('bad', ['0', 'x', '-2', '1.5'])
def test_bad_jobs_is_refused_fast(bad, tmp_path):
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, '-m', 'agentrl.cli', 'reproduce', '--smoke', '--jobs', bad, '--out', str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert 'argument --jobs: expected a positive integer' in res.stderr and repr(bad) in res.stderr
    assert time.perf_counter() - t0 < 30 and not (tmp_path / 'results.json').exists()


@pytest.mark.parametrize('bad', [0, -2, 1.5, '2', True])
def test_bad_jobs_is_refused_by_the_api(bad, tmp_path):
    with pytest.raises(ValueError, match='jobs must be a positive int'):
        Chapter15(tmp_path, config=Ch15Config.smoke(), log=lambda line: None, jobs=bad)
    assert not (tmp_path / 'results.json').exists()


DEPS = dependencies(Chapter15, SECTIONS + ('beyond',))


def test_plan_never_deadlocks_and_balances_the_chapter():
    todo = list(LATER)
    # 15.5 and 15.6 wait (at their end) for 15.3 / 15.4: two of them first would hold both workers forever
    assert not parallel.safe(['15.5', '15.6', '15.3', '15.4'], 2, DEPS)
    assert parallel.safe(['15.6', '15.3', '15.4', '15.5'], 2, DEPS) and parallel.safe(todo, 1, DEPS)
    assert parallel.simulate(['15.5', '15.6', '15.3', '15.4'], 2, DEPS) == float('inf')
    for jobs in (1, 2, 3, 4):
        order = parallel.plan(todo, jobs, DEPS)
        assert sorted(order) == todo and parallel.safe(order, jobs, DEPS)
    assert parallel.plan(todo, 1, DEPS) == todo
    two = parallel.plan(todo, 2, DEPS)
    assert parallel.simulate(two, 2, DEPS) == min(parallel.simulate(o, 2, DEPS) for o in
                                                  itertools.permutations(todo) if parallel.safe(o, 2, DEPS))
    assert parallel.simulate(two, 2, DEPS) < 0.55 * parallel.simulate(todo, 1, DEPS)
    ext = parallel.plan(todo + ['beyond'], 2, DEPS)
    assert ext.index('beyond') < 3  # the longest section starts early: it only reads the others at its end
    assert parallel.worker_threads(2, 3) == 3 and parallel.worker_threads(10 ** 6) == 1


def test_the_dependencies_are_the_sections_own_declarations():
    """Each section method's @reads is its entry of the table --jobs plans on; every _after read of the chapter is
    declared (a jobs=1 run would raise otherwise: see test_an_undeclared_read_fails_at_once_naming_both)."""
    assert DEPS == {'15.1': (), '15.2': (), '15.3': (), '15.4': (), '15.5': ('15.2', '15.3'), '15.6': ('15.3', '15.4'),
                    'beyond': ('15.3', '15.4', '15.5', '15.6')}
    with pytest.raises(ValueError, match=r"no dependency entry for section\(s\) \['extra'\]"):
        parallel.plan(todo=list(LATER) + ['extra'], jobs=2, deps=DEPS)


def test_a_section_without_a_declaration_fails_at_once_naming_it(tmp_path, monkeypatch):
    def s15_5(self):  # as if a new section had been written without @reads
        return {}
    monkeypatch.setattr(Chapter15, 's15_5', s15_5)
    with pytest.raises(ValueError, match=r'section 15\.5 \(Chapter15\.s15_5\) declares no reads: put @reads'):
        run(tmp_path, jobs=2)
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_an_undeclared_read_fails_at_once_naming_both(serial, tmp_path, monkeypatch):
    """A section that reads one it does not declare raises at its read, even with jobs=1 (where the read would
    succeed, and only a parallel run would wait for a section not scheduled before it)."""
    from agentrl.experiments.chapter15.sections import reads

    @reads('15.3')
    def s15_4(self):
        return self._after('15.2')
    monkeypatch.setattr(Chapter15, 's15_4', s15_4)
    folder = tmp_path / 'run'
    shutil.copytree(serial, folder)  # the shared run stays as it was
    r = Chapter15(folder, resume=True, config=Ch15Config.smoke(), log=lambda line: None)
    with pytest.raises(RuntimeError, match=r"section 15\.4 reads section 15\.2 but its @reads does not declare it: "
                                           r"add '15\.2' to the @reads above s15_4"):
        r.run_section('15.4')
    assert r.running is None


def test_waiting_for_a_section_the_run_does_not_run_fails_at_once(tmp_path):
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match=r'waiting for section beyond, which this run does not run'):
        parallel.wait_for(tmp_path / 'results.json', 0, None, 'beyond', scheduled=SECTIONS)
    assert time.perf_counter() - t0 < 1
