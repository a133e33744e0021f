"""A word-level, deterministic tokenizer for any text environment (section 15 setup).

Every word an environment can show or take gets one id. Special tokens come first, in a fixed
order; the other words follow sorted, so the same words always give the same vocabulary. The words
come from the tasks (``task.words``: BugFix's tasks list theirs), from a corpus, or from the
environment's scripted episodes (``build_tokenizer``). A word outside the vocabulary encodes as
``<unk>``: one id for every word the tokenizer never saw (``check_text_env(env, tasks, tok)`` lists
the words of scripted play it lacks).

    >>> tok = build_tokenizer(arl.make_tasks('all'))
    >>> tok.decode(tok.encode('read') + [tok.stop_id])   # special tokens are skipped by default
    'read'
"""
from __future__ import annotations

import json

from ..envs.play import episode_texts
from ..envs.protocol import env_attr, env_name

PAD, BOS, STOP, UNK, TOOL, END_TOOL = '<pad>', '<bos>', '<stop>', '<unk>', '<tool>', '</tool>'
SPECIALS = (PAD, BOS, STOP, UNK, TOOL, END_TOOL)
"""Special tokens: padding, begin-of-episode, the policy's stop token, unknown, and the template
wrappers around each tool reply (``<tool> ... </tool>``)."""
PAD_ID = 0
"""The id of ``<pad>`` in every agentrl vocabulary (``SPECIALS`` starts with it). ``collate`` pads
with it, and ``TinyAgent`` reads a row's length off its ids: trailing id 0 is padding."""
assert SPECIALS[PAD_ID] == PAD

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


def build_tokenizer(tasks=(), texts=(), env=None) -> Tokenizer:
    """Build the word-level tokenizer of an environment's text (section 15 setup: ``build_tokenizer(tasks)``).

    The vocabulary is the special tokens, then every word of (any of):

    - ``tasks`` that list their words (``task.words``; BugFix's tasks list their prompt, every source the
      gym can show under up to two edits, and the call grammar);
    - ``texts``: a corpus (each string split on whitespace);
    - with ``env`` (a factory or Gymnasium id with scripted players), every prompt, call and reply of its
      scripted players on ``tasks`` (``envs.play.episode_texts``).
    """
    tasks, texts = list(tasks), list(texts)
    words = set()
    for task in tasks:
        words.update(getattr(task, 'words', ()))
    if env is not None:
        if not tuple(env_attr(env, 'scripted_kinds', ('oracle',))) and not (words or texts):
            raise ValueError(f'{env_name(env)} has no scripted players (its scripted_kinds are empty), so there was no '
                             'play to take words from: pass players=(kind, seed) -> player to from_gem/from_textarena '
                             '(or give the environment a scripted_policy), or texts=[...] to build from a corpus')
        texts += episode_texts(tasks, env)
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f'texts must be strings, got {type(text).__name__}')
        words.update(text.split())
    if not words:
        if tasks and env is None:
            raise ValueError(f'the tasks ({type(tasks[0]).__name__}) do not list their words (task.words): pass '
                             'env=YourEnv to play its scripted players, or texts=[...] to build from a corpus')
        raise ValueError('build_tokenizer needs words: tasks that list them, texts, or an env with scripted players')
    return Tokenizer(list(SPECIALS) + sorted(words - set(SPECIALS)))
