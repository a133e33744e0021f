"""Loggers: where a recipe's monitors go while it trains (section 15.6: what to watch, and when).

Every recipe takes ``loggers=`` (None, a logger, or a list of them) and reports one record of named
scalars per step or round to each, and its periodic evaluation under ``eval/``:

- ``protocol``: the ``Logger`` protocol (``log(metrics, step)``) and the ``Reporter`` recipes write through;
- ``jsonl``: ``JsonlLogger``, one JSON Lines file per run, a record per line, and ``read_jsonl``;
- ``tensorboard``: ``TensorBoardLogger`` (the extra ``agentrl[tensorboard]``);
- ``runs``: a run's folder name (``run_dir``), ``open_run`` (its loggers), ``MemoryLogger``;
- ``names``: the monitors' names, meanings and TRL equivalents (``METRICS``), per recipe (``RECIPE_METRICS``).

This package imports nothing else of agentrl, and no torch until a ``TensorBoardLogger`` is made.
"""
from .jsonl import SCHEMA, JsonlLogger, jsonl_header, read_jsonl, series
from .names import CONDITIONAL, METRICS, RECIPE_METRICS, Metric
from .protocol import EVAL_PREFIX, Logger, Reporter, as_reporter
from .runs import METRICS_FILE, LoggerSet, MemoryLogger, open_run, run_dir, run_name
from .tensorboard import TensorBoardLogger, tensorboard_available

__all__ = ['CONDITIONAL', 'EVAL_PREFIX', 'METRICS', 'METRICS_FILE', 'RECIPE_METRICS', 'SCHEMA', 'JsonlLogger', 'Logger',
           'LoggerSet', 'MemoryLogger', 'Metric', 'Reporter', 'TensorBoardLogger', 'as_reporter', 'jsonl_header',
           'open_run', 'read_jsonl', 'run_dir', 'run_name', 'series', 'tensorboard_available']
