"""What the commands print: a pass rate only where returns are 0 or 1 (else a mean return, named so, beside the
success rate), and output to a pipe or a file that keeps every table row and title on one line."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from agentrl.cli import _demo_table
from agentrl.experiments.chapter15.reproduction import Reproduction
from agentrl.recipes.outcomes import mean_return, success_rate, zero_one
from agentrl.runtime.terminal import PIPE_WIDTH, console

ROOT = Path(__file__).resolve().parents[1]


def episodes(*returns):
    return [SimpleNamespace(reward=r) for r in returns]


def test_success_rate_is_the_rate_and_pass_rate_s_mean_return_only_equals_it_for_0_1_returns():
    binary, partial = episodes(1.0, 0.0, 0.0, 1.0), episodes(-0.1, -0.1, 1.0, 0.5)
    assert zero_one(binary) and mean_return(binary) == success_rate(binary) == 0.5
    assert not zero_one(partial)
    assert mean_return(partial) == pytest.approx(0.325) and success_rate(partial) == 0.25
    assert mean_return(episodes(-0.1)) < 0 <= success_rate(episodes(-0.1))


def test_the_reproduction_s_sample_pass_counts_successes_and_equals_the_mean_return_bit_for_bit_on_0_1():
    for n in (4, 10, 64, 320):
        chapter = SimpleNamespace(cfg=SimpleNamespace(rft_samples=n // 2), train=[0, 1])
        for k in range(n + 1):
            returns = [1.0] * k + [0.0] * (n - k)
            row = {'rate': sum(returns) / n, 'kept': returns[:k]}
            assert Reproduction.round_pass(chapter, row) == row['rate']  # ==: the same float, not a close one
    chapter = SimpleNamespace(cfg=SimpleNamespace(rft_samples=2), train=[0, 1])
    row = {'rate': mean_return(episodes(1.0, 0.5, -0.1, 0.98)), 'kept': episodes(1.0)}
    assert Reproduction.round_pass(chapter, row) == 0.25 != row['rate']


def render(table) -> str:
    out = io.StringIO()
    Console(file=out, width=PIPE_WIDTH).print(table)
    return out.getvalue()


def test_the_demo_table_says_pass_rate_for_0_1_returns_and_mean_return_otherwise():
    env = SimpleNamespace(title='a game')
    binary = render(_demo_table(env, 2, ['g'], [('oracle', 'train', {'g': episodes(1.0, 0.0)})], True))
    assert 'mean return' not in binary and '0.50' in binary
    partial = render(_demo_table(env, 2, ['g'], [('random', 'train', {'g': episodes(-0.1, -0.1)})], False))
    assert 'mean return / success rate' in partial and '-0.10 / 0.00' in partial


def test_a_console_that_is_not_a_terminal_is_wide_unless_columns_says(monkeypatch):
    monkeypatch.delenv('COLUMNS', raising=False)
    assert console(file=io.StringIO()).width == PIPE_WIDTH
    monkeypatch.setenv('COLUMNS', '90')
    assert console(file=io.StringIO()).width == 90


def test_a_command_into_a_pipe_keeps_each_title_and_row_on_one_line():
    env = {k: v for k, v in os.environ.items() if k != 'COLUMNS'}
    env['PYTHONPATH'] = str(ROOT / 'src') + os.pathsep + env.get('PYTHONPATH', '')
    res = subprocess.run([sys.executable, '-m', 'agentrl.cli', 'demo', '--seeds', '1'], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].strip() == 'Scripted play on the BugFix gym (1 seeds per task, the hidden reward)'
    rows = [line for line in lines if line.startswith('│')]
    assert len(rows) == 8  # four players x two splits, a line each: no row folded onto a second line
    assert all(len(row.split('│')) == 10 for row in rows)  # policy, split, five groups, all
