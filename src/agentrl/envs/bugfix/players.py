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
- ``human`` is a good but imperfect demonstrator (exercise 7): the oracle's episode, but for the faults of
  ``play.HUMAN_FAULTS``: it edits without reading (a blind guess), reads then edits with a wrong fix
  (any op but the cue's and the exploit), or reads then writes ``hardcode_tests``; it always submits.
"""
from __future__ import annotations

from ..play import ScriptedPlayer, human_fault

KINDS = ScriptedPlayer.KINDS + ('human',)
FIXES = ('swap_minmax', 'fix_range_end', 'fix_compare', 'guard_zero', 'fix_init')
"""Every op that fixes some family's bug."""
GUESSABLE = FIXES[:-1]
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


WRONG = object()
"""A plan entry: after reading, a fix other than the cue's (the ``human`` player's ``wrong_fix``)."""


class ScriptedPolicy(ScriptedPlayer):
    """A scripted player. ``reset(task_name)`` starts an episode; ``policy(observation) -> call``."""
    KINDS = KINDS

    def __init__(self, kind: str, seed: int = 0):
        super().__init__(kind, seed)
        self.plan = []

    def reset(self, task_name: str):
        """Start an episode of ``task_name``: draws this episode's plan from its own seeded RNG."""
        rng = self.rng = self.episode_rng(task_name)
        if self.kind == 'oracle':
            self.plan = ['read', None, 'submit']  # None: decided from what `read` returns
        elif self.kind == 'blind':
            self.plan = ['edit ' + rng.choice(GUESSABLE), 'submit']
        elif self.kind == 'human':
            fault = human_fault(rng)
            self.plan = (['edit ' + rng.choice(GUESSABLE), 'submit'] if fault == 'no_read' else
                         ['read', 'edit hardcode_tests', 'submit'] if fault == 'exploit' else
                         ['read', WRONG if fault == 'wrong_fix' else None, 'submit'])
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
        elif call is WRONG:
            call = 'edit ' + self.rng.choice([op for op in FIXES if op != cue_op(observation)])
        return call

    def __repr__(self):
        return f'ScriptedPolicy({self.kind!r}, seed={self.seed})'


def scripted_policy(kind: str, seed: int = 0) -> ScriptedPolicy:
    """A scripted policy of ``kind`` (``'oracle'``, ``'blind'``, ``'random'`` or ``'human'``), seeded by ``seed`` (section
    15.1-15.2; ``'human'``: exercise 7's demonstrator)."""
    return ScriptedPolicy(kind, seed)

