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
"""
from __future__ import annotations

import inspect
import warnings
from functools import partial

from .play import Episode, play, scripted_player
from .protocol import END_INFO_KEYS, EnvProtocolError, env_attr, make_env_factory, task_name

FUZZ_CALLS = ('', '   ', 'xyzzy', 'submit submit submit submit submit submit', '<stop>', '!! ?? ..', '0 1 2 3 4 5 6 7 8 9')
"""Calls no environment's grammar should accept: each must get a reply, never an exception."""
OPTIONAL_INFO = {'group': str, 'hidden_pass': bool, 'public_pass': bool, 'submitted': bool}


class _Repeat:
    """A player that makes the same call every turn (how the checker fuzzes an environment)."""

    def __init__(self, call):
        self.call = call

    def reset(self, task_name):
        pass

    def __call__(self, observation):
        return self.call


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
    ``{'env', 'tasks', 'episodes', 'players', 'unknown_words', 'returns'}`` (``returns``: the distinct returns
    of the scripted players' episodes, rounded to 1e-6: more than 0 and 1 means partial credit). With ``tok`` (a word-level tokenizer),
    words of scripted play that it lacks are listed in ``unknown_words`` and in a ``UserWarning``.
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

    players = []  # (label, a callable that builds the player afresh)
    if env_attr(first, 'scripted_policy') is not None:
        kinds = env_attr(first, 'scripted_kinds', ('oracle',))
        players = [(f'{kind} (seed {s})', partial(scripted_player, first, kind, s)) for kind in kinds for s in seeds]
    players += [(f'fuzz {c!r}', partial(_Repeat, c)) for c in FUZZ_CALLS]
    words, episodes, returns = set(), 0, set()
    for task, name in zip(tasks, names):
        for label, new_player in players:
            ep = _play(make(), task, new_player(), cls, label)
            _check_end(ep, name, cls, label)
            if not label.startswith('fuzz'):
                again = _play(make(), task, new_player(), cls, label)
                if (again.prompt, again.replies, again.rewards) != (ep.prompt, ep.replies, ep.rewards):
                    raise EnvProtocolError(cls, 'the same calls give the same episode',
                                           f'task {name!r} with player {label} gave other replies or reward the '
                                           'second time; seed every random choice from the task')
                words.update(w for text in (ep.prompt, *ep.calls, *ep.replies) for w in text.split())
                returns.add(round(ep.reward, 6))
            episodes += 1
    _check_reward_modes(env, cls)
    unknown = sorted(w for w in words if tok is not None and w not in tok.token_to_id)
    if unknown:
        warnings.warn(f'{len(unknown)} words of scripted play on {cls} are not in the vocabulary and encode as <unk>: '
                      f'{unknown[:12]}{" ..." if len(unknown) > 12 else ""}', UserWarning, stacklevel=2)
    return {'env': cls, 'tasks': len(tasks), 'episodes': episodes, 'players': [p for p, _ in players],
            'unknown_words': unknown, 'returns': sorted(returns)}


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
