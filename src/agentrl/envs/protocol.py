"""The text-environment protocol: what an environment gives agentrl, and how the library builds one.

agentrl trains on any environment that keeps Gymnasium's ``reset`` / ``step`` with text in and text
out. The environment never sees a token: the library renders the episode, builds the action mask and
keeps the policy's sampled ids as sampled (``render``, ``rollout``). One environment is built per
episode, and the episode's task is handed to ``reset``.

**An environment** (an object; ``arl.check_text_env`` checks every rule below and names the broken one):

==============================================  ======================================================
``reset(*, seed=None, options={'task': task})``  start the episode of ``task`` -> ``(prompt: str, info: dict)``
``step(call: str)``                              the policy's call (its text before the stop token) ->
                                                 ``(reply: str, reward: float, terminated: bool,
                                                 truncated: bool, info: dict)``; a call the environment
                                                 cannot parse is answered with an error reply and
                                                 counted in ``info['n_invalid']``, never raised; the
                                                 reward is any finite number, paid at any step
``max_turns``                                    every episode ends (terminated or truncated) within
                                                 this many calls
``max_tokens``                                   the longest rendered episode, in word-level tokens;
                                                 ``rollout_batch`` refuses a model whose
                                                 ``block_size`` is shorter
``max_call_tokens``                              the most tokens a sampled call may have, its stop token
                                                 included (word-level: words + 1); longer calls are cut
==============================================  ======================================================

**Rewards.** Every step pays a reward: a finite number (0, a share of partial credit, a penalty below 0), at
any step, not only the last. A trajectory keeps each call's reward (``Trajectory.turn_rewards``) and its
``reward`` is the episode's *return*, their sum, undiscounted (a discount is the learner's choice:
``recipes.credit``). An episode that pays one 0/1 reward at the end, as the chapter's gyms do, has a return
of 0 or 1. Where the recipes split episodes into successes and failures (expert iteration, STaR, RFT,
DPO's pairs) the rule is an argument: a return that reaches ``threshold`` (default 1.0), or a pair whose
returns differ by at least ``margin`` (default 1.0) (``recipes.outcomes``).

``info`` at the end of an episode (the step that returns ``terminated`` or ``truncated``) holds:

- required: ``'task'`` (the task's name), ``'actions'`` (each call as the environment received it,
  a list of str, one per call) and ``'n_invalid'`` (calls it could not parse, an int);
- optional, read by the tables and diagnostics that apply: ``'group'`` (the task's group, for
  per-group pass rates), ``'hidden_pass'`` and ``'public_pass'`` (bools: whether the episode's
  outcome passes the hidden check that decides the reward, and the public check the agent can see:
  the reward-hacking diagnostics compare them), ``'submitted'`` (the agent ended the episode itself).

The library adds ``'truncated'`` to an ended episode's info (whether the step that ended it returned
``truncated`` and not ``terminated``: a budget cut it), which its trajectory keeps.

Optional members, used where present:

- ``scripted_policy(kind, seed=0)`` (a static method) and ``scripted_kinds``: scripted players
  (``'oracle'``, ``'blind'``, ``'random'``, ...) with ``reset(task_name)`` and ``player(observation) ->
  call``. ``recipes.star`` forces the oracle's answer; ``tokenizer.build_tokenizer(env=...)`` and
  ``check_text_env`` play them.
- a ``reward`` keyword of the constructor: ``'hidden'`` (the default: the true reward) or ``'public'``
  (the check the agent can see, which an exploit may game); recipes called with ``reward='public'``
  build the environment with it.
- ``is_read_call(call) -> bool`` (a static method): whether a call only looks at the task (BugFix: a
  well-formed ``read``), for the share of episodes that read (``describe``, ``reads_first``);
  ``example_calls``: well-formed calls, which size a ``ChatRenderer``'s call limit.

**A task** has a ``name`` (a non-empty str, unique among the tasks), optionally a ``group`` (str) and
``words`` (every word an episode of it can show: ``build_tokenizer(tasks)`` uses it).

**An environment factory**, the ``env=`` keyword of every recipe and evaluator, is either a callable
that returns a fresh environment (the class itself, a ``functools.partial`` of it, a function) or a
registered Gymnasium id such as ``'agentrl/BugFix-v0'`` (the default everywhere). The library calls
it with no argument, or with ``reward='public'`` when a recipe is asked for the public reward.
"""
from __future__ import annotations

import math
import numbers
from functools import partial

DEFAULT_ENV = 'agentrl/BugFix-v0'
"""The environment every recipe uses unless given ``env=``: the BugFix gym, by its Gymnasium id."""
REWARD_MODES = ('hidden', 'public')
"""``reward=`` of the recipes: the environment's true (hidden) reward, or the public check it shows the agent."""
END_INFO_KEYS = ('task', 'actions', 'n_invalid')
"""The ``info`` keys every environment reports at the end of an episode."""
RETURN_TOL = 1e-9
"""How far a return may fall short of a threshold and still reach it. A return is a sum of step rewards, and
sums round (ten steps of 0.1 add up to 0.9999999999999999), so "reaches ``threshold``" is
``return >= threshold - RETURN_TOL`` throughout the library (``recipes.outcomes``)."""


class EnvProtocolError(TypeError):
    """An environment broke the text-env protocol. ``env`` is its class name, ``rule`` the rule it broke."""

    def __init__(self, env: str, rule: str, detail: str):
        super().__init__(f'{env} breaks the text-env protocol ({rule}): {detail}')
        self.env, self.rule = env, rule


class EnvStepError(RuntimeError):
    """An environment raised inside ``reset`` or ``step`` during a rollout; the original exception is chained."""


def env_name(env) -> str:
    """The class name of an environment (or of what a factory is)."""
    if isinstance(env, str):
        return env
    if isinstance(env, type):
        return env.__name__
    if isinstance(env, partial):
        return env_name(env.func)
    return type(env).__name__ if hasattr(env, 'step') else getattr(env, '__name__', type(env).__name__)


def _creator(env):
    """The callable behind ``env`` (a factory or a Gymnasium id) and the keyword arguments its registration adds."""
    if isinstance(env, str):
        import gymnasium as gym
        from gymnasium.envs.registration import load_env_creator
        try:
            spec = gym.spec(env)
        except gym.error.Error as e:
            known = sorted(k for k in gym.registry if k.startswith('agentrl/'))
            raise ValueError(f'unknown environment {env!r} ({e}); registered agentrl environments: {known}') from None
        creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
        return creator, dict(spec.kwargs)
    if isinstance(env, type) or (callable(env) and not hasattr(env, 'step')):
        return env, {}
    raise TypeError(f'env must be an environment factory (a class or a callable that returns a fresh environment) or '
                    f'a registered Gymnasium id, got {env_name(env)} instance: pass the class, e.g. env={env_name(env)}')


def make_env_factory(env=DEFAULT_ENV, reward: str = 'hidden'):
    """A zero-argument callable that builds a fresh environment for one episode (the library's one way to build them).

    ``env``: an environment class or any callable returning a fresh environment, or a registered Gymnasium id
    (default: the BugFix gym). ``reward``: ``'hidden'`` (the environment's own, true reward: it is built with no
    argument) or ``'public'`` (it is built with ``reward='public'``).
    """
    if reward not in REWARD_MODES:
        raise ValueError(f'unknown reward mode {reward!r}; valid modes are {list(REWARD_MODES)}')
    creator, kwargs = _creator(env)
    if reward != 'hidden':
        kwargs['reward'] = reward
    factory = partial(creator, **kwargs) if kwargs else creator
    if reward != 'hidden':
        try:
            factory()
        except TypeError as e:
            raise ValueError(f"{env_name(env)} does not take reward={reward!r} ({e}): an environment with a public "
                             "check to game takes reward= in its constructor (see agentrl.envs.protocol)") from None
    return factory


class with_env_workers:
    """An environment factory whose environments ask ``rollout_batch`` to step them in a pool of ``n`` threads.

    ``with_env_workers(env, n)`` wraps a factory or Gymnasium id: each environment it builds has
    ``env_workers = n`` (an environment class may also set that attribute itself). For environments whose
    steps wait (a subprocess, a sandbox, a local service); the trajectories are the same as with ``n = 1``.
    """

    def __init__(self, env, n: int):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f'env_workers must be a positive int, got {n!r}')
        self.env, self.n = env, n
        self.__name__ = env_name(env)

    def __call__(self, **kwargs):
        creator, base = _creator(self.env)
        env = creator(**{**base, **kwargs})
        env.env_workers = self.n
        return env

    def __repr__(self):
        return f'with_env_workers({self.__name__}, {self.n})'


def env_attr(env, name: str, default=None):
    """An optional member of an environment, read off its class (a factory or id is resolved to what it builds)."""
    if not isinstance(env, str) and hasattr(env, 'step'):  # an instance
        return getattr(env, name, default)
    creator, _ = _creator(env)
    if isinstance(creator, type):
        return getattr(creator, name, default)
    return getattr(creator(), name, default)


def task_name(task) -> str:
    """A task's name (the protocol's one required member)."""
    name = getattr(task, 'name', None)
    if not isinstance(name, str) or not name:
        raise EnvProtocolError(type(task).__name__, 'a task has a name',
                               f'task {task!r} has no non-empty str .name (got {name!r})')
    return name


def task_group(task) -> str | None:
    """A task's group, or None when it has none."""
    return getattr(task, 'group', None)


def find_task(name: str, tasks=None):
    """The task named ``name``: the one of ``tasks`` with that name, or (no ``tasks``) the name itself, which an
    environment that resets by name takes (the chapter's gyms do). ``ValueError`` if ``tasks`` lack it."""
    if tasks is None:
        return name
    by_name = {task_name(t): t for t in tasks}
    if name not in by_name:
        raise ValueError(f'no task named {name!r} among the {len(by_name)} tasks given '
                         f'(e.g. {sorted(by_name)[:3]}); pass the tasks the episode was played on')
    return by_name[name]


def _number(x) -> bool:
    return isinstance(x, numbers.Real) and math.isfinite(float(x))


def checked_reset(env, task):
    """``env.reset(options={'task': task})``, checked -> ``(prompt, info)``.

    Raises ``EnvStepError`` (chained) if the environment raises, ``EnvProtocolError`` if it returns
    anything but ``(str, dict)``."""
    try:
        out = env.reset(options={'task': task})
    except Exception as e:
        raise EnvStepError(f'{type(env).__name__}.reset raised on task {getattr(task, "name", task)!r}: '
                           f'{type(e).__name__}: {e}') from e
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], str) and isinstance(out[1], dict)):
        raise EnvProtocolError(type(env).__name__, 'reset returns (observation, info)',
                               f'reset(options={{"task": ...}}) returned {_shape(out)}; return (prompt: str, info: dict)')
    return out


def checked_step(env, call: str, task, turn: int):
    """``env.step(call)`` at call number ``turn`` (1-based) of ``task``'s episode, checked -> the five values.

    Raises ``EnvStepError`` naming the class, the task, the turn and the call when the environment
    raises (the original exception chained); ``EnvProtocolError`` when it returns something other
    than five values with a str observation and a finite numeric reward, or when the episode has not
    ended after ``max_turns`` calls."""
    try:
        out = env.step(call)
    except Exception as e:
        raise EnvStepError(f'{type(env).__name__}.step raised on task {getattr(task, "name", task)!r}, turn {turn}, '
                           f'call {call!r}: {type(e).__name__}: {e}') from e
    cls = type(env).__name__
    if not (isinstance(out, tuple) and len(out) == 5):
        raise EnvProtocolError(cls, 'step returns five values',
                               f'step({call!r}) returned {_shape(out)}; return (observation, reward, terminated, '
                               'truncated, info) as Gymnasium does')
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, str):
        raise EnvProtocolError(cls, 'the observation is a str',
                               f'step({call!r}) returned an observation of type {type(obs).__name__}; the '
                               'environment sees and answers text')
    if not _number(reward):
        raise EnvProtocolError(cls, 'the reward is a finite number',
                               f'step({call!r}) returned reward {reward!r}')
    if not isinstance(info, dict):
        raise EnvProtocolError(cls, 'info is a dict', f'step({call!r}) returned info of type {type(info).__name__}')
    if not (terminated or truncated) and turn >= env.max_turns:
        raise EnvProtocolError(cls, 'every episode ends within max_turns',
                               f'the episode of task {getattr(task, "name", task)!r} has not ended after {turn} calls '
                               f'(max_turns={env.max_turns}); truncate it at max_turns')
    return out


def _shape(out) -> str:
    if isinstance(out, tuple):
        return f'{len(out)} values ({", ".join(type(x).__name__ for x in out)})'
    return f'a {type(out).__name__}'
