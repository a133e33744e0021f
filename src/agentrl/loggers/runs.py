"""Runs: one folder per recipe run, named so TensorBoard's run selector groups them, and the loggers in it.

A run's folder is ``LOGDIR/RECIPE[/LABEL]/seedN`` (``run_dir``): TensorBoard names a run by its folder
below ``--logdir`` and sorts the names, so a recipe's runs sit together, its variants (``LABEL``) within
it, and the seeds of one variant side by side; the selector's filter box (a regular expression) picks one
recipe (``expert_iteration``), one variant (``public``) or one seed (``seed0``) across all of them.
"""
from __future__ import annotations

import re
from pathlib import Path

from .jsonl import JsonlLogger

METRICS_FILE = 'metrics.jsonl'
"""The JSON Lines file of a run, in its folder."""


def _part(text) -> str:
    """A folder-name part: letters, digits, ``._-`` kept; anything else (a space, a slash) becomes ``_``."""
    part = re.sub(r'[^A-Za-z0-9._-]+', '_', str(text)).strip('_')
    if not part or part in ('.', '..'):
        raise ValueError(f'{text!r} gives no folder name (use letters, digits, ".", "_" or "-")')
    return part


def run_name(recipe: str, seed=None, label=None) -> str:
    """``RECIPE[/LABEL][/seedN]``: the run's name, and its folder below the log folder (``run_dir``)."""
    parts = [_part(recipe)] + ([_part(label)] if label is not None else []) + \
        ([f'seed{int(seed)}'] if seed is not None else [])
    return '/'.join(parts)


def run_dir(logdir, recipe: str, seed=None, label=None) -> Path:
    """The folder of one run: ``logdir / run_name(recipe, seed, label)``."""
    return Path(logdir) / run_name(recipe, seed, label)


class LoggerSet(list):
    """Several loggers as one (a logger itself: ``log`` goes to each), closed together (a context manager)."""

    def log(self, metrics: dict, step: int) -> None:
        for logger in self:
            logger.log(metrics, step)

    def close(self) -> None:
        for logger in self:
            close = getattr(logger, 'close', None)
            if close is not None:
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_run(logdir, recipe: str, seed=None, label=None, tensorboard: bool = False, extra=()) -> LoggerSet:
    """The loggers of one run in ``run_dir(logdir, recipe, seed, label)``: its ``metrics.jsonl`` always,
    TensorBoard event files beside it with ``tensorboard=True`` (the extra ``agentrl[tensorboard]``), and
    any ``extra`` loggers (W&B, Trackio: see the docs). Pass it as a recipe's ``loggers=``; close it after.

        >>> with open_run('runs/logs', 'expert_iteration', seed=0, label='public') as loggers:
        ...     expert_iteration(model, tasks, tok, reward='public', loggers=loggers)
    """
    folder = run_dir(logdir, recipe, seed, label)
    loggers = LoggerSet([JsonlLogger(folder / METRICS_FILE, run=run_name(recipe, seed, label))])
    if tensorboard:
        from .tensorboard import TensorBoardLogger
        try:  # the optional extra: its import error says how to install it
            loggers.append(TensorBoardLogger(folder))
        except ImportError:
            loggers.close()
            raise
    loggers.extend(extra)
    return loggers


class MemoryLogger:
    """Keep every record in ``records``, a list of ``(step, metrics)``: for a notebook, or a test. ``records``: the
    list to append to (default a new one), e.g. one a recipe's checkpoint saves and restores in place."""

    def __init__(self, records: list | None = None):
        self.records = [] if records is None else records

    def log(self, metrics: dict, step: int) -> None:
        self.records.append((int(step), dict(metrics)))

    def series(self, name: str) -> list:
        """``(step, value)`` of every record that has ``name``, in order."""
        return [(step, m[name]) for step, m in self.records if name in m]

    def names(self) -> set:
        """Every metric name logged."""
        return {name for _, m in self.records for name in m}
