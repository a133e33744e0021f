"""Importing another library's games: once, isolated, with a clear message when its extra is missing.

Both GEM and TextArena move Python's global random state when imported, and GEM configures the root
logger (``logging.basicConfig``); ``import_isolated`` imports a library with the caller's random states
and root-logger handlers put back as they were.
"""
from __future__ import annotations

import importlib
import logging
import sys

from .isolation import GameRandomness, game_call

EXTRAS = {'gem': ('gem', 'gem-llm'), 'textarena': ('textarena', 'textarena')}
"""Each adapter's library -> (the module it imports, the PyPI package); the extra is ``agentrl[<library>]``."""


def import_isolated(library: str):
    """The library's module (``'gem'`` or ``'textarena'``), imported without moving the caller's global state.

    Raises ``ImportError`` naming the extra to install when the library is missing."""
    if library not in EXTRAS:
        raise ValueError(f'unknown library {library!r}; valid libraries are {list(EXTRAS)}')
    module, package = EXTRAS[library]
    if sys.modules.get(module) is not None:
        return sys.modules[module]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with game_call(library, GameRandomness(0)):
            return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"the {library} adapter needs the {package!r} package: pip install 'agentrl[{library}]' "
                          f'({e})') from None
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)

