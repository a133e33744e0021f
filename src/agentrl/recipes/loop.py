"""The step loop every recipe shares: resume from a saved step, save every N steps, say how far it is.

A recipe written as ``for step in loop.steps(): ...`` over a ``RecipeLoop`` gains, when its caller passes a
``Checkpoint``, a file holding everything its later steps depend on: the weights it trains (``trained_state``), the
optimizer's state, its random streams (``random.Random``, ``torch.Generator``), the outputs gathered so far (losses,
evaluation history, logs) and the caller's own lists (``Checkpoint.extra``: what a hook or an evaluation appends
to), in a safetensors file (``statefile``). The file is written whole or not at all (a temporary file renamed over
the last) after every ``every`` steps and after the last step, so a run killed at any point resumes from its last
save and, every random draw coming from a saved stream, ends with the figures of a run never killed. A loop whose
file holds its last step restores it and runs no step: a finished recipe costs a file read when its caller runs again.

Without a checkpoint the loop is a plain ``range(1, total + 1)``. ``progress(recipe, step, total, seconds, first)``,
when given, is called after every step (``seconds`` since the loop started, ``first`` the step it started after).

The file also keeps the seconds the saved steps took, counting every earlier process: a resumed loop puts them in
``Checkpoint.resumed_seconds``, so a recipe's wall time (``clock() - start + resumed_seconds``) is the time its
kept steps took, not its last attempt's (the steps an attempt ran past its last save are run again, and counted once).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .statefile import load_state, save_state

clock = time.monotonic
"""The loop's clock (a module attribute, so a test can put a counter in its place)."""


@dataclass
class Checkpoint:
    """Where one recipe run keeps its state, and how often it saves it."""
    path: Path | str
    """The file of this recipe run's state (``statefile``: safetensors, no pickle)."""
    every: int = 10
    """Save after every this many steps, and after the last."""
    extra: dict = field(default_factory=dict)
    """The caller's own lists (name -> list) that the recipe's hooks or evaluations append to: saved with the
    recipe's state and restored in place."""
    say: Callable[[str], None] | None = None
    """Told ``resuming RECIPE at step N of M`` when the recipe resumes from a step before its last."""
    resumed_seconds: float = 0.0
    """Set by the loop when it restores: the seconds the restored steps took in the processes before this one (0 for
    a run that starts afresh). Add it to this process's time for the recipe's wall time."""

    def __post_init__(self):
        self.path = Path(self.path)
        if not isinstance(self.every, int) or isinstance(self.every, bool) or self.every < 1:
            raise ValueError(f'every must be a positive int (save after every N steps), got {self.every!r}')
        for name, value in self.extra.items():
            if not isinstance(value, list):
                raise TypeError(f'Checkpoint.extra[{name!r}] must be a list (restored in place), got {type(value).__name__}')


def trained_state(model) -> dict:
    """The tensors a recipe changes in ``model``: a LoRA policy's adapters (``policy.lora.state()``: its frozen base
    never changes), else every parameter and buffer (``state_dict``), copied."""
    lora = getattr(model, 'lora', None)
    if lora is not None:
        return lora.state()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_trained_state(model, state: dict) -> None:
    """Put back what ``trained_state`` returned."""
    lora = getattr(model, 'lora', None)
    if lora is not None:
        lora.load_state(state)
    else:
        model.load_state_dict(state)


def _stream_state(stream):
    if isinstance(stream, torch.Generator):
        return stream.get_state()
    if isinstance(stream, random.Random):
        return stream.getstate()
    raise TypeError(f'a random stream is a torch.Generator or a random.Random, got {type(stream).__name__}')


def _set_stream_state(stream, state) -> None:
    if isinstance(stream, torch.Generator):
        stream.set_state(state)
    else:
        stream.setstate(state)


class RecipeLoop:
    """The steps ``1 .. total`` of one recipe run (see the module docstring), its state restored from
    ``checkpoint`` when the file exists.

    Args:
        recipe: the recipe's name (``'train_rl'``), said in the resume line and checked against the file.
        total: the number of steps (a round counts as one step for the round-based recipes).
        model: the policy the recipe trains (``trained_state``).
        optimizer: its optimizer, or None (a recipe that makes one each round).
        scheduler: its learning-rate schedule (``recipes.optim.make_scheduler``), or None.
        streams: name -> ``random.Random`` or ``torch.Generator``: every random stream the steps draw from.
        outputs: name -> list the recipe fills step by step (losses, history, logs).
        models: name -> another model whose state the later steps read (a frozen reference copied at the start).
        checkpoint: where to save and restore (None: nothing is saved).
        progress: called after each step (module docstring).
    """

    def __init__(self, recipe: str, total: int, model, optimizer=None, streams: dict | None = None,
                 outputs: dict | None = None, models: dict | None = None, checkpoint: Checkpoint | None = None,
                 progress=None, scheduler=None):
        self.recipe, self.total, self.model, self.optimizer = recipe, total, model, optimizer
        self.scheduler = scheduler
        self.streams, self.outputs, self.models = dict(streams or {}), dict(outputs or {}), dict(models or {})
        self.checkpoint, self.progress = checkpoint, progress
        self.first = self._restore() if checkpoint is not None and checkpoint.path.is_file() else 0
        """The step the loop starts after: 0, or the step its checkpoint was saved at."""

    @property
    def resumed(self) -> bool:
        """Whether the state came from a checkpoint (the steps up to ``first`` were run by an earlier process)."""
        return self.first > 0

    def steps(self):
        """Yield ``first + 1 .. total``; after each, save when due and report progress."""
        self._started = clock()
        if 0 < self.first < self.total and self.checkpoint.say is not None:
            self.checkpoint.say(f'resuming {self.recipe} at step {self.first} of {self.total}')
        for step in range(self.first + 1, self.total + 1):
            yield step
            c = self.checkpoint
            if c is not None and (step % c.every == 0 or step == self.total):
                self._save(step)
            if self.progress is not None:
                self.progress(self.recipe, step, self.total, clock() - self._started, self.first)

    def _save(self, step: int) -> None:
        c = self.checkpoint
        state = {'recipe': self.recipe, 'total': self.total, 'step': step, 'model': trained_state(self.model),
                 'seconds': c.resumed_seconds + (clock() - self._started),  # the saved steps' time, every process's
                 'optimizer': None if self.optimizer is None else self.optimizer.state_dict(),
                 'scheduler': None if self.scheduler is None else self.scheduler.state_dict(),
                 'streams': {k: _stream_state(s) for k, s in self.streams.items()},
                 'outputs': {k: list(v) for k, v in self.outputs.items()},
                 'extra': {k: list(v) for k, v in c.extra.items()},
                 'models': {k: trained_state(m) for k, m in self.models.items()}}
        save_state(state, c.path)  # whole or not at all: a run killed while saving keeps the last save

    def _restore(self) -> int:
        path = self.checkpoint.path
        state = load_state(path)
        if state.get('recipe') != self.recipe or state.get('total') != self.total:
            raise ValueError(f'{path} holds {state.get("recipe")} of {state.get("total")} steps, not {self.recipe} of '
                             f'{self.total}: another run\'s state; delete it or use another folder')
        missing = (set(self.streams) ^ set(state['streams'])) | (set(self.outputs) ^ set(state['outputs'])) | (
            set(self.checkpoint.extra) ^ set(state['extra'])) | (set(self.models) ^ set(state['models']))
        if missing:
            raise ValueError(f'{path} does not match this recipe run (it differs in {sorted(missing)})')
        load_trained_state(self.model, state['model'])
        if self.optimizer is not None and state['optimizer'] is not None:
            self.optimizer.load_state_dict(state['optimizer'])
        if self.scheduler is not None and state.get('scheduler') is not None:
            self.scheduler.load_state_dict(state['scheduler'])
        for k, s in self.streams.items():
            _set_stream_state(s, state['streams'][k])
        for store, saved in ((self.outputs, state['outputs']), (self.checkpoint.extra, state['extra'])):
            for k, v in store.items():
                v[:] = saved[k]
        for k, m in self.models.items():
            load_trained_state(m, state['models'][k])
        self.checkpoint.resumed_seconds = float(state.get('seconds', 0.0))  # a file saved before it kept the time: 0
        return int(state['step'])
