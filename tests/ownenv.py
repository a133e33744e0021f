"""The worked example's environment (``examples/mailroom.py``), loaded once: the suite's environment that is not BugFix.

It differs from BugFix in every way the recipes could depend on: other words, another call grammar
(``label``, ``go ROOM``, ``drop``), an open argument copied from a reply, three calls on the oracle's
path, a reward only at the end, and its own scripted players.
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / 'examples' / 'mailroom.py'


@functools.lru_cache(maxsize=None)
def mailroom():
    """The ``examples/mailroom.py`` module (``Mailroom``, ``Courier``, ``make_parcels``, ``main``)."""
    spec = importlib.util.spec_from_file_location('mailroom', EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules['mailroom'] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module
