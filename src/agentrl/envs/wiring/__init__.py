"""The Wiring gym: point ``web`` at another service's setting, read from a small service registry.

The chapter's second gym, designed so that its skill is "find it, then use it" rather than
BugFix's "classify, then pick": the answer is an open argument copied from a tool reply. Its modules:

- ``vocab``: its words (fields, services, values, the call grammar, the replies);
- ``tasks``: the 28 registries, their groups and splits (``make_tasks``, ``GROUPS``), and the
  properties the chapter's findings rest on, built in on purpose;
- ``players``: the scripted oracle, blind and random players (``scripted_policy``);
- ``env``: ``WiringEnv``, the call grammar, replies, the public and hidden checks.

Gymnasium knows it as ``agentrl/Wiring-v0``; ``agentrl reproduce --env wiring`` runs the chapter on it.
"""
from .env import CALLS, WiringEnv
from .players import KINDS, WiringPlayer, scripted_policy
from .tasks import GROUPS, Task, make_tasks
from .vocab import ARCHIVE, COMMON, WILDCARD

__all__ = ['ARCHIVE', 'CALLS', 'COMMON', 'GROUPS', 'KINDS', 'Task', 'WILDCARD', 'WiringEnv', 'WiringPlayer', 'make_tasks',
           'scripted_policy']
