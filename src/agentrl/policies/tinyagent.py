"""TinyAgent: a small causal transformer policy with a key/value cache (docs/tinyagent.md).

Read top to bottom, small to large: config, the cache, attention, MLP, block, the model; then the
two functions the chapter calls on it, ``sequence_log_probs`` and ``entropy_from_logits``.

Shapes: B batch, T sequence, C new tokens in a cached step, S cached length, V vocabulary,
d model width, nh heads, hs head size (d = nh * hs).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..rendering.tokenizer import PAD_ID


@dataclass
class TinyAgentConfig:
    """Shape of a TinyAgent."""
    vocab_size: int
    """Number of token ids (the tokenizer's ``vocab_size``)."""
    d_model: int = 96
    """Width of the residual stream. At 64 some held-out functions transfer poorly; 96 transfers all."""
    n_layers: int = 2
    """Transformer blocks."""
    n_heads: int = 4
    """Attention heads per block (head size d_model / n_heads)."""
    block_size: int = 320
    """Longest sequence; the env's ``max_tokens`` must not exceed it."""
    rotary_frac: float = 0.0
    """Share of each head's dims that carry rotary positions; the rest match on content alone. The
    default 0 gives no position signal at all (NoPE): order is known only through the causal mask
    and the template tokens, so the op decision looks up the source's family cue by content, and a
    policy trained on demos without the ``<tool>`` wrappers loses its bearings (section 15.6). Half
    rotary dims (0.5, the earlier default, with temperature 8) transferred to held-out functions at fewer seeds."""
    qk_temperature: float = 3.0
    """Initial scale of the cosine attention logits (learned per head, but it moves little in the
    chapter's budgets). At 3 the op decision starts out attending broadly over the source, where the
    family cue is the signal shared by four train functions; at 8 it starts peaked on a few random
    tokens, and at some seeds it settles on the function name instead (held-out transfer fails).
    3 rather than 4 (the 0.2 default) also slows RL from the weak base, which at 4 learned the
    train functions' names too well for section 15.5 at a third of the seeds (docs/tinyagent.md)."""
    abs_pos_std: float = 0.0
    """Init std of learned absolute position embeddings added to the input; 0 (default) leaves them
    out. With them, a policy trained on demos rendered without the template wrappers breaks on
    rollouts (section 15.6's mismatch), but it also memorises function names by position and
    transfers worse to held-out functions (``scripts/ablate_transfer.py`` measures both)."""
    init_std: float = 0.05
    """Std of the initial weights. Larger than GPT-2's 0.02: with Adam at the chapter's lr 3e-3,
    a cue in the source then reaches the op logit within ten or twenty steps."""

    def __post_init__(self):
        for name in ('vocab_size', 'd_model', 'n_layers', 'n_heads', 'block_size'):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        if self.d_model % self.n_heads:
            raise ValueError(f'd_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})')
        if not 0.0 <= self.rotary_frac <= 1.0:
            raise ValueError(f'rotary_frac must lie in [0, 1], got {self.rotary_frac!r}')
        if not self.abs_pos_std >= 0:
            raise ValueError(f'abs_pos_std must be >= 0, got {self.abs_pos_std!r}')
        if not self.init_std > 0:
            raise ValueError(f'init_std must be > 0, got {self.init_std!r}')
        if not self.qk_temperature > 0:
            raise ValueError(f'qk_temperature must be > 0, got {self.qk_temperature!r}')

    @property
    def rotary_dims(self) -> int:
        """Dims per head that rotate with position (an even number)."""
        return int(self.d_model // self.n_heads * self.rotary_frac) // 2 * 2


class Rotary(nn.Module):
    """Rotary position embedding on the first ``dims`` dims of each head (RoPE, Su et al. 2021).

    Only *relative* position reaches the attention scores, so no token sits at an absolute
    position the model could memorise (a prompt's function name, say); the remaining dims of
    each head compare content alone, which is how the policy finds a family cue anywhere in a source.
    """

    def __init__(self, dims: int, block_size: int, base: float = 10000.0):
        super().__init__()
        self.dims = dims
        inv = 1.0 / base ** (torch.arange(0, dims, 2).float() / max(dims, 1))  # (dims/2,)
        angles = torch.arange(block_size).float()[:, None] * inv[None, :]  # (block, dims/2)
        self.register_buffer('cos', angles.cos()[:, None, :], persistent=False)  # (block, 1, dims/2)
        self.register_buffer('sin', angles.sin()[:, None, :], persistent=False)

    def forward(self, x, positions):
        """x (..., T, h, hs), positions (T,) or (..., T) -> x with each head's first ``dims`` dims rotated."""
        if self.dims == 0:
            return x
        cos, sin = self.cos[positions], self.sin[positions]  # (..., T, 1, dims/2)
        x1, x2 = x[..., :self.dims:2], x[..., 1:self.dims:2]  # (..., T, h, dims/2) each
        rot = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)  # (..., T, h, dims)
        return torch.cat((rot, x[..., self.dims:]), dim=-1)


class KVCache:
    """Keys and values of every layer for a batch of sequences that grow at different speeds.

    Row ``b`` holds ``lengths[b]`` valid positions; a cached forward writes its new tokens at
    positions ``lengths[b] .. lengths[b] + C - 1`` and attends causally by absolute position, so
    rows with different prefix lengths share one batched forward.

    Storage is allocated uninitialised and doubled when full (copying only the positions in use),
    and positions are zeroed only as the batch first reaches them (``ready``): a masked position
    must hold a finite value, since softmax weight 0 times NaN is NaN. ``keep`` copies only the
    positions in use.
    """

    def __init__(self, n_layers, batch, n_heads, capacity, head_size, dtype=torch.float32):
        shape = (batch, n_heads, capacity, head_size)  # (B, nh, S_max, hs)
        self.k = [torch.empty(shape, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.empty(shape, dtype=dtype) for _ in range(n_layers)]
        self.lengths = torch.zeros(batch, dtype=torch.long)  # (B,)
        self.capacity = capacity
        self.ready = 0  # positions [0, ready) of every row hold finite values (written or zeroed)

    def reserve(self, needed: int):
        """Make positions [0, needed) usable in every row: grow the storage if it is too short (to twice
        its size, or 16 past ``needed`` if that is more), then zero what no row has reached yet (in steps of 16)."""
        if needed > self.capacity:
            new = max(needed + 16, 2 * self.capacity)  # room for the sampling steps after a long reply

            def grow(t):
                out = t.new_empty(t.shape[0], t.shape[1], new, t.shape[3])  # (B, nh, new, hs)
                out[:, :, :self.ready] = t[:, :, :self.ready]
                return out
            self.k, self.v = [grow(k) for k in self.k], [grow(v) for v in self.v]
            self.capacity = new
        if needed > self.ready:
            end = min(-(-needed // 16) * 16, self.capacity)
            for t in self.k + self.v:
                t[:, :, self.ready:end].zero_()
            self.ready = end

    def keep(self, rows: torch.Tensor):
        """Drop every row not in ``rows`` (finished episodes leave the batch)."""
        def take(t):
            out = t.new_empty(len(rows), t.shape[1], t.shape[2], t.shape[3])  # (b, nh, S_max, hs)
            torch.index_select(t[:, :, :self.ready], 0, rows, out=out[:, :, :self.ready])
            return out
        self.k, self.v = [take(k) for k in self.k], [take(v) for v in self.v]
        self.lengths = self.lengths.index_select(0, rows)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with QK-norm: logits are ``g * cos(q, k)``, ``g`` learned per head.

    Normalising queries and keys keeps the logits in a trained range from the first step, so a
    head can sharpen onto a cue token in tens of steps (cosine attention; cf. QK-norm in OLMo 2).
    """

    def __init__(self, cfg: TinyAgentConfig, rotary: Rotary):
        super().__init__()
        self.n_heads, self.head_size = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.temperature = nn.Parameter(torch.full((cfg.n_heads, 1, 1), float(cfg.qk_temperature)))
        self.rotary = rotary

    def _qkv(self, x, positions):
        """x (..., T, d) -> q, k, v, each (..., T, nh, hs): QK-norm, rotary and temperature applied.

        Queries and keys are normalised (and rotated) together, as one (..., T, 2 nh, hs) tensor.
        """
        nh, hs = self.n_heads, self.head_size
        qkv = self.qkv(x).unflatten(-1, (3 * nh, hs))  # (..., T, 3nh, hs)
        qk = self.rotary(F.normalize(qkv[..., :2 * nh, :], dim=-1), positions)  # (..., T, 2nh, hs)
        q = qk[..., :nh, :] * self.temperature.view(nh, 1)  # (..., T, nh, hs)
        return q, qk[..., nh:, :], qkv[..., 2 * nh:, :]

    def forward(self, x, positions):
        """x (B, T, d), positions (T,) -> (B, T, d): causal self-attention over the whole sequence."""
        B, T, d = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x, positions))  # (B, nh, T, hs) each
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, d))  # (B, T, d)

    def forward_cached(self, x, rows, positions, cache, layer, mask):
        """x (b, C, d): C new tokens of cache rows ``rows`` (b,) at absolute ``positions`` (b, C) -> (b, C, d).

        ``rows`` None means every row of the cache, in order. Keys and values go into the cache at
        their positions, then the queries attend to each row's cached prefix under ``mask``
        (b, 1, C, S), additive. A row's padding tokens are computed too: their keys land past its
        real tokens, where the row's next real tokens overwrite them before any query attends there.
        """
        b, C, d = x.shape
        q, k, v = self._qkv(x, positions)  # (b, C, nh, hs) each
        at = (torch.arange(b) if rows is None else rows)[:, None]  # (b, 1)
        cache.k[layer][at, :, positions] = k  # (b, C, nh, hs) into (B, nh, S_max, hs)
        cache.v[layer][at, :, positions] = v
        S = mask.shape[-1]
        keys, values = cache.k[layer][:, :, :S], cache.v[layer][:, :, :S]  # (B, nh, S, hs)
        if rows is not None:
            keys, values = keys[rows], values[rows]  # (b, nh, S, hs)
        if C == 1:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, scale=1.0)  # (b, nh, 1, hs)
        else:  # a prefill: two batched matmuls beat the CPU flash kernel 1.5-2x at these few queries per row
            att = torch.matmul(q.transpose(1, 2), keys.transpose(-1, -2))  # (b, nh, C, S)
            y = torch.matmul(att.add_(mask).softmax(-1), values)  # (b, nh, C, hs)
        return self.proj(y.transpose(1, 2).reshape(b, C, d))  # (b, C, d)


class MLP(nn.Module):
    def __init__(self, cfg: TinyAgentConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: TinyAgentConfig, rotary: Rotary):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn, self.mlp = CausalSelfAttention(cfg, rotary), MLP(cfg)

    def forward(self, x, positions):
        x = x + self.attn(self.ln1(x), positions)
        return x + self.mlp(self.ln2(x))

    def forward_cached(self, x, rows, positions, cache, layer, mask):
        x = x + self.attn.forward_cached(self.ln1(x), rows, positions, cache, layer, mask)
        return x + self.mlp(self.ln2(x))


class TinyAgent(nn.Module):
    """A small causal transformer policy: ``model(ids [B, T]) -> logits [B, T, V]`` (docs/tinyagent.md).

    Pre-norm blocks with cosine (QK-norm) attention, no position embedding by default (rotary
    positions on part of each head are a knob), and an output head separate from the input embedding. Why these choices: with absolute positions the policy
    memorises the function name at its fixed prompt slot instead of reading the source, and with a
    tied head the never-predicted names of held-out functions drift into noise; both block transfer
    to held-out functions (``scripts/ablate_transfer.py`` measures each choice; see docs/tinyagent.md).
    Weights start small, so logits start near uniform (loss near log V). Right padding is safe:
    attention is causal, so pad tokens after a sequence never change its logits, and the padding
    is not computed at all (trailing id 0 is padding, or pass ``lengths``: see ``forward``).
    """

    def __init__(self, vocab_size: int, d_model: int = TinyAgentConfig.d_model, n_layers: int = TinyAgentConfig.n_layers,
                 n_heads: int = TinyAgentConfig.n_heads, block_size: int = TinyAgentConfig.block_size,
                 rotary_frac: float = TinyAgentConfig.rotary_frac, qk_temperature: float = TinyAgentConfig.qk_temperature,
                 abs_pos_std: float = TinyAgentConfig.abs_pos_std, init_std: float = TinyAgentConfig.init_std):
        # the defaults are TinyAgentConfig's (documented there), so a new default is changed in one place
        super().__init__()
        self.config = cfg = TinyAgentConfig(vocab_size, d_model, n_layers, n_heads, block_size, rotary_frac,
                                            qk_temperature, abs_pos_std, init_std)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        rotary = Rotary(cfg.rotary_dims, 2 * cfg.block_size)  # room for a padded chunk past the end
        self.blocks = nn.ModuleList(Block(cfg, rotary) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=cfg.init_std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        self.pos_emb = None
        if cfg.abs_pos_std > 0:
            self.pos_emb = nn.Embedding(2 * cfg.block_size, cfg.d_model)
            nn.init.normal_(self.pos_emb.weight, std=cfg.abs_pos_std)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def _check_ids(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
            raise TypeError(f'ids must be a LongTensor [B, T], got '
                            f'{type(ids).__name__ if not isinstance(ids, torch.Tensor) else (ids.dtype, tuple(ids.shape))}')
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size):
            raise ValueError(f'ids must lie in [0, {self.config.vocab_size}) (the vocabulary), '
                             f'got values in [{int(ids.min())}, {int(ids.max())}]')

    def forward(self, ids: torch.Tensor, lengths=None) -> torch.Tensor:
        """ids (B, T) -> logits (B, T, V). Rows may be right-padded; only their real tokens are computed.

        A row's real length is ``lengths[b]`` when ``lengths`` (B,) is given (``collate``'s
        ``batch['lengths']``); otherwise it is read off the ids: **trailing id 0 is padding**
        (``<pad>`` is id 0 in every agentrl vocabulary, ``tokenizer.PAD_ID``), so a row is T long
        minus its run of trailing 0s (``lengths_from_padding``). A batch with no padding takes the
        plain forward; otherwise rows are grouped into a few buckets of similar length, so little
        padding is computed (``length_buckets``). Attention is causal, so the logits of every real
        position are the plain forward's (to float rounding); those at padded positions are
        meaningless (0 past a bucket's width). Pass ``lengths`` when a row's own tokens may end in
        id 0 (a sampled ``<pad>``): read off the ids, those tokens would count as padding.
        """
        self._check_ids(ids)
        B, T = ids.shape
        if T > self.config.block_size:
            raise ValueError(f'sequence of {T} tokens is longer than block_size {self.config.block_size}')
        lengths = lengths_from_padding(ids) if lengths is None else self._check_lengths(lengths, B, T)
        if not B or bool((lengths == T).all()):
            return self._forward(ids)
        logits = None
        for rows, width in length_buckets(lengths.clamp(min=1)):
            part = self._forward(ids[rows, :width])  # (b, width, V)
            if logits is None:
                logits = part.new_zeros(B, T, part.shape[-1])  # (B, T, V)
            logits[rows[:, None], torch.arange(width)[None, :]] = part
        return logits

    @staticmethod
    def _check_lengths(lengths, B: int, T: int) -> torch.Tensor:
        lengths = torch.as_tensor(lengths)
        if lengths.shape != (B,) or lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise ValueError(f'lengths must hold one integer per row ({B}), got {lengths.dtype} {tuple(lengths.shape)}')
        if B and (int(lengths.min()) < 0 or int(lengths.max()) > T):
            raise ValueError(f'lengths must lie in [0, {T}] (the sequence length), '
                             f'got values in [{int(lengths.min())}, {int(lengths.max())}]')
        return lengths.long()

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The plain forward: ids (B, T) -> logits (B, T, V), every position computed."""
        B, T = ids.shape
        positions = torch.arange(T)
        x = self.tok_emb(ids)  # (B, T, d)
        if self.pos_emb is not None:
            x = x + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x, positions)
        return self.head(self.ln_f(x))  # (B, T, V)

    # --- cached decoding, used by rollouts
    def new_cache(self, batch: int, capacity: int = 16) -> KVCache:
        """An empty cache for ``batch`` sequences, with room for ``capacity`` positions; it doubles as
        needed. Starting small keeps each row's keys close together in memory (a short rollout's
        cache then touches a third of the memory pages, and its sampling steps run 1.35x faster)."""
        cfg = self.config
        return KVCache(cfg.n_layers, batch, cfg.n_heads, capacity, cfg.d_model // cfg.n_heads, self.tok_emb.weight.dtype)

    def forward_cached(self, ids: torch.Tensor, n_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Feed a chunk through the cache -> logits (B, V) at each row's last new token.

        ids (B, C): row b's new tokens are ``ids[b, :n_new[b]]`` (the rest is padding). They are
        written at positions ``cache.lengths[b] ...`` and the lengths advance by ``n_new``. A row
        with ``n_new[b] == 0`` is left as it was; its logits are 0.

        A one-token chunk (a sampling step) runs every row at once, a row without a new token on
        a dummy one, unless fewer than a quarter of the rows have one: then only those rows run. Longer chunks (prompt and reply prefills) run in a few groups of rows with
        similar ``n_new`` (``length_buckets``), each as one dense (rows, width) forward, so little
        padding is computed. Padding and dummy tokens only ever write past a row's real tokens.
        """
        B, C = ids.shape
        start = cache.lengths  # (B,)
        longest = int((start + n_new).max()) if B else 0
        if longest > self.config.block_size:
            raise ValueError(f'sequence of {longest} tokens is longer than block_size {self.config.block_size}')
        if C == 1:
            real = (n_new > 0).nonzero().squeeze(1)  # (b,) rows with a new token
            # most rows still writing their call: all rows at once, dummies included (no gather of their
            # cached keys); a few stragglers (a long call): those rows alone
            groups = [(None, 1)] if len(real) * 4 >= B else [(real, 1)] if len(real) else []
        else:
            real = (n_new > 0).nonzero().squeeze(1)  # (b,) rows with new tokens
            groups = [(real[g], w) for g, w in length_buckets(n_new[real])] if len(real) else []
            if len(groups) == 1 and len(real) == B:
                groups = [(None, groups[0][1])]
        cache.reserve(max((int(start.max() if r is None else start[r].max()) + w for r, w in groups), default=0))
        logits = None
        for rows, width in groups:
            st, nn_ = (start, n_new) if rows is None else (start[rows], n_new[rows])  # (b,) each
            positions = st[:, None] + torch.arange(width)[None, :]  # (b, width)
            S = int(positions.max()) + 1
            mask = torch.zeros(len(st), 1, width, S).masked_fill_(
                torch.arange(S)[None, None, None, :] > positions[:, None, :, None], float('-inf'))  # (b, 1, width, S)
            x = self.tok_emb(ids[:, :width] if rows is None else ids[rows, :width])  # (b, width, d)
            if self.pos_emb is not None:
                x = x + self.pos_emb(positions)
            for i, block in enumerate(self.blocks):
                x = block.forward_cached(x, rows, positions, cache, i, mask)
            h = x[torch.arange(len(st)), (nn_ - 1).clamp(min=0)]  # (b, d): each row's last new token
            out = self.head(self.ln_f(h))  # (b, V)
            if rows is None:
                logits = out
            else:
                logits = out.new_zeros(B, out.shape[1]) if logits is None else logits
                logits[rows] = out
        if logits is None:
            logits = torch.zeros(B, self.config.vocab_size)
        cache.lengths = start + n_new
        return logits.masked_fill_((n_new == 0)[:, None], 0.0)  # (B, V)


def lengths_from_padding(ids: torch.Tensor) -> torch.Tensor:
    """Real length of each row of right-padded ids: ids (B, T) -> (B,), T minus the row's run of trailing 0s.

    Id 0 is ``<pad>`` in every agentrl vocabulary (``tokenizer.PAD_ID``) and ``collate`` pads with
    it, so for a batch of our trajectories this is ``batch['lengths']``, unless a trajectory's own
    last token is id 0 (then that token counts as padding too). A 0 inside a row is a token like any other.
    """
    real = ids != PAD_ID  # (B, T)
    return (real * torch.arange(1, ids.shape[1] + 1)).amax(1) if ids.shape[1] else real.sum(1)  # (B,)


def length_buckets(lengths: torch.Tensor, max_buckets: int = 4, overhead: int = 256) -> list:
    """Split rows into at most ``max_buckets`` groups of similar length -> [(row indices, width)].

    Chooses the split that minimises the padded tokens computed, ``sum(len(rows) * width)``,
    plus ``overhead`` tokens per extra group (a forward pass has a fixed cost), by dynamic
    programming over the distinct lengths, longest first.
    """
    order = torch.argsort(lengths, descending=True, stable=True)
    widths, counts = torch.unique_consecutive(lengths[order], return_counts=True)
    widths, cum = widths.tolist(), [0] + torch.cumsum(counts, 0).tolist()
    u, INF = len(widths), float('inf')
    best = [[INF] * (u + 1) for _ in range(max_buckets + 1)]  # best[k][i]: first i distinct lengths in k groups
    cut = [[0] * (u + 1) for _ in range(max_buckets + 1)]
    best[0][0] = 0
    for k in range(1, max_buckets + 1):
        for i in range(1, u + 1):
            for j in range(k - 1, i):  # this group holds distinct lengths j..i-1; its width is widths[j]
                c = best[k - 1][j] + (cum[i] - cum[j]) * widths[j] + (overhead if j else 0)
                if c < best[k][i]:
                    best[k][i], cut[k][i] = c, j
    k = min(range(1, max_buckets + 1), key=lambda k: best[k][u])
    groups, i = [], u
    while i > 0:
        j = cut[k][i]
        groups.append((order[cum[j]:cum[i]], widths[j]))
        i, k = j, k - 1
    return groups[::-1]
