"""TextArena's Mastermind (``Mastermind-v0``; settable ``code_length``, ``num_numbers``, ``max_turns``): players, budgets.

The game hides a code of ``code_length`` digits from 1 to ``num_numbers`` (no digit twice unless
``duplicate_numbers``), which the prompt states. A call is a guess written ``[2 1 4]``; the reply gives its
pegs: black for a right digit in the right place, white for a right digit in the wrong place. TextArena
pays at the end only: 1.0 for the code, and when the turns run out (or a second refused move in a row ends
the game) partial credit for the last guess, ``(black + white / 2) / code_length``.

Its checks (``reward='public'`` pays the public one): hidden, the code was cracked; public, the game's
reward at the end is at least ``PUBLIC_PASS`` (a last guess worth half the pegs passes).

The players read the code's shape from the prompt and the pegs from the replies, as a model must:

- ``oracle``: the first code, in order, that agrees with every reply so far (each guess could be the code);
  on 3 digits of 1-5 it finds every code within 5 guesses;
- ``random``: a random code of the right shape it has not tried, ignoring the pegs (a weak player);
- ``blind``: a random code of the right shape each turn, ignoring the pegs and what it tried (a repeat is refused).
"""
from __future__ import annotations

import itertools
import re

from ..play import ScriptedPlayer
from .adapted import probe_texts

SHAPE = re.compile(r'(\d+) digits long, each digit from 1 to (\d+), (with possible repeats|with no duplicates)')
FEEDBACK = re.compile(r'Submitted \[([\d ]+)\]\. Feedback: (\d+) black peg\(s\), (\d+) white peg\(s\)')
FEEDBACK_WORDS = 9
"""Words of a reply to a guess: ``Submitted [1 2 3]. Feedback: 0 black peg(s), 1 white peg(s).``"""
REFUSAL_WORDS = 40
"""Words of the longest reply to a refused move (``You attempted an invalid move. Reason: ...``)."""
END_WORDS = 16
"""Words of the longest reason the game gives at the end."""


PUBLIC_PASS = 0.5
"""The public check: the game's reward at the end (1.0 cracked, else its partial credit) reaches this."""


def checks(game_reward: float, reply: str) -> tuple:
    """``(hidden_pass, public_pass)`` of an ended game: the code cracked; the game's end reward >= ``PUBLIC_PASS``."""
    return game_reward >= 1.0, game_reward >= PUBLIC_PASS


def call(code) -> str:
    """The call that guesses ``code``: ``[2 1 4]``."""
    return '[' + ' '.join(str(d) for d in code) + ']'


def pegs(guess, code) -> tuple:
    """``(black, white)`` of ``guess`` against ``code``, as the game counts them."""
    black = sum(g == c for g, c in zip(guess, code))
    common = sum(min(guess.count(d), code.count(d)) for d in set(guess))
    return black, common - black


def codes(length: int, digits: int, repeats: bool) -> list:
    """Every code of the shape, in order."""
    pool = range(1, digits + 1)
    return list(itertools.product(pool, repeat=length) if repeats else itertools.permutations(pool, length))


class Codebreaker(ScriptedPlayer):
    """The scripted players of Mastermind (see the module docstring)."""

    def reset(self, task_name: str):
        self.rng = self.episode_rng(task_name)
        self.candidates = self.all = None
        self.tried = set()

    def __call__(self, observation: str) -> str:
        shape = SHAPE.search(observation)
        if shape and self.all is None:  # the prompt: the code's shape
            length, digits, repeats = int(shape.group(1)), int(shape.group(2)), 'repeats' in shape.group(3)
            self.all = codes(length, digits, repeats)
            self.candidates = list(self.all)
        for found in FEEDBACK.finditer(observation):
            guess = tuple(int(d) for d in found.group(1).split())
            seen = (int(found.group(2)), int(found.group(3)))
            self.candidates = [c for c in self.candidates if pegs(guess, c) == seen]
        if self.all is None:  # no shape seen: a guess all the same
            return call((1, 2, 3, 4))
        if self.kind == 'oracle':
            guess = (self.candidates or self.all)[0]
        elif self.kind == 'random':
            fresh = [c for c in self.all if c not in self.tried] or self.all
            guess = fresh[self.rng.randrange(len(fresh))]
        else:  # blind
            guess = self.all[self.rng.randrange(len(self.all))]
        self.tried.add(guess)
        return call(guess)


def players(kind: str, seed: int = 0) -> Codebreaker:
    """The scripted player of ``kind`` (``'oracle'``, ``'random'``, ``'blind'``)."""
    return Codebreaker(kind, seed)


def probe_calls(length: int, digits: int) -> list:
    """Call sequences that show the game's refusals: no brackets, a digit twice, out of range, too short, a repeat."""
    first = list(range(1, length + 1))
    return [['guess', 'guess'], [call([1] * length), call([digits + 1] * length)], [call(first[:-1]), call(first)],
            [call(first), call(first), call(first)]]


def textarena_settings(env) -> dict:
    """The ``GameSpec`` fields of a TextArena Mastermind game (``env``: a built, dealt ``TextArenaEnv``).

    ``max_tokens`` holds ``<bos>``, the prompt, every guess the game allows with its reply, two refused moves
    with theirs, and the final reason."""
    prompt = env.reset(seed=0)[0]
    game = env.game
    length, turns, digits = int(game.code_length), int(game.max_turns), int(game.num_numbers)
    call_tokens = length + 1  # '[2', '1', '4]' and the stop token
    forms = ' '.join(f'[{d}, {d}, {d}]. {d}/{length}' for d in range(1, digits + 1))  # a repeat's reply lists the guess
    return {'max_call_tokens': call_tokens, 'players': players, 'kinds': ('oracle', 'random', 'blind'),
            'example_calls': tuple(call(c) for c in codes(length, int(game.num_numbers),
                                                             bool(game.duplicate_numbers))[:64]),
            'checks': checks, 'prefix': 'mastermind',
            'texts': (*probe_texts(env, probe_calls(length, digits)), forms),
            'max_tokens': (1 + len(prompt.split()) + (turns + 1) * (call_tokens + 2 + FEEDBACK_WORDS)
                           + 2 * (call_tokens + 2 + REFUSAL_WORDS) + END_WORDS)}
