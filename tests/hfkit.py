"""Tokenizers and chat templates built locally for the Hugging Face tests (nothing is downloaded).

Two templates in the styles of real ones, each on its own byte-level BPE tokenizer trained here on
the gym's own text:

- ``chatml``: ``<|im_start|>role\\n content<|im_end|>\\n``, GPT-2's pre-tokenizer;
- ``llama3``: ``<|begin_of_text|>`` then ``<|start_header_id|>role<|end_header_id|>\\n\\n content<|eot_id|>``,
  Llama 3's split pattern, tool replies under the ``ipython`` header (as Llama 3.1 writes them).

Both mark the assistant's content and its end-of-turn marker with ``{% generation %}``, so
``apply_chat_template(..., return_assistant_tokens_mask=True)`` gives an independent mask.
"""
from __future__ import annotations

import functools

CHATML = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

LLAMA3 = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% set role = 'ipython' if m['role'] == 'tool' else m['role'] %}"
    "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' }}"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] | trim + '<|eot_id|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

STYLES = ('chatml', 'llama3')


def mailroom_corpus():
    """Every text of scripted play in the worked example's Mailroom, and the chat roles."""
    import agentrl as arl
    from ownenv import mailroom
    m = mailroom()
    return arl.episode_texts(m.make_parcels(), m.Mailroom) + ['user assistant tool ipython system']


def gym_corpus():
    """Every text the gym shows: prompts, the sources under up to two edits, replies, calls."""
    import agentrl as arl
    from agentrl.envs.bugfix import CALLS
    from agentrl.envs.bugfix.vocab import reachable_sources
    lines = list(CALLS)
    for task in arl.make_tasks('all'):
        lines.append(task.prompt)
        lines += [' '.join(src) for src in reachable_sources(task, depth=1)]
    lines += ['edited : public tests pass', 'no change : public tests fail', 'public tests pass', 'submitted',
              'error : unknown call', 'error : empty call', 'error : call too long', 'error : edit needs an op',
              'error : unknown op', 'error : already edited', 'user assistant tool ipython system']
    return lines


@functools.lru_cache(maxsize=None)
def bpe_tokenizer(style: str, vocab_size: int = 512, corpus: str = 'bugfix'):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on an environment's text (``corpus``: ``'bugfix'`` or
    ``'mailroom'``), with the chat template of ``style``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    if style == 'chatml':
        specials = ['<pad>', '<|im_start|>', '<|im_end|>']
        pre = pre_tokenizers.ByteLevel(add_prefix_space=False)
        extra = dict(eos_token='<|im_end|>')
        template = CHATML
    elif style == 'llama3':
        specials = ['<pad>', '<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>']
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior='isolated'),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        extra = dict(bos_token='<|begin_of_text|>', eos_token='<|eot_id|>')
        template = LLAMA3
    else:
        raise ValueError(style)
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(gym_corpus() if corpus == 'bugfix' else mailroom_corpus(), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token='<pad>', **extra)
    tok.chat_template = template
    return tok


def tiny_llama(max_positions: int = 1024, seed: int = 0):
    """A random Llama (hidden 32, 2 layers, grouped key/value heads) on the ChatML BPE tokenizer -> (model, tokenizer)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    tk = bpe_tokenizer('chatml')
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tk), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions)
    return LlamaForCausalLM(cfg), tk


def tiny_llama_folder(folder, max_positions: int = 1024):
    """``tiny_llama`` saved in ``folder`` as a model folder with its tokenizer: what ``pretrained.load_pretrained``
    reads, nothing downloaded."""
    model, tk = tiny_llama(max_positions)
    model.save_pretrained(str(folder))
    tk.save_pretrained(str(folder))
    return folder


SMOKE_SETS = ('sft_batch_size=4', 'rl_tasks=2', 'rl_group=2', 'lora_rank=4', 'weak_steps=2', 'rft_samples=2',
              'hack_rounds=1', 'dtype=fp32', 'device=cpu')
"""The ``--set`` keys that, with ``--smoke``, run the chapter on a tiny Llama in about half a minute."""


def tiny_pretrained_run(tmp_path_factory):
    """``agentrl reproduce --policy FOLDER --smoke`` on a tiny Llama model folder (``tiny_llama_folder``), run once per
    test session (``conftest.once_per_session``) and shared by the tests that read a pretrained run (none writes into
    it) -> (run folder, model folder, exit code, what it printed)."""
    import contextlib
    import io
    import json

    from conftest import once_per_session

    def make(base):
        from agentrl.cli import main
        tiny_llama_folder(base / 'tiny-llama', max_positions=1024)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            rc = main(['reproduce', '--policy', str(base / 'tiny-llama'), '--smoke',
                       *[a for k in SMOKE_SETS for a in ('--set', k)], '--jobs', '1', '--threads', '1', '--out', str(base / 'run')])
        (base / 'printed.json').write_text(json.dumps({'rc': rc, 'printed': printed.getvalue()}))

    base = once_per_session(tmp_path_factory, 'tiny_pretrained_run', make)
    done = json.loads((base / 'printed.json').read_text())
    return base / 'run', base / 'tiny-llama', done['rc'], done['printed']
