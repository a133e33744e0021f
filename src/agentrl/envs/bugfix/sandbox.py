"""Restricted, time-bounded execution of a function's source against tests ("tests are real", docs/bugfix.md).

The gym's tests really run the (edited) source. Three guards keep that safe and fast:

1. **A whitelist of syntax.** Only plain arithmetic, comparisons, names, literals, calls to a few
   builtins, ``if``/``for``/``while`` and ``def`` compile. No imports, no attributes (so no
   ``__class__`` escapes), no ``open`` or ``print``: nothing can reach I/O.
2. **A step budget.** Every loop body and function entry ticks a counter; past ``max_steps`` ticks
   or ``max_seconds`` of wall time the run raises, so an infinite loop is a failed test in
   milliseconds. Work that a single step could hide is bounded too: ``**``, ``*``, ``+`` and
   ``<<`` refuse gigantic results, and ``range`` and ``sum`` refuse more than ``MAX_ITEMS`` items.
3. **Failures are results.** Any exception (a ``SyntaxError``, a ``ZeroDivisionError``, the budget)
   makes that test fail; nothing propagates out of ``run_tests``.

Results are cached per (task name, source), so repeated rollouts of the same edits cost nothing.
"""
from __future__ import annotations

import ast
import copy
import time
from functools import lru_cache

MAX_BITS = 4096
"""Largest integer result (in bits) that ``**``, ``*`` and ``<<`` may produce in the sandbox."""
MAX_ITEMS = 100_000
"""Largest sequence ``*``, ``+`` and ``range`` may build, or ``sum`` may add up."""


class BudgetExceeded(RuntimeError):
    """Raised inside sandboxed code that ran too many steps, too long, or built something too big."""


def _range(*args):
    r = range(*args)
    if len(r) > MAX_ITEMS:
        raise BudgetExceeded('range too long')
    return r


def _sum(iterable, start=0):
    if not isinstance(start, (int, float)):
        raise TypeError('sum() start must be a number in the sandbox')
    total = start
    for i, x in enumerate(iterable):
        if i >= MAX_ITEMS:
            raise BudgetExceeded('sum over too many items')
        total = total + x
    return total


SAFE_BUILTINS = {'len': len, 'min': min, 'max': max, 'range': _range, 'abs': abs, 'sum': _sum,
                 'True': True, 'False': False, 'None': None}
_ALLOWED = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.AugAssign,
            ast.For, ast.While, ast.If, ast.Expr, ast.Pass, ast.Break, ast.Continue, ast.Name, ast.Load,
            ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call,
            ast.Subscript, ast.Slice, ast.List, ast.Tuple, ast.IfExp, ast.operator, ast.unaryop,
            ast.boolop, ast.cmpop, ast.expr_context)
_GUARDED = {ast.Pow: '__pow__', ast.Mult: '__mul__', ast.LShift: '__lshift__', ast.Add: '__add__'}


class _Guard(ast.NodeTransformer):
    """Route ``**``, ``*`` and ``<<`` through checked helpers, and tick in every loop and function."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        name = _GUARDED.get(type(node.op))
        if name is None:
            return node
        return ast.copy_location(ast.Call(ast.Name(name, ast.Load()), [node.left, node.right], []), node)

    def _tick(self, node):
        self.generic_visit(node)
        node.body.insert(0, ast.Expr(ast.Call(ast.Name('__tick__', ast.Load()), [], [])))
        return node

    visit_For = visit_While = visit_FunctionDef = _tick


def _check(tree):
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise SyntaxError(f'{type(node).__name__} is not allowed in the sandbox')
        if isinstance(node, ast.Name) and node.id.startswith('__'):
            raise SyntaxError('dunder names are not allowed in the sandbox')
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in SAFE_BUILTINS):
            raise SyntaxError('only calls to len, min, max, range, abs and sum are allowed')


def _bits(x):
    return x.bit_length() if isinstance(x, int) else 0


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 0 and b * _bits(a) > MAX_BITS:
        raise BudgetExceeded('power too large')
    if isinstance(b, (int, float)) and abs(b) > MAX_BITS:
        raise BudgetExceeded('exponent too large')
    return a ** b


def _mul(a, b):
    if isinstance(a, (list, tuple, str)) or isinstance(b, (list, tuple, str)):
        seq, n = (a, b) if isinstance(a, (list, tuple, str)) else (b, a)
        if isinstance(n, int) and len(seq) * n > MAX_ITEMS:
            raise BudgetExceeded('sequence too large')
    elif _bits(a) + _bits(b) > MAX_BITS:
        raise BudgetExceeded('product too large')
    return a * b


def _add(a, b):
    if isinstance(a, (list, tuple, str)) and isinstance(b, (list, tuple, str)) and len(a) + len(b) > MAX_ITEMS:
        raise BudgetExceeded('sequence too large')
    return a + b


def _lshift(a, b):
    if isinstance(b, int) and b + _bits(a) > MAX_BITS:
        raise BudgetExceeded('shift too large')
    return a << b


@lru_cache(maxsize=4096)
def compile_function(src: str):
    """Compile ``src`` under the whitelist -> code object. Raises ``SyntaxError`` if it is not allowed."""
    tree = ast.parse(src)
    _check(tree)
    tree = ast.fix_missing_locations(_Guard().visit(tree))
    return compile(tree, '<bugfix>', 'exec')


def run_function(src: str, name: str, tests, max_steps: int = 20_000, max_seconds: float = 0.2) -> list[bool]:
    """Run ``name`` from ``src`` on each ``(args, expected)`` test -> list of pass/fail, never raises."""
    try:
        code = compile_function(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [False] * len(tests)
    results = []
    for args, expected in tests:
        steps = [0]
        deadline = time.perf_counter() + max_seconds

        def tick():
            steps[0] += 1
            if steps[0] > max_steps or (steps[0] % 256 == 0 and time.perf_counter() > deadline):
                raise BudgetExceeded('step budget exceeded')

        scope = {'__builtins__': SAFE_BUILTINS, '__tick__': tick, '__pow__': _pow, '__mul__': _mul,
                 '__lshift__': _lshift, '__add__': _add}
        try:
            exec(code, scope)
            out = scope[name](*copy.deepcopy(args))
            results.append(type(out) is type(expected) and out == expected)
        except Exception:  # any failure inside the sandbox is a failed test, by design
            results.append(False)
    return results


_RESULTS: dict[tuple[str, tuple[str, ...]], tuple[bool, bool]] = {}


def run_tests(task, words) -> tuple[bool, bool]:
    """Run a task's public and hidden tests on source ``words`` -> (public_pass, hidden_pass).

    Cached per (task name, source words): a rollout batch that repeats the same edits runs them
    once, and a cache hit does not even rebuild the Python source.
    """
    key = (task.name, tuple(words))
    hit = _RESULTS.get(key)
    if hit is None:
        from .source import to_python
        if len(_RESULTS) > 100_000:
            _RESULTS.clear()
        src = to_python(list(words))
        hit = _RESULTS[key] = (all(run_function(src, task.func, task.public_tests)),
                               all(run_function(src, task.func, task.hidden_tests)))
    return hit
