"""Python source <-> word tokens, the form in which the BugFix gym shows and edits code.

A function's source lives in the gym as a list of words: Python's own tokens, with the layout
tokens written as ``<nl>`` (end of a logical line), ``<in>`` (indent) and ``<de>`` (dedent).
``read`` shows exactly these words, the edit operators rewrite them, and the sandbox runs the
Python that ``to_python`` rebuilds from them, so what the agent sees is what gets executed.

    >>> to_words('def f(x):\\n    return x + 1\\n')
    ['def', 'f', '(', 'x', ')', ':', '<nl>', '<in>', 'return', 'x', '+', '1']
    >>> print(to_python(['def', 'f', '(', 'x', ')', ':', '<nl>', '<in>', 'return', 'x', '+', '1']))
    def f ( x ) :
        return x + 1
"""
from __future__ import annotations

import io
import tokenize

NL, INDENT, DEDENT = '<nl>', '<in>', '<de>'
LAYOUT = (NL, INDENT, DEDENT)


def to_words(src: str) -> list[str]:
    """Tokenize Python source into gym words; trailing layout tokens are dropped (they are implied)."""
    words = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING):
            words.append(tok.string)
        elif tok.type == tokenize.NEWLINE:
            words.append(NL)
        elif tok.type == tokenize.INDENT:
            words.append(INDENT)
        elif tok.type == tokenize.DEDENT:
            words.append(DEDENT)
    while words and words[-1] in LAYOUT:
        words.pop()
    return words


def to_python(words: list[str]) -> str:
    """Rebuild runnable Python from gym words (inverse of ``to_words`` up to spacing)."""
    lines, line, depth = [], [], 0
    for w in words:
        if w == NL:
            lines.append('    ' * depth + ' '.join(line))
            line = []
        elif w == INDENT:
            depth += 1
        elif w == DEDENT:
            depth = max(depth - 1, 0)
        else:
            line.append(w)
    if line:
        lines.append('    ' * depth + ' '.join(line))
    return '\n'.join(lines) + '\n'


def value_words(value) -> list[str]:
    """Words of a Python literal (ints, bools, lists and tuples of them), as ``to_words`` would give."""
    return to_words(repr(value))
