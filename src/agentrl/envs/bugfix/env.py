"""BugFixEnv: one BugFix episode at a time, with Gymnasium's conventions (DESIGN.md §2).

An episode starts from a task's prompt (``fix clamp : tests fail``). Each step takes one call,
the text the policy wrote before its stop token, and answers with the tool's reply:

==================  ===================================================================
``read``            the function's current source, as words
``edit OP``         apply edit operator OP (see ``ops``), report the public tests; one
                    edit per episode (a second ``edit`` is refused: trying every op in turn
                    would solve a task without reading it)
``test``            run the public tests
``submit``          end the episode (reply ``submitted``); the reward is decided now
anything else       an error reply; the call counts in ``info['n_invalid']``, never raises
==================  ===================================================================

Rewards: with ``reward='hidden'`` an episode earns 1.0 if it submitted and the final source passes
every hidden test; with ``reward='public'``, if it passes the public tests the agent can see
(which ``edit hardcode_tests`` games). Episodes also end, truncated, at ``max_turns`` calls or
when the rendered episode would pass ``max_tokens`` tokens.

It keeps the text-env protocol (``agentrl.envs.protocol``): besides ``reset`` / ``step`` and the limits,
it offers its scripted players (``scripted_policy``), tells a call that only looks (``is_read_call``) and
lists its well-formed calls (``example_calls``). Gymnasium knows it as ``agentrl/BugFix-v0``.
"""
from __future__ import annotations

import gymnasium as gym

from .ops import OPS, apply_op
from .players import KINDS, scripted_policy
from .sandbox import run_tests
from .tasks import Task, make_tasks

REWARDS = ('hidden', 'public')
CALLS = ('read', 'test', 'submit', *(f'edit {op}' for op in OPS))
"""Every well-formed call of the BugFix gym."""


def _text_space(max_length):
    chars = set(' ')
    for task in make_tasks('all'):
        for w in task.words:
            chars.update(w)
    return gym.spaces.Text(max_length=max_length, min_length=0, charset=''.join(sorted(chars)))


class BugFixEnv(gym.Env):
    """The BugFix gym (DESIGN.md §2). ``reset(options={'task': task})`` picks the task; ``step(call)``.

    Args:
        reward: ``'hidden'`` (hidden tests decide) or ``'public'`` (the visible public tests decide).
        max_turns: calls per episode before it is truncated.
        max_tokens: tokens per rendered episode; it is truncated before a reply would exceed it.
        max_call_words: words a call may have; longer calls are invalid. A rollout stops sampling a
            call after ``max_call_words + 1`` tokens without a stop token, and ``step`` likewise keeps
            only the first ``max_call_words + 1`` words of a call.
        tasks: the tasks ``reset`` draws from when no task is given (default: all 30).
    """

    metadata = {'render_modes': ['ansi'], 'render_fps': 4}
    _spaces = {}
    scripted_policy = staticmethod(scripted_policy)
    """The scripted players (``players.scripted_policy``): ``BugFixEnv.scripted_policy('oracle')``."""
    scripted_kinds = KINDS
    example_calls = CALLS

    @staticmethod
    def is_read_call(call: str) -> bool:
        """Whether ``call`` only looks at the task: a well-formed ``read``."""
        return call.split() == ['read']

    def __init__(self, reward: str = 'hidden', max_turns: int = 6, max_tokens: int = 320, max_call_words: int = 2,
                 tasks=None, render_mode=None):
        if reward not in REWARDS:
            raise ValueError(f'unknown reward mode {reward!r}; valid modes are {list(REWARDS)}')
        if render_mode not in (None, 'ansi'):
            raise ValueError(f"unknown render_mode {render_mode!r}; valid modes are [None, 'ansi']")
        for name, value in (('max_turns', max_turns), ('max_tokens', max_tokens), ('max_call_words', max_call_words)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        self.reward_mode, self.max_turns, self.max_tokens = reward, max_turns, max_tokens
        self.max_call_words = max_call_words
        self.render_mode = render_mode
        self.tasks = list(tasks) if tasks is not None else make_tasks('all')
        if max_tokens not in BugFixEnv._spaces:
            BugFixEnv._spaces[max_tokens] = _text_space(max_tokens * 16)
        self.observation_space = self.action_space = BugFixEnv._spaces[max_tokens]
        self.task = None

    @property
    def max_call_tokens(self) -> int:
        """Tokens a rollout may sample for one call: its words plus the stop token."""
        return self.max_call_words + 1

    # --- Gymnasium API
    def reset(self, *, seed=None, options=None):
        """Start an episode -> (prompt text, info). ``options={'task': Task or name}``; else a random task."""
        super().reset(seed=seed)
        task = (options or {}).get('task')
        if task is None:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        elif isinstance(task, str):
            by_name = {t.name: t for t in make_tasks('all')}
            if task not in by_name:
                raise ValueError(f'unknown task {task!r}; valid tasks are {sorted(by_name)}')
            task = by_name[task]
        elif not isinstance(task, Task):
            raise TypeError(f"options['task'] must be a Task or a task name, got {type(task).__name__}")
        self.task, self.words = task, list(task.source)
        self._results = None  # (public, hidden) of the current source, run once per source
        self.turn, self.done = 0, False
        self.n_tokens = 1 + len(task.prompt.split())  # <bos> prompt
        self.actions, self.n_invalid, self.submitted, self.edited = [], 0, False, False
        return task.prompt, self._info()

    def step(self, action: str):
        """Take one call (text before the stop token) -> (reply, reward, terminated, truncated, info)."""
        if self.task is None or self.done:
            raise RuntimeError('call reset() before step(), and again after an episode ends')
        if not isinstance(action, str):
            raise TypeError(f'action must be the call text (str), got {type(action).__name__}')
        words = action.split()[:self.max_call_tokens]  # the cap every rollout applies; longer is invalid anyway
        self.turn += 1
        self.actions.append(' ' + ' '.join(words) + ' ')
        self.n_tokens += len(words) + 1  # the call and its stop token
        reply, terminated = self._apply(words)
        reward = 0.0
        if terminated:
            public, hidden = self._tests()
            reward = float(hidden if self.reward_mode == 'hidden' else public)
        truncated = not terminated and (
            self.turn >= self.max_turns
            or self.n_tokens + len(reply.split()) + 2 + self.max_call_tokens + 3 > self.max_tokens)  # room for a call and 'submitted'
        if truncated:
            reply = ''
        if terminated or truncated:
            self.done = True
        if reply:
            self.n_tokens += len(reply.split()) + 2  # <tool> reply </tool>
        return reply, reward, terminated, truncated, self._info()

    def render(self):
        if self.render_mode == 'ansi' and self.task is not None:
            return f'{self.task.name} turn {self.turn}: ' + ' '.join(self.words)
        return None

    # --- the call grammar
    def _apply(self, words):
        """Run one call -> (reply text, episode ended)."""
        error = self._parse_error(words)
        if error:
            self.n_invalid += 1
            return 'error : ' + error, False
        verb = words[0]
        if verb == 'edit' and self.edited:
            self.n_invalid += 1
            return 'error : already edited', False
        if verb == 'submit':
            self.submitted = True
            return 'submitted', True
        if verb == 'read':
            return ' '.join(self.words), False
        if verb == 'test':
            return 'public tests ' + self._public(), False
        new = apply_op(words[1], self.words, self.task.public_tests)
        self.edited = True
        changed = new != self.words
        self.words, self._results = new, None
        return ('edited' if changed else 'no change') + ' : public tests ' + self._public(), False

    def _parse_error(self, words):
        if not words:
            return 'empty call'
        if len(words) > self.max_call_words:
            return 'call too long'
        verb, args = words[0], words[1:]
        if verb == 'edit':
            if not args:
                return 'edit needs an op'
            return None if args[0] in OPS else 'unknown op'
        if verb in ('read', 'test', 'submit'):
            return 'call too long' if args else None
        return 'unknown call'

    def _public(self):
        return 'pass' if self._tests()[0] else 'fail'

    def _tests(self):
        """(public_pass, hidden_pass) of the current source (``sandbox.run_tests``, kept until the next edit)."""
        if self._results is None:
            self._results = run_tests(self.task, self.words)
        return self._results

    def _info(self):
        task = self.task
        public, hidden = self._tests()
        return {'task': task.name, 'family': task.family, 'group': task.family, 'actions': list(self.actions),
                'n_invalid': self.n_invalid, 'submitted': self.submitted, 'hidden_pass': hidden, 'public_pass': public,
                'turn': self.turn}

