"""TextArena's single-player games as agentrl environments: ``from_textarena('Mastermind-v0')`` (``agentrl[textarena]``).

TextArena's protocol is its own: ``ta.make(id)``, ``reset(num_players, seed)``, ``get_observation()`` ->
``(player_id, messages)``, ``step(action) -> (done, info)``, and ``close()`` -> the rewards. ``TextArenaEnv``
plays one episode of a single-player game behind the text-env protocol (``adapted.AdaptedEnv``):

- the prompt is the game's first messages; each reply is what the game said since the call (the echo of
  the call itself left out), and at the end the reason the game gives for its outcome. TextArena's
  observation wrappers, which re-send the whole history every turn, are not used: the rendered episode
  already holds it;
- TextArena pays only at the end of a game (``close()``): every step before pays 0, the last step pays
  the game's reward (Mastermind: 1 for the code, else partial credit for the last guess's pegs);
- a call counts as invalid when the game's own signal says so (its error count rises, or its invalid move
  ends the game: a game allows one refused move in a row, the second ends it);
- the environment's ``max_turns`` defaults to the most calls a game can take: its own turns (refused moves do not count
  among them), each after up to one refused move.

TextArena seeds Python's global ``random`` in its game state; here it runs on the game's own stream
(``isolation``), so the caller's random state never moves.
"""
from __future__ import annotations

from .adapted import AdaptedEnv, GameFactory, GameSpec, game_factory, resolve_spec
from .isolation import held_output
from .libraries import import_isolated
from . import mastermind

GAMES = {'Mastermind': mastermind.textarena_settings}
"""The TextArena games that come with scripted players and budgets here, by the name in their id
(``'<Name>-v0...'``) -> ``settings(env) -> dict`` of ``GameSpec`` fields, read off a built game."""


class TextArenaEnv(AdaptedEnv):
    """One episode of a single-player TextArena game (see the module docstring)."""

    def _build(self):
        ta = import_isolated('textarena')
        game = ta.make(self.spec.env_id, **self.spec.kwargs)
        while isinstance(game, ta.Wrapper):  # the bare game: replies are what it says since the call
            game = game.env
        return game

    def _messages(self) -> str:
        import textarena as ta
        _, messages = self.game.get_observation()
        return '\n'.join(str(text).strip() for _, text, kind in messages if kind != ta.ObservationType.PLAYER_ACTION)

    def _start(self, seed: int) -> str:
        try:
            self.game.reset(num_players=1, seed=seed)
        except AssertionError as e:
            raise ValueError(f'{self.spec.title} is not a single-player game ({e}): the TextArena adapter plays '
                             'single-player games only') from None
        self.errors = 0
        return self._messages()

    def _play(self, call: str) -> tuple:
        state = self.game.state
        done, _ = self.game.step(call)
        player = state.game_info.get(0, {})
        invalid = state.error_count > self.errors or (done and bool(player.get('invalid_move')))
        self.errors = state.error_count
        reply = self._messages()
        reward = 0.0
        if done:
            rewards = self.game.close()
            rewards = rewards[0] if isinstance(rewards, tuple) else rewards
            reward = float((rewards or {}).get(0, 0.0))
            reason = player.get('reason')
            reply = '\n'.join(part for part in (reply, str(reason or '').strip()) if part)
        return reply, reward, bool(done), bool(invalid)


def game_name(env_id: str) -> str:
    """``'Mastermind-v0-hard'`` -> ``'Mastermind'``."""
    return env_id.split('-', 1)[0]


def from_textarena(env_id: str, *, max_calls: int | None = None, max_tokens: int | None = None,
                   max_call_tokens: int | None = None, players=None, kinds=None, example_calls=None,
                   prefix: str | None = None, **kwargs) -> GameFactory:
    """An environment factory for the single-player TextArena game ``env_id`` (every recipe takes it as ``env=``).

    ``kwargs`` go to ``ta.make`` (the game's own settings, e.g. ``code_length=3``, ``max_turns=``). The rest
    override the defaults as in ``gem.from_gem`` (``max_calls``, the environment's ``max_turns``, defaults to
    the most calls the game can take); a game
    listed in ``GAMES`` brings its own. One game is built and dealt here, so an unknown id, a missing extra,
    a game for several players or one that needs the network fail now, saying so.
    """
    import_isolated('textarena')
    from textarena.envs.registration import ENV_REGISTRY
    if env_id not in ENV_REGISTRY:
        raise ValueError(f'unknown TextArena environment {env_id!r}; valid ids include '
                         f'{sorted(k for k in ENV_REGISTRY if not k.endswith(("-raw", "-train")))}')
    with held_output():  # a download's chatter is dropped when the game needs the network
        probe = TextArenaEnv(GameSpec('textarena', env_id, dict(kwargs), max_tokens=10**9))
        probe.reset(seed=0)  # a game for several players is refused here
    own = getattr(probe.game, 'max_turns', None)
    allowance = getattr(probe.game.state, 'error_allowance', 1)
    defaults = {'max_turns': (allowance + 1) * (own + 1) if isinstance(own, int) else None,
                'prefix': game_name(env_id).lower()}
    known = GAMES.get(game_name(env_id))
    if known is not None:
        defaults.update(known(probe))
    explicit = dict(max_turns=max_calls, max_tokens=max_tokens, max_call_tokens=max_call_tokens, players=players,
                    kinds=kinds, example_calls=example_calls, prefix=prefix)
    return game_factory(TextArenaEnv, resolve_spec('textarena', env_id, kwargs, defaults, explicit))
