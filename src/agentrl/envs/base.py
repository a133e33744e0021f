"""``TextEnv``: a base class that keeps the text-env protocol's bookkeeping, so a new environment writes only its game.

A subclass implements three methods and may set the class attributes below. For example:

```python
class Vault(arl.TextEnv):
    def start(self, task) -> str:            # set up the episode; return the prompt
        ...
    def act(self, verb, args) -> tuple:      # one call -> (reply, ended) or (reply, ended, step_reward);
        ...                                  # raise InvalidCall('reason') to refuse it
    def checks(self) -> tuple:               # at the end -> (hidden_pass, public_pass)
        ...
```

``TextEnv`` does the rest, the same way for every environment (and as ``BugFixEnv`` does):

- ``reset(options={'task': task})`` takes a task object (or a task's name, found in ``self.tasks``);
- ``step(call)`` keeps at most ``max_call_words + 1`` words of the call, records it in ``info['actions']``
  (as ``' word word '``), answers a refused call with ``error : <reason>`` and counts it in
  ``info['n_invalid']``, and never raises for anything the policy writes;
- rewards: a step pays what ``act`` returned as its third value (0 when it returns two), and the step that
  ends the episode also pays ``end_reward(hidden_pass, public_pass)``: by default 1.0 if the agent ended
  the episode (``act`` returned ``ended``) and the hidden check passes (``reward='hidden'``, the default)
  or the public one (``reward='public'``), else 0. Override ``end_reward`` for partial credit. A
  trajectory's return is the sum of its steps' rewards (``agentrl.envs.protocol``);
- an episode is truncated after ``max_turns`` calls, or before a reply would push the rendered episode
  past ``max_tokens`` (word-level tokens, room kept for one more call and a short final reply);
- ``info`` holds ``task``, ``group`` (``task.group`` if the task has one), ``actions``, ``n_invalid``,
  ``submitted``, ``hidden_pass``, ``public_pass`` and ``turn``;
- for a language model (``envs.calls``): ``calls``, its calls described (set it to tell a model what it may
  do), and ``readable``, its words joined as prose (override it where a reply has a layout of its own).
"""
from __future__ import annotations

import gymnasium as gym

from .calls import plain_text
from .protocol import REWARD_MODES, task_group, task_name


class InvalidCall(Exception):
    """Raised by ``TextEnv.act`` for a call the grammar refuses; its message is the reply's reason."""


class TextEnv(gym.Env):
    """Base class of a text environment (see the module docstring). Arguments override the class attributes."""

    max_turns: int = 6
    """Calls per episode before it is truncated."""
    max_tokens: int = 256
    """Word-level tokens per rendered episode; a reply that would pass it truncates the episode."""
    max_call_words: int = 3
    """Words a call may have; a rollout samples at most ``max_call_words + 1`` tokens (the stop token included)."""
    tasks: tuple = ()
    """The tasks ``reset`` finds a name among (and draws from when no task is given)."""
    calls: tuple = ()
    """The calls the environment takes, described for a language model (``envs.calls.Call``; optional)."""
    readable = staticmethod(plain_text)
    """A prompt or reply as a language model reads it (``envs.calls``): by default its words joined as prose."""
    metadata = {'render_modes': []}

    def __init__(self, reward: str = 'hidden', max_turns: int | None = None, max_tokens: int | None = None,
                 max_call_words: int | None = None):
        if reward not in REWARD_MODES:
            raise ValueError(f'unknown reward mode {reward!r}; valid modes are {list(REWARD_MODES)}')
        self.reward_mode = reward
        for name, value in (('max_turns', max_turns), ('max_tokens', max_tokens), ('max_call_words', max_call_words)):
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f'{name} must be a positive int, got {value!r}')
                setattr(self, name, value)
        self.task, self.done = None, True

    @property
    def max_call_tokens(self) -> int:
        """Tokens a rollout may sample for one call: its words plus the stop token."""
        return self.max_call_words + 1

    # --- what a subclass writes
    def start(self, task) -> str:
        """Set up the episode of ``task`` -> the prompt."""
        raise NotImplementedError

    def act(self, verb: str, args: list) -> tuple:
        """Carry out one call (its first word and the rest) -> ``(reply, ended)``; ``raise InvalidCall(reason)``
        to refuse it."""
        raise NotImplementedError

    def checks(self) -> tuple:
        """The episode's outcome -> ``(hidden_pass, public_pass)`` (bools)."""
        raise NotImplementedError

    def end_reward(self, hidden_pass: bool, public_pass: bool) -> float:
        """What the step that ends the episode (the agent's own end, not a truncation) pays on top of its step
        reward: the check of the reward mode, as 1.0 or 0.0. Override for partial credit."""
        return float(hidden_pass if self.reward_mode == 'hidden' else public_pass)

    # --- the protocol
    def reset(self, *, seed=None, options=None):
        """Start the episode of ``options['task']`` (a task or a task's name) -> (prompt, info)."""
        task = self._find_task((options or {}).get('task'), seed)
        self.task, self.done = task, False
        self.turn, self.actions, self.n_invalid, self.submitted = 0, [], 0, False
        prompt = self.start(task)
        self.n_tokens = 1 + len(prompt.split())  # <bos> prompt
        return prompt, self._info(final=False)

    def step(self, action: str):
        """Take one call (the text before the stop token) -> (reply, reward, terminated, truncated, info)."""
        if self.task is None or self.done:
            raise RuntimeError('call reset() before step(), and again after an episode ends')
        if not isinstance(action, str):
            raise TypeError(f'action must be the call text (str), got {type(action).__name__}')
        call = self._received(action)
        self.turn += 1
        self.actions.append(call)
        self.n_tokens += len(call.split()) + 1  # the call and its stop token
        reply, terminated, reward = self._call(call)
        truncated = not terminated and (
            self.turn >= self.max_turns
            or self.n_tokens + self._reply_tokens(reply) + self.max_call_tokens + 3 > self.max_tokens)
        reply = '' if truncated else reply
        if reply:
            self.n_tokens += self._reply_tokens(reply)
        self.done, self.submitted = terminated or truncated, terminated
        info = self._info(final=self.done)
        return reply, self._paid(reward, terminated, info), terminated, truncated, info

    # --- the protocol's steps a subclass may do its own way (``adapters.AdaptedEnv``, a game of another library)
    def _find_task(self, task, seed):
        """``task``, the one of ``tasks`` so named, or (none given) one drawn by ``np_random`` (``seed`` seeds it)."""
        super().reset(seed=seed)
        if task is None:
            if not self.tasks:
                raise ValueError(f"{type(self).__name__}.reset needs options={{'task': task}}")
            return self.tasks[int(self.np_random.integers(len(self.tasks)))]
        if isinstance(task, str):
            by_name = {task_name(t): t for t in self.tasks}
            if task not in by_name:
                raise ValueError(f'unknown task {task!r}; valid tasks are {sorted(by_name)}')
            return by_name[task]
        return task

    def _received(self, action: str) -> str:
        """The call ``act`` gets and ``info['actions']`` keeps: its first ``max_call_tokens`` words (the cap a rollout
        applies), spaced as the chapter's tables print calls (``' read '``)."""
        return ' ' + ' '.join(action.split()[:self.max_call_tokens]) + ' '

    def _call(self, call: str):
        """One call -> (reply, ended, step reward)."""
        words = call.split()
        if not words:
            self.n_invalid += 1
            return 'error : empty call', False, 0.0
        if len(words) > self.max_call_words:
            self.n_invalid += 1
            return 'error : call too long', False, 0.0
        try:
            out = self.act(words[0], words[1:])
        except InvalidCall as e:
            self.n_invalid += 1
            return f'error : {e}', False, 0.0
        if not isinstance(out, tuple) or len(out) not in (2, 3):
            raise TypeError(f'{type(self).__name__}.act must return (reply, ended) or (reply, ended, step_reward), '
                            f'got {out!r}')
        reply, ended, *paid = out
        return reply, bool(ended), float(paid[0]) if paid else 0.0

    def _reply_tokens(self, reply: str) -> int:
        """Tokens of ``<tool> reply </tool>`` (an empty reply is not rendered, but the room checked for it counts 2)."""
        return len(reply.split()) + 2

    def _paid(self, reward: float, terminated: bool, info: dict) -> float:
        """What a step pays: its step reward, and ``end_reward`` on top at the agent's own end."""
        return reward + float(self.end_reward(info['hidden_pass'], info['public_pass'])) if terminated else reward

    def _info(self, final: bool) -> dict:
        info = {'task': task_name(self.task), 'actions': list(self.actions), 'n_invalid': self.n_invalid,
                'submitted': self.submitted, 'turn': self.turn}
        group = task_group(self.task)
        if group is not None:
            info['group'] = group
        if final:
            hidden, public = self.checks()
            info['hidden_pass'], info['public_pass'] = bool(hidden), bool(public)
        return info
