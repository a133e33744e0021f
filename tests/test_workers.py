"""The runner of ``reproduce --jobs``, ``agentrl sweep`` and ``exercise N --seeds`` (``experiments/workers.py``).

A worker that dies (``os._exit``, SIGKILL) fails only its own job, whatever else runs beside it; at most N jobs run,
in the order submitted; leaving on an error or SIGTERM ends the workers. The jobs are tiny functions of this module
(the workers import it), standing in for a section or a seed; the callers' own paths run on them too.
"""
import io
import os
import signal
import time
from argparse import Namespace
from types import SimpleNamespace

import pytest

from agentrl.experiments.workers import Runner, WorkerDied

LIGHT = ('agentrl.experiments.workers',)


@pytest.fixture(autouse=True, scope='module')
def _forkserver():
    """The forkserver started before the timings below (preloading only this light module if no test started it)."""
    from multiprocessing import forkserver

    from agentrl.experiments.workers import process_context
    if process_context(LIGHT).get_start_method() == 'forkserver':
        forkserver.ensure_running()


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def exit_after(seconds, code):
    time.sleep(seconds)
    os._exit(code)


def kill_after(seconds):
    time.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_dead_worker_fails_only_its_own_job():
    with Runner(4, LIGHT) as runner:
        jobs = [runner.submit('ok', sleep_then, 1.0, 'done'), runner.submit('exit', exit_after, 0.2, 3),
                runner.submit('kill', kill_after, 0.2), runner.submit('raise', int, 'x')]
        finished = list(runner.as_finished())
    assert sorted(j.key for j in finished) == sorted(j.key for j in jobs) and finished[-1].key == 'ok'
    assert jobs[0].result() == 'done'
    with pytest.raises(WorkerDied, match=r'the worker process exited with code 3 before its job returned'):
        jobs[1].result()
    with pytest.raises(WorkerDied, match=r'was killed by signal 9 \(Killed\) before its job returned; out of memory\?'):
        jobs[2].result()
    with pytest.raises(ValueError, match='invalid literal'):  # the job's own exception
        jobs[3].result()


def test_at_most_size_jobs_run_in_the_order_submitted():
    started = []
    with Runner(2, LIGHT, on_start=lambda job: started.append((job.key, job.slot, len(runner.running)))) as runner:
        for i in range(5):
            runner.submit(i, sleep_then, 0.3 if i else 1.5, i * i)
        results = {job.key: job.result() for job in runner.as_finished()}
    assert results == {i: i * i for i in range(5)}
    assert [k for k, _, _ in started] == list(range(5)) and max(n for _, _, n in started) == 2
    assert started[:3] == [(0, 1, 1), (1, 2, 2), (2, 2, 2)]  # job 1 ends first: job 2 takes its worker


def test_leaving_on_an_error_or_sigterm_ends_the_workers():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), Runner(2, LIGHT) as runner:
        jobs = [runner.submit(i, time.sleep, 60) for i in range(3)]
        raise KeyboardInterrupt
    assert not any(j.proc.is_alive() for j in jobs[:2]) and jobs[2].proc is None  # the third never started
    assert not runner.running and not runner.queue
    with pytest.raises(SystemExit), Runner(1, LIGHT) as runner:
        job = runner.submit('a', time.sleep, 60)
        os.kill(os.getpid(), signal.SIGTERM)
        runner.wait(10)
    assert not job.proc.is_alive() and not runner.running
    assert signal.getsignal(signal.SIGTERM) is before


# --- the callers

def seed_dies_on_1(number, out, seed, *rest):
    """Stands in for ``exercises.seeds.run_seed``: seed 1's worker dies while the others run."""
    if seed == 1:
        exit_after(0.3, 1)
    return sleep_then(1.0, {'seed': seed, 'seconds': 1.0, 'summary': f'seed {seed} ran'})


def test_an_exercise_seed_whose_worker_dies_fails_alone(tmp_path, monkeypatch):
    from rich.console import Console

    from agentrl.experiments.chapter15.config import Ch15Config
    from agentrl.experiments.exercises import seeds
    monkeypatch.setattr(seeds, 'run_seed', seed_dies_on_1)
    args = Namespace(seeds=[0, 1, 2], resume=False, workers=3, threads=1, source=None, policy='tiny')
    console = Console(file=io.StringIO(), width=200)
    state = seeds.run_all(SimpleNamespace(number=1), args, tmp_path, 'bugfix', Ch15Config.smoke(), {}, console)
    assert state[0]['status'] == state[2]['status'] == 'ok' and state[1]['status'] == 'failed'
    assert state[1]['error'] == 'WorkerDied: the worker process exited with code 1 before its job returned'
    assert 'seed 1 failed: WorkerDied' in console.file.getvalue() and 'seed 2 ran' in console.file.getvalue()


def section_dies_on_15_4(section, episodes, **settings):
    """Stands in for ``chapter15.parallel.run_section``: 15.3 is quick, 15.4's worker dies, the others take long."""
    if section == '15.4':
        kill_after(1.0)
    return sleep_then(0.1 if section == '15.3' else 60, {'results': {'ran': section}, 'lines': [], 'seconds': 0.1})


def test_a_section_whose_worker_dies_fails_the_run_naming_it(tmp_path, monkeypatch):
    from agentrl.experiments.chapter15 import parallel
    from agentrl.experiments.chapter15.config import Ch15Config
    monkeypatch.setattr(parallel, 'run_section', section_dies_on_15_4)
    todo, seen, merged = ['15.3', '15.4', '15.5', '15.6'], [], []
    chapter = SimpleNamespace(jobs=2, depends={s: () for s in todo}, cfg=Ch15Config.smoke(), worker_threads=1,
                              sections=tuple(todo), provenance={}, policy='tiny', env=SimpleNamespace(name='bugfix'),
                              logdir=None, out=tmp_path, seed=0,
                              progress=lambda s, done, worker: seen.append((s, worker)),
                              _merge=lambda s, results, lines, seconds, worker: merged.append((s, worker, results)))
    order = parallel.plan(todo, 2, chapter.depends)
    assert order[:2] == ['15.3', '15.4']
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match=r'section 15\.4: the worker process was killed by signal 9'):
        parallel.run_sections(chapter, todo)
    assert time.perf_counter() - t0 < 10  # the section still running was ended, not waited for
    assert merged == [('15.3', 1, {'ran': '15.3'})]  # finished before the death: merged
    assert seen == [('15.3', 1), ('15.4', 2), (order[2], 1)]  # the next took 15.3's worker; the last never started
