"""``AdaptedEnv``: another library's game behind the text-env protocol (one instance per episode).

The GEM and TextArena adapters (``gem.py``, ``textarena.py``) write only how to build, start and step
their library's game (``_build``, ``_start``, ``_play``); this base, a ``TextEnv``, keeps the protocol alike for both:

- ``reset(options={'task': task})`` takes a task that is a seed (``seeds``: a name and an int ``seed``) and
  deals the game of that seed;
- ``step(call)`` passes the call to the game as the policy wrote it and the game's reward for that step
  through unchanged (any finite number: partial credit and penalties included), records the call in
  ``info['actions']`` and counts it in ``info['n_invalid']`` when the game's own invalid-move signal says so;
- every call into the game runs with the game's own random streams and no network (``isolation``);
- an episode ends when the game ends it (``terminated``), or is truncated after ``max_turns`` calls, or
  before a reply would push the rendered episode past ``max_tokens`` word-level tokens (room kept for
  one more call and a short reply); a final reply that would not fit is cut to the room left;
- ``info`` holds ``task``, ``group``, ``actions``, ``n_invalid``, ``turn`` and, at the end, ``submitted`` (the
  game ended the episode itself), ``game_reward`` (the game's reward at its last step) and, for a game with
  ``checks``, ``hidden_pass`` (it was won) and ``public_pass`` (a weaker check, which ``reward='public'`` pays).

A ``GameSpec`` says everything about one adapted game; a ``GameFactory`` (what ``from_gem`` and
``from_textarena`` return; a ``CheckedGameFactory``, which takes ``reward=``, for a game with checks) builds a fresh environment of it with no argument, as every recipe's ``env=``
expects.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..base import TextEnv
from ..play import play
from ..protocol import task_name
from .isolation import GameRandomness, game_call
from .seeds import SeedTask, seed_tasks, task_seed


@dataclass(frozen=True)
class GameSpec:
    """One game of another library as agentrl plays it (built by ``from_gem`` / ``from_textarena``)."""
    library: str
    """``'gem'`` or ``'textarena'``."""
    env_id: str
    """The game's id in its library (``'game:GuessTheNumber-v0-easy'``, ``'Mastermind-v0'``)."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments for the library's ``make`` (the game's own settings, e.g. ``max_turns``)."""
    max_turns: int = 8
    """Calls per episode before the adapter truncates it (set above the game's own limit, so the game ends first)."""
    max_tokens: int = 320
    """Word-level tokens per rendered episode (``<bos>``, prompt, calls with their stop token, wrapped replies)."""
    max_call_tokens: int = 4
    """Tokens a sampled call may have, its stop token included (word-level: words + 1)."""
    prefix: str = 'seed'
    """Task names of ``tasks()``: ``'<prefix>/<seed>'``."""
    players: Callable | None = None
    """``players(kind, seed)`` -> a scripted player of the game (``reset(task_name)``, ``__call__(obs) -> call``)."""
    kinds: tuple = ()
    """The kinds ``players`` takes (``'oracle'`` first when there is one)."""
    example_calls: tuple = ()
    """Well-formed calls (size a ``ChatRenderer``'s call limit)."""
    invalid: Callable | None = None
    """``invalid(reply, reward, game_over) -> bool``: the game's invalid-move signal, where the library's own
    (``AdaptedEnv._play``) does not say it."""
    texts: tuple = ()
    """Text the game can show beyond what its scripted players see (its refusals, every number's forms): a
    word-level vocabulary built with ``build_tokenizer(tasks, env=factory, texts=factory.spec.texts)`` covers it."""
    checks: Callable | None = None
    """``checks(game_reward, reply) -> (hidden_pass, public_pass)`` at the end of a game: whether it was won, and
    a weaker check an exploit can pass; with it the environment takes ``reward='public'``, which pays the
    public check (1.0 or 0.0) at the end instead of the game's rewards."""
    show_suffix: bool = True
    """GEM: the prompt and every reply end with the game's ``info['suffix']`` (a board game's board), as GEM's
    ``ObservationWrapper`` shows them; off for a game whose suffix is a fixed line (``gem.FIXED_SUFFIX``)."""

    @property
    def title(self) -> str:
        """How errors and reports name the game: ``'gem:game:GuessTheNumber-v0-easy'``."""
        return f'{self.library}:{self.env_id}'


def resolve_spec(library: str, env_id: str, kwargs: dict, defaults: dict, explicit: dict) -> GameSpec:
    """The ``GameSpec`` of a game: ``GameSpec``'s defaults, then ``defaults`` (the game's own and its module's),
    then the ``explicit`` settings that are not None. ValueError when no ``max_turns`` is known, or a setting
    is not a positive int."""
    fields = {k: v for k, v in {**defaults, **{k: v for k, v in explicit.items() if v is not None}}.items()
              if v is not None}
    if explicit.get('players') is not None and explicit.get('kinds') is None:
        fields['kinds'] = ('oracle',)
    title = f'{library}:{env_id}'
    if 'max_turns' not in fields:
        raise ValueError(f'{title} declares no turn limit of its own: pass max_calls= to from_{library} (the calls '
                         "an episode may take, the environment's max_turns), e.g. max_calls=20")
    for name in ('max_turns', 'max_tokens', 'max_call_tokens'):
        value = fields.get(name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f'{name} of {title} must be a positive int, got {value!r}')
    if fields.get('kinds') and fields.get('players') is None:
        raise ValueError(f'{title}: kinds={fields["kinds"]!r} given without players=(kind, seed) -> player')
    fields['kinds'], fields['example_calls'] = tuple(fields.get('kinds', ())), tuple(fields.get('example_calls', ()))
    return GameSpec(library, env_id, dict(kwargs), **fields)


def game_factory(env_class: type, spec: GameSpec):
    """The factory of a game: a ``CheckedGameFactory`` (it takes ``reward=``) when the game has ``checks``."""
    return (CheckedGameFactory if spec.checks is not None else GameFactory)(env_class, spec)


def probe_texts(env, call_sequences, seeds=range(2)) -> tuple:
    """Every prompt and reply of ``env`` (a built ``AdaptedEnv``) over some fixed ``call_sequences`` on ``seeds``:
    the text a game shows for calls its scripted players never make (its refusals), for ``GameSpec.texts``."""
    episodes = [play(env, task, lambda _, rest=iter(calls): next(rest, None))
                for task in seed_tasks(env.spec.prefix, seeds) for calls in call_sequences]
    return tuple(dict.fromkeys(text for ep in episodes for text in (ep.prompt, *ep.replies)))


class GameFactory:
    """Builds a fresh environment of one adapted game per call (the ``env=`` of every recipe); picklable."""

    def __init__(self, env_class: type, spec: GameSpec):
        self.env_class, self.spec = env_class, spec
        self.__name__ = f'{env_class.__name__}({spec.env_id})'

    def __call__(self):
        return self.env_class(self.spec)

    def tasks(self, seeds) -> list:
        """One ``SeedTask`` per seed, named ``'<prefix>/<seed>'``."""
        return seed_tasks(self.spec.prefix, seeds)

    def __repr__(self):
        return f'<agentrl environment factory {self.spec.title} {self.spec.kwargs or ""}>'.replace(' >', '>')

    def __eq__(self, other):
        return isinstance(other, GameFactory) and (self.env_class, self.spec) == (other.env_class, other.spec)

    def __hash__(self):
        return hash((self.env_class, self.spec.title))


class CheckedGameFactory(GameFactory):
    """The factory of a game with a hidden and a public check: it takes ``reward='hidden'`` or ``'public'``."""

    def __call__(self, reward: str = 'hidden'):
        return self.env_class(self.spec, reward=reward)


class AdaptedEnv(TextEnv):
    """One episode of an adapted game (see the module docstring); subclasses write ``_build``, ``_start``, ``_play``.
    ``TextEnv`` keeps its ``reset``, ``step`` and token budget; what a game does its own way is in the hooks below."""

    readable = None  # a game's text is shown as the game wrote it (a board keeps its rows), not as prose

    def __init__(self, spec: GameSpec, reward: str = 'hidden'):
        super().__init__(reward)
        if reward != 'hidden' and spec.checks is None:
            raise ValueError(f"{spec.title} has no public check (GameSpec.checks): only reward='hidden'")
        self.spec = spec
        self.max_turns, self.max_tokens, self.max_call_words = spec.max_turns, spec.max_tokens, spec.max_call_tokens - 1
        self.example_calls, self.scripted_kinds = spec.example_calls, spec.kinds
        self.randomness = GameRandomness(0)
        with game_call(spec.title, self.randomness):
            self.game = self._build()

    # --- what an adapter writes
    def _build(self):
        """The library's game object (called once, isolated)."""
        raise NotImplementedError

    def _start(self, seed: int) -> str:
        """Deal the game of ``seed`` -> the prompt (isolated)."""
        raise NotImplementedError

    def _play(self, call: str) -> tuple:
        """One call -> ``(reply, reward, game_over, invalid)`` (isolated); ``invalid`` from the library's signal."""
        raise NotImplementedError

    def scripted_policy(self, kind: str, seed: int = 0):
        """The game's scripted player of ``kind`` (``scripted_kinds``); ValueError if it has none."""
        if self.spec.players is None:
            raise ValueError(f'{self.spec.title} has no scripted players: pass players=(kind, seed) -> player to the '
                             'adapter (see agentrl.envs.adapters)')
        return self.spec.players(kind, seed)

    # --- TextEnv's hooks, as a game of another library takes them
    def _find_task(self, task, seed):
        """A task with a seed, or a name ``'prefix/SEED'``, or (no task given) the task of ``seed``."""
        if task is None:
            if seed is None:
                raise ValueError(f"{type(self).__name__}.reset needs options={{'task': task}} (a task with a seed)")
            return SeedTask(f'{self.spec.prefix}/{seed}', seed)
        return SeedTask(task, task_seed(task)) if isinstance(task, str) else task

    def start(self, task) -> str:
        """Deal the game of the task's seed (isolated) -> the prompt; ValueError when it leaves no room for a call."""
        game_seed = task_seed(task)
        self.randomness.reseed(game_seed)
        with game_call(self.spec.title, self.randomness):
            prompt = self._start(game_seed)
        self.game_reward, self.last_reply = 0.0, ''
        if 1 + len(prompt.split()) + self.max_call_tokens + 3 > self.max_tokens:  # <bos> prompt, a call, a reply
            raise ValueError(f'{self.spec.title} prompt of task {task_name(task)!r} has {len(prompt.split())} words: '
                             f'no room for a call within max_tokens={self.max_tokens}; raise max_tokens')
        return prompt

    def _received(self, action: str) -> str:
        """The call as the policy wrote it, whitespace and all: the game parses it (``\\boxed{50}``, ``[1 2 3]``)."""
        return action

    def _call(self, call: str):
        """The game's answer -> (reply, game over, reward); a last reply past the budget is cut to the room left."""
        with game_call(self.spec.title, self.randomness):
            reply, reward, game_over, invalid = self._play(call)
        self.last_reply, self.game_reward = reply, float(reward)  # as the game said and paid it (the checks read them)
        if self.spec.invalid is not None:
            invalid = invalid or bool(self.spec.invalid(reply, reward, game_over))
        self.n_invalid += int(bool(invalid))
        if game_over and self.n_tokens + self._reply_tokens(reply) > self.max_tokens:
            reply = ' '.join(reply.split()[:max(self.max_tokens - self.n_tokens - 2, 1)])
        return reply, bool(game_over), float(reward)

    def _reply_tokens(self, reply: str) -> int:
        """As ``TextEnv``'s, but a reply of only whitespace (a game may send one) counts as none."""
        return len(reply.split()) + 2 if reply.strip() else 0

    def _paid(self, reward: float, terminated: bool, info: dict) -> float:
        """The game's reward, or with ``reward='public'`` the public check at the end (0 before)."""
        if self.reward_mode == 'public':
            return float(info['public_pass']) if terminated else 0.0
        return reward

    def _info(self, final: bool) -> dict:
        info = super()._info(final=False)
        del info['submitted']  # a game's info says it at the end, with the game's reward and its checks
        if final:
            info['submitted'], info['game_reward'] = self.submitted, self.game_reward
            if self.spec.checks is not None:
                hidden, public = (self.spec.checks(self.game_reward, self.last_reply) if self.submitted
                                  else (False, False))  # truncated: the game did not end
                info['hidden_pass'], info['public_pass'] = bool(hidden), bool(public)
        return info

    def __repr__(self):
        return f'<{type(self).__name__} {self.spec.title}>'

    __str__ = __repr__  # gym.Env's __str__ reads self.spec.id, a registered id; here self.spec is the GameSpec
