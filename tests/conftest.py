"""Shared, session-scoped objects for the test suite: tasks, tokenizer, scripted play, small models.

The machine these tests run on has 2 cores shared with other work. Tiny models run far faster on
one intra-op thread than on two contended ones (measured: a small SFT step went from ~0.5 s with
2 contended threads to ~0.01 s with 1), so every test module but the benchmark's, and the
fixtures that train or sample, run torch on one thread; the previous setting is restored
afterwards, so the benchmark sees the process default.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import agentrl as arl

SEEDS = range(4)
DEFAULT_THREAD_MODULES = {'test_bench'}

SLOWEST_FIRST = ('test_resume_kill', 'test_sweep', 'test_docs', 'test_reproduce', 'test_exercises', 'test_compare', 'test_hf',
                 'test_own_env', 'test_export', 'test_reproduce_jobs', 'test_chapter_envs', 'test_browser', 'test_rl_sweep',
                 'test_trl', 'test_sampler', 'test_wiring_chapter', 'test_config', 'test_real_model')
"""The modules that take longest (``--durations`` on a quiet 2-core machine), longest first. ``make test`` gives each
worker a whole module (``--dist loadfile``) in this order, so the long ones start first and the short ones fill the end
(by pytest-xdist's default, the modules with the most tests go first, and the longest module ran alone at the end)."""


def pytest_collection_modifyitems(items):
    """Every module's tests, in the order of ``SLOWEST_FIRST`` and then as collected (each module's own order kept)."""
    rank = {name: k for k, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, len(rank)))


def once_per_session(tmp_path_factory, name: str, make) -> Path:
    """The folder ``make(folder)`` fills, made once per test session however many pytest-xdist workers ask for it: the
    first to ask makes it under a file lock in the session's shared temporary folder; the others wait, then read it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        root = root.parent  # the workers' folders (popen-gw0, ...) share this one
    folder, done = root / name, root / f'{name}.done'
    with open(root / f'{name}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when its process dies
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            make(folder)
            done.touch()
    return folder


@contextmanager
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope='module')
def _one_torch_thread(request):
    if Path(str(request.fspath)).stem not in DEFAULT_THREAD_MODULES:
        with one_thread():
            yield
    else:
        yield


@pytest.fixture(scope='session')
def tasks():
    return arl.make_tasks('all')


@pytest.fixture(scope='session')
def train_tasks():
    return arl.make_tasks('train')


@pytest.fixture(scope='session')
def heldout_tasks():
    return arl.make_tasks('heldout')


@pytest.fixture(scope='session')
def tok(tasks):
    return arl.build_tokenizer(tasks)


@pytest.fixture(scope='session')
def oracle_demos(tasks, tok):
    """One oracle episode per task (all 30), hidden reward."""
    return [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, tok) for t in tasks]


@pytest.fixture(scope='session')
def train_oracle_demos(train_tasks, tok):
    return [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, tok) for t in train_tasks]


@pytest.fixture(scope='session')
def blind_trajs(train_tasks, tok):
    """Blind play: seeds 0-3 x the 20 train tasks (80 episodes), hidden reward."""
    return [arl.scripted_rollout(arl.scripted_policy('blind', seed=s), arl.BugFixEnv(), t, tok)
            for s in SEEDS for t in train_tasks]


@pytest.fixture(scope='session')
def random_trajs(train_tasks, tok):
    """Random play: seeds 0-3 x the 20 train tasks (80 episodes), hidden reward."""
    return [arl.scripted_rollout(arl.scripted_policy('random', seed=s), arl.BugFixEnv(), t, tok)
            for s in SEEDS for t in train_tasks]


SMALL = dict(d_model=48, n_layers=2, n_heads=4)
"""A small TinyAgent shape: every code path of the default model (2 layers, rotary, cache) at a fraction of the cost."""


@pytest.fixture(scope='session')
def fresh_model(tok):
    """An untrained default-size TinyAgent (seeded)."""
    torch.manual_seed(0)
    return arl.TinyAgent(tok.vocab_size)


@pytest.fixture(scope='session')
def trained_model(tok, blind_trajs, random_trajs):
    """A small TinyAgent after 30 SFT steps on blind + random play: it writes well-formed multi-turn episodes.

    Tests must not train it further (it is shared); they may only sample from it.
    """
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size, **SMALL)
    with one_thread():
        arl.sft_train(model, blind_trajs + random_trajs, tok, steps=30, batch_size=16, seed=0)
    model.eval()
    return model


@pytest.fixture(scope='session')
def fresh_rollouts(fresh_model, tasks, tok):
    """One episode per task (30) sampled from the untrained model."""
    gen = torch.Generator().manual_seed(0)
    with one_thread():
        return arl.rollout_batch(fresh_model, [arl.BugFixEnv() for _ in tasks], tasks, tok, generator=gen)


@pytest.fixture(scope='session')
def trained_rollouts(trained_model, tasks, tok):
    """Two episodes per task (60) sampled from the briefly trained model."""
    batch = [t for t in tasks for _ in range(2)]
    gen = torch.Generator().manual_seed(1)
    with one_thread():
        return arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch], batch, tok, generator=gen)


def script_main(name):
    """``scripts/NAME.py``'s ``main``, loaded in this process (running a script as a subprocess starts torch again)."""
    import importlib.util
    path = Path(__file__).resolve().parent.parent / 'scripts' / f'{name}.py'
    spec = importlib.util.spec_from_file_location(f'script_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def least_settings() -> dict:
    """Every chapter setting at its least value at once (one step, two samples, a one-dimensional model, ...): a key with
    an open limit (> 0) keeps its default, ``model.block_size`` the environment's least. A run at them takes a few
    seconds: for tests of what a command writes and how, whose figures mean nothing."""
    from agentrl.experiments.chapter15 import config as C
    low = {key: bound.low for key, bound in C.RANGES.items()
           if not bound.above and not bound.choices and not isinstance(bound.low, str)}
    low.update({'cold_start_step': 1, 'model.block_size': C.values(C.Ch15Config())['model.block_size']})
    return low


def least_args() -> list:
    """``least_settings()`` as a command line's ``--set KEY=VALUE`` arguments."""
    return [arg for key, value in least_settings().items() for arg in ('--set', f'{key}={value}')]


def exit_code(main, argv) -> int:
    """``main(argv)`` as a command's exit status (argparse's ``SystemExit`` included); torch's thread count is kept."""
    before = torch.get_num_threads()
    try:
        return main(argv) or 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        torch.set_num_threads(before)
