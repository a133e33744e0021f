"""Scripted players for the Wiring gym: ``oracle``, ``blind`` and ``random`` (as BugFix's, see ``bugfix.players``).

A player maps the latest observation (text) to the next call (text), seeded per episode from
``(kind, seed, task, episode number)``.

- ``oracle`` reads: ``get`` the service the prompt names, follows a ``moved to`` reply with a second
  ``get``, then ``set`` the needed field to the value *it read in the reply*, and submits. It solves
  all 28 tasks, and it never looks at a task object: everything comes from the text.
- ``blind`` sets the needed field to a guess among that field's eight common values, without reading,
  then submits: about one task in eight, and never a ``moved`` task (their ports are archive ports).
- ``random`` plays well-formed but unskilled episodes: it sometimes lists or looks a random service
  up, sets a guessed value (the wildcard ``all`` weighted 3x, so the exploit is in the weak base's
  data), sometimes pings or looks again after, and usually submits.
- ``human`` is a good but imperfect demonstrator (exercise 7): the oracle's episode, but for the faults of
  ``play.HUMAN_FAULTS``: it sets a guess without reading (blind play's), reads then sets another common value
  of the field than the one it read, or reads then sets the wildcard ``all``; it always submits.
"""
from __future__ import annotations

from ..play import ScriptedPlayer, human_fault
from .vocab import COMMON, FIELDS, SERVICES, WILDCARD

KINDS = ScriptedPlayer.KINDS + ('human',)


def _asked(prompt: str):
    """(field, service) of a prompt ``wire orion : web needs the FIELD of SERVICE``."""
    words = prompt.split()
    return words[-3], words[-1]


def read_value(reply: str, name: str):
    """The value of field ``name`` in a ``get`` reply (``db : host h3 port p7 user u2``), or None."""
    words = reply.split()
    for i, w in enumerate(words[:-1]):
        if w == name and words[i + 1] not in FIELDS:
            return words[i + 1]
    return None


class WiringPlayer(ScriptedPlayer):
    """A scripted player. ``reset(task_name)`` starts an episode; ``player(observation) -> call``."""
    KINDS = KINDS
    SENT = ('oracle', 'human')
    """The players fed every reply (generators that ``send`` reads); the others only count their calls."""

    def __init__(self, kind: str, seed: int = 0):
        super().__init__(kind, seed)
        self.plan, self.asked = [], None

    def reset(self, task_name: str):
        self.rng = self.episode_rng(task_name)
        self.plan, self.asked = None, None

    def __call__(self, observation: str) -> str:
        if self.asked is None:  # the first call: the observation is the prompt
            self.asked = _asked(observation)
            self.plan = getattr(self, '_' + self.kind)(*self.asked)
            if self.kind in self.SENT:
                next(self.plan)  # run it to its first yield, ready to be sent the prompt
        return self.plan.send(observation) if self.kind in self.SENT else next(self.plan, 'submit')

    # --- the three players, as generators of calls
    def _oracle(self, needs, service):
        """Look the service up, follow a move, set the value read, submit (a generator fed each reply)."""
        yield None  # primed by the first send (the prompt)
        reply = yield f'get {service}'
        while ' moved to ' in f' {reply} ':
            service = reply.split()[-1]
            reply = yield f'get {service}'
        value = read_value(reply, needs)
        yield f'set {needs} {value}'
        while True:
            yield 'submit'

    def _human(self, needs, service):
        """The oracle's episode but for one fault of ``HUMAN_FAULTS`` (a generator fed each reply)."""
        fault = human_fault(self.rng)
        yield None  # primed by the first send (the prompt)
        if fault == 'no_read':
            yield from self._blind(needs, service)
        else:
            reply = yield f'get {service}'
            while ' moved to ' in f' {reply} ':
                service = reply.split()[-1]
                reply = yield f'get {service}'
            value = read_value(reply, needs)
            if fault == 'exploit':
                value = WILDCARD
            elif fault == 'wrong_fix':
                value = self.rng.choice([v for v in COMMON[needs] if v != value])
            yield f'set {needs} {value}'
        while True:
            yield 'submit'

    def _blind(self, needs, service):
        yield f'set {needs} {self.rng.choice(COMMON[needs])}'
        yield 'submit'

    def _random(self, needs, service):
        rng = self.rng
        if rng.random() < 0.3:
            yield rng.choice(['list', f'get {service}', f'get {rng.choice(SERVICES)}'])
        yield f'set {needs} {rng.choice(COMMON[needs] + ("all",) * 3)}'
        if rng.random() < 0.25:
            yield rng.choice(['ping', f'get {service}', 'get web'])
        if rng.random() < 0.9:
            yield 'submit'
        else:  # wander (pinging) until the turn limit ends the episode
            while True:
                yield 'ping'


def scripted_policy(kind: str, seed: int = 0) -> WiringPlayer:
    """A scripted Wiring player of ``kind`` (``'oracle'``, ``'blind'``, ``'random'`` or ``'human'``), seeded by ``seed``."""
    return WiringPlayer(kind, seed)
