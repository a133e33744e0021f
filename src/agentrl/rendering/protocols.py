"""The policy and renderer protocols: what the recipes and ``rollout_batch`` need.

Two small contracts, written down here once. ``TinyAgent`` implements the policy one as it always
has; ``hf.HFPolicy`` implements it for any ``transformers`` causal LM. Our word-level ``Tokenizer``
is turned into a renderer by ``as_renderer``; ``chat.ChatRenderer`` is a renderer for any tokenizer
with a chat template.

**Policy** (a ``torch.nn.Module``; the recipes train it, copy it and switch train/eval):

- ``policy(ids, lengths=None)``: ids ``[B, T]`` (long) -> logits ``[B, T, V]``. Rows may be
  right-padded: the model is causal, so pads after a row never change its real logits (``collate``
  pads this way). ``lengths`` ``[B]``, when given, is each row's real length (``collate``'s
  ``batch['lengths']``, which the recipes pass); a policy may use it to skip the padding
  (``TinyAgent`` does; without it, it takes trailing id 0 for padding) or ignore it (``HFPolicy``).
- ``policy.vocab_size``: ``V``, the number of token ids (the renderer's ``vocab_size`` must equal it).
- ``policy.new_cache(batch)`` -> a cache for ``batch`` sequences that grow at different speeds; the
  cache has ``keep(rows)`` (a LongTensor of row indices: every other row leaves the batch).
- ``policy.forward_cached(ids, n_new, cache)``: ids ``[B, C]``, n_new ``[B]`` -> logits ``[B, V]``
  at each row's last new token. Row ``b``'s new tokens are ``ids[b, :n_new[b]]`` (the rest is
  padding, never attended to); they continue that row's sequence in the cache. A row with
  ``n_new[b] == 0`` is left as it was and gets logits 0. Over any schedule of chunks, the logits
  equal a full forward of each row's whole sequence (the tests check 1e-5 for TinyAgent, 1e-4
  for ``HFPolicy``).

Rollouts also read, where present, ``policy.config.block_size`` (the longest sequence) to check
the envs against it.

**Renderer** (what ``rollout_batch`` and ``scripted_rollout`` need to turn calls and replies into
tokens; ``tok`` in every recipe may be one):

- ``new_episode(env=None)`` -> a builder for one episode of the environment instance ``env`` (a chat renderer
  describes its calls and shows its ``readable`` text, ``envs.calls``; the word-level one ignores it) with ``prompt(text) -> ids``, ``call(ids, logprobs=None) -> ids``,
  ``reply(text, final=False) -> ids`` (``final``: the episode ends after this reply) and
  ``build(reward, info, turn_rewards=None) -> Trajectory`` (``reward``: the return, ``turn_rewards``: each
  call's reward). The ids each method returns are the tokens to feed the policy next (the builder keeps
  owners, turns and behaviour log-probs). Subclass ``render.TrajectoryBuilder``, which writes ``call`` and
  ``build``: a builder writes only ``prompt`` and ``reply``.
- ``stop_id``: the token that ends a call (``<stop>``, or a chat template's end-of-turn marker).
- ``call_limit(env)``: most tokens a sampled call may have (the stop token included).
- ``encode_call(text)`` -> the ids a scripted call is written as (ending with ``stop_id``).
- ``call_text(ids)`` -> the text the env receives for a call's ids (a trailing stop dropped).
- ``pad_id`` and ``vocab_size``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from .trajectory import EpisodeBuilder


@runtime_checkable
class Policy(Protocol):
    """A model the recipes and ``rollout_batch`` can use (see the module docstring)."""

    vocab_size: int

    def __call__(self, ids: torch.Tensor, lengths=None) -> torch.Tensor: ...

    def new_cache(self, batch: int): ...

    def forward_cached(self, ids: torch.Tensor, n_new: torch.Tensor, cache) -> torch.Tensor: ...


@runtime_checkable
class Renderer(Protocol):
    """Turns an episode's prompt, calls and replies into tokens with owners (see the module docstring)."""

    stop_id: int
    pad_id: int
    vocab_size: int

    def new_episode(self, env=None): ...

    def call_limit(self, env) -> int: ...

    def encode_call(self, text: str) -> list: ...

    def call_text(self, ids) -> str: ...


class WordRenderer:
    """Our word-level tokenizer as a renderer: ``<bos> prompt``, calls ending in ``<stop>``, replies
    wrapped in ``<tool> ... </tool>`` (``render.EpisodeBuilder``, token for token)."""

    def __init__(self, tok):
        self.tok = tok
        self.stop_id, self.pad_id = tok.stop_id, tok.pad_id

    @property
    def vocab_size(self) -> int:
        return self.tok.vocab_size

    def new_episode(self, env=None):
        """A builder for one episode (the word-level layout is the same for every environment)."""
        return EpisodeBuilder(self.tok)

    def call_limit(self, env) -> int:
        return env.max_call_tokens

    def encode_call(self, text: str) -> list[int]:
        return self.tok.encode(text) + [self.stop_id]

    def call_text(self, ids) -> str:
        ids = list(ids)
        if ids and ids[-1] == self.stop_id:
            ids = ids[:-1]
        return ' '.join(self.tok.vocab[i] for i in ids)

    def __repr__(self):
        return f'WordRenderer({self.tok!r})'


def as_renderer(tok):
    """A renderer for ``tok``: a renderer is returned as it is, our word-level ``Tokenizer`` is wrapped
    in ``WordRenderer``."""
    if hasattr(tok, 'new_episode') and hasattr(tok, 'call_limit'):
        return tok
    if hasattr(tok, 'vocab') and hasattr(tok, 'stop_id') and hasattr(tok, 'encode'):
        return WordRenderer(tok)
    raise TypeError(f'expected an agentrl Tokenizer or a renderer (see agentrl.rendering.protocols), got {type(tok).__name__}')
