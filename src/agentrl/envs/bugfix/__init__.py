"""The BugFix gym (docs/bugfix.md): 30 buggy Python functions, fixed by reading, editing and submitting.

Its modules, from the bottom up:

- ``source``: Python source <-> the words the gym shows and edits;
- ``ops``: the six edit operators (five fixes and the ``hardcode_tests`` exploit);
- ``vocab``: every word an episode can show (``Task.words``, which ``build_tokenizer(tasks)`` reads);
- ``tasks``: the 30 tasks, their splits and families (``make_tasks``, ``FAMILIES``);
- ``sandbox``: restricted, time-bounded execution of a source against a task's tests;
- ``players``: the scripted oracle, blind and random players (``scripted_policy``);
- ``env``: ``BugFixEnv``, the call grammar, replies, rewards and limits.

``BugFixEnv`` keeps the text-env protocol (``agentrl.envs.protocol``) like any other environment;
the library's recipes and rollouts never import this package (an ``import-linter`` contract holds
that): they build it from its Gymnasium id, ``agentrl/BugFix-v0``, their default ``env``.
"""
from .env import CALLS, REWARDS, BugFixEnv
from .ops import OPS, apply_op
from .players import KINDS, ScriptedPolicy, scripted_policy
from .tasks import FAMILIES, FIX, Task, make_tasks

__all__ = ['BugFixEnv', 'CALLS', 'FAMILIES', 'FIX', 'KINDS', 'OPS', 'REWARDS', 'ScriptedPolicy', 'Task', 'apply_op',
           'make_tasks', 'scripted_policy']
