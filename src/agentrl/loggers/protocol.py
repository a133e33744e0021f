"""The logger protocol, and the reporter every recipe writes its monitors through (section 15.6).

A **logger** is any object with ``log(metrics, step)``: ``metrics`` a dict of named floats, ``step`` an int
(the recipe's step axis). That is the whole protocol, small enough that W&B or Trackio is a few lines
(``wandb.log(metrics, step=step)``; see the "Watching a run" page of the docs). A logger may also have
``close()``; a recipe never calls it (whoever opened a logger closes it).

A **reporter** is what a recipe holds: its loggers, a step offset (expert iteration's SFT steps continue
one axis across rounds) and the run's running totals (``num_tokens``). A recipe computes its loss one way,
whether or not anything listens, and hands the reporter what it would log: tensors that computation has
anyway (read with ``.item()`` only when logged), or callables that only a listening reporter calls (a
monitor that costs more than reading a tensor: ``Reporter.measure`` takes it at once, ``Reporter.log``
when it records). With no logger nothing is read and nothing is called, so a run's numerics are exactly
those of a run without logging, and its cost is that of the loss alone.
Every record goes through ``Reporter.log``; a periodic evaluation goes through ``Reporter.log_eval``,
under its own prefix (``eval/``), so a name an evaluation returns can never overwrite a recipe's.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Protocol, runtime_checkable

EVAL_PREFIX = 'eval'
"""The prefix of what a recipe's ``evaluate`` returns, in the logged records (``eval/train``, ``eval/0``)."""


@runtime_checkable
class Logger(Protocol):
    """Anything with ``log(metrics: dict[str, float], step: int)``: a sink for a recipe's monitors."""

    def log(self, metrics: dict, step: int) -> None:
        """Record ``metrics`` (name -> float) at ``step``."""


def as_loggers(loggers) -> tuple:
    """``None`` -> ``()``; one logger -> ``(logger,)``; a list or tuple of loggers (a ``LoggerSet``) -> a tuple of
    them (empty: nothing listens); else TypeError."""
    if loggers is None:
        return ()
    if isinstance(loggers, (list, tuple)):  # first: an empty LoggerSet (a list) listens to nothing
        bad = [type(x).__name__ for x in loggers if not isinstance(x, Logger)]
        if not bad:
            return tuple(loggers)
        raise TypeError(f'loggers must have a log(metrics, step) method; got {", ".join(bad)}')
    if isinstance(loggers, Logger):
        return (loggers,)
    raise TypeError(f'loggers must be None, a logger (an object with log(metrics, step)) or a list of them, '
                    f'got {type(loggers).__name__}')


def scalar(value):
    """``value`` as a float if it is a real number (a bool counts as 0/1; a 0-d tensor's ``.item()``), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, 'item', None)
    if callable(item) and getattr(value, 'ndim', None) == 0:
        return scalar(item())
    return None


def flatten(values, prefix: str) -> dict:
    """What an ``evaluate`` returned, as named scalars under ``prefix``: ``{prefix/name: float}``.

    A dict's entries keep their keys (a nested dict's become ``prefix/key/inner``, as ``group_pass``'s
    groups); a named tuple's, its field names; a plain tuple's (or a top-level list's), their positions (``eval/0``,
    ``eval/1``). Entries that are not numbers (a list of episodes, a name, None) are left out."""
    if isinstance(values, dict):
        items = [(str(k), v) for k, v in values.items()]
    elif isinstance(values, tuple) and hasattr(values, '_fields'):
        items = list(zip(values._fields, values))
    elif isinstance(values, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(values)]
    else:
        value = scalar(values)
        return {} if value is None else {prefix: value}
    out = {}
    for name, value in items:
        if isinstance(value, (dict, tuple)):  # nested: group_pass's groups, a named tuple
            out.update(flatten(value, f'{prefix}/{name}'))
            continue
        value = scalar(value)
        if value is not None:
            out[f'{prefix}/{name}'] = value
    return out


class _Totals:
    """Running totals a run's reporters share (one per recipe call, handed to the recipes it calls)."""

    def __init__(self):
        self.num_tokens = 0


class Reporter:
    """A recipe's loggers, its step offset and the run's running totals (see the module docstring).

    ``Reporter(loggers)`` accepts what every recipe's ``loggers=`` does: None, a logger, a list of them,
    or a Reporter (a recipe called by another, which reports on the caller's axis)."""

    def __init__(self, loggers=None, offset: int = 0, totals: _Totals | None = None):
        self.loggers = as_loggers(loggers)
        self.offset = offset
        self.totals = totals if totals is not None else _Totals()

    @property
    def active(self) -> bool:
        """Whether anything listens: ``measure`` and ``log`` call and read nothing otherwise."""
        return bool(self.loggers)

    def measure(self, read):
        """``read()`` now if anything listens, else None: a monitor taken at the moment it describes (the gradient's
        norm before the optimizer step changes the weights, the entropy of logits the loss is done with), which a
        later ``log`` records. A run without a logger never pays for it."""
        return read() if self.loggers else None

    def shifted(self, offset: int) -> Reporter:
        """The same loggers and totals, with ``offset`` more steps (round k's SFT inside expert iteration)."""
        return Reporter(self.loggers, self.offset + offset, self.totals)

    @staticmethod
    def clock() -> float:
        """The time now, for ``log(started=...)``: a step's or round's start."""
        return time.perf_counter()

    def log(self, step: int, metrics: dict | Callable[[], dict], started: float | None = None, tokens: int = 0,
            episodes: int = 0):
        """Send ``metrics`` at ``step`` (plus the offset) to every logger; nothing if inactive.

        ``metrics``: a dict of numbers (a 0-d tensor is read with ``.item()`` here), or a callable with no arguments
        that returns one, called only when something listens (what a sample shows, computed for the record only).
        ``tokens``: the tokens this step trained on (non-padding; added to ``num_tokens``, the run's running
        total); ``episodes``: the episodes it sampled. With ``started`` (a ``clock()``), the step's wall time
        is added as ``step_time``, with ``tokens_per_second`` and ``episodes_per_second`` where counted."""
        if not self.loggers:
            return
        if callable(metrics):
            metrics = metrics()
        out = {}
        for name, value in metrics.items():
            value = scalar(value)
            if value is None:
                raise TypeError(f'metric {name!r} is not a number: {metrics[name]!r}')
            out[name] = value
        if tokens:
            self.totals.num_tokens += int(tokens)
            out['num_tokens'] = float(self.totals.num_tokens)
        if started is not None:
            elapsed = max(time.perf_counter() - started, 1e-9)
            out['step_time'] = elapsed
            if tokens:
                out['tokens_per_second'] = tokens / elapsed
            if episodes:
                out['episodes_per_second'] = episodes / elapsed
        for logger in self.loggers:
            logger.log(out, self.offset + int(step))

    def log_eval(self, step: int, values, prefix: str = EVAL_PREFIX):
        """Send what an evaluation returned (``flatten``ed under ``prefix``) at ``step``; nothing if inactive."""
        if self.loggers:
            metrics = flatten(values, prefix)
            if metrics:
                self.log(step, metrics)


def as_reporter(loggers) -> Reporter:
    """A recipe's ``loggers=`` argument as a ``Reporter`` (a Reporter is passed through)."""
    return loggers if isinstance(loggers, Reporter) else Reporter(loggers)


def merge_eval(row: dict, values: dict, recipe: str) -> dict:
    """``row`` updated with an ``evaluate``'s dict, or ValueError naming a key that would overwrite the recipe's.

    The histories the recipes return keep the chapter's shape (the evaluation's keys beside the recipe's);
    the logged records keep them apart anyway (``eval/...``)."""
    if not isinstance(values, dict):
        raise TypeError(f'{recipe}: evaluate(model) must return a dict, got {type(values).__name__}')
    clash = sorted(set(values) & set(row))
    if clash:
        raise ValueError(f'{recipe}: evaluate(model) returned {clash}, which the recipe\'s own rows use '
                         f'({sorted(row)}); rename them (the logs keep them apart as {EVAL_PREFIX}/...)')
    row.update(values)
    return row


def finite_or_none(value: float):
    """A float for JSON: itself if finite, else None (JSON has no NaN or infinity)."""
    return value if math.isfinite(value) else None
