"""Integrations: agentrl's episodes and environments in other libraries' hands.

- ``export``: a run's episodes as chat data other trainers read, and back in (the format of ``agentrl export``,
  whose command, which finds a run's renderer, is ``experiments/export_command.py``);
- ``trl``: agentrl's environments trained by TRL's ``GRPOTrainer`` (``environment_factory``, ``rollout_func``).

Beside ``experiments``, above the rollouts and recipes: nothing in the library imports them.
"""
