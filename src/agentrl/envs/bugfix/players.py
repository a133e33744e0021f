"""Scripted policies for the BugFix gym: ``oracle``, ``blind`` and ``random`` (docs/bugfix.md).

A scripted policy maps the latest observation (text) to the next call (text). Its randomness is
seeded per episode from ``(kind, seed, task, episode number)``, so a rollout is reproducible and
two tasks never share a sequence of guesses.

- ``oracle`` reads, picks the fix from the family cue *in the source it read*, edits, submits.
  It solves all 30 tasks.
- ``blind`` edits without reading, guessing one of the four ops other than ``fix_init``, then
  submits: it passes about a fifth of tasks, and never an ``init`` task.
- ``random`` plays well-formed but unskilled episodes: it reads sometimes, edits once with an op
  drawn from a set that includes ``hardcode_tests`` (weighted 3x, so the exploit is in the weak
  base's data) but not ``fix_init``, sometimes reads or tests after, and usually submits.
"""
from __future__ import annotations

from ..play import ScriptedPlayer

KINDS = ScriptedPlayer.KINDS
GUESSABLE = ('swap_minmax', 'fix_range_end', 'fix_compare', 'guard_zero')
"""The ops blind play guesses from: every fix but ``fix_init``."""
RANDOM_OPS = GUESSABLE + ('hardcode_tests',) * 3
"""The ops random play draws from: the exploit weighted 3x (so the weak base has seen it), never ``fix_init``."""


def cue_op(source: str) -> str | None:
    """The fix a family cue in ``source`` calls for (what the oracle reads off), or None."""
    words = set(source.split())
    cues = [('swap_minmax', {'min', 'max'}), ('fix_range_end', {'range'}), ('fix_compare', {'<', '>', '<=', '>='}),
            ('guard_zero', {'//'}), ('fix_init', {'while'})]
    for op, cue in cues:
        if words & cue:
            return op
    return None


class ScriptedPolicy(ScriptedPlayer):
    """A scripted player. ``reset(task_name)`` starts an episode; ``policy(observation) -> call``."""

    def __init__(self, kind: str, seed: int = 0):
        super().__init__(kind, seed)
        self.plan = []

    def reset(self, task_name: str):
        """Start an episode of ``task_name``: draws this episode's plan from its own seeded RNG."""
        rng = self.episode_rng(task_name)
        if self.kind == 'oracle':
            self.plan = ['read', None, 'submit']  # None: decided from what `read` returns
        elif self.kind == 'blind':
            self.plan = ['edit ' + rng.choice(GUESSABLE), 'submit']
        else:
            self.plan = self._random_plan(rng)

    @staticmethod
    def _random_plan(rng):
        plan = ['read'] if rng.random() < 0.3 else []
        plan.append('edit ' + rng.choice(RANDOM_OPS))
        if rng.random() < 0.25:
            plan.append(rng.choice(['read', 'test']))
        if rng.random() < 0.9:
            plan.append('submit')
        else:  # wander (testing) until the turn limit ends the episode
            plan += ['test'] * 8
        return plan

    def __call__(self, observation: str) -> str:
        if not self.plan:
            return 'submit'
        call = self.plan.pop(0)
        if call is None:
            call = 'edit ' + (cue_op(observation) or 'hardcode_tests')
        return call

    def __repr__(self):
        return f'ScriptedPolicy({self.kind!r}, seed={self.seed})'


def scripted_policy(kind: str, seed: int = 0) -> ScriptedPolicy:
    """A scripted policy of ``kind`` (``'oracle'``, ``'blind'`` or ``'random'``), seeded by ``seed`` (section 15.1-15.2)."""
    return ScriptedPolicy(kind, seed)

