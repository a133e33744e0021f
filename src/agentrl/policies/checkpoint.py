"""Checkpoints: safetensors weights with the model config and tokenizer vocabulary in the metadata.

Nothing here unpickles: a checkpoint is tensors plus JSON. Loading checks everything it can and
raises ``ValueError`` naming the problem: a truncated or corrupted file, a file that is not an
agentrl checkpoint, weights that do not fit the config, or a vocabulary that differs from the
tokenizer the caller uses.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

import torch

from ..runtime.files import atomic_path
from .tinyagent import TinyAgent, TinyAgentConfig

CONFIG_KEY, VOCAB_KEY = 'agentrl_config', 'agentrl_vocab'


def save_checkpoint(model, path, tok=None) -> Path:
    """Write ``model`` (and ``tok``'s vocabulary) to ``path`` atomically -> the path."""
    from safetensors.torch import save_file
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a TinyAgent's config dataclass, or (HFPolicy) {'hf': the transformers config}
    raw = model.checkpoint_config() if hasattr(model, 'checkpoint_config') else asdict(model.config)
    metadata = {CONFIG_KEY: json.dumps(raw)}
    if tok is not None:
        if tok.vocab_size != model.vocab_size:
            raise ValueError(f'tokenizer vocab_size {tok.vocab_size} does not match the model ({model.vocab_size})')
        metadata[VOCAB_KEY] = json.dumps(tok.vocab)
    # every weight, or (LoRA on a pretrained model, whose weights are built again from its source) the adapters
    state = model.checkpoint_tensors() if hasattr(model, 'checkpoint_tensors') else model.state_dict()
    tensors = {k: v.detach().contiguous().clone() for k, v in state.items()}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
    return path


def _read(path, with_tensors: bool = True):
    from safetensors import SafetensorError, safe_open
    path = Path(path)
    if not path.is_file():
        raise ValueError(f'no checkpoint at {path}')
    try:
        with safe_open(str(path), framework='pt') as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()} if with_tensors else {}
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise ValueError(f'{path} is not a readable safetensors file (truncated or corrupted?): {e}') from None
    if CONFIG_KEY not in metadata:
        raise ValueError(f'{path} has no agentrl model config in its metadata; is it an agentrl checkpoint?')
    return metadata, tensors


def read_vocab(path) -> list | None:
    """The vocabulary saved with a checkpoint (``save_checkpoint(..., tok)``), or None if it was saved without one."""
    metadata, _ = _read(path, with_tensors=False)
    try:
        return json.loads(metadata.get(VOCAB_KEY, 'null'))
    except json.JSONDecodeError as e:
        raise ValueError(f'{path} has an invalid vocabulary in its metadata: {e}') from None


def load_model(path, tok=None):
    """Load a TinyAgent (or an ``hf.HFPolicy``) saved by ``save_checkpoint``.

    With ``tok``, the checkpoint's vocabulary must equal the tokenizer's (same words, same ids).
    """
    metadata, tensors = _read(path)
    try:
        raw = json.loads(metadata[CONFIG_KEY])
        hf = isinstance(raw, dict) and 'hf' in raw
        known = {f.name for f in fields(TinyAgentConfig)}
        cfg = None if hf else TinyAgentConfig(**{k: v for k, v in raw.items() if k in known})
    except (json.JSONDecodeError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f'{path} has an invalid model config: {e}') from None
    vocab_size = raw['hf'].get('vocab_size') if hf else cfg.vocab_size
    if tok is not None:
        vocab = json.loads(metadata.get(VOCAB_KEY, 'null'))
        if vocab is None:
            if vocab_size != tok.vocab_size:
                raise ValueError(f'{path} was saved for a vocabulary of {vocab_size} tokens, '
                                 f'but the tokenizer has {tok.vocab_size}')
        elif vocab != tok.vocab:
            diff = next((i for i, (a, b) in enumerate(zip(vocab, tok.vocab)) if a != b), min(len(vocab), len(tok.vocab)))
            raise ValueError(f'{path} was saved with a different vocabulary ({len(vocab)} tokens vs the '
                             f"tokenizer's {tok.vocab_size}; first difference at id {diff})")
    if hf:
        from .hf import HFPolicy, word_tokenizer
        # a pretrained source brings its own tokenizer; a model built from a config is on our word-level vocabulary
        words = tok is not None and raw.get('source') is None and hasattr(tok, 'token_to_id')
        base = None
        if raw.get('source') is not None and raw.get('lora'):  # the adapters' base, built again from its source
            from .pretrained import frozen_base
            dtype, device = raw.get('precision', ('fp32', 'cpu'))
            base = frozen_base(raw['source'], dtype=dtype, device=device, quiet=True)
        model = HFPolicy.from_checkpoint_config(raw, word_tokenizer(tok) if words else None, base=base)
        _check_finite(path, tensors)
        try:
            model.load_checkpoint_tensors(tensors)
        except (ValueError, RuntimeError) as e:
            raise ValueError(f'{path}: {e}') from None
        return model
    model = TinyAgent(**{f.name: getattr(cfg, f.name) for f in fields(TinyAgentConfig)})
    expected = model.state_dict()
    missing, extra = set(expected) - set(tensors), set(tensors) - set(expected)
    if missing or extra:
        raise ValueError(f'{path} does not match a {type(model).__name__} with its config: '
                         f'missing {sorted(missing)[:3]}, unexpected {sorted(extra)[:3]}')
    for k, v in tensors.items():
        if v.shape != expected[k].shape:
            raise ValueError(f'{path}: tensor {k} has shape {tuple(v.shape)}, expected {tuple(expected[k].shape)}')
    _check_finite(path, tensors)
    model.load_state_dict(tensors)
    return model


def _check_finite(path, tensors) -> None:
    for k, v in tensors.items():
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise ValueError(f'{path}: tensor {k} holds NaN or infinite values (corrupted?)')
