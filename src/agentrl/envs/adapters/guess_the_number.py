"""GEM's Guess The Number (``game:GuessTheNumber-v0-easy``, ``-hard``, ``-random``): budgets and scripted players.

The game hides a number in a range the prompt states ("between 1 and 10 (inclusive) within 4 turns"). A
call is a guess written ``\\boxed{7}``; the reply says whether the number is higher or lower. GEM pays 1.0
for the number found, and, when the turns run out, partial credit for the last guess,
``1 - |guess - number| / (max - min)``; a call without a ``\\boxed{}`` number pays -0.1 and ends the
episode; a guess out of range or made before pays 0 and is refused (counted in ``info['n_invalid']``).

Its checks (``reward='public'`` pays the public one): hidden, the number was found; public, the game's
reward at the end is at least ``PUBLIC_PASS`` (a last guess within half the range passes), a weaker check
that guessing near the middle without searching often passes.

The players read the range from the prompt and the hints from the replies, as a model must:

- ``oracle``: binary search, the middle of what the hints leave; finds the number within
  ``ceil(log2(max - min + 2))`` guesses, so within the game's turns on every seed of the easy and hard games;
- ``random``: a uniformly random number of the range it has not guessed, ignoring the hints (well-formed,
  unskilled: a weak player);
- ``blind``: a uniformly random number of the range each turn, ignoring the hints and its guesses (a repeat
  is refused).
"""
from __future__ import annotations

import re

from ..play import ScriptedPlayer
from .adapted import probe_texts

RANGE = re.compile(r'between (\d+) and (\d+)')
HINT = re.compile(r'you guessed (\d+), and the target number is (higher|lower) than')
REFUSED = ('outside the range', 'already guessed')
"""What the game's reply says of a guess it refuses (GEM pays such a guess 0, like an ordinary one)."""
REPLY_WORDS = 14
"""The longest reply, in words: ``At turn 10, you guessed 12, and the target number is higher than 12.``"""


PUBLIC_PASS = 0.5
"""The public check: the game's reward at the end (1.0 found, else its partial credit) reaches this."""


def checks(game_reward: float, reply: str) -> tuple:
    """``(hidden_pass, public_pass)`` of an ended game: the number found; the game's end reward >= ``PUBLIC_PASS``."""
    return game_reward >= 1.0, game_reward >= PUBLIC_PASS


def call(number: int) -> str:
    """The call that guesses ``number``: ``\\boxed{7}``."""
    return '\\boxed{' + str(number) + '}'


def refused(reply: str, reward: float, game_over: bool) -> bool:
    """Whether the game refused the guess (out of range, or made before): its invalid-move signal."""
    return any(phrase in reply for phrase in REFUSED)


class Guesser(ScriptedPlayer):
    """The scripted players of Guess The Number (see the module docstring)."""

    def reset(self, task_name: str):
        self.rng = self.episode_rng(task_name)
        self.lo = self.hi = None
        self.low, self.high = None, None
        self.guessed = set()

    def __call__(self, observation: str) -> str:
        found = RANGE.search(observation)
        if found and self.lo is None:  # the prompt: the range
            self.low, self.high = int(found.group(1)), int(found.group(2))
            self.lo, self.hi = self.low, self.high
        hint = HINT.search(observation)
        if hint:
            guess = int(hint.group(1))
            if hint.group(2) == 'higher':
                self.lo = max(self.lo, guess + 1)
            else:
                self.hi = min(self.hi, guess - 1)
        if self.lo is None:  # no range seen: a guess all the same
            return call(1)
        if self.kind == 'oracle':
            guess = (self.lo + max(self.lo, self.hi)) // 2
        elif self.kind == 'random':
            fresh = [n for n in range(self.low, self.high + 1) if n not in self.guessed] or [self.low]
            guess = fresh[self.rng.randrange(len(fresh))]
        else:  # blind
            guess = self.rng.randint(self.low, self.high)
        self.guessed.add(guess)
        return call(guess)


def players(kind: str, seed: int = 0) -> Guesser:
    """The scripted player of ``kind`` (``'oracle'``, ``'random'``, ``'blind'``)."""
    return Guesser(kind, seed)


def probe_calls(low: int, high: int) -> list:
    """Call sequences that show the game's refusals: out of range, a repeat, no number."""
    return [[call(high + 1), call(low), call(low), 'guess']]


def gem_settings(env) -> dict:
    """The ``GameSpec`` fields of a GEM Guess The Number game (``env``: a built ``GemEnv``).

    ``max_tokens`` holds the longest episode: ``<bos>``, the prompt, and on every turn a one-word call with
    its stop token and a wrapped reply of at most ``REPLY_WORDS`` words."""
    prompt, _ = env.reset(seed=0)
    game = env.game
    turns, low, high = int(game.max_turns), int(game.min_number), int(game.max_number)
    forms = ' '.join(f'{n} {n}, {n}. {call(n)}.' for n in range(low, high + 2))  # a number as prompts and replies write it
    return {'max_turns': turns, 'max_call_tokens': 2, 'players': players, 'kinds': ('oracle', 'random', 'blind'),
            'example_calls': tuple(call(n) for n in range(game.min_number, game.max_number + 1)),
            'invalid': refused, 'checks': checks, 'prefix': 'guess',
            'texts': (*probe_texts(env, probe_calls(low, high)), forms),
            'max_tokens': 1 + len(prompt.split()) + turns * (2 + REPLY_WORDS + 2)}
