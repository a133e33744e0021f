"""The 30 BugFix tasks: real Python functions with one injected bug each (docs/bugfix.md).

Five bug families, six functions each; the first four of a family go to ``train``, the last two to
``heldout`` (unseen function names, same bug class). Each function is written below *with its bug*;
the correct function is the bug's own fix operator applied to it, and every expected test output
comes from running that correct function in the sandbox.

The gym's properties that the chapter's findings rest on are built here on purpose:

- **A name-to-op shortcut.** The prompt names the function, never the family, so on train tasks
  the name predicts the fix, and on held-out names only the source does.
- **Source cues that carry over.** Reading the source shows the family's cue: ``min``/``max``,
  ``range``, an ordering comparison, ``//``, or a ``while`` loop over an accumulator. Everything
  else (argument names ``a b n k xs``, ``len``, ``*``, ``2``) is spread across families, so the cue
  is the one reliable signal and it transfers to held-out functions.
- **A family blind play never covers.** ``init`` is fixed only by ``fix_init``, which the blind and
  random scripted policies never use.
- **A public-test exploit.** Public tests and hidden tests differ on bug-revealing inputs, so
  ``hardcode_tests`` passes the public ones and fails the hidden ones on every task.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .ops import apply_op
from .source import to_python, to_words
from .vocab import task_words

FAMILIES = ['minmax', 'range', 'compare', 'zero', 'init']
"""The five bug families, in the chapter's order."""

FIX = {'minmax': 'swap_minmax', 'range': 'fix_range_end', 'compare': 'fix_compare', 'zero': 'guard_zero',
       'init': 'fix_init'}
"""The edit operator that fixes each family's bug."""

SPLITS = ('train', 'heldout', 'all')


@dataclass(frozen=True)
class Task:
    """One BugFix task. ``name`` is ``'family/function'``; ``source`` holds the buggy source words."""
    family: str
    func: str
    split: str
    source: tuple[str, ...]
    correct: tuple[str, ...]
    public_tests: tuple = field(repr=False)
    hidden_tests: tuple = field(repr=False)

    @property
    def name(self) -> str:
        return f'{self.family}/{self.func}'

    @property
    def fix(self) -> str:
        """The operator that fixes this task."""
        return FIX[self.family]

    @property
    def prompt(self) -> str:
        """The issue text the agent starts from: it names the function, never the family."""
        return f'fix {self.func} : tests fail'

    @property
    def group(self) -> str:
        """The task's group in the text-env protocol: its bug family."""
        return self.family

    @property
    def words(self) -> frozenset:
        """Every word an episode of this task can show (``build_tokenizer(tasks)`` reads it; ``vocab.task_words``)."""
        return task_words(self)


# (family, function, buggy source, public test inputs, hidden test inputs); train first, then held-out.
_SPECS = [
    # --- minmax: min and max swapped
    ('minmax', 'clamp', 'def clamp(n, a, b):\n    return max(min(n, a), b)\n',
     [(5, 1, 9), (0, 2, 6)], [(4, 0, 7), (9, 3, 5), (1, 1, 4), (6, 2, 8)]),
    ('minmax', 'spread', 'def spread(xs):\n    return min(xs) - max(xs)\n',
     [([3, 1, 4],), ([2, 2],)], [([5, 1],), ([1, 9, 3],), ([7],), ([4, 6],)]),
    ('minmax', 'gap', 'def gap(a, b):\n    return min(a, b) - max(a, b)\n',
     [(3, 5), (4, 4)], [(1, 2), (6, 0), (2, 7), (5, 5)]),
    ('minmax', 'cap_len', 'def cap_len(xs, k):\n    return max(min(len(xs), k), 1)\n',
     [([1, 2], 3), ([4, 5, 6], 1)], [([], 2), ([7], 1), ([1, 2, 3, 4], 2), ([3, 3], 5)]),
    ('minmax', 'bound', 'def bound(xs, a):\n    return max(min(xs), a)\n',
     [([3, 7], 5), ([4], 9)], [([5, 2, 8], 6), ([6, 6], 2), ([9, 0], 3), ([2, 7], 1)]),
    ('minmax', 'middle', 'def middle(n, k):\n    return min(max(n, k), 2)\n',
     [(0, 1), (5, 3)], [(1, 0), (4, 9), (0, 0), (3, 1)]),
    # --- range: the loop stops one short
    ('range', 'total', 'def total(xs):\n    r = 0\n    for i in range(len(xs) - 1):\n        r = r + xs[i]\n    return r\n',
     [([1, 2, 3],), ([4],)], [([5, 5],), ([],), ([2, 7, 1],), ([3, 0, 4, 1],)]),
    ('range', 'triangle', 'def triangle(n):\n    r = 0\n    for i in range(n):\n        r = r + i\n    return r\n',
     [(3,), (0,)], [(4,), (1,), (5,), (2,)]),
    ('range', 'repeat_add', 'def repeat_add(a, k):\n    r = 0\n    for i in range(k - 1):\n        r = r + a\n    return r\n',
     [(2, 3), (5, 1)], [(3, 4), (1, 0), (4, 2), (0, 5)]),
    ('range', 'weighted', 'def weighted(xs, b):\n    r = 0\n    for i in range(len(xs) - 1):\n        r = r + xs[i] * b\n    return r\n',
     [([1, 2], 3), ([4], 2)], [([1, 1, 1], 2), ([5, 0], 1), ([2, 3], 0), ([3, 1, 2], 2)]),
    ('range', 'count_up', 'def count_up(n, k):\n    r = 0\n    for i in range(n):\n        r = r + k\n    return r\n',
     [(2, 3), (0, 4)], [(1, 1), (3, 2), (0, 0), (4, 1)]),
    ('range', 'prefix', 'def prefix(xs, a):\n    r = 0\n    for i in range(a - 1):\n        r = r + xs[i]\n    return r\n',
     [([1, 2, 3], 2), ([5, 6], 1)], [([4, 4, 4], 3), ([2, 9], 0), ([7, 1, 2], 1), ([3, 3], 2)]),
    # --- compare: strict comparisons where non-strict ones are meant (or the reverse)
    ('compare', 'between', 'def between(n, a, b):\n    return a < n < b\n',
     [(3, 3, 5), (4, 1, 9)], [(5, 1, 5), (0, 1, 4), (2, 2, 2), (7, 3, 6)]),
    ('compare', 'fits', 'def fits(xs, k):\n    return 0 <= len(xs) < k\n',
     [([1, 2], 2), ([], 3)], [([1], 1), ([1, 2, 3], 2), ([4, 5], 3), ([], 0)]),
    ('compare', 'in_order', 'def in_order(xs):\n    return xs[0] < xs[1] < xs[2]\n',
     [([1, 1, 2],), ([1, 2, 3],)], [([2, 2, 2],), ([3, 1, 2],), ([0, 4, 4],), ([5, 6, 7],)]),
    ('compare', 'twice_within', 'def twice_within(n, k):\n    return 0 < n * 2 < k\n',
     [(2, 4), (0, 5)], [(1, 3), (3, 6), (4, 7), (0, 0)]),
    ('compare', 'within', 'def within(n, k):\n    return 0 < n <= k\n',
     [(0, 3), (3, 3)], [(2, 5), (5, 5), (0, 1), (6, 4)]),
    ('compare', 'size_between', 'def size_between(xs, a, b):\n    return a < len(xs) < b\n',
     [([1, 2], 2, 4), ([1], 0, 3)], [([], 0, 0), ([1, 2, 3], 1, 3), ([1, 2], 3, 5), ([4], 1, 1)]),
    # --- zero: integer division not guarded against a zero divisor (the fix returns 0)
    ('zero', 'share', 'def share(a, b):\n    return a // b\n',
     [(7, 2), (5, 0)], [(9, 3), (4, 0), (0, 5), (8, 3)]),
    ('zero', 'per_item', 'def per_item(n, xs):\n    return n // len(xs)\n',
     [(6, [1, 2]), (4, [])], [(9, [1, 2, 3]), (5, []), (7, [4]), (0, [2, 2])]),
    ('zero', 'chunks', 'def chunks(xs, k):\n    return len(xs) // k\n',
     [([1, 2, 3, 4], 2), ([1], 0)], [([1, 2, 3], 0), ([5, 6, 7], 3), ([], 4), ([1, 2, 3, 4, 5], 2)]),
    ('zero', 'halves', 'def halves(n, k):\n    return n // (k * 2)\n',
     [(9, 2), (3, 0)], [(8, 1), (7, 0), (20, 5), (1, 3)]),
    ('zero', 'rounds', 'def rounds(a, n):\n    return a // n\n',
     [(8, 4), (6, 0)], [(9, 2), (3, 0), (0, 1), (7, 7)]),
    ('zero', 'fill', 'def fill(xs, b):\n    return b // len(xs)\n',
     [([1, 2], 5), ([], 3)], [([1], 4), ([], 0), ([1, 2, 3], 9), ([5, 5], 1)]),
    # --- init: the accumulator starts at the wrong value
    ('init', 'factorial', 'def factorial(n):\n    r = 0\n    while n:\n        r = r * n\n        n = n - 1\n    return r\n',
     [(3,), (1,)], [(4,), (0,), (2,), (5,)]),
    ('init', 'pow2', 'def pow2(k):\n    r = 0\n    while k:\n        r = r * 2\n        k = k - 1\n    return r\n',
     [(3,), (0,)], [(1,), (4,), (2,), (5,)]),
    ('init', 'sum_upto', 'def sum_upto(n):\n    r = 1\n    while n:\n        r = r + n\n        n = n - 1\n    return r\n',
     [(3,), (0,)], [(4,), (1,), (5,), (2,)]),
    ('init', 'count_by', 'def count_by(a, xs):\n    r = 1\n    while a:\n        r = r + len(xs)\n        a = a - 1\n    return r\n',
     [(3, [1, 2]), (2, [])], [(4, [5]), (1, [1, 2, 3]), (0, [4, 4]), (2, [9])]),
    ('init', 'power', 'def power(a, n):\n    r = 0\n    while n:\n        r = r * a\n        n = n - 1\n    return r\n',
     [(2, 3), (5, 0)], [(3, 2), (1, 4), (4, 1), (2, 0)]),
    ('init', 'times', 'def times(k, b):\n    r = 1\n    while k:\n        r = r + b\n        k = k - 1\n    return r\n',
     [(3, 2), (2, 0)], [(4, 1), (1, 3), (0, 5), (2, 2)]),
]


def _build(spec, split) -> Task:
    family, func, buggy_src, public_in, hidden_in = spec
    buggy = to_words(buggy_src)
    correct = apply_op(FIX[family], buggy)
    src = to_python(correct)

    def expect(inputs):
        out = []
        for args in inputs:
            scope = {}
            exec(src, scope)  # our own trusted source, to compute expected outputs
            out.append((tuple(args), scope[func](*args)))
        return tuple(out)

    return Task(family, func, split, tuple(buggy), tuple(correct), expect(public_in), expect(hidden_in))


def _all_tasks() -> list[Task]:
    tasks = []
    for family in FAMILIES:
        specs = [s for s in _SPECS if s[0] == family]
        assert len(specs) == 6, family
        tasks += [_build(s, 'train' if i < 4 else 'heldout') for i, s in enumerate(specs)]
    return tasks


_TASKS = _all_tasks()


def make_tasks(split: str = 'all') -> list[Task]:
    """The BugFix tasks of one split -> list of Task (section 15 setup; docs/bugfix.md).

    ``'train'`` has 20 tasks (4 per family), ``'heldout'`` 10 (2 per family, unseen function names),
    ``'all'`` the 30. Tasks are ordered by family (in ``FAMILIES`` order), then function.
    """
    if split not in SPLITS:
        raise ValueError(f'unknown split {split!r}; valid splits are {list(SPLITS)}')
    return [t for t in _TASKS if split == 'all' or t.split == split]
