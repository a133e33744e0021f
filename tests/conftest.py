"""Shared, session-scoped objects for the test suite: tasks, tokenizer, scripted play, small models.

The machine these tests run on has 2 cores shared with other work. Tiny models run far faster on
one intra-op thread than on two contended ones (measured: a small SFT step went from ~0.5 s with
2 contended threads to ~0.01 s with 1), so every test module but the benchmark's, and the
fixtures that train or sample, run torch on one thread; the previous setting is restored
afterwards, so the benchmark sees the process default.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import agentrl as arl

SEEDS = range(4)
DEFAULT_THREAD_MODULES = {'test_bench'}


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


def exit_code(main, argv) -> int:
    """``main(argv)`` as a command's exit status (argparse's ``SystemExit`` included); torch's thread count is kept."""
    before = torch.get_num_threads()
    try:
        return main(argv) or 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        torch.set_num_threads(before)
