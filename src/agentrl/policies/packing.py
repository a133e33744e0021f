"""A causal LM whose decoder runs a padded batch as one packed row: no pad computed, the shared start computed once.

TRL's ``GRPOTrainer`` scores a batch of episodes as one (B, T) tensor, prompts padded on the left and completions on
the right, and every row starts with the same system message (the environment's calls described: more than half of
a short episode's tokens). Run as it is, the decoder computes the pads and B copies of that message.
``packed_forward(model)`` makes the decoder run such a batch as one row of its real tokens:

    [shared start | row 0's rest | row 1's rest | ...]        positions 0..S-1 | S..len_0-1 | S..len_1-1 | ...

each token attending to the shared start and to its own row's earlier tokens (a block mask), at the position it has in
its row alone. Rows of the same tokens (a group's completions once the policy has settled on one answer) are packed
once, unless a dropout is active (each row then draws its own noise). The hidden states go back to the (B, T) layout,
zeros at the pads, so what reads them (TRL's fused output layer, a causal LM's head) is unchanged, and gradients reach
the shared start from every row. The same function of the ids as the plain forward at every real token (a row's
positions counted from its first real token, as agentrl samples it), its floats rounded in another order
(``tests/test_packing.py`` bounds the difference and checks the gradients).

Only a call that asks for no cache (``use_cache=False``, as TRL's loss calls it) is packed; any other runs the decoder
as before (generation among them), as do calls with a cache, embeddings or positions given, hidden states or attention
weights asked for, a row with no real token, or a row whose real tokens are not one run.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .hf import dropping_out, shared_columns

PACKABLE = ('eager', 'sdpa')
"""The attention implementations that take a custom 4-D mask as ``packed_forward`` builds it."""
_UNPACKABLE_KW = ('past_key_values', 'cache', 'inputs_embeds', 'position_ids', 'cache_position')


@dataclass
class Packing:
    """How a (B, T) batch maps to one packed row of N tokens."""
    ids: torch.Tensor  # (1, N) the shared start, then each row's other real tokens, row after row
    positions: torch.Tensor  # (1, N) each token's position in its row
    segment: torch.Tensor  # (N,) -1 on the shared start, else the row the token belongs to
    index: torch.Tensor  # (B, T) where each cell's hidden state lies in the packed row; N at the pads

    def mask(self, implementation: str, dtype: torch.dtype) -> torch.Tensor:
        """(1, 1, N, N): token q sees token k when k <= q and k is the shared start or of q's own row. sdpa takes it as
        booleans (True: attend); eager adds it to the scores (0, or the dtype's most negative value)."""
        seg = self.segment
        N = seg.shape[0]
        order = torch.arange(N, device=seg.device)
        allowed = (order[None, :] <= order[:, None]) & ((seg[None, :] == -1) | (seg[None, :] == seg[:, None]))  # (N, N)
        if implementation == 'sdpa':
            return allowed[None, None]
        return torch.zeros(N, N, dtype=dtype, device=seg.device).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def plan_packing(ids: torch.Tensor, attention_mask: torch.Tensor, min_shared: int = 1,
                 merge_copies: bool = False) -> Packing | None:
    """ids and attention_mask (B, T) -> the ``Packing`` of their real tokens, or None where a row has no real token or
    its real tokens are not one run. The shared start is the longest run of tokens every row begins with (its first
    real token on), run once when at least ``min_shared`` long. ``merge_copies``: rows of the same real tokens in the
    same columns (a group's completions once its policy has settled on one answer) are packed once, every copy reading
    that one's hidden states."""
    if merge_copies and ids.shape[0] > 1:
        key = torch.cat([ids * attention_mask, attention_mask.to(ids.dtype)], 1)  # (B, 2T): the pads' ids do not count
        distinct, copy_of = torch.unique(key, dim=0, return_inverse=True)  # (U, 2T), (B,): row b = distinct[copy_of[b]]
        if len(distinct) < len(key):
            T = ids.shape[1]
            plan = plan_packing(distinct[:, :T], distinct[:, T:], min_shared)
            if plan is not None:
                plan.index = plan.index[copy_of]  # (B, T) each row reads its copy's cells
            return plan
    B, T = ids.shape
    real = attention_mask.bool()
    lengths = real.sum(1)  # (B,)
    if B == 0 or bool((lengths == 0).any()):
        return None
    starts = real.int().argmax(1)  # (B,) each row's first real column
    cols = torch.arange(T, device=ids.device)
    rel = cols[None, :] - starts[:, None]  # (B, T) a cell's place among its row's real tokens
    if not bool((real == ((rel >= 0) & (rel < lengths[:, None]))).all()):
        return None
    shortest = int(lengths.min())
    aligned = ids.gather(1, starts[:, None] + torch.arange(shortest, device=ids.device)[None, :])  # (B, shortest)
    S = shared_columns(aligned)
    S = S if S >= min_shared and B > 1 else 0
    own = real & (rel >= S)  # (B, T) the tokens each row runs itself
    rest = lengths - S  # (B,)
    offsets = S + torch.cumsum(rest, 0) - rest  # (B,) where each row's own tokens start in the packed row
    N = S + int(rest.sum())
    index = torch.where(rel < S, rel, offsets[:, None] + rel - S).masked_fill(~real, N)  # (B, T)
    packed = torch.cat([aligned[0, :S], ids[own]])  # (N,) row-major: row 0's own tokens, then row 1's, ...
    positions = torch.cat([torch.arange(S, device=ids.device), rel[own]])  # (N,)
    segment = torch.cat([torch.full((S,), -1, device=ids.device), torch.repeat_interleave(
        torch.arange(B, device=ids.device), rest)])  # (N,)
    return Packing(packed[None], positions[None], segment, index)


def packed_forward(model, min_shared: int = 1, max_tokens: int = 8192):
    """``model`` (a ``transformers`` causal LM) with its decoder running every padded batch it can as one packed row
    (the module docstring) -> the same model, changed in place. Call it before ``GRPOTrainer`` wraps the model (peft's
    LoRA layers go into the same decoder).

    Args:
        model: the causal LM, its attention ``'sdpa'`` or ``'eager'`` (``PACKABLE``; ValueError otherwise).
        min_shared: the fewest shared columns worth running once; a batch whose rows share fewer is still packed, its
            pads dropped.
        max_tokens: the most tokens a packed row holds: its attention is N x N, so a batch that packs into more
            runs the decoder as before.
    """
    decoder = getattr(model, 'base_model', None)
    if decoder is None or decoder is model or not callable(getattr(model, 'get_output_embeddings', None)):
        raise TypeError(f'{type(model).__name__} is not a transformers causal LM with a decoder (base_model); give '
                        'packed_forward the model before peft or TRL wrap it')
    implementation = model.config._attn_implementation
    if implementation not in PACKABLE:
        raise ValueError(f'packed_forward needs attention that takes a custom mask ({", ".join(PACKABLE)}); the model '
                         f"runs {implementation!r}: model.set_attn_implementation('sdpa') first")
    if getattr(decoder, 'packed', False):
        return model
    plain = decoder.forward

    def forward(input_ids=None, attention_mask=None, **kwargs):
        plan = None
        if (input_ids is not None and attention_mask is not None and attention_mask.dim() == 2
                and kwargs.get('use_cache') is False and not any(kwargs.get(k) is not None for k in _UNPACKABLE_KW)
                and not kwargs.get('output_hidden_states') and not kwargs.get('output_attentions')):
            plan = plan_packing(input_ids, attention_mask, min_shared,
                                merge_copies=not dropping_out(decoder, model.config))  # a dropout: each row its noise
            plan = plan if plan is not None and plan.ids.shape[1] <= max_tokens else None
        if plan is None:
            return plain(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in _UNPACKABLE_KW}  # each None here
        dtype = decoder.get_input_embeddings().weight.dtype
        out = plain(input_ids=plan.ids, attention_mask=plan.mask(implementation, dtype), position_ids=plan.positions,
                    **kwargs)
        hidden = out.last_hidden_state[0]  # (N, d)
        out.last_hidden_state = torch.cat([hidden, hidden.new_zeros(1, hidden.shape[-1])])[plan.index]  # (B, T, d)
        return out

    decoder.forward, decoder.packed = forward, True
    return model
