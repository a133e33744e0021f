"""Environments from other libraries: GEM's and TextArena's text games behind the text-env protocol.

- ``from_gem(env_id, **kwargs)`` (extra ``agentrl[gem]``) and ``from_textarena(env_id, **kwargs)`` (extra
  ``agentrl[textarena]``) return an environment factory that every recipe takes as ``env=``; the library
  is imported only when one is called (importing this package imports neither);
- ``seeds``: tasks that are seeds (``SeedTask``, ``seed_tasks``, ``seed_splits``: train and held-out splits);
- ``adapted``: ``AdaptedEnv``, the protocol's bookkeeping both adapters share; ``isolation``: the game's
  own random streams (the caller's Python, NumPy and torch states never move) and no network;
- ``guess_the_number`` (GEM) and ``mastermind`` (TextArena): budgets and scripted players (an oracle and
  two weak players) for two games, so every section of the chapter runs on them.
"""
from .gem import from_gem
from .isolation import OfflineGameError
from .seeds import SeedTask, seed_splits, seed_tasks, task_seed
from .textarena import from_textarena

__all__ = ['OfflineGameError', 'SeedTask', 'from_gem', 'from_textarena', 'seed_splits', 'seed_tasks', 'task_seed']
