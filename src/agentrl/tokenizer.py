"""A word-level, deterministic tokenizer for the BugFix gym (section 15 setup; DESIGN.md §1).

Every word the gym can show (prompts, sources under any edits, tool replies, calls) gets one id.
Special tokens come first, in a fixed order; the other words follow sorted, so the same tasks
always give the same vocabulary.

    >>> tok = build_tokenizer(make_tasks('all'))
    >>> tok.decode(tok.encode('read') + [tok.stop_id])   # special tokens are skipped by default
    'read'
"""
from __future__ import annotations

import itertools
import json

from .ops import OPS, apply_op
from .source import LAYOUT

PAD, BOS, STOP, UNK, TOOL, END_TOOL = '<pad>', '<bos>', '<stop>', '<unk>', '<tool>', '</tool>'
SPECIALS = (PAD, BOS, STOP, UNK, TOOL, END_TOOL)
"""Special tokens: padding, begin-of-episode, the policy's stop token, unknown, and the template
wrappers around each tool reply (``<tool> ... </tool>``)."""
PAD_ID = 0
"""The id of ``<pad>`` in every agentrl vocabulary (``SPECIALS`` starts with it). ``collate`` pads
with it, and ``TinyAgent`` reads a row's length off its ids: trailing id 0 is padding."""
assert SPECIALS[PAD_ID] == PAD

VERBS = ('read', 'edit', 'test', 'submit')
REPLY_WORDS = ('fix', ':', 'tests', 'fail', 'pass', 'public', 'edited', 'no', 'change', 'error', 'empty',
               'call', 'unknown', 'needs', 'an', 'op', 'too', 'long', 'submitted', 'already')


class Tokenizer:
    """Word-level tokenizer: ``encode(text) -> ids``, ``decode(ids) -> text`` (words joined by spaces).

    Invariant: ``<pad>`` is id 0 (``pad_id == PAD_ID``), because the vocabulary starts with
    ``SPECIALS``. ``TinyAgent`` relies on it to find a batch's padding without being told: in ids
    padded with ``pad_id``, a row's run of trailing 0s is padding.
    """

    def __init__(self, words):
        words = list(words)
        if list(words[:len(SPECIALS)]) != list(SPECIALS) or len(set(words)) != len(words):
            raise ValueError('vocabulary must start with the special tokens and hold each word once')
        self.vocab = words
        self.token_to_id = {w: i for i, w in enumerate(words)}
        self.pad_id, self.bos_id, self.stop_id, self.unk_id, self.tool_id, self.end_tool_id = (
            self.token_to_id[w] for w in SPECIALS)
        self.special_ids = frozenset(range(len(SPECIALS)))
        assert self.pad_id == PAD_ID, 'the vocabulary must put <pad> at id 0'

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Split on whitespace and map each word to its id (unknown words -> ``<unk>``)."""
        get = self.token_to_id.get
        return [get(w, self.unk_id) for w in text.split()]

    def decode(self, ids, skip_special: bool = True) -> str:
        """Words of ``ids`` joined by single spaces; special tokens are left out unless ``skip_special=False``."""
        if hasattr(ids, 'tolist'):
            ids = ids.tolist()
        n = self.vocab_size
        for i in ids:
            if not 0 <= i < n:
                raise ValueError(f'token id {i} is outside the vocabulary (size {n})')
        return ' '.join(self.vocab[i] for i in ids if not (skip_special and i in self.special_ids))

    def to_json(self) -> str:
        return json.dumps({'vocab': self.vocab})

    @classmethod
    def from_json(cls, text: str) -> 'Tokenizer':
        return cls(json.loads(text)['vocab'])

    def __eq__(self, other):
        return isinstance(other, Tokenizer) and self.vocab == other.vocab

    def __repr__(self):
        return f'Tokenizer(vocab_size={self.vocab_size})'


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


def build_tokenizer(tasks) -> Tokenizer:
    """Build the word-level tokenizer for ``tasks`` (section 15 setup).

    The vocabulary covers the special tokens, the call grammar (verbs and ops), every tool reply,
    each task's prompt, and every word of each task's source under up to two edits (edits only
    introduce a fixed set of words, so deeper edit chains add none).
    """
    tasks = list(tasks)
    if not tasks:
        raise ValueError('build_tokenizer needs at least one task')
    words = set(VERBS) | set(OPS) | set(REPLY_WORDS) | set(LAYOUT)
    for task in tasks:
        words.update(task.prompt.split())
        for src in reachable_sources(task):
            words.update(src)
    return Tokenizer(list(SPECIALS) + sorted(words - set(SPECIALS)))
