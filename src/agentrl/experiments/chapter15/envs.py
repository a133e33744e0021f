"""The environments the chapter runs on (``agentrl reproduce --env NAME``): what a run needs of each.

A ``ChapterEnv`` names an environment's Gymnasium id, its tasks by split, its tokenizer and its
scripted players, and the budgets that must differ from the chapter's for it (applied before
``--set``, so they are settable like any other key). Sections 15.1-15.6 run the same recipe code on
every one of them. This module is the only one of the experiments that imports a gym's own code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...envs.bugfix import make_tasks as bugfix_tasks
from ...envs.wiring import make_tasks as wiring_tasks
from ...envs.protocol import env_attr, make_env_factory
from ...tokenizer import build_tokenizer

SPLITS = ('train', 'heldout', 'all')


@dataclass(frozen=True)
class ChapterEnv:
    """One environment as the chapter's experiments use it."""
    name: str
    """The ``--env`` name."""
    title: str
    """How the report and the tables name it."""
    env_id: str
    """Its Gymnasium id: what every recipe is given as ``env=``."""
    tasks: Callable[[str], list]
    """``tasks(split)`` for ``'train'``, ``'heldout'`` and ``'all'``."""
    budgets: dict = field(default_factory=dict)
    """``Ch15Config`` keys whose value differs from the chapter's for this environment (settable with ``--set``)."""
    task_label: str = 'tasks'
    """What its tasks are, in the report's prose (BugFix: functions)."""

    def tokenizer(self):
        """The word-level tokenizer of its text: every task's words, or (tasks that list none) its scripted play."""
        tasks = self.tasks('all')
        return build_tokenizer(tasks) if hasattr(tasks[0], 'words') else build_tokenizer(tasks, env=self.env_id)

    def player(self, kind: str, seed: int = 0):
        """Its scripted player of ``kind`` (``'oracle'``, ``'blind'``, ``'random'``)."""
        return env_attr(self.env_id, 'scripted_policy')(kind, seed=seed)

    def make(self):
        """A fresh environment (its hidden reward)."""
        return make_env_factory(self.env_id)()

    def groups(self) -> list:
        """Its task groups, in the order of its tasks (BugFix: ``FAMILIES``)."""
        return list(dict.fromkeys(t.group for t in self.tasks('all')))


ENVIRONMENTS = {
    'bugfix': ChapterEnv('bugfix', 'the BugFix gym', 'agentrl/BugFix-v0', bugfix_tasks, task_label='functions'),
    'wiring': ChapterEnv('wiring', 'the Wiring gym', 'agentrl/Wiring-v0', wiring_tasks, task_label='registries'),
}
"""Every environment ``--env`` takes, by name; ``'bugfix'`` is the chapter's own."""
DEFAULT = 'bugfix'


def run_env(run_dir) -> ChapterEnv:
    """The environment a reproduction folder was run on (its ``results.json``'s ``env``; runs before it: BugFix)."""
    import json
    from pathlib import Path
    path = Path(run_dir) / 'results.json'
    try:
        name = json.loads(path.read_text()).get('env', DEFAULT)
    except (OSError, ValueError, AttributeError):
        name = DEFAULT
    return get_env(name)


def get_env(name: str) -> ChapterEnv:
    """The environment called ``name``; ValueError naming the valid ones."""
    if name not in ENVIRONMENTS:
        raise ValueError(f'unknown environment {name!r}; valid environments are {list(ENVIRONMENTS)}')
    return ENVIRONMENTS[name]
