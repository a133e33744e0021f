"""``HFPolicy``: any ``transformers`` causal LM as an agentrl policy.

``HFPolicy`` wraps an ``AutoModelForCausalLM`` (built from a config, or ``from_pretrained`` on a
local folder) and its tokenizer, and implements the policy protocol of ``agentrl.rendering.protocols``, so
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

import copy
import inspect

import torch
import torch.nn as nn
import torch.nn.functional as F

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

    ``word_renderer(tok)`` renders an episode through it token for token as ``EpisodeBuilder`` does."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from ..rendering.tokenizer import BOS, END_TOOL, PAD, SPECIALS, STOP, TOOL, UNK
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


def word_renderer(tok):
    """``ChatRenderer(word_tokenizer(tok))`` for the word-level layout: no description of the calls, the environment's
    words as they are; it renders an episode token for token as ``EpisodeBuilder`` does."""
    from ..rendering.chat import ChatRenderer
    return ChatRenderer(word_tokenizer(tok), describe='none', readable=False)


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


SHARED_PREFIX = 32
"""``HFPolicy.shared_prefix``'s default: a chat template's system message is longer, a word-level prompt shorter."""


def dropping_out(module: nn.Module, config) -> bool:
    """Whether a forward of ``module`` now draws random noise: a dropout module with p > 0 in training mode (peft's
    LoRA dropout among them), or in training mode ``config``'s attention dropout (Llama's, applied inside attention).
    Rows of the same tokens then differ, and may not run as one."""
    if module.training and float(getattr(config, 'attention_dropout', 0) or 0) > 0:
        return True
    return any(isinstance(m, nn.Dropout) and m.p > 0 and m.training for m in module.modules())


def shared_columns(ids: torch.Tensor) -> int:
    """How many columns from the start every row of ``ids`` (B, T) holds the same token in."""
    differs = (ids != ids[:1]).any(0)  # (T,)
    return int(differs.float().argmax()) if bool(differs.any()) else ids.shape[1]


class HFCache:
    """The key/value cache of one ``HFPolicy`` batch: the model's cache (``hf_cache.growing_cache``), a 2-D mask over its
    slots (``mask[b, s] = 1`` where slot ``s`` holds a real token of row ``b``) and each row's length."""

    def __init__(self, kv, batch: int, device='cpu'):
        self.kv = kv
        self.mask = torch.zeros(batch, 0, dtype=torch.long, device=device)  # (B, S) over the cache's slots
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)  # (B,) real tokens per row

    def keep(self, rows: torch.Tensor):
        """Drop every row not in ``rows`` (finished episodes leave the batch)."""
        rows = rows.to(self.mask.device)
        if self.mask.shape[1]:
            self.kv.batch_select_indices(rows)
        self.mask, self.lengths = self.mask.index_select(0, rows), self.lengths.index_select(0, rows)


class HFPolicy(nn.Module):
    """A ``transformers`` causal LM as an agentrl policy (see the module docstring).

    Args:
        model: a causal LM (``AutoModelForCausalLM``) itself, not a wrapper around it (of peft's ``PeftModel``, its
            ``get_base_model()``: the causal LM with the LoRA layers in place); dropout should be off for rollouts to
            match training.
        tokenizer: its tokenizer (kept for ``renderer()`` and checkpoints; the recipes take theirs as ``tok``).
        precision: where and how it runs (``precision.Precision``, or ``precision.resolve``'s ``dtype`` and
            ``device`` as ``'fp32'``/``'bf16'`` and ``'cpu'``/``'cuda'``); default float32 on the CPU.
        source: how to build its pretrained weights again (``pretrained.load_pretrained``'s name or path), which a
            checkpoint of its LoRA adapters records instead of the weights; None for a model built from a config.
    """

    def __init__(self, model, tokenizer=None, precision=None, source: str | None = None):
        super().__init__()
        from .precision import Precision, resolve
        wrapper = 'a peft PeftModel' if hasattr(model, 'get_base_model') else \
            'a distributed wrapper' if isinstance(getattr(model, 'module', None), nn.Module) else None
        if wrapper is not None:  # its base_model is not the decoder: _hidden would get logits
            raise TypeError(f'HFPolicy holds the causal LM itself, not {wrapper} around it ({type(model).__name__}): '
                            'pass model.get_base_model() (peft) or model.module (DDP); '
                            'agentrl.integrations.trl.causal_lm unwraps any of them')
        self.precision = precision if isinstance(precision, Precision) else resolve(*(precision or ('fp32', 'cpu')))
        self.model = model.to(self.precision.device)
        self.train(model.training)  # the policy's mode is the model's (a loaded model is in eval mode: no dropout);
        # train() / eval() on the policy set both, and a rollout restores exactly the mode it found
        self.tokenizer = tokenizer
        self.source = source
        self.lora = None
        """The LoRA adapters (``lora.Adapters``), or None: every weight trains."""
        cfg = model.config
        self.max_positions = int(getattr(cfg, 'max_position_embeddings', None) or getattr(cfg, 'n_positions', 1 << 30))
        params = inspect.signature(model.base_model.forward).parameters
        self._cache_kw = 'cache' if 'cache' in params else 'past_key_values'
        self.shared_prefix = SHARED_PREFIX
        """Columns all rows of a batch must share from the start for them to run once (``_hidden``,
        ``prefill_shared``); a larger value than any sequence switches the sharing off."""
        self.lean_decoding = True
        """Cached sampling takes the lean path (``llama_sampler``) where the model allows it (``lean_reason``); False
        keeps ``transformers``' own forward for it."""
        self._sampler = None
        """The lean path's sampling weights (``llama_sampler.sampler_weights``), built on first use."""

    # --- construction
    @classmethod
    def from_config(cls, config, tokenizer=None, attn: str = 'sdpa', precision=None) -> 'HFPolicy':
        """A randomly initialised model of ``config`` (seed torch first for a reproducible init)."""
        transformers = _transformers()
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn)
        return cls(model, tokenizer, precision)

    @classmethod
    def from_pretrained(cls, path, tokenizer=None, precision=None, **kw) -> 'HFPolicy':
        """``AutoModelForCausalLM.from_pretrained(path)`` on a local folder (and its tokenizer, if ``tokenizer`` is
        None). ``pretrained.load_pretrained`` also takes a name (``'smollm2'``) or a ``.gguf`` file, and says what is
        missing in one line."""
        transformers = _transformers()
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
        if tokenizer is None:
            tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        return cls(model, tokenizer, precision, source=str(path))

    def renderer(self, **kw):
        """A ``ChatRenderer`` on this policy's tokenizer and its chat template."""
        from ..rendering.chat import ChatRenderer
        if self.tokenizer is None:
            raise ValueError('this HFPolicy has no tokenizer')
        return ChatRenderer(self.tokenizer, **kw)

    def __deepcopy__(self, memo):
        """A copy that trains apart from this policy: its own trainable weights, the frozen ones (the base model
        under LoRA adapters, which no recipe changes) and the tokenizer shared, so a copy costs the adapters."""
        for p in self.parameters():
            if not p.requires_grad:
                memo[id(p)] = p
        memo[id(self.tokenizer)] = self.tokenizer
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = None if k == '_sampler' else copy.deepcopy(v, memo)  # a copy builds its own when it samples
        return new

    # --- LoRA (``lora.py``)
    def add_lora(self, rank: int, alpha: float | None = None, seed: int = 0) -> 'HFPolicy':
        """Freeze every weight and train LoRA adapters of ``rank`` on every linear layer instead (``lora.add_lora``)."""
        from .lora import add_lora
        add_lora(self, rank, alpha, seed)
        return self

    def new_adapter(self, seed: int = 0) -> None:
        """Freeze the adapters trained so far and train a fresh one on top (``lora.Adapters.new``): what the policy is
        now becomes the reference ``adapter_off`` gives back."""
        self._adapters('new_adapter').new(seed)

    def adapter_off(self):
        """A context in which the newest adapter is switched off: the policy it was trained from (DPO's reference)."""
        return self._adapters('adapter_off').off()

    def _adapters(self, what):
        if self.lora is None:
            raise ValueError(f'{what}: this policy has no LoRA adapters (add_lora(rank) first)')
        return self.lora

    # --- the policy protocol
    @property
    def vocab_size(self) -> int:
        """The output layer's size, from the config (its text part's, for a model of several): a weight's shape is 0
        where it is sharded, as under DeepSpeed ZeRO-3. The output layer's rows for a config that does not say."""
        cfg = self.model.config
        size = getattr(cfg.get_text_config(decoder=True) if hasattr(cfg, 'get_text_config') else cfg, 'vocab_size', None)
        return int(size) if size else int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def arch(self) -> str:
        return self.model.config.model_type

    @property
    def device(self) -> torch.device:
        return torch.device(self.precision.device)

    def _check_ids(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
            raise TypeError('ids must be a LongTensor [B, T]')
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(f'ids must lie in [0, {self.vocab_size}) (the vocabulary)')
        if ids.shape[1] > self.max_positions:
            raise ValueError(f'sequence of {ids.shape[1]} tokens is longer than the model\'s {self.max_positions} positions')

    def _hidden(self, ids):
        """ids (B, T) -> last hidden states (B, T, d), on the policy's device, under its autocast.

        The columns every row shares from the start (a chat template's system message: the environment's calls,
        half of an episode's tokens) run once, as one row, when there are at least ``shared_prefix`` of them; the rows
        then attend to that one copy's keys and values. The same function of the ids (a causal model's prefix does
        not see what follows), its floats rounded in another order. Rows that are the same tokens (a group's episodes
        once its policy has settled on one answer) run once, each row then reading its copy's hidden states, unless
        a dropout is active (each row then draws its own noise)."""
        ids = ids.to(self.device)
        if ids.shape[0] > 1 and not dropping_out(self, self.model.config):
            distinct, copy_of = torch.unique(ids, dim=0, return_inverse=True)  # (U, T), (B,): row b is distinct[copy_of[b]]
            if len(distinct) < len(ids):
                return self._hidden(distinct)[copy_of]  # (B, T, d); a row's gradient sums over its copies
        B, T = ids.shape
        L = shared_columns(ids) if B > 1 else 0
        # an all-ones mask: every token is real (right padding is harmless to a causal model), which
        # transformers turns back into plain causal attention
        with self.precision.autocast():
            if L < self.shared_prefix or L >= T:
                return self.model.base_model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)[0]
            from transformers.cache_utils import DynamicCache
            kv = DynamicCache()
            first = self.model.base_model(input_ids=ids[:1, :L], use_cache=True, **{self._cache_kw: kv})
            for layer in kv.layers:  # one row's keys and values, seen by every row (a view: gradients sum over rows)
                layer.keys, layer.values = layer.keys.expand(B, -1, -1, -1), layer.values.expand(B, -1, -1, -1)
            rest = self.model.base_model(input_ids=ids[:, L:], attention_mask=torch.ones_like(ids),
                                         position_ids=torch.arange(L, T, device=ids.device).expand(B, -1),
                                         use_cache=True, **{self._cache_kw: kv})[0]  # (B, T-L, d)
            return torch.cat([first[0].expand(B, -1, -1), rest], dim=1)  # (B, T, d)

    def _head(self, h):
        """hidden states (..., d) -> logits (..., V) in float32: the output layer runs in float32 on the hidden states
        the body computed (in bfloat16 under bf16 autocast), so a logit of 20 carries no bfloat16 rounding (0.06-0.125
        at that size) into the log-probs a loss sums. Lockstep sampling's logits on the lean path are the sampler's own
        (``llama_sampler.lean_logits``, in the sampling precision)."""
        head = self.model.get_output_embeddings()
        return F.linear(h.float(), head.weight.float(), None if head.bias is None else head.bias.float())

    def forward(self, ids: torch.Tensor, lengths=None) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, V) in float32 on the CPU: one plain forward, every position computed.

        ``lengths`` (each row's real tokens, from the policy protocol) is accepted and not needed:
        right padding never changes a causal model's real logits.
        """
        self._check_ids(ids)
        return self._head(self._hidden(ids)).cpu()

    def masked_logits(self, ids: torch.Tensor, mask: torch.Tensor, lengths=None) -> torch.Tensor:
        """Next-token logits where ``mask`` (B, T-1) is non-zero -> (n, V) in float32 on the policy's device, in row-major
        order of those positions. The output layer (49,152 words for SmolLM2) runs only there: at the policy's tokens,
        a sixth of an episode's."""
        self._check_ids(ids)
        h = self._hidden(ids)[:, :-1]  # (B, T-1, d)
        return self._head(h[(mask != 0).to(self.device)])  # (n, V)

    def masked_log_probs(self, ids: torch.Tensor, mask: torch.Tensor, lengths=None) -> torch.Tensor:
        """``sequence_log_probs`` where ``mask`` (B, T-1) is non-zero, 0 elsewhere -> (B, T-1) on the CPU.

        The output layer and its softmax run only at those positions (``masked_logits``), the policy's tokens in a
        recipe's loss, where the plain forward computes them all. The same values as ``sequence_log_probs`` there
        (the same operations on the same hidden states)."""
        return self.masked_log_probs_and_logits(ids, mask, lengths)[0]

    def masked_log_probs_and_logits(self, ids: torch.Tensor, mask: torch.Tensor, lengths=None,
                                    temperature: float = 1.0) -> tuple:
        """``masked_log_probs`` and the logits it took them from (``masked_logits``'s, divided by ``temperature``) ->
        ((B, T-1) on the CPU, (n, V) on the policy's device): what ``sequence_log_probs`` computes given a ``mask``,
        and the logits a monitor reads (the action tokens' entropy)."""
        B, T = ids.shape
        where = (mask != 0).to(self.device)  # (B, T-1)
        logits = self.masked_logits(ids, mask, lengths)  # (n, V) at the masked positions only
        if temperature != 1:
            logits = logits / temperature
        targets = ids[:, 1:].to(self.device)[where]  # (n,)
        logp = -F.cross_entropy(logits, targets, reduction='none')  # (n,)
        out = torch.zeros(B, T - 1, device=self.device, dtype=logp.dtype)
        out = out.masked_scatter(where, logp)  # (B, T-1), 0 off the mask
        return out.cpu(), logits

    def lean_reason(self) -> str | None:
        """Why cached sampling does not take the lean path (``llama_sampler``), or None when it does: switched off
        (``lean_decoding = False``), or the model is not one it reads (``llama_sampler.lean_reason``)."""
        if not self.lean_decoding:
            return 'lean_decoding is off'
        from .llama_sampler import lean_reason
        return lean_reason(self.model)

    def new_cache(self, batch: int, capacity: int = 0):
        """An empty cache for ``batch`` sequences (``capacity`` is accepted for TinyAgent's signature): a
        ``llama_sampler.LockstepCache`` on the lean path (its sampling weights brought up to date with the model's), else
        an ``HFCache`` over ``transformers``' own forward."""
        if self.lean_reason() is None:
            from .llama_sampler import LockstepCache, sampler_weights
            return LockstepCache(sampler_weights(self, self.sampling_dtype), batch, self.device)
        from .kv_cache import growing_cache
        return HFCache(growing_cache(), batch, self.device)

    @property
    def sampling_dtype(self) -> torch.dtype:
        """The dtype of the lean path's products: bfloat16 under bf16 autocast, else float32."""
        return torch.bfloat16 if self.precision.dtype == 'bf16' else torch.float32

    def prefill_shared(self, chunks, cache) -> int:
        """Feed the tokens that every row's first chunk starts with (a chat template's system message) into the empty
        ``cache`` once, as one row, and give every row a copy of their keys and values -> how many tokens each row
        has been fed (0, and nothing done, when fewer than ``shared_prefix``). Every row keeps at least its last token
        for ``forward_cached``, whose logits are its first call's. The same function of the ids as feeding every row
        (``_hidden`` shares columns the same way); the lockstep rollout calls it before its first ``forward_cached``."""
        B = len(chunks)
        if B < 2 or bool(cache.lengths.any()):
            return 0
        most = min(len(c) for c in chunks) - 1  # each row keeps its last token
        L = shared_columns(torch.tensor([c[:most] for c in chunks], dtype=torch.long)) if most > 0 else 0
        if L < self.shared_prefix:
            return 0
        dev = self.device
        ids = torch.tensor([chunks[0][:L]], dtype=torch.long, device=dev)  # (1, L)
        if not isinstance(cache, HFCache):
            from .llama_sampler import LockstepCache, lean_forward
            one = LockstepCache(cache.weights, 1, dev)
            lean_forward(cache.weights, ids, torch.tensor([L], device=dev), one)
            cache.share(one, L)
            return L
        with self.precision.autocast():
            self.model.base_model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                  position_ids=torch.arange(L, device=dev)[None], use_cache=True,
                                  **{self._cache_kw: cache.kv})
        for layer in cache.kv.layers:
            layer.repeat_rows(B)
        cache.mask = torch.ones(B, L, dtype=torch.long, device=dev)  # (B, L)
        cache.lengths = torch.full((B,), L, dtype=torch.long, device=dev)
        return L

    def forward_cached(self, ids: torch.Tensor, n_new: torch.Tensor, cache) -> torch.Tensor:
        """Feed a chunk through the cache -> logits (B, V) in float32 on the CPU at each row's last new token.

        ids (B, C): row b's new tokens are ``ids[b, :n_new[b]]`` (the rest is padding: never attended to). A row with
        ``n_new[b] == 0`` is left as it was; its logits are 0, and the output layer runs for the other rows only."""
        B, C = ids.shape
        dev = self.device
        ids, n_new = ids.to(dev), n_new.to(dev)
        if bool(((cache.lengths + n_new) > self.max_positions).any()):
            raise ValueError(f'a sequence grew past the model\'s {self.max_positions} positions')
        if not isinstance(cache, HFCache):  # the lean path (llama_sampler), with the weights the cache was made for
            from .llama_sampler import lean_forward, lean_logits
            hidden, fed = lean_forward(cache.weights, ids, n_new, cache)  # (m, d), (m,)
            out = lean_logits(cache.weights, hidden)  # (m, V)
            if len(fed) < B:
                out = torch.zeros(B, self.vocab_size, device=dev).index_copy_(0, fed, out)  # (B, V)
            return out.cpu()
        logits = torch.zeros(B, self.vocab_size, device=dev)  # (B, V)
        cols = torch.arange(C, device=dev)
        valid = cols[None, :] < n_new[:, None]  # (B, C) real new tokens
        positions = (cache.lengths[:, None] + cols[None, :]).clamp(max=self.max_positions - 1)  # (B, C); padding: any
        mask = torch.cat([cache.mask, valid.long()], dim=1)  # (B, S + C) over the cache's slots
        ids = ids.masked_fill(~valid, 0)
        with self.precision.autocast():
            out = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                        **{self._cache_kw: cache.kv})
        h = out[0]  # (B, C, d) last hidden states
        rows = (n_new > 0).nonzero().squeeze(1)  # (m,) rows that were fed
        logits[rows] = self._head(h[rows, n_new[rows] - 1])  # (m, V): each fed row's last new token
        cache.mask, cache.lengths = mask, cache.lengths + n_new
        return logits.cpu()

    # --- checkpoints (agentrl.policies.checkpoint): the config as JSON, the weights (or only the adapters) as safetensors
    def checkpoint_config(self) -> dict:
        raw = {'hf': self.model.config.to_dict(), 'precision': [self.precision.dtype, self.precision.device]}
        if self.source is not None:
            raw['source'] = self.source
        if self.lora is not None:
            raw['lora'] = self.lora.config()
        return raw

    def checkpoint_tensors(self) -> dict:
        """What a checkpoint stores: the adapters' weights under LoRA on a pretrained ``source`` (the base is built
        again from it), else every weight."""
        if self.lora is not None and self.source is not None:
            return self.lora.state()
        return self.state_dict()

    @classmethod
    def from_checkpoint_config(cls, raw: dict, tokenizer=None, base=None) -> 'HFPolicy':
        """The policy a checkpoint's config describes, before its tensors are loaded (``load_checkpoint_tensors``).
        ``base``: the pretrained policy its ``source`` names, built by the caller (``checkpoint.load_model``)."""
        precision = tuple(raw.get('precision', ('fp32', 'cpu')))
        if base is not None:
            policy = base
        else:
            transformers = _transformers()
            cfg = dict(raw['hf'])
            config = transformers.AutoConfig.for_model(cfg.pop('model_type'), **cfg)
            attn = cfg.get('_attn_implementation') or 'sdpa'
            policy = cls(transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn), tokenizer,
                         precision)
        if raw.get('lora'):
            from .lora import Adapters
            Adapters.rebuild(policy, raw['lora'])
        if tokenizer is not None:
            policy.tokenizer = tokenizer
        return policy

    def load_checkpoint_tensors(self, tensors: dict) -> None:
        """Load what ``checkpoint_tensors`` stored (ValueError naming a missing or unexpected tensor)."""
        if self.lora is not None and self.source is not None:
            self.lora.load_state(tensors)
            return
        expected = self.state_dict()
        missing, extra = set(expected) - set(tensors), set(tensors) - set(expected)
        if missing or extra:
            raise ValueError(f'the checkpoint does not match the model: missing {sorted(missing)[:3]}, '
                             f'unexpected {sorted(extra)[:3]}')
        self.load_state_dict(tensors)

    def __repr__(self):
        n = sum(p.numel() for p in self.parameters())
        trained = sum(p.numel() for p in self.parameters() if p.requires_grad)
        lora = f', LoRA rank {self.lora.rank} ({trained / 1e6:.2f} M trained)' if self.lora is not None else ''
        return f'HFPolicy({self.arch}, vocab {self.vocab_size}, {n / 1e6:.2f} M parameters{lora}, {self.precision})'
