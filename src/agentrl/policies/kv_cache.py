"""A key/value cache for ``transformers`` models that grows by doubling (``HFPolicy``'s lockstep rollouts).

``transformers``'s ``DynamicCache`` appends by concatenation, so every decoding step copies the whole cache: at
SmolLM2's 30 layers and a batch of 120 episodes of 300 tokens, 1.6 GB a step. Here each layer keeps buffers of
twice the slots it needs and writes new keys and values in place; a step costs its own tokens. Imported only
where ``transformers`` is (``hf.HFPolicy.new_cache``).
"""
from __future__ import annotations

from transformers.cache_utils import Cache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """One layer's keys and values in buffers that grow by doubling, so appending C slots costs C slots (the default
    cache of ``transformers`` concatenates: every step copies the whole cache). Made by ``transformers``'s ``Cache``
    (``layer_class_to_replicate``); ``update`` returns views of the filled part."""

    is_sliding, is_compileable, is_croppable, supports_early_init = False, False, False, False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.n = 0  # slots filled

    def lazy_initialization(self, key_states, value_states):
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        C = key_states.shape[-2]
        if self.keys is None or self.n + C > self.keys.shape[-2]:
            cap = max(2 * (self.n + C), 64)
            grown = [x.new_empty((*x.shape[:-2], cap, x.shape[-1])) for x in (key_states, value_states)]  # (B, h, cap, d)
            if self.keys is not None:
                grown[0][..., :self.n, :], grown[1][..., :self.n, :] = self.keys[..., :self.n, :], self.values[..., :self.n, :]
            self.keys, self.values = grown
        self.keys[..., self.n:self.n + C, :] = key_states
        self.values[..., self.n:self.n + C, :] = value_states
        self.n += C
        return self.keys[..., :self.n, :], self.values[..., :self.n, :]

    def repeat_rows(self, batch: int):
        """One row's keys and values (a shared prefix, ``HFPolicy.prefill_shared``) copied into ``batch`` rows."""
        if self.keys is not None:
            self.keys = self.keys.expand(batch, -1, -1, -1).contiguous()  # (B, h, cap, d)
            self.values = self.values.expand(batch, -1, -1, -1).contiguous()

    def get_mask_sizes(self, query_length: int):
        return self.n + query_length, 0

    def get_seq_length(self) -> int:
        return self.n

    def get_max_length(self) -> int:
        return -1

    def batch_select_indices(self, indices):
        if self.keys is not None:
            self.keys, self.values = self.keys[indices], self.values[indices]

    def reset(self):
        self.keys = self.values = None
        self.n = 0


def growing_cache() -> Cache:
    """An empty cache of ``GrowingLayer``s (one is made per attention layer on first use)."""
    return Cache(layer_class_to_replicate=GrowingLayer)
