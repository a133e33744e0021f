"""Choose the SFT checkpoint to start RL from by its informative-group fraction (section 15.6; cf. exercise 6).

Section 15.6 recommends picking the SFT checkpoint that RL starts from by the share of RL groups
on a probe set whose rewards are not all equal (the only groups a group baseline learns from),
not by the SFT loss: training longer on demos drives the policy towards determinism, and its
remaining failures sit in groups that fail every time. ``select_sft_checkpoint`` runs the SFT,
probes every ``every`` steps with ``recipes.diagnostics.probe``, and keeps the best checkpoint::

    sft_train(model, demos, hook=every `every` steps:
        pass, informative, entropy = probe(model, probe_tasks, group)
        if informative > best so far: best = copy of model)
"""
from __future__ import annotations

import copy
from typing import NamedTuple

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..runtime.threads import small_model_threads
from .diagnostics import probe
from .sft import sft_train


class Selection(NamedTuple):
    """What ``select_sft_checkpoint`` returns (a tuple: ``best, step, table, last = ...``)."""
    best: object
    """A copy of the checkpoint with the highest informative fraction (ties: the earliest)."""
    step: int
    """Its SFT step."""
    table: list
    """One ``(step, pass, informative, entropy)`` per probed checkpoint, in order."""
    last: object
    """The model after the last SFT step (the ``model`` passed in, trained in place)."""


@small_model_threads
def select_sft_checkpoint(model, demos, tok, probe_tasks, steps=60, every=10, group=8, seed=0, lr=3e-3,
                          batch_size=32, include_start=False, env=DEFAULT_ENV, loggers=None) -> Selection:
    """Oracle SFT on ``demos`` (in place), probing every ``every`` steps -> ``Selection`` (section 15.6).

    SFT uses seed ``seed``; each probe samples ``group`` episodes per probe task with seed
    ``5 + seed`` (the chapter's probe seed), so every checkpoint is probed on the same draws.
    ``include_start`` also probes (and may select) the model before any SFT step, as step 0. The probes play
    ``env`` (a factory or Gymnasium id).

    ``loggers`` (``agentrl.loggers``) get every SFT step's ``loss``, ``grad_norm``, ``entropy`` and, at each
    probe, ``probe/reward``, ``probe/informative`` (what chooses), ``probe/entropy`` and ``probe/best_step``:
    the informative fraction beside the loss, the two curves section 15.6 tells apart.
    """
    if not isinstance(every, int) or isinstance(every, bool) or every < 1 or not isinstance(steps, int) or steps < every:
        raise ValueError(f'need ints steps >= every >= 1, got steps={steps!r}, every={every!r}')
    probe_tasks = list(probe_tasks)
    table, best = [], {}
    rep = as_reporter(loggers)

    def measure(step):
        rate, informative, entropy = probe(model, probe_tasks, tok, group=group, seed=5 + seed, env=env)
        table.append((step, rate, informative, entropy))
        if not best or informative > best['informative']:  # strictly greater: ties keep the earliest
            best.update(step=step, informative=informative, model=copy.deepcopy(model))
        rep.log_eval(step, {'reward': rate, 'informative': informative, 'entropy': entropy, 'best_step': best['step']},
                     prefix='probe')

    if include_start:
        measure(0)
    sft_train(model, demos, tok, steps=steps, lr=lr, batch_size=batch_size, seed=seed, hook=measure, every=every,
              loggers=rep)
    return Selection(best['model'], best['step'], table, model)
