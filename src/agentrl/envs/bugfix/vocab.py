"""Every word a BugFix episode can show: what ``Task.words`` lists for ``build_tokenizer(tasks)`` (section 15 setup).

The gym's text is closed: prompts, the call grammar (verbs and ops), a fixed set of reply words, and
each task's source under any edits. Edits only introduce a fixed set of words, so the sources
reachable with up to two edits hold every word deeper edit chains can show.
"""
from __future__ import annotations

import itertools

from .ops import OPS, apply_op
from .source import LAYOUT

VERBS = ('read', 'edit', 'test', 'submit')
"""The verbs of the call grammar."""
REPLY_WORDS = ('fix', ':', 'tests', 'fail', 'pass', 'public', 'edited', 'no', 'change', 'error', 'empty',
               'call', 'unknown', 'needs', 'an', 'op', 'too', 'long', 'submitted', 'already')
"""Every word of the gym's fixed replies (and of the prompt's template)."""
GRAMMAR_WORDS = frozenset(VERBS) | frozenset(OPS) | frozenset(REPLY_WORDS) | frozenset(LAYOUT)
"""Words every episode may show, whatever its task."""


def reachable_sources(task, depth: int = 2):
    """Every source the gym can show for ``task`` after at most ``depth`` edits."""
    seen = {tuple(task.source)}
    frontier = [tuple(task.source)]
    for _ in range(depth):
        nxt = []
        for words, op in itertools.product(frontier, OPS):
            new = tuple(apply_op(op, list(words), task.public_tests))
            if new not in seen:
                seen.add(new)
                nxt.append(new)
        frontier = nxt
    return seen


def task_words(task) -> frozenset:
    """Every word an episode of ``task`` can show: the grammar, its prompt, its sources under up to two edits."""
    words = set(GRAMMAR_WORDS) | set(task.prompt.split())
    for src in reachable_sources(task):
        words.update(src)
    return frozenset(words)
