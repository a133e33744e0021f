"""Environments from other libraries: GEM's and TextArena's text games behind the text-env protocol.

- ``from_gem(env_id, **kwargs)`` (extra ``agentrl[gem]``) and ``from_textarena(env_id, **kwargs)`` (extra
  ``agentrl[textarena]``) return an environment factory that every recipe takes as ``env=``; the library
  is imported only when one is called;
- ``seeds``: tasks that are seeds (``SeedTask``, ``seed_tasks``, ``seed_splits``: train and held-out splits);
- ``adapted``: ``AdaptedEnv``, the protocol's bookkeeping both adapters share; ``isolation``: the game's
  own random streams (the caller's Python, NumPy and torch states never move) and no network;
- ``guess_the_number`` (GEM) and ``mastermind`` (TextArena): budgets and scripted players (an oracle and
  two weak players) for two games, so every section of the chapter runs on them.
"""
from .isolation import OfflineGameError
from .seeds import SeedTask, seed_splits, seed_tasks, task_seed

__all__ = ['OfflineGameError', 'SeedTask', 'from_gem', 'from_textarena', 'seed_splits', 'seed_tasks', 'task_seed']


def from_gem(env_id: str, **kwargs):
    """An environment factory for the GEM game ``env_id`` (see ``adapters.gem.from_gem``)."""
    from .gem import from_gem as make
    return make(env_id, **kwargs)


def from_textarena(env_id: str, **kwargs):
    """An environment factory for the single-player TextArena game ``env_id`` (see
    ``adapters.textarena.from_textarena``)."""
    from .textarena import from_textarena as make
    return make(env_id, **kwargs)
