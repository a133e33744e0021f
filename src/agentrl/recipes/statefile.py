"""A recipe's saved state as one safetensors file: its tensors as tensors, the rest as JSON in the header.

``torch.save`` would pickle the state, and reading a pickle runs whatever code the file names. This file holds only
tensors and data: ``save_state(obj, path)`` walks ``obj`` (dicts, lists, tuples, numbers, strings, None, tensors and
the episodes a recipe keeps, ``Trajectory``), stores each tensor under a key of its own and the structure as JSON
that names them; ``load_state(path)`` builds the same object back, every tensor bit for bit and every float exactly
(JSON writes a float's shortest exact repr). Anything else is refused by its type when saving, not lost.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from ..rendering.trajectory import Trajectory
from ..runtime.files import atomic_path

KEY = 'agentrl.state'
DATACLASSES = {'Trajectory': Trajectory}
"""The objects a state may hold besides plain data and tensors, by name."""


def _encode(obj, tensors: dict):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        key = f't{len(tensors)}'
        tensors[key] = obj.detach().clone().contiguous()
        return {'__tensor__': key}
    if isinstance(obj, list):
        return [_encode(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return {'__tuple__': [_encode(v, tensors) for v in obj]}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith('__') for k in obj):
            return {k: _encode(v, tensors) for k, v in obj.items()}
        return {'__items__': [[_encode(k, tensors), _encode(v, tensors)] for k, v in obj.items()]}
    name = type(obj).__name__
    if dataclasses.is_dataclass(obj) and DATACLASSES.get(name) is type(obj):
        return {'__dataclass__': name, 'fields': {f.name: _encode(getattr(obj, f.name), tensors)
                                                   for f in dataclasses.fields(obj)}}
    raise TypeError(f'a recipe state holds dicts, lists, tuples, numbers, strings, None, tensors and '
                    f'{", ".join(DATACLASSES)}; got a {name}')


def _decode(obj, tensors):
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if '__tensor__' in obj:
        return tensors[obj['__tensor__']]
    if '__tuple__' in obj:
        return tuple(_decode(v, tensors) for v in obj['__tuple__'])
    if '__items__' in obj:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in obj['__items__']}
    if '__dataclass__' in obj:
        cls = DATACLASSES[obj['__dataclass__']]
        fields = {k: _decode(v, tensors) for k, v in obj['fields'].items()}
        init = {f.name: fields[f.name] for f in dataclasses.fields(cls) if f.init}
        return cls(**init)
    return {k: _decode(v, tensors) for k, v in obj.items()}


def save_state(obj, path) -> Path:
    """Write ``obj`` to ``path`` whole or not at all (a temporary file renamed over the last)."""
    from safetensors.torch import save_file
    path = Path(path)
    tensors: dict = {}
    tree = _encode(obj, tensors)
    with atomic_path(path) as tmp:  # a run killed while saving keeps the last save
        save_file(tensors, str(tmp), metadata={KEY: json.dumps(tree, separators=(',', ':'))})
    return path


def load_state(path):
    """What ``save_state`` wrote to ``path``; a clear ``ValueError`` for any other file."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(path), framework='pt') as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise ValueError(f'{path} is not a recipe state file (truncated or corrupted?): {e}') from None
    if KEY not in meta:
        raise ValueError(f'{path} is a safetensors file but not a recipe state (no {KEY!r} in its header)')
    return _decode(json.loads(meta[KEY]), tensors)
