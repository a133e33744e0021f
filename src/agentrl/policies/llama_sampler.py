"""A lean cached forward of the Llama family for lockstep sampling (``HFPolicy.forward_cached`` on Llama models).

A decoding step of SmolLM2-135M over 40 rows through ``transformers`` costs about five times its weight products: the
attention masks rebuilt in every layer, the key/value heads repeated for eager attention, the cache's bookkeeping and
thirty layers of module calls around products of 40 rows. This module computes the same function of the ids from the
model's own weights, with the products as the step's main cost:

- **Weights for sampling** (``SamplerWeights``): every linear layer with its LoRA adapters merged in (``W + s B A``,
  rebuilt when the adapters change: each weight's version counter is compared), the query/key/value projections
  fused into one matrix and the gate/up projections into another, transposed once and stored in the precision the
  policy samples in (bfloat16 under bf16 autocast, else float32). The residual stream, the norms and the softmax
  stay in float32.
- **A cache laid out for lockstep rows** (``LockstepCache``): per layer one key and one value tensor
  ``(B, kv_heads, capacity, head_dim)``, each row's tokens packed from slot 0 (slot = position), the capacity a
  multiple of ``BLOCK`` just above the longest row: no repeated heads, no copy of the cache at each step, one mask a
  call for every layer.
- **Between the products, one pass each**: in bfloat16 on the CPU the compiled kernels of ``decode_kernels.c``
  (``native``) do a decoding step's attention whole (rotary positions, the cache write, scores, softmax, values, the
  query heads of a key/value head reading it once) and every norm and SwiGLU; a chunk of several tokens (a tool's
  reply) attends with torch's fused attention. Without a C compiler, torch does all of it (two batched products
  for one token a row).
- **The output layer only where it is read**: each fed row's last new token.

On SmolLM2-135M over 40 rows after 250 tokens (``agentrl bench --policy smollm2``) a step costs 1.7 times its
weight products where ``transformers``' forward costs about eight: what remains is reading the cache (230 MB a step
at that size), which this machine's memory bandwidth sets (``docs/speed.md``).

``lean_reason(model)`` says why a model cannot take this path (another architecture, a bias, a rope scaling that
changes with length, DoRA adapters); ``HFPolicy`` then keeps ``transformers``' own forward. The logits are the
model's, rounded in another order: ``tests/test_sampler.py`` bounds them against a full forward (float32 1e-4).
"""
from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F

BLOCK = 64
"""The cache's capacity grows in steps of this many slots (a step of growth copies the cache once)."""
STATIC_ROPE = ('default', 'linear', 'llama3')
"""Rope types whose frequencies do not change with the sequence's length (``rotary_emb.inv_freq`` holds them)."""
KEPT = 2
"""How many policies keep their sampling weights at once in a process (each holds a copy of the model's weights in
the sampling precision: 270 MB for SmolLM2 in bfloat16); the least recently sampled one drops its copy."""


def _lora_layer(module):
    """``module`` if it is a ``peft`` LoRA linear layer, else None."""
    return module if hasattr(module, 'lora_A') and hasattr(module, 'base_layer') else None


def lean_reason(model) -> str | None:
    """Why ``model`` (a ``transformers`` causal LM) cannot take the lean path, or None when it can."""
    cfg = model.config
    if cfg.model_type != 'llama':
        return f'{cfg.model_type} is not a Llama'
    if getattr(cfg, 'attention_bias', False) or getattr(cfg, 'mlp_bias', False):
        return 'its projections have biases'
    if getattr(cfg, 'hidden_act', 'silu') != 'silu':
        return f'its MLP activation is {cfg.hidden_act}'
    rope = (getattr(cfg, 'rope_parameters', None) or getattr(cfg, 'rope_scaling', None) or {}).get('rope_type', 'default')
    if rope not in STATIC_ROPE:
        return f'its rope type {rope!r} changes with the length'
    for module in model.modules():
        lora = _lora_layer(module)
        if lora is not None and any(getattr(lora, 'use_dora', {}).get(a) for a in lora.active_adapters):
            return 'it has DoRA adapters'
    return None


def _effective_weight(module) -> torch.Tensor:
    """The weight ``module`` (a linear layer, or a ``peft`` LoRA layer around one) applies, in float32: the base
    weight plus each active adapter's ``scaling * B @ A`` (none while the adapters are disabled or merged)."""
    lora = _lora_layer(module)
    if lora is None:
        return module.weight.detach().float()
    weight = lora.base_layer.weight.detach().float()
    if lora.disable_adapters or lora.merged:
        return weight
    for name in lora.active_adapters:
        if name in lora.lora_A:
            weight = weight + lora.get_delta_weight(name).detach().float()
    return weight


def _state(module) -> tuple:
    """What ``_effective_weight(module)`` depends on: each tensor's storage and version, and the adapters' state."""
    params = tuple((p.data_ptr(), p._version) for p in module.parameters())
    lora = _lora_layer(module)
    return params if lora is None else (params, tuple(lora.active_adapters), lora.disable_adapters, lora.merged)


class SamplerWeights:
    """The weights of one Llama model as the lean forward reads them (see the module docstring).

    ``layers[i]`` holds ``(ln1, w_qkv, w_o, ln2, w_gate_up, w_down)``: the norms' weights in float32, each product's
    matrix transposed to ``(in, out)`` in ``dtype``; ``head`` is the output layer's ``(d, V)``."""

    def __init__(self, model, dtype: torch.dtype):
        cfg = model.config
        self.dtype = dtype
        self.n_heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, 'head_dim', None) or cfg.hidden_size // cfg.num_attention_heads
        self.intermediate = cfg.intermediate_size
        self.eps = cfg.rms_norm_eps
        self.fingerprint = fingerprint(model)
        body = model.model
        t = lambda *ws: torch.cat([_effective_weight(w) for w in ws]).t().to(dtype).contiguous()  # noqa: E731
        self.layers = []
        for layer in body.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((layer.input_layernorm.weight.detach().float(), t(a.q_proj, a.k_proj, a.v_proj),
                                t(a.o_proj), layer.post_attention_layernorm.weight.detach().float(),
                                t(m.gate_proj, m.up_proj), t(m.down_proj)))
        self.embed = body.embed_tokens.weight.detach()  # (V, d), float32: the residual stream starts in float32
        self.norm = body.norm.weight.detach().float()
        self.head = t(model.get_output_embeddings())  # (d, V)
        self.inv_freq = body.rotary_emb.inv_freq.detach().float()  # (head_dim / 2,)
        self.rope_scale = float(getattr(body.rotary_emb, 'attention_scaling', 1.0))


def fingerprint(model) -> tuple:
    """A value that changes whenever a weight the lean forward reads changes (a training step, loaded tensors, an
    adapter switched on or off): each linear layer's ``_state``, the norms' and the embedding's versions."""
    return tuple(_state(m) for m in model.modules() if isinstance(m, torch.nn.Linear) or _lora_layer(m) is not None
                 ) + tuple((p.data_ptr(), p._version) for n, p in model.named_parameters() if 'norm' in n or 'embed' in n)


_RECENT: list = []
"""Weak references to the policies that last built their sampling weights, oldest first (``KEPT`` at most)."""


def sampler_weights(policy, dtype: torch.dtype) -> SamplerWeights:
    """``policy``'s sampling weights, built again when a weight they were built from has changed."""
    held = getattr(policy, '_sampler', None)
    if held is not None and held.dtype == dtype and held.fingerprint == fingerprint(policy.model):
        _touch(policy)
        return held
    policy._sampler = None  # the old copy goes before the new one is made
    with torch.no_grad():
        policy._sampler = SamplerWeights(policy.model, dtype)
    _touch(policy)
    return policy._sampler


def _touch(policy) -> None:
    """Make ``policy`` the most recent sampler; the least recent beyond ``KEPT`` drops its weights."""
    global _RECENT
    _RECENT = [r for r in _RECENT if r() is not None and r() is not policy] + [weakref.ref(policy)]
    while len(_RECENT) > KEPT:
        old = _RECENT.pop(0)()
        if old is not None:
            old._sampler = None


class LockstepCache:
    """The key/value cache of one lockstep batch on the lean path (see the module docstring): per layer ``k[i]`` and
    ``v[i]`` of ``(B, kv_heads, capacity, head_dim)``; row ``b``'s tokens in slots ``0 .. lengths[b] - 1``. It keeps
    the sampling weights it was made for (``weights``): every token it holds was computed with them."""

    def __init__(self, weights: SamplerWeights, batch: int, device='cpu'):
        self.weights = weights
        shape, dtype = (batch, weights.kv_heads, 0, weights.head_dim), weights.dtype
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in weights.layers]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in weights.layers]
        self.device = device
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)  # (B,) tokens in each row

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    def _resize(self, cap: int, rows=None) -> None:
        """Every layer's buffers at ``cap`` slots (new slots are zeros), keeping only ``rows`` if given."""
        for store in (self.k, self.v):
            for i, old in enumerate(store):
                if rows is not None:
                    old = old.index_select(0, rows)
                new = old.new_zeros(old.shape[0], old.shape[1], cap, old.shape[3])  # (B, kvh, cap, hd)
                n = min(cap, old.shape[2])
                new[:, :, :n] = old[:, :, :n]
                store[i] = new

    def reserve(self, longest: int) -> None:
        """Room for ``longest`` slots: the capacity grows to the next multiple of ``BLOCK`` (one copy of the cache)."""
        if longest > self.capacity:
            self._resize(BLOCK * math.ceil(longest / BLOCK))

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in ``rows`` (finished episodes leave the batch); the capacity shrinks to the longest."""
        rows = rows.to(self.device)
        self.lengths = self.lengths.index_select(0, rows)
        longest = int(self.lengths.max()) if len(rows) else 0
        self._resize(min(self.capacity, BLOCK * math.ceil(longest / BLOCK)), rows)

    def share(self, one: 'LockstepCache', n: int) -> None:
        """The first ``n`` slots of ``one`` (a cache of one row: a prefix every row starts with, fed once) copied into
        every row of this empty cache."""
        self.reserve(n)
        for mine, theirs in ((self.k, one.k), (self.v, one.v)):
            for x, y in zip(mine, theirs):
                x[:, :, :n] = y[:, :, :n]  # (B, kvh, n, hd) from one row's (1, kvh, n, hd)
        self.lengths[:] = n


@torch.no_grad()
def lean_forward(w: SamplerWeights, ids: torch.Tensor, n_new: torch.Tensor, cache: LockstepCache) -> tuple:
    """Feed row ``b``'s ``ids[b, :n_new[b]]`` (ids ``(B, C)``) into ``cache`` -> hidden states ``(m, d)`` after the
    final norm at each fed row's last new token, and the indices ``(m,)`` of those rows.

    In bfloat16 on the CPU, the steps between the products run in the compiled kernels (``native``) where they could
    be built: a decoding step's attention whole (rotary positions, the cache write, scores, softmax, values), and for
    a chunk the norms, SwiGLU and rotary positions, its attention being torch's fused one. Otherwise, torch alone."""
    lib = None
    if w.dtype == torch.bfloat16 and ids.device.type == 'cpu':
        from .native import kernels
        lib = kernels()
    B, C = ids.shape
    nh, kvh, hd, dt = w.n_heads, w.kv_heads, w.head_dim, w.dtype
    g, half = nh // kvh, hd // 2  # query heads per key/value head; rotary positions turn a head's two halves
    dev = ids.device
    n_new = n_new.contiguous()
    cols = torch.arange(C, device=dev)
    valid = cols[None, :] < n_new[:, None]  # (B, C) real new tokens
    positions = cache.lengths[:, None] + cols[None, :]  # (B, C): slot and position of each new token
    cache.reserve(int((cache.lengths + n_new).max()))
    S = cache.capacity
    decode = C == 1 and lib is not None  # the decoding kernel writes the cache and attends itself
    if not decode:
        rows, at = valid.nonzero(as_tuple=True)  # (n,), (n,): where the real tokens are
        at_slot = ((rows[:, None] * kvh + torch.arange(kvh, device=dev)) * S + positions[rows, at][:, None]).view(-1)
        # each new token sees its row's slots up to its own position; a padding column sees the same, never read
        seen = torch.arange(S, device=dev)[None, None, :] <= positions[:, :, None]  # (B, C, S)
        if C == 1:  # one token a row: two batched products (torch's fused attention is slower for one query)
            bias = torch.zeros(B, 1, S, device=dev).masked_fill_(~seen, float('-inf'))[:, None]  # (B, 1, 1, S)
    angles = positions[..., None].float() * w.inv_freq  # (B, C, hd/2)
    cos, sin = angles.cos() * w.rope_scale, angles.sin() * w.rope_scale  # (B, C, hd/2)
    x = w.embed[ids.masked_fill(~valid, 0)].float().view(B * C, -1)  # (B C, d) the residual stream
    d = x.shape[-1]
    rope = _Rope(lib, cos, sin, nh, kvh, hd ** -0.5, dt)
    delta = None  # the last product's output, added to the residual stream by the next norm
    for i, (ln1, w_qkv, w_o, ln2, w_gu, w_down) in enumerate(w.layers):
        h = _add_norm(lib, x, delta, ln1, w.eps, dt)  # (B C, d)
        qkv = torch.mm(h, w_qkv)  # (B C, (nh + 2 kvh) hd)
        if decode:
            from .native import ptr
            a = torch.zeros(B, nh * hd, dtype=dt)  # (B, nh hd); a row that is not fed keeps zeros
            lib.agentrl_decode_attention(ptr(qkv), ptr(rope.cos), ptr(rope.sin), ptr(cache.k[i]), ptr(cache.v[i]),
                                         ptr(cache.lengths), ptr(n_new), ptr(a), B, nh, kvh, hd, S, hd ** -0.5)
        else:
            q, k = rope(qkv)  # (B, C, nh, hd), (B, C, kvh, hd)
            # each real token's key and value into its slot: rows (b kvh + head) S + slot of the (B kvh S, hd) view
            cache.k[i].view(-1, hd).index_copy_(0, at_slot, k[rows, at].reshape(-1, hd))
            cache.v[i].view(-1, hd).index_copy_(0, at_slot, qkv.view(B, C, -1, hd)[rows, at, nh + kvh:].reshape(-1, hd))
            if C == 1:
                qt = q[:, 0].reshape(B * kvh, g, hd).transpose(1, 2)  # (B kvh, hd, g)
                kk, vv = cache.k[i].view(B * kvh, S, hd), cache.v[i].view(B * kvh, S, hd)  # no copy
                scores = torch.bmm(kk, qt).transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
                p = torch.softmax(scores.view(B, kvh, g, S).add_(bias), dim=-1).to(dt).view(B * kvh, g, S)
                a = torch.bmm(p, vv).view(B, nh * hd)  # (B, nh hd): query heads h g + j of key/value head h
            else:  # torch's fused attention, the query heads of a key/value head reading it in place
                a = F.scaled_dot_product_attention(q.transpose(1, 2), cache.k[i], cache.v[i], attn_mask=seen[:, None],
                                                   scale=1.0, enable_gqa=True)  # (B, nh, C, hd)
                a = a.transpose(1, 2).reshape(B * C, nh * hd)  # (B C, nh hd)
        h = _add_norm(lib, x, torch.mm(a, w_o), ln2, w.eps, dt)
        delta = torch.mm(_swiglu(lib, torch.mm(h, w_gu), w.intermediate), w_down)  # (B C, d)
    h = _add_norm(lib, x, delta, w.norm, w.eps, dt).view(B, C, d)  # the final norm
    cache.lengths = cache.lengths + n_new
    fed = (n_new > 0).nonzero().squeeze(1)  # (m,) rows that were fed
    return h[fed, n_new[fed] - 1], fed  # (m, d) each fed row's last new token


def _add_norm(lib, x: torch.Tensor, delta, weight: torch.Tensor, eps: float, dt) -> torch.Tensor:
    """``x += delta`` (a product's output, unless None) in place, then RMSNorm of ``x`` (rows, d) -> (rows, d) in ``dt``."""
    if lib is not None:
        from .native import ptr
        out = torch.empty(x.shape, dtype=dt)
        lib.agentrl_add_rmsnorm(ptr(x), None if delta is None else ptr(delta), ptr(weight), ptr(out), x.shape[0],
                                x.shape[1], eps)
        return out
    if delta is not None:
        x += delta
    return F.rms_norm(x, (x.shape[-1],), weight, eps).to(dt)


def _swiglu(lib, gu: torch.Tensor, n: int) -> torch.Tensor:
    """SwiGLU of the gate and up products side by side, ``gu`` (rows, 2 n) -> (rows, n)."""
    if lib is not None:
        from .native import ptr
        out = torch.empty(gu.shape[0], n, dtype=gu.dtype)
        lib.agentrl_silu_mul(ptr(gu), ptr(out), gu.shape[0], n)
        return out
    gate, up = gu.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)


class _Rope:
    """Rotary positions at given angles: ``rope(qkv)`` -> the query heads (times ``scale``) and the key heads rotated,
    ``(B, C, nh, hd)`` and ``(B, C, kvh, hd)`` in ``dt``; ``cos`` and ``sin`` ``(B, C, hd/2)`` kept for the kernels."""

    def __init__(self, lib, cos, sin, nh, kvh, scale, dt):
        self.lib, self.cos, self.sin = lib, cos.contiguous(), sin.contiguous()
        self.nh, self.kvh, self.scale, self.dt = nh, kvh, scale, dt
        if lib is None:  # torch: x cos + roll(x, half) sin', with sin' = (-sin, sin) and the queries' scale folded in
            factor = torch.ones(nh + kvh, 1, device=cos.device)
            factor[:nh] = scale
            self.cos_t = cos.repeat(1, 1, 2)[:, :, None] * factor  # (B, C, nh + kvh, hd)
            self.sin_t = torch.cat((-sin, sin), -1)[:, :, None] * factor

    def __call__(self, qkv: torch.Tensor) -> tuple:
        B, C, half = self.cos.shape
        nh, kvh, hd = self.nh, self.kvh, 2 * half
        if self.lib is not None:
            from .native import ptr
            q, k = torch.empty(B, C, nh, hd, dtype=self.dt), torch.empty(B, C, kvh, hd, dtype=self.dt)
            self.lib.agentrl_rope(ptr(qkv), ptr(self.cos), ptr(self.sin), ptr(q), ptr(k), B * C, nh, kvh, hd, self.scale)
            return q, k
        x = qkv.view(B, C, -1, hd)[:, :, :nh + kvh].float()  # (B, C, nh + kvh, hd)
        x = torch.addcmul(x * self.cos_t, x.roll(half, -1), self.sin_t).to(self.dt)
        return x[:, :, :nh], x[:, :, nh:]


def lean_logits(w: SamplerWeights, hidden: torch.Tensor) -> torch.Tensor:
    """Final-norm hidden states ``(m, d)`` -> logits ``(m, V)`` in float32, the product in the sampling precision."""
    return torch.mm(hidden.to(w.dtype), w.head).float()
