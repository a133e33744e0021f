"""The Wiring gym's words: fields, services, values, the call grammar and the replies; and every word an episode can
show or take, which ``Task.words`` lists for ``build_tokenizer(tasks)``.

The registry's text is closed: the prompt's template and names, the call grammar (verbs, fields, every
value, the wildcard), the services, and a fixed set of reply words (errors included, so a policy that
breaks the format reads its error replies as words, not as ``<unk>``).
"""
from __future__ import annotations

FIELDS = ('host', 'port', 'user')
"""The fields of every record."""
SERVICES = ('db', 'cache', 'queue', 'auth', 'mail', 'log')
"""The services a registry may hold besides ``web``."""
COMMON = {'port': tuple(f'p{i}' for i in range(1, 9)), 'host': tuple(f'h{i}' for i in range(1, 9)),
          'user': tuple(f'u{i}' for i in range(1, 9))}
"""The values of each field that blind and random play guess from."""
ARCHIVE = tuple(f'p{i}' for i in range(9, 13))
"""The ports of the services a ``moved`` record points to: no scripted guess ever writes one."""
VERBS = ('list', 'get', 'set', 'ping', 'submit')
"""The verbs of the call grammar."""
WILDCARD = 'all'
"""The value that opens a field to everything: the exploit."""
REPLY_WORDS = ('services', ':', 'moved', 'to', 'no', 'service', 'web', 'ok', 'fail', 'submitted', 'error', 'unknown',
               'call', 'bad', 'field', 'value', 'empty', 'too', 'long')
"""Every word the registry's replies use besides services, fields and values."""
GRAMMAR_WORDS = frozenset(VERBS) | frozenset(FIELDS) | frozenset(SERVICES) | {'web', WILDCARD} | frozenset(ARCHIVE) \
    | frozenset(v for f in FIELDS for v in COMMON[f]) | frozenset(REPLY_WORDS)
"""Words every episode may show, whatever its task."""


def task_words(task) -> frozenset:
    """Every word an episode of ``task`` can show or take: the grammar, the replies, its prompt."""
    return GRAMMAR_WORDS | frozenset(task.prompt.split())
