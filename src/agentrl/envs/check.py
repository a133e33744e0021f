"""``check_text_env``: does an environment keep the text-env protocol? (as ``gymnasium.utils.env_checker.check_env``).

It plays every task with the environment's scripted players (when it has them) and with a fixed set of
malformed calls, and checks each rule of ``protocol``. The first broken rule raises
``EnvProtocolError`` naming the class and the rule, e.g.::

    FourValues breaks the text-env protocol (step returns five values): step('look') returned 4 values ...

Rules checked: the tasks have unique non-empty names; ``max_turns``, ``max_tokens`` and
``max_call_tokens`` are positive ints; ``reset`` returns ``(str, dict)``; ``step`` returns five values,
a str observation, a finite numeric reward (at any step: a trajectory keeps each step's reward and sums
them into the episode's return), bool flags and a dict info; malformed calls are answered,
not raised; every episode ends within ``max_turns`` calls; the end info has ``task`` (the task's
name), ``actions`` (one str per call) and ``n_invalid`` (an int >= 0), and the optional keys have their
types; the same calls give the same replies and rewards (determinism); a ``reward='public'`` mode, if
the constructor takes one, builds. With ``tok``, words of scripted play that the vocabulary lacks are
reported in a warning: ``encode`` maps them to ``<unk>``, one token for every unseen word.

It also says, in a ``CheckWarning``, what it could not check or saw go wrong without breaking a rule:

- the environment has no scripted players: only malformed calls and the calls its prompt quotes (or its
  ``example_calls``) were played, so no game was played through;
- some episodes were truncated before ``max_turns`` calls (by ``max_tokens``): the share, and how many calls
  they had; a policy's episodes are cut the same way, unpaid;
- the returns of the players' episodes fall outside [0, 1] (penalties, or credit beyond a win): ``pass_rate``'s
  first value is then a mean return, not a share of successes.

None of these holds for the chapter's gyms, which it checks in silence.
"""
from __future__ import annotations

import inspect
import re
import warnings
from functools import partial

from .play import Episode, play, scripted_player
from .protocol import END_INFO_KEYS, RETURN_TOL, EnvProtocolError, env_attr, make_env_factory, task_name

FUZZ_CALLS = ('', '   ', 'xyzzy', 'submit submit submit submit submit submit', '<stop>', '!! ?? ..', '0 1 2 3 4 5 6 7 8 9')
"""Calls no environment's grammar should accept: each must get a reply, never an exception."""
OPTIONAL_INFO = {'group': str, 'hidden_pass': bool, 'public_pass': bool, 'submitted': bool}
QUOTED_CALL = re.compile(r'\\boxed\{[^{}\n]+\}|\[[^\[\]\n]+\]')
"""A call a prompt quotes as an example: ``\\boxed{reveal 3 3}`` (GEM's games) or ``[3 2]`` (TextArena's)."""


class CheckWarning(UserWarning):
    """What ``check_text_env`` could not check, or saw go wrong without breaking a rule (see the module)."""


class _Repeat:
    """A player that makes the same call every turn (how the checker fuzzes an environment)."""

    def __init__(self, call):
        self.call = call

    def reset(self, task_name):
        pass

    def __call__(self, observation):
        return self.call


class _Quoted:
    """A player that makes the environment's ``example_calls``, or else the calls its prompt quotes, in turn and
    over again: how the checker plays past the first call of an environment that has no scripted players."""

    def __init__(self, example_calls=()):
        self.examples = tuple(example_calls)
        self.reset('')

    def reset(self, task_name):
        self.calls, self.turn = None, 0

    def __call__(self, observation):
        if self.calls is None:  # the first observation is the prompt
            self.calls = list(self.examples) or list(dict.fromkeys(QUOTED_CALL.findall(observation))) or ['xyzzy']
        self.turn += 1
        return self.calls[(self.turn - 1) % len(self.calls)]


def _is_instance(env) -> bool:
    return not isinstance(env, (str, type)) and hasattr(env, 'step')


def _instance_and_factory(env):
    if _is_instance(env):  # an instance: reuse it, episode after episode
        return env, lambda: env
    make = make_env_factory(env)
    return make(), make


def check_text_env(env, tasks, tok=None, seeds=range(2)) -> dict:
    """Check ``env`` (an instance, a class or factory, or a Gymnasium id) on ``tasks`` against the text-env protocol.

    Raises ``EnvProtocolError`` naming the class and the broken rule; returns a summary otherwise:
    ``{'env', 'tasks', 'episodes', 'players', 'unknown_words', 'returns', 'truncated'}`` (``returns``: the
    distinct returns of the players' episodes, the fuzzing's left out, rounded to 1e-6: more than 0 and 1 means
    partial credit; ``truncated``: how many episodes were truncated before ``max_turns`` calls). With ``tok`` (a
    word-level tokenizer), words of scripted play that it lacks are listed in ``unknown_words`` and in a
    ``UserWarning``. What it could not check, or saw go wrong quietly, it says in a ``CheckWarning``.
    """
    first, make = _instance_and_factory(env)
    cls = type(first).__name__
    tasks = list(tasks)
    if not tasks:
        raise ValueError(f'check_text_env needs at least one task of {cls}')
    names = [task_name(t) for t in tasks]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise EnvProtocolError(cls, 'task names are unique', f'these names are shared: {dup}')
    for attr in ('max_turns', 'max_tokens', 'max_call_tokens'):
        value = getattr(first, attr, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise EnvProtocolError(cls, f'{attr} is a positive int', f'{cls}.{attr} is {value!r}')
    for method in ('reset', 'step'):
        if not callable(getattr(first, method, None)):
            raise EnvProtocolError(cls, f'{method} is a method', f'{cls} has no {method}()')

    players = _players(first, seeds)  # (label, kind, a callable that builds the player afresh)
    words, returns, played = set(), set(), []
    for task, name in zip(tasks, names):
        for label, kind, new_player in players:
            ep = _play(make(), task, new_player(), cls, label)
            _check_end(ep, name, cls, label)
            if kind != 'fuzz':
                again = _play(make(), task, new_player(), cls, label)
                if (again.prompt, again.replies, again.rewards) != (ep.prompt, ep.replies, ep.rewards):
                    raise EnvProtocolError(cls, 'the same calls give the same episode',
                                           f'task {name!r} with player {label} gave other replies or reward the '
                                           'second time; seed every random choice from the task')
                returns.add(round(ep.reward, 6))
            if kind == 'scripted':
                words.update(w for text in (ep.prompt, *ep.calls, *ep.replies) for w in text.split())
            played.append((kind, ep))
    _check_reward_modes(env, cls)
    unknown = sorted(w for w in words if tok is not None and w not in tok.token_to_id)
    if unknown:
        warnings.warn(f'{len(unknown)} words of scripted play on {cls} are not in the vocabulary and encode as <unk>: '
                      f'{unknown[:12]}{" ..." if len(unknown) > 12 else ""}', UserWarning, stacklevel=2)
    cut = [(kind, ep) for kind, ep in played if ep.truncated and len(ep.calls) < first.max_turns]
    for advice in _advisories(_title(first, cls), first, players, played, cut, sorted(returns)):
        warnings.warn(advice, CheckWarning, stacklevel=2)
    return {'env': cls, 'tasks': len(tasks), 'episodes': len(played), 'players': [p for p, _, _ in players],
            'unknown_words': unknown, 'returns': sorted(returns), 'truncated': len(cut)}


def _players(env, seeds) -> list:
    """The checker's players: ``(label, kind, new_player)``, kind ``'scripted'``, ``'quoted'`` (only when the
    environment has no scripted players) or ``'fuzz'``."""
    players = []
    if env_attr(env, 'scripted_policy') is not None:
        kinds = env_attr(env, 'scripted_kinds', ('oracle',))
        players = [(f'{kind} (seed {s})', 'scripted', partial(scripted_player, env, kind, s))
                   for kind in kinds for s in seeds]
    if not players:
        examples = tuple(getattr(env, 'example_calls', None) or ())
        label = 'its example_calls' if examples else "the prompt's quoted calls"
        players = [(label, 'quoted', partial(_Quoted, examples))]
    return players + [(f'fuzz {c!r}', 'fuzz', partial(_Repeat, c)) for c in FUZZ_CALLS]


def _title(env, cls: str) -> str:
    """How an advisory names the environment: its class, and an adapted game's id (``GemEnv (gem:game:...)``)."""
    title = getattr(getattr(env, 'spec', None), 'title', None)
    return f'{cls} ({title})' if isinstance(title, str) else cls


def _advisories(cls, env, players, played, cut, returns) -> list:
    """What the checker could not check or saw go wrong without breaking a rule, one message each (see the module)."""
    advice = []
    if not any(kind == 'scripted' for _, kind, _ in players):
        advice.append(f'{cls} has no scripted players, so check_text_env only played malformed calls and '
                      f'{players[0][0]}: no game was played through, and determinism and returns were checked on '
                      'those calls alone; pass players=(kind, seed) -> player to from_gem/from_textarena (or give '
                      'the environment a scripted_policy) to check real play')
    if cut:
        calls = sorted({len(ep.calls) for _, ep in cut})
        names = {'scripted': 'scripted', 'quoted': f'playing {players[0][0]}', 'fuzz': 'fuzzing'}
        shares = ', '.join(f'{sum(k == kind for k, _ in cut)} of {sum(k == kind for k, _ in played)} {names[kind]}'
                           for kind in names if any(k == kind for k, _ in cut))
        advice.append(f'{cls}: {len(cut)} of {len(played)} episodes ({len(cut) / len(played):.0%}; {shares}) were '
                      f'truncated by max_tokens={env.max_tokens} before max_turns={env.max_turns} calls, after '
                      f'{calls[0]}{"" if len(calls) == 1 else f" to {calls[-1]}"} calls: a policy\'s episodes are cut '
                      'there too, unpaid; raise max_tokens (max_tokens= to from_gem/from_textarena) or lower '
                      'max_turns (max_calls=)')
    outside = [r for r in returns if r < -RETURN_TOL or r > 1 + RETURN_TOL]
    if outside:
        advice.append(f'{cls}: returns of its players\' episodes run from {returns[0]:g} to {returns[-1]:g}, outside '
                      "[0, 1] (penalties, or credit beyond a win): pass_rate's first value is then the mean return, "
                      'not a share of successes; count successes with success_rate(trajs, threshold=...)')
    return advice


def _play(env, task, player, cls, label) -> Episode:
    try:
        return play(env, task, player)
    except EnvProtocolError:
        raise
    except Exception as e:  # a malformed call must be answered, not raised
        cause = e.__cause__ or e
        raise EnvProtocolError(cls, 'calls are answered, never raised',
                               f'playing task {task_name(task)!r} with {label}: {cause!r}') from e


def _check_end(ep: Episode, name: str, cls: str, label: str):
    info = ep.info
    missing = [k for k in END_INFO_KEYS if k not in info]
    if missing:
        raise EnvProtocolError(cls, 'the end info has task, actions and n_invalid',
                               f'task {name!r} ({label}) ended with info keys {sorted(info)}, missing {missing}')
    if info['task'] != name:
        raise EnvProtocolError(cls, "info['task'] is the task's name", f'got {info["task"]!r} for task {name!r}')
    actions = info['actions']
    if not (isinstance(actions, list) and all(isinstance(a, str) for a in actions) and len(actions) == len(ep.calls)):
        raise EnvProtocolError(cls, "info['actions'] holds one str per call",
                               f'task {name!r} ({label}): {len(ep.calls)} calls, actions {actions!r}')
    n = info['n_invalid']
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise EnvProtocolError(cls, "info['n_invalid'] is an int >= 0", f'task {name!r} ({label}): {n!r}')
    for key, kind in OPTIONAL_INFO.items():
        if key in info and not isinstance(info[key], kind):
            raise EnvProtocolError(cls, f"info['{key}'] is a {kind.__name__}",
                                   f'task {name!r} ({label}): {info[key]!r}')


def _check_reward_modes(env, cls):
    """If the constructor takes ``reward``, ``reward='public'`` must build."""
    source = type(env) if _is_instance(env) else env
    try:
        takes_reward = 'reward' in inspect.signature(make_env_factory(source)).parameters
    except (TypeError, ValueError):  # a callable without a signature: nothing to check
        return
    if takes_reward:
        try:
            make_env_factory(source, reward='public')
        except ValueError as e:
            raise EnvProtocolError(cls, "reward='public' builds", str(e)) from None
