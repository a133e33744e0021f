"""The sandbox: hostile or broken sources are failed tests, fast, never a crash or a hang."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from agentrl.envs.bugfix.sandbox import run_function

TESTS = [((1,), 1), ((2,), 2), ((3,), 3)]

HOSTILE = {
    'infinite_loop': 'def f(n):\n    while True:\n        pass\n',
    'infinite_loop_toplevel': 'while True:\n    pass\ndef f(n):\n    return n\n',
    'deep_recursion': 'def f(n):\n    return f(n + 1)\n',
    'huge_power': 'def f(n):\n    return 2 ** 10 ** 10\n',
    'huge_power_toplevel': 'x = 2 ** 10 ** 10\ndef f(n):\n    return n\n',
    'huge_shift': 'def f(n):\n    return 1 << 10 ** 10\n',
    'huge_sequence': 'def f(n):\n    return [0] * 10 ** 9\n',
    'raises': 'def f(n):\n    return n // 0\n',
    'raises_name_error': 'def f(n):\n    return undefined_name\n',
    'import': 'import os\ndef f(n):\n    return n\n',
    'import_inside': 'def f(n):\n    import os\n    return n\n',
    'open': "def f(n):\n    open('x')\n    return n\n",
    'attribute': 'def f(n):\n    ().__class__\n    return n\n',
    'attribute_escape': 'def f(n):\n    return ().__class__.__base__.__subclasses__()\n',
    'dunder_name': 'def f(n):\n    return __builtins__\n',
    'exec': "def f(n):\n    exec('x = 1')\n    return n\n",
    'lambda': 'f = lambda n: n\n',
    'syntax_error': 'def f(n) return n',
    'missing_function': 'def g(n):\n    return n\n',
    'empty': '',
}


def test_identity_source_passes():
    """The sandbox really runs code: a correct function passes, a wrong answer or wrong type fails."""
    assert run_function('def f(n):\n    return n\n', 'f', TESTS) == [True, True, True]
    assert run_function('def f(n):\n    return n + 1\n', 'f', TESTS) == [False, False, False]
    assert run_function('def f(n):\n    return n == 1\n', 'f', [((1,), True), ((1,), 1)]) == [True, False]


@pytest.mark.parametrize('name', list(HOSTILE))
def test_hostile_source_fails_fast(name):
    start = time.perf_counter()
    result = run_function(HOSTILE[name], 'f', TESTS)
    elapsed = time.perf_counter() - start
    assert result == [False, False, False]
    assert elapsed < 1.0, f'{name} took {elapsed:.2f} s'


def test_sandbox_cannot_touch_files(tmp_path):
    target = tmp_path / 'created'
    src = f"def f(n):\n    open({str(target)!r}, 'w')\n    return n\n"
    assert run_function(src, 'f', TESTS) == [False, False, False]
    assert not target.exists()


def test_arguments_are_not_mutated():
    xs = [3, 1, 2]
    src = 'def f(xs):\n    xs[0] = 99\n    return 1\n'
    assert run_function(src, 'f', [((xs,), 1)]) == [True]
    assert xs == [3, 1, 2]


# --- resource exhaustion that slips past the step budget (found while writing these tests)

_CHILD = textwrap.dedent('''
    import importlib.util, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2 ** 30, 2 * 2 ** 30))
    spec = importlib.util.spec_from_file_location('sandbox', sys.argv[1])
    sandbox = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sandbox)
    start = time.perf_counter()
    result = sandbox.run_function(sys.argv[2], 'f', [((1,), 1)])
    print(result, time.perf_counter() - start)
''')
SANDBOX_PY = os.path.join(os.path.dirname(__file__), os.pardir, 'src', 'agentrl', 'envs', 'bugfix', 'sandbox.py')

def _run_isolated(src, timeout=1.5):
    """run_function(src, 'f', [((1,), 1)]) in a child process (2 GiB address-space cap, killed after
    ``timeout`` s), so that a hang or a memory blow-up cannot take the suite down -> (result, seconds)."""
    start = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, '-c', _CHILD, SANDBOX_PY, src], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f'run_function still running after {time.perf_counter() - start:.1f} s')
    assert out.returncode == 0, out.stderr[-500:]
    result, elapsed = out.stdout.rsplit(' ', 1)
    return result, float(elapsed)


GROWTH = {
    'int_squaring_loop': 'def f(n):\n    x = 3\n    while True:\n        x = x * x\n',
    'int_power_loop': 'def f(n):\n    x = 3\n    for i in range(40):\n        x = x ** 200\n    return x\n',
    'int_shift_loop': 'def f(n):\n    x = 3\n    while True:\n        x = x << x\n',
}


SLOW = {
    # a builtin iterates in C, where no tick runs
    'builtin_over_huge_range': 'def f(n):\n    return sum(range(10 ** 12))\n',
    # '+' is not guarded: a list doubled in a loop exhausts time and memory long before the step budget
    'list_doubling_loop': 'def f(n):\n    x = [0]\n    while True:\n        x = x + x\n',
}


@pytest.mark.parametrize('name', [*GROWTH, *SLOW])
def test_runaway_source_fails_fast(name):
    """Doubly exponential integers hit the arithmetic guards; C-level loops and memory blow-ups hit the
    process limits: either way a failed test in well under a second, not a stuck machine."""
    result, elapsed = _run_isolated({**GROWTH, **SLOW}[name])
    assert result == '[False]'
    assert elapsed < 1.0
