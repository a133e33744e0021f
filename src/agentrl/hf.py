"""``HFPolicy``: any ``transformers`` causal LM as an agentrl policy.

``HFPolicy`` wraps an ``AutoModelForCausalLM`` (built from a config, or ``from_pretrained`` on a
local folder) and its tokenizer, and implements the policy protocol of ``agentrl.policy``, so
``rollout_batch`` and every recipe run on it unchanged:

- ``policy(ids)`` -> logits ``[B, T, V]`` (one plain forward; right padding is safe, the model is causal);
- ``forward_cached(ids, n_new, cache)`` feeds each row's new tokens through the model's own
  key/value cache (``DynamicCache``). Rows of different lengths share one batched forward: the
  cache has one slot per fed column for every row, a 2-D ``attention_mask`` marks which slots
  hold a real token of that row, and explicit ``position_ids`` give each real token its position
  in its own sequence (so a gap in the slots never shifts a position). Tool replies are prefilled
  in one batched step, as for TinyAgent.

``make_policy('gpt2' | 'llama', tok)`` builds a randomly initialised model of the TinyAgent's
width, depth and heads on our word-level vocabulary, wrapped as a ``PreTrainedTokenizerFast``
(``word_tokenizer``) whose chat template renders episodes exactly as ``render.EpisodeBuilder`` does.

``transformers`` and ``tokenizers`` are optional (``pip install -e '.[hf]'``) and imported here only.
Nothing is downloaded: models come from configs, tokenizers are built locally.
"""
from __future__ import annotations

import inspect

import torch
import torch.nn as nn

ARCHS = ('gpt2', 'llama')
"""Architectures ``make_policy`` builds (the TinyAgent's shape, random init)."""

WORD_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %} {% generation %}{{ m['content'] }}"
    "{% if m['end_of_turn'] is not defined or m['end_of_turn'] %} <stop>{% endif %}{% endgeneration %}"
    "{% elif m['role'] == 'tool' %} <tool> {{ m['content'] }} </tool>"
    "{% else %} {{ m['content'] }}{% endif %}"
    "{% endfor %}")
"""The word-level layout as a chat template: ``<bos> prompt``, each call followed by ``<stop>`` (the
policy's end-of-turn marker), each reply wrapped in ``<tool> ... </tool>``."""


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ImportError("HFPolicy needs transformers: pip install -e '.[hf]'") from None
    return transformers


def word_tokenizer(tok):
    """Our word-level ``Tokenizer`` as a ``PreTrainedTokenizerFast`` with the same ids and ``WORD_TEMPLATE``.

    ``ChatRenderer(word_tokenizer(tok))`` renders an episode token for token as ``EpisodeBuilder`` does."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from .tokenizer import BOS, END_TOOL, PAD, SPECIALS, STOP, TOOL, UNK
    transformers = _transformers()
    tk = Tokenizer(models.WordLevel(vocab=dict(tok.token_to_id), unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix='##', cleanup=False)  # joins words with single spaces
    tk.add_special_tokens([AddedToken(w, special=True, normalized=False) for w in SPECIALS])
    out = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=BOS, eos_token=STOP, pad_token=PAD,
                                               unk_token=UNK, additional_special_tokens=[TOOL, END_TOOL])
    out.chat_template = WORD_TEMPLATE
    if len(out) != tok.vocab_size or out.convert_tokens_to_ids(STOP) != tok.stop_id:
        raise ValueError('the wrapped tokenizer does not keep the word-level ids')
    return out


def hf_config(arch: str, vocab_size: int, d_model: int = 96, n_layers: int = 2, n_heads: int = 4,
              max_positions: int = 512, bos_id=None, eos_id=None, pad_id=None):
    """A ``transformers`` config of ``arch`` ('gpt2' or 'llama') with the TinyAgent's shape and no dropout.

    GPT-2 keeps its own design: learned absolute positions, a tied output head, GELU MLP of width 4d.
    Llama: rotary positions on every dim, RMSNorm, a SwiGLU MLP of width 4d, an untied head."""
    transformers = _transformers()
    ids = dict(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    if arch == 'gpt2':
        return transformers.GPT2Config(vocab_size=vocab_size, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
                                       n_positions=max_positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                       **ids)
    if arch == 'llama':
        return transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=d_model, intermediate_size=4 * d_model,
                                        num_hidden_layers=n_layers, num_attention_heads=n_heads,
                                        num_key_value_heads=n_heads, max_position_embeddings=max_positions,
                                        tie_word_embeddings=False, attention_dropout=0.0, **ids)
    raise ValueError(f'unknown architecture {arch!r}; valid architectures are {list(ARCHS)}')


def make_policy(arch: str, tok, d_model: int = 96, n_layers: int = 2, n_heads: int = 4, max_positions: int = 512,
                attn: str = 'sdpa') -> 'HFPolicy':
    """A randomly initialised ``arch`` model on our word-level vocabulary (seed torch before calling)."""
    cfg = hf_config(arch, tok.vocab_size, d_model, n_layers, n_heads, max_positions, tok.bos_id, tok.stop_id, tok.pad_id)
    return HFPolicy.from_config(cfg, word_tokenizer(tok), attn=attn)


class HFCache:
    """The key/value cache of one ``HFPolicy`` batch: the model's ``DynamicCache``, a 2-D mask over its
    slots (``mask[b, s] = 1`` where slot ``s`` holds a real token of row ``b``) and each row's length."""

    def __init__(self, kv, batch: int):
        self.kv = kv
        self.mask = torch.zeros(batch, 0, dtype=torch.long)  # (B, S) over the cache's slots
        self.lengths = torch.zeros(batch, dtype=torch.long)  # (B,) real tokens per row

    def keep(self, rows: torch.Tensor):
        """Drop every row not in ``rows`` (finished episodes leave the batch)."""
        if self.mask.shape[1]:
            self.kv.batch_select_indices(rows)
        self.mask, self.lengths = self.mask.index_select(0, rows), self.lengths.index_select(0, rows)


class HFPolicy(nn.Module):
    """A ``transformers`` causal LM as an agentrl policy (see the module docstring).

    Args:
        model: a causal LM (``AutoModelForCausalLM``); dropout should be off for rollouts to match training.
        tokenizer: its tokenizer (kept for ``renderer()`` and checkpoints; the recipes take theirs as ``tok``).
    """

    def __init__(self, model, tokenizer=None):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        cfg = model.config
        self.max_positions = int(getattr(cfg, 'max_position_embeddings', None) or getattr(cfg, 'n_positions', 1 << 30))
        params = inspect.signature(model.base_model.forward).parameters
        self._cache_kw = 'cache' if 'cache' in params else 'past_key_values'

    # --- construction
    @classmethod
    def from_config(cls, config, tokenizer=None, attn: str = 'sdpa') -> 'HFPolicy':
        """A randomly initialised model of ``config`` (seed torch first for a reproducible init)."""
        transformers = _transformers()
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn)
        return cls(model, tokenizer)

    @classmethod
    def from_pretrained(cls, path, tokenizer=None, **kw) -> 'HFPolicy':
        """``AutoModelForCausalLM.from_pretrained(path)`` (and its tokenizer, if ``tokenizer`` is None)."""
        transformers = _transformers()
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
        if tokenizer is None:
            tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        return cls(model, tokenizer)

    def renderer(self, **kw):
        """A ``ChatRenderer`` on this policy's tokenizer and its chat template."""
        from .chat import ChatRenderer
        if self.tokenizer is None:
            raise ValueError('this HFPolicy has no tokenizer')
        return ChatRenderer(self.tokenizer, **kw)

    # --- the policy protocol
    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def arch(self) -> str:
        return self.model.config.model_type

    def _check_ids(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
            raise TypeError('ids must be a LongTensor [B, T]')
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(f'ids must lie in [0, {self.vocab_size}) (the vocabulary)')

    def forward(self, ids: torch.Tensor, lengths=None) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, V): one plain forward, every position computed.

        ``lengths`` (each row's real tokens, from the policy protocol) is accepted and not needed:
        right padding never changes a causal model's real logits.
        """
        self._check_ids(ids)
        if ids.shape[1] > self.max_positions:
            raise ValueError(f'sequence of {ids.shape[1]} tokens is longer than the model\'s {self.max_positions} positions')
        # an all-ones mask: every token is real (right padding is harmless to a causal model), which
        # transformers turns back into plain causal attention
        return self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits

    def new_cache(self, batch: int, capacity: int = 0) -> HFCache:
        """An empty cache for ``batch`` sequences (``capacity`` is accepted for TinyAgent's signature)."""
        from transformers import DynamicCache
        try:
            kv = DynamicCache(config=self.model.config)
        except TypeError:  # transformers 4.x
            kv = DynamicCache()
        return HFCache(kv, batch)

    def forward_cached(self, ids: torch.Tensor, n_new: torch.Tensor, cache: HFCache) -> torch.Tensor:
        """Feed a chunk through the cache -> logits (B, V) at each row's last new token.

        ids (B, C): row b's new tokens are ``ids[b, :n_new[b]]`` (the rest is padding: its slots are
        masked out and never attended to). A row with ``n_new[b] == 0`` is left as it was; its
        logits are 0."""
        B, C = ids.shape
        cols = torch.arange(C)
        valid = cols[None, :] < n_new[:, None]  # (B, C) real new tokens
        positions = cache.lengths[:, None] + cols[None, :]  # (B, C) each token's position in its own row
        if bool((positions[valid] >= self.max_positions).any()):
            raise ValueError(f'a sequence grew past the model\'s {self.max_positions} positions')
        positions = positions.clamp(max=self.max_positions - 1)  # padding slots: any valid position
        mask = torch.cat([cache.mask, valid.long()], dim=1)  # (B, S + C) over the cache's slots
        ids = ids.masked_fill(~valid, 0)
        out = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                    **{self._cache_kw: cache.kv})
        h = out[0]  # (B, C, d) last hidden states
        last = (n_new - 1).clamp(min=0)  # (B,) each row's last new token
        logits = self.model.get_output_embeddings()(h[torch.arange(B), last])  # (B, V)
        cache.mask, cache.lengths = mask, cache.lengths + n_new
        return logits.masked_fill((n_new == 0)[:, None], 0.0)

    # --- checkpoints (agentrl.checkpoint): the model's config as JSON, the weights as safetensors
    def checkpoint_config(self) -> dict:
        return {'hf': self.model.config.to_dict()}

    @classmethod
    def from_checkpoint_config(cls, raw: dict, tokenizer=None) -> 'HFPolicy':
        transformers = _transformers()
        cfg = dict(raw['hf'])
        config = transformers.AutoConfig.for_model(cfg.pop('model_type'), **cfg)
        attn = cfg.get('_attn_implementation') or 'sdpa'
        return cls(transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn), tokenizer)

    def __repr__(self):
        n = sum(p.numel() for p in self.parameters())
        return f'HFPolicy({self.arch}, vocab {self.vocab_size}, {n / 1e6:.2f} M parameters)'
