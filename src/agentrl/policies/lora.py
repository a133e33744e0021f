"""LoRA adapters on an ``HFPolicy`` (``peft``): train a few million weights instead of all of them.

``add_lora(policy, rank)`` freezes every weight of the model and puts a LoRA adapter of ``rank`` on every linear
layer (``peft``'s ``'all-linear'``: attention and MLP projections, not the output layer). The recipes train the
policy's trainable parameters as they train any policy; nothing else changes for them.

Adapters stack. ``policy.new_adapter()`` freezes the adapters trained so far and adds a fresh one on top (its
second matrix starts at zero, so the policy is unchanged), and ``policy.adapter_off()`` switches the newest one
off: the policy it started from. That is DPO's reference (``recipes.dpo.train_dpo``), with no second copy of the
model. A checkpoint stores every adapter's weights and the base model's ``source`` (``checkpoint.py``); loading
builds the base again and puts the adapters back, to the same logits.

A copy of the policy (``copy.deepcopy``) shares the frozen base weights, which no recipe changes: it costs its
adapters, a few MB, where a fully fine-tuned copy costs the whole model.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

PREFIX = 'a'
"""Adapters are named ``a0``, ``a1``, ... in the order they were added."""


def _peft():
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install -e '.[pretrained]'") from None
    return peft


def _check_rank(rank, alpha):
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f'lora rank must be a positive int (0 trains every weight instead), got {rank!r}')
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0):
        raise ValueError(f'lora alpha must be a number > 0 (default: twice the rank), got {alpha!r}')


class Adapters:
    """The LoRA adapters of one policy (``policy.lora``): their settings, the ``peft`` model and their names."""

    def __init__(self, peft_model, rank: int, alpha: float, names: list):
        self.peft, self.rank, self.alpha, self.names = peft_model, rank, alpha, list(names)

    # --- building
    @classmethod
    def add(cls, policy, rank: int, alpha=None, seed: int = 0) -> 'Adapters':
        """Freeze ``policy``'s weights and add its first adapter (its random matrices drawn from ``seed``)."""
        _check_rank(rank, alpha)
        if policy.lora is not None:
            raise ValueError('this policy already has LoRA adapters (new_adapter() adds one on top)')
        peft = _peft()
        alpha = float(alpha if alpha is not None else 2 * rank)
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():  # the caller's random stream does not move
            # peft reads a property transformers 5 renamed, and transformers says so each time: not the user's concern
            warnings.filterwarnings('ignore', message='`is_gradient_checkpointing` is deprecated', category=FutureWarning)
            torch.manual_seed(seed)
            model = peft.get_peft_model(policy.model, _config(peft, rank, alpha), adapter_name=f'{PREFIX}0')
        policy.lora = cls(model, rank, alpha, [f'{PREFIX}0'])
        return policy.lora

    def new(self, seed: int = 0) -> None:
        """Freeze the adapters so far and train a fresh one on top (the policy is unchanged: its B matrices are 0)."""
        name = f'{PREFIX}{len(self.names)}'
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.peft.add_adapter(name, _config(_peft(), self.rank, self.alpha))
        self.names.append(name)
        self._activate(self.names)

    def _activate(self, names) -> None:
        """Make ``names`` the active adapters, only the newest of them trainable."""
        self.peft.base_model.set_adapter(list(names))
        for n, p in self.peft.named_parameters():
            if 'lora_' in n:
                p.requires_grad = f'.{self.names[-1]}.' in n

    @contextmanager
    def off(self):
        """The newest adapter switched off while inside (the policy it was trained from)."""
        if len(self.names) == 1:
            with self.peft.disable_adapter():
                yield
            return
        self.peft.base_model.set_adapter(self.names[:-1])
        try:
            yield
        finally:
            self._activate(self.names)

    # --- checkpoints
    def config(self) -> dict:
        return {'rank': self.rank, 'alpha': self.alpha, 'adapters': list(self.names)}

    def state(self) -> dict:
        """Every adapter's weights -> {parameter name: tensor} (what a checkpoint stores)."""
        return {n: p.detach().clone() for n, p in self.peft.named_parameters() if 'lora_' in n}

    def load_state(self, tensors: dict) -> None:
        """Put back what ``state`` returned (ValueError naming a missing or unexpected tensor)."""
        own = dict((n, p) for n, p in self.peft.named_parameters() if 'lora_' in n)
        missing, extra = set(own) - set(tensors), set(tensors) - set(own)
        if missing or extra:
            raise ValueError(f'the checkpoint does not match the adapters {self.names}: missing {sorted(missing)[:2]}, '
                             f'unexpected {sorted(extra)[:2]}')
        with torch.no_grad():
            for n, p in own.items():
                if tensors[n].shape != p.shape:
                    raise ValueError(f'adapter tensor {n} has shape {tuple(tensors[n].shape)}, expected {tuple(p.shape)}')
                p.copy_(tensors[n])

    @classmethod
    def rebuild(cls, policy, raw: dict) -> 'Adapters':
        """The adapters a checkpoint's config describes (``config()``), freshly made: ``load_state`` fills them."""
        adapters = cls.add(policy, int(raw['rank']), raw['alpha'])
        for _ in raw['adapters'][1:]:
            adapters.new()
        return adapters


def _config(peft, rank, alpha):
    return peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules='all-linear', bias='none')


def add_lora(policy, rank: int, alpha=None, seed: int = 0) -> Adapters:
    """Freeze ``policy``'s weights and train LoRA adapters of ``rank`` (``alpha``: default ``2 * rank``) instead."""
    return Adapters.add(policy, rank, alpha, seed)
