"""The chapter on a game from another library: GEM's Guess The Number, as ``agentrl reproduce --env guess`` runs it.

``GUESS`` is a ``ChapterEnv`` (see ``env_registry``) whose environment is ``from_gem('game:GuessTheNumber-v0-hard')``:
a number from 1 to 50 to find in 7 guesses written ``\\boxed{27}``, with GEM's rewards (1 found, partial
credit when the turns run out, -0.1 for a call it cannot parse). Binary search finds every number within
6 guesses; guesses that ignore the hints find one in 7 about one time in 7, so the skill is reading the
replies, as in the chapter's gyms. Its tasks are seeds, train and held-out
on disjoint seeds; its scripted players are the adapter's (binary search, and two weak ones); its
vocabulary is built from their play plus the game's refusals (``GameSpec.texts``). It needs the
``agentrl[gem]`` extra: the factory is built on first use, so importing this module does not import GEM.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...envs.adapters import seed_splits
from ...rendering.tokenizer import build_tokenizer
from .env_registry import SPLITS, ChapterEnv

GAME = 'game:GuessTheNumber-v0-hard'
N_TRAIN, N_HELDOUT = 24, 12
"""Seeds 0-23 train, 24-35 are held out (held-out games are dealt by seeds the training never saw; the game
hides one of 50 numbers, so some held-out numbers are also hidden in a train game)."""
BUDGETS = {'model.block_size': 232, 'dpo_margin': 0.5}
"""The longest episode is 227 word-level tokens (``<bos>``, the 100-word prompt, seven one-word guesses and
their replies), so the TinyAgent's window is cut to 232; the chapter's training budgets are kept. A lost game pays
up to 0.98, so DPO's pairs need a margin below 1 (at 1.0 a win pairs only with a lost game that also paid for an
unreadable guess): 0.5 pairs an episode with one of its game that scored at least half the reward range lower."""


@lru_cache(maxsize=None)
def guess_factory():
    """The GEM Guess The Number factory (built once; ImportError naming the extra without GEM)."""
    from ...envs.adapters import from_gem
    return from_gem(GAME)


class _Factory:
    """The factory, resolved on first call: ``GUESS`` is declared without importing GEM."""
    __name__ = f'GemEnv({GAME})'

    def __call__(self, reward: str = 'hidden'):
        return guess_factory()(reward=reward)

    def __repr__(self):
        return repr(guess_factory())

    def __reduce__(self):
        return (_Factory, ())


def guess_tasks(split: str) -> list:
    """The seeds of ``split`` (``'train'``, ``'heldout'`` or ``'all'``), as ``SeedTask`` s named ``'guess/<seed>'``."""
    if split not in SPLITS:
        raise ValueError(f'unknown split {split!r}; valid splits are {list(SPLITS)}')
    train, heldout = seed_splits('guess', N_TRAIN, N_HELDOUT, group='guess')
    return {'train': train, 'heldout': heldout, 'all': train + heldout}[split]


@dataclass(frozen=True)
class GameChapterEnv(ChapterEnv):
    """A ``ChapterEnv`` of an adapted game: its vocabulary also covers the game's refusals (``GameSpec.texts``)."""

    def tokenizer(self):
        """The word-level tokenizer of the scripted players' play on every task, plus the game's other text."""
        return build_tokenizer(self.tasks('all'), env=self.env_id, texts=guess_factory().spec.texts)


GUESS = GameChapterEnv('guess', "GEM's Guess The Number", _Factory(), guess_tasks, budgets=dict(BUDGETS),
                       task_label='games')
"""The chapter on GEM's Guess The Number (registered in ``envs.ENVIRONMENTS`` as ``'guess'``)."""
