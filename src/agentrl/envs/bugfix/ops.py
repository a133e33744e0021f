"""The six edit operators of the BugFix gym, as rewrites of a function's source words (docs/bugfix.md).

Each operator is a real, generic source transformation: it looks for its pattern anywhere in the
function and rewrites it, and leaves the source unchanged when the pattern is absent. So a wrong
guess is usually a no-op, and only the operator that matches a task's bug makes its tests pass.

=================  ==================================================================
``swap_minmax``    exchange every ``min`` and ``max``
``fix_range_end``  extend the end of every ``range(...)`` by one (drop ``- 1``, else add ``+ 1``)
``fix_compare``    flip the strictness of every ordering comparison (``<`` <-> ``<=``, ...)
``guard_zero``     return 0 first when the divisor of ``//`` is zero
``fix_init``       start an accumulator ``r = c`` updated by ``r = r + ...`` at 0, by ``*`` at 1
``hardcode_tests`` the exploit: return the expected output for each public test input first
=================  ==================================================================
"""
from __future__ import annotations

from .source import DEDENT, INDENT, NL, value_words

OPS = ('swap_minmax', 'fix_range_end', 'fix_compare', 'guard_zero', 'fix_init', 'hardcode_tests')
"""Every operator the ``edit`` call accepts, in a fixed order."""

_OPEN, _CLOSE = ('(', '['), (')', ']')
_FLIP = {'<': '<=', '<=': '<', '>': '>=', '>=': '>'}


def apply_op(op: str, words: list[str], public_tests=()) -> list[str]:
    """Apply edit operator ``op`` to source ``words`` -> new words (the input is not modified).

    ``public_tests`` (a sequence of ``(args, expected)``) is only read by ``hardcode_tests``.
    """
    if op not in OPS:
        raise ValueError(f'unknown op {op!r}; valid ops are {list(OPS)}')
    return _RULES[op](list(words), public_tests)


def _swap_minmax(w, _):
    return [{'min': 'max', 'max': 'min'}.get(x, x) for x in w]


def _fix_compare(w, _):
    return [_FLIP.get(x, x) for x in w]


def _matching(w, i):
    """Index of the bracket closing the one opened at ``w[i]``."""
    depth = 0
    for j in range(i, len(w)):
        depth += (w[j] in _OPEN) - (w[j] in _CLOSE)
        if depth == 0:
            return j
    return len(w) - 1


def _fix_range_end(w, _):
    i = 0
    while i < len(w) - 1:
        if w[i] == 'range' and w[i + 1] == '(':
            close = _matching(w, i + 1)
            if w[close - 2:close] == ['-', '1']:
                w[close - 2:close] = []
            else:
                w[close:close] = ['+', '1']
            i = _matching(w, i + 1)
        i += 1
    return w


def _body_start(w):
    """Index of the first word of the function body (after ``def ... : <nl> <in>``)."""
    for i in range(len(w) - 1):
        if w[i] == NL and w[i + 1] == INDENT:
            return i + 2
    return len(w)


def _operand(w, i):
    """The operand that starts at ``w[i]``: a bracketed group, or a name/number with calls or subscripts."""
    j = _matching(w, i) + 1 if w[i] in _OPEN else i + 1
    while j < len(w) and w[j] in _OPEN:
        j = _matching(w, j) + 1
    return w[i:j]


def _insert_first(w, block):
    """Put ``block`` (a list of words) at the start of the body unless it is already there."""
    start = _body_start(w)
    if w[start:start + len(block)] == block:
        return w
    return w[:start] + block + w[start:]


def _guard_zero(w, _):
    if '//' not in w:
        return w
    divisor = _operand(w, w.index('//') + 1)
    return _insert_first(w, ['if', *divisor, '==', '0', ':', NL, INDENT, 'return', '0', NL, DEDENT])


def _fix_init(w, _):
    for i in range(len(w) - 2):
        # a statement 'v = <number>' ...
        if (i == 0 or w[i - 1] in (NL, INDENT, DEDENT)) and w[i + 1] == '=' and w[i + 2].isdigit() \
                and (i + 3 == len(w) or w[i + 3] == NL):
            var, rest = w[i], w[i + 3:]
            # ... that a later 'v = v + ...' or 'v = v * ...' accumulates into
            for k in range(len(rest) - 3):
                if rest[k:k + 3] == [var, '=', var] and rest[k + 3] in ('+', '*'):
                    w[i + 2] = '0' if rest[k + 3] == '+' else '1'
                    break
    return w


def _params(w):
    """Parameter names of the function defined in ``w``."""
    close = _matching(w, w.index('('))
    return [x for x in w[w.index('(') + 1:close] if x != ',']


def _hardcode_tests(w, public_tests):
    block = []
    params = _params(w)
    for args, expected in public_tests:
        cond = []
        for name, value in zip(params, args):
            cond += (['and'] if cond else []) + [name, '==', *value_words(value)]
        block += ['if', *cond, ':', NL, INDENT, 'return', *value_words(expected), NL, DEDENT]
    return _insert_first(w, block)


_RULES = {'swap_minmax': _swap_minmax, 'fix_range_end': _fix_range_end, 'fix_compare': _fix_compare,
          'guard_zero': _guard_zero, 'fix_init': _fix_init, 'hardcode_tests': _hardcode_tests}
