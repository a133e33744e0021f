"""How many threads torch gets while the library trains or samples a small model (a TinyAgent).

A TinyAgent at the chapter's size has 0.25 M parameters: its matrices are too small to split across
threads. With torch's default of one thread per core, every op waits for all of its threads, so a thread
that shares its core with other work holds up every op: the README's "Ten lines" took 67.6 s at two
threads and 17.1 s at one on a 2-core machine whose cores other work kept busy, with the same result.
On an idle machine a second thread saves little.

So the library's training and rollout functions (``sft_train``, ``train_rl``, ``pass_rate``,
``rollout_batch`` ...: every function decorated with ``small_model_threads``) run a model of fewer than
``SMALL_PARAMS`` parameters at ``SMALL_MODEL_THREADS`` threads and put torch's count back when they
return (or raise). A larger model (a pretrained one) runs at whatever torch is set to. The environment
variable ``AGENTRL_THREADS`` (``THREADS_ENV``) changes it, read at every call:

- unset or empty: ``SMALL_MODEL_THREADS`` (1);
- a number ``N``: ``N`` threads for a small model;
- ``torch``: leave torch's count alone (``torch.set_num_threads`` decides, as it does for a large model).

The ``agentrl`` command runs its subcommands with ``torch`` (``torch_decides``): they set their own thread
counts (``reproduce``: one thread per worker process, ``--threads``; ``bench --threads``), and worker
processes inherit the variable. This module imports nothing of the library; torch is imported when a
decorated function runs.
"""
from __future__ import annotations

import functools
import inspect
import os
from contextlib import contextmanager

THREADS_ENV = 'AGENTRL_THREADS'
"""The environment variable that sets a small model's thread count (a number) or leaves torch's (``torch``)."""
SMALL_MODEL_THREADS = 1
"""Threads for a small model when ``AGENTRL_THREADS`` is unset."""
SMALL_PARAMS = 10_000_000
"""A model with fewer parameters is small (the chapter's TinyAgent: 245,384; SmolLM2-135M: 135 M)."""


def small_threads() -> int | None:
    """The thread count a small model runs at (``AGENTRL_THREADS``), or None when torch's own count is kept.
    ValueError naming the variable for a value that is neither a number >= 1 nor ``torch``."""
    value = os.environ.get(THREADS_ENV, '').strip()
    if not value:
        return SMALL_MODEL_THREADS
    if value.lower() == 'torch':
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{THREADS_ENV}={value!r}: give a number of threads >= 1, or 'torch' to keep torch's count")
    return int(value)


def is_small(model) -> bool:
    """Whether ``model`` has fewer than ``SMALL_PARAMS`` parameters (no ``parameters()``: not small)."""
    params = getattr(model, 'parameters', None)
    if not callable(params):
        return False
    total = 0
    for p in params():
        total += p.numel()
        if total >= SMALL_PARAMS:
            return False
    return True


@contextmanager
def model_threads(model):
    """Run the block at ``small_threads()`` torch threads if ``model`` is small; torch's count is restored after."""
    n = small_threads()
    if n is None or not is_small(model):
        yield
        return
    import torch
    before = torch.get_num_threads()
    if n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def small_model_threads(fn):
    """Decorate a function whose first argument is the model: its body runs under ``model_threads(model)``."""
    if inspect.isgeneratorfunction(fn):
        raise TypeError(f'{fn.__name__} is a generator: its body would run after the thread count is restored')
    first = next(iter(inspect.signature(fn).parameters))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        model = args[0] if args else kwargs.get(first)
        with model_threads(model):
            return fn(*args, **kwargs)
    return wrapper


@contextmanager
def torch_decides():
    """Inside the block, and in processes started from it, the library leaves torch's thread count alone
    (``AGENTRL_THREADS=torch``) unless the variable is already set; it is put back afterwards."""
    had = THREADS_ENV in os.environ
    if not had:
        os.environ[THREADS_ENV] = 'torch'
    try:
        yield
    finally:
        if not had:
            os.environ.pop(THREADS_ENV, None)
