"""GEM's games as agentrl environments: ``from_gem('game:GuessTheNumber-v0-easy')`` (the ``agentrl[gem]`` extra).

GEM (the ``gem-llm`` package) keeps Gymnasium's shape with text in and out: ``gem.make(id)``,
``reset(seed) -> (prompt, info)``, ``step(text)`` -> five values. ``GemEnv`` plays one episode of a GEM game
behind the text-env protocol (``adapted.AdaptedEnv``): the game's reward at each step is passed through
(GEM pays 1 for a win, partial credit when some games run out of turns, and -0.1 for a call it cannot
parse, which ends the episode), and a call counts as invalid in ``info['n_invalid']`` when GEM pays its
format-error reward for it, or when the game's module here reads its reply as a refused move.

GEM keeps what a game shows of its state in ``info``, not in the observation: Minesweeper's, Sudoku's and
Fifteen Puzzle's board, Tower of Hanoi's towers, Hangman's word are in ``info['suffix']`` at ``reset`` and at
every ``step``. GEM's own ``ObservationWrapper`` appends it (after ``info['prefix']`` and the text); so does
``GemEnv``: the prompt is the instructions then the board, and each reply what the game said then the board
as it now stands. Guess The Number's suffix is a fixed line ("Enter your next guess.", no state) and is left
out (``GameSpec.show_suffix``), so the chapter's runs on it keep their text.

GEM's constructors call ``reset`` and its ``reset(seed)`` seeds Python's and NumPy's global generators;
here both run on the game's own streams (``isolation``), so the caller's random state never moves.
"""
from __future__ import annotations

from .adapted import AdaptedEnv, GameFactory, GameSpec, game_factory, resolve_spec
from .isolation import held_output
from .libraries import import_isolated
from . import guess_the_number

GAMES = {'GuessTheNumber': guess_the_number.gem_settings}
"""The GEM games that come with scripted players and budgets here, by the name in their id
(``'game:<Name>-v0-...'``) -> ``settings(game) -> dict`` of ``GameSpec`` fields, read off the built game;
any other GEM game is adapted too, with the settings passed to ``from_gem``."""
FIXED_SUFFIX = ('GuessTheNumber',)
"""The GEM games whose ``info['suffix']`` is a fixed line, not state: left out of their text (see the module)."""
FORMAT_ERROR_REWARD = -0.1
"""GEM's reward for a call it cannot parse (``gem.utils.constants.LanguageGameReward.format_error_reward``)."""


class GemEnv(AdaptedEnv):
    """One episode of a GEM game (see the module docstring); built by the factory ``from_gem`` returns."""

    def _build(self):
        gem = import_isolated('gem')
        return gem.make(self.spec.env_id, **self.spec.kwargs)

    def _start(self, seed: int) -> str:
        prompt, info = self.game.reset(seed=seed)
        return self._shown(prompt, info)

    def _play(self, call: str) -> tuple:
        reply, reward, terminated, truncated, info = self.game.step(call)
        invalid = bool(terminated) and float(reward) == FORMAT_ERROR_REWARD
        return self._shown(reply, info), float(reward), bool(terminated or truncated), invalid

    def _shown(self, text, info) -> str:
        """The text as GEM's ``ObservationWrapper`` shows it: ``info['prefix']``, the text (ending in a newline),
        ``info['suffix']`` (the game's state); the text alone when the spec leaves the suffix out."""
        text = str(text)
        if not self.spec.show_suffix or not isinstance(info, dict):
            return text
        prefix, suffix = str(info.get('prefix', '')), str(info.get('suffix', ''))
        if suffix and text and not text.endswith('\n'):
            text += '\n'
        return prefix + text + suffix


def game_name(env_id: str) -> str:
    """``'game:GuessTheNumber-v0-easy'`` -> ``'GuessTheNumber'``."""
    return env_id.split(':', 1)[-1].split('-', 1)[0]


def from_gem(env_id: str, *, max_calls: int | None = None, max_tokens: int | None = None,
             max_call_tokens: int | None = None, players=None, kinds=None, example_calls=None, prefix: str | None = None,
             **kwargs) -> GameFactory:
    """An environment factory for the GEM game ``env_id`` (every recipe takes it as ``env=``).

    ``kwargs`` go to ``gem.make`` (the game's own settings, e.g. ``max_number=``, ``max_turns=``). The rest
    override the defaults: ``max_calls`` (the environment's ``max_turns``, calls per episode; default the
    game's own ``max_turns``, since GEM counts every call as a turn), ``max_tokens``
    (word-level tokens of a rendered episode), ``max_call_tokens`` (words of a call + 1), ``players``
    (``players(kind, seed)`` -> a scripted player) with their ``kinds``, ``example_calls``, and ``prefix``
    (task names ``'<prefix>/<seed>'``); a game listed in ``GAMES`` brings its own. One game is built here,
    so an unknown id, a missing extra, bad settings or a game that needs the network fail now, saying so.
    """
    import_isolated('gem')
    from gem.envs.registration import ENV_REGISTRY
    if env_id not in ENV_REGISTRY:
        games = sorted(k for k in ENV_REGISTRY if k.startswith('game:'))
        raise ValueError(f'unknown GEM environment {env_id!r}; valid game ids include {games}')
    show_suffix = game_name(env_id) not in FIXED_SUFFIX
    with held_output():  # built once, isolated and offline; a download's chatter is dropped with it
        probe = GemEnv(GameSpec('gem', env_id, dict(kwargs), show_suffix=show_suffix))
    defaults = {'max_turns': getattr(probe.game, 'max_turns', None), 'prefix': game_name(env_id).lower(),
                'show_suffix': show_suffix}
    known = GAMES.get(game_name(env_id))
    if known is not None:
        defaults.update(known(probe))
    explicit = dict(max_turns=max_calls, max_tokens=max_tokens, max_call_tokens=max_call_tokens, players=players,
                    kinds=kinds, example_calls=example_calls, prefix=prefix)
    return game_factory(GemEnv, resolve_spec('gem', env_id, kwargs, defaults, explicit))
