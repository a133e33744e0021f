"""A small model trains and samples at one torch thread (``agentrl.runtime.threads``), and torch's count comes back after.

The module runs on 2 threads where a test says so (conftest puts every module on one): the library must lower it
for a small model inside its functions and restore it on return, on an exception too; a large model, the
``AGENTRL_THREADS`` variable and the ``agentrl`` command leave torch's count alone.
"""
from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

import pytest
import torch

import agentrl as arl
from agentrl.runtime import threads


@contextmanager
def torch_threads(n):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _no_setting(monkeypatch):
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)


class Big(torch.nn.Module):
    """A model with ``SMALL_PARAMS`` parameters (meta tensors: no memory), so not small."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(threads.SMALL_PARAMS, device='meta'))


def test_a_recipe_runs_a_small_model_at_one_thread_and_restores_the_count(train_oracle_demos, tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    seen = []
    with torch_threads(2):
        arl.sft_train(model, train_oracle_demos, tok, steps=2, batch_size=4, seed=0,
                      hook=lambda step: seen.append(torch.get_num_threads()), every=1)
        assert torch.get_num_threads() == 2
        rate, trajs = arl.pass_rate(model, arl.make_tasks('heldout')[:2], tok, 1, seed=0)
        assert torch.get_num_threads() == 2 and len(trajs) == 2
    assert seen == [1, 1]


def test_the_count_is_restored_when_the_function_raises(tok):
    model = arl.TinyAgent(tok.vocab_size)
    with torch_threads(2):
        with pytest.raises(ValueError, match='at least one trajectory'):
            arl.sft_train(model, [], tok, steps=1)
        assert torch.get_num_threads() == 2


def test_a_large_model_and_the_variable_leave_torch_alone(monkeypatch, tok):
    small = arl.TinyAgent(tok.vocab_size)
    assert threads.is_small(small) and not threads.is_small(Big()) and not threads.is_small(object())
    with torch_threads(2):
        with threads.model_threads(Big()):
            assert torch.get_num_threads() == 2
        with threads.model_threads(small):
            assert torch.get_num_threads() == 1
        monkeypatch.setenv(threads.THREADS_ENV, 'torch')
        with threads.model_threads(small):
            assert torch.get_num_threads() == 2
        monkeypatch.setenv(threads.THREADS_ENV, '3')
        with threads.model_threads(small):
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == 2
        monkeypatch.setenv(threads.THREADS_ENV, 'two')
        with pytest.raises(ValueError, match='AGENTRL_THREADS'):
            threads.small_threads()


def test_the_decorator_finds_the_model_by_keyword_and_refuses_generators(tok):
    @threads.small_model_threads
    def count(model, extra=0):
        return torch.get_num_threads() + extra

    with torch_threads(2):
        assert count(model=arl.TinyAgent(tok.vocab_size)) == 1 and count(Big(), extra=1) == 3
    with pytest.raises(TypeError, match='generator'):
        threads.small_model_threads(lambda model: (yield))


def test_the_command_leaves_threads_to_itself_and_puts_the_variable_back(monkeypatch):
    import agentrl.cli as cli
    seen = []
    args = argparse.Namespace(func=lambda a: seen.append(threads.small_threads()) or 0)
    monkeypatch.setattr(cli, 'build_parser', lambda: argparse.Namespace(parse_args=lambda argv: args))
    assert cli.main([]) == 0
    assert seen == [None] and threads.THREADS_ENV not in os.environ
