"""Environments: the text-env protocol, and the gyms that keep it.

- ``base``: ``TextEnv``, a base class that keeps the protocol's bookkeeping (a new environment writes
  its start, its calls and its checks);
- ``protocol``: what an environment and a task provide, how the library builds one environment per
  episode from an ``env=`` factory or Gymnasium id (``make_env_factory``), and the checked
  ``reset`` / ``step`` the rollouts use;
- ``play``: scripted play as text (no model, no tokens);
- ``check``: ``check_text_env``, which checks an environment against the protocol (and says what it could not
  check in a ``CheckWarning``);
- ``bugfix/``: the BugFix gym of chapter 15;
- ``wiring/``: the Wiring gym, a second one built to tell the chapter's lessons from BugFix's.

The rest of the library imports this package's protocol, never a gym: recipes, rollouts and
renderers take the environment from their caller, by default the Gymnasium id registered here
(``'agentrl/BugFix-v0'``; the entry points are strings, so registering imports no gym).
"""
import gymnasium as gym

from .base import InvalidCall, TextEnv
from .check import CheckWarning, check_text_env
from .play import Episode, episode_texts, oracle_calls, play, scripted_player
from .protocol import (DEFAULT_ENV, REWARD_MODES, EnvProtocolError, EnvStepError, checked_reset, checked_step,
                       env_attr, env_name, make_env_factory, task_group, task_name)

__all__ = ['CheckWarning', 'DEFAULT_ENV', 'REWARD_MODES', 'Episode', 'EnvProtocolError', 'EnvStepError', 'InvalidCall', 'TextEnv',
           'check_text_env',
           'checked_reset', 'checked_step', 'env_attr', 'env_name', 'episode_texts', 'make_env_factory', 'oracle_calls',
           'play', 'scripted_player', 'task_group', 'task_name']

gym.register(id='agentrl/BugFix-v0', entry_point='agentrl.envs.bugfix:BugFixEnv')
"""``gymnasium.make('agentrl/BugFix-v0', reward='public')`` builds a ``BugFixEnv``."""
gym.register(id='agentrl/Wiring-v0', entry_point='agentrl.envs.wiring:WiringEnv')
"""``gymnasium.make('agentrl/Wiring-v0')`` builds a ``WiringEnv``."""
