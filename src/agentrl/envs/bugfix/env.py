"""BugFixEnv: one BugFix episode at a time, with Gymnasium's conventions (docs/bugfix.md).

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

from ..base import InvalidCall, TextEnv
from ..calls import Arg, Call, plain_text
from .ops import OPS, apply_op
from .players import KINDS, scripted_policy
from .sandbox import run_tests
from .source import LAYOUT, to_python
from .tasks import Task, make_tasks

REWARDS = ('hidden', 'public')
"""The reward modes (``TextEnv``'s): the hidden tests decide, or the public tests the agent can see."""
CALLS = ('read', 'test', 'submit', *(f'edit {op}' for op in OPS))
"""Every well-formed call of the BugFix gym."""
DESCRIBED = (
    Call('read', "show the function's current source"),
    Call('edit', 'apply one fix to the function and run its public tests (one edit per episode)',
         (Arg('op', 'the fix', OPS),)),
    Call('test', "run the function's public tests"),
    Call('submit', 'end the episode: the hidden tests decide whether the function is fixed'),
)
"""The calls as a language model is told them (``envs.calls``)."""


def readable(text: str) -> str:
    """A prompt or reply as a language model reads it: a source as Python, with its newlines and indentation
    (``def clamp(n, a, b):`` on its own line, the body indented), anything else as prose (``fix clamp: tests fail``)."""
    words = text.split()
    if not any(w in LAYOUT for w in words):
        return plain_text(text)
    import ast
    source = to_python(words)
    try:
        return ast.unparse(ast.parse(source))
    except SyntaxError:  # an edit never makes one, but a source is shown as it is rather than refused
        return source.rstrip('\n')


def _text_space(max_length):
    chars = set(' ')
    for task in make_tasks('all'):
        for w in task.words:
            chars.update(w)
    return gym.spaces.Text(max_length=max_length, min_length=0, charset=''.join(sorted(chars)))


class BugFixEnv(TextEnv):
    """The BugFix gym (docs/bugfix.md). ``reset(options={'task': task})`` picks the task; ``step(call)``.

    A ``TextEnv`` (``agentrl.envs.base``), which keeps the bookkeeping every environment shares (turns,
    the call cap, invalid calls, truncation, rewards); this class writes the game: ``start``, ``act``
    (the call grammar of the table above) and ``checks`` (the public and hidden tests).

    Args:
        reward: ``'hidden'`` (hidden tests decide) or ``'public'`` (the visible public tests decide).
        max_turns: calls per episode before it is truncated.
        max_tokens: tokens per rendered episode; it is truncated before a reply would exceed it.
        max_call_words: words a call may have; longer calls are invalid. A rollout stops sampling a
            call after ``max_call_words + 1`` tokens without a stop token, and ``step`` likewise keeps
            only the first ``max_call_words + 1`` words of a call.
        tasks: the tasks ``reset`` draws from when no task is given (default: all 30).
    """

    max_turns, max_tokens, max_call_words = 6, 320, 2
    metadata = {'render_modes': ['ansi'], 'render_fps': 4}
    _spaces = {}
    scripted_policy = staticmethod(scripted_policy)
    """The scripted players (``players.scripted_policy``): ``BugFixEnv.scripted_policy('oracle')``."""
    scripted_kinds = KINDS
    example_calls = CALLS
    calls = DESCRIBED
    readable = staticmethod(readable)

    @staticmethod
    def is_read_call(call: str) -> bool:
        """Whether ``call`` only looks at the task: a well-formed ``read``."""
        return call.split() == ['read']

    def __init__(self, reward: str = 'hidden', max_turns: int = 6, max_tokens: int = 320, max_call_words: int = 2,
                 tasks=None, render_mode=None):
        super().__init__(reward=reward, max_turns=max_turns, max_tokens=max_tokens, max_call_words=max_call_words)
        if render_mode not in (None, 'ansi'):
            raise ValueError(f"unknown render_mode {render_mode!r}; valid modes are [None, 'ansi']")
        self.render_mode = render_mode
        self.tasks = list(tasks) if tasks is not None else make_tasks('all')
        if max_tokens not in BugFixEnv._spaces:
            BugFixEnv._spaces[max_tokens] = _text_space(max_tokens * 16)
        self.observation_space = self.action_space = BugFixEnv._spaces[max_tokens]

    def reset(self, *, seed=None, options=None):
        """Start an episode -> (prompt text, info). ``options={'task': Task or name}`` (a name of any of the 30);
        else a random task of ``tasks``."""
        task = (options or {}).get('task')
        if isinstance(task, str):
            by_name = {t.name: t for t in make_tasks('all')}
            if task not in by_name:
                raise ValueError(f'unknown task {task!r}; valid tasks are {sorted(by_name)}')
            options = {**options, 'task': by_name[task]}
        elif task is not None and not isinstance(task, Task):
            raise TypeError(f"options['task'] must be a Task or a task name, got {type(task).__name__}")
        return super().reset(seed=seed, options=options)

    def render(self):
        if self.render_mode == 'ansi' and self.task is not None:
            return f'{self.task.name} turn {self.turn}: ' + ' '.join(self.words)
        return None

    # --- the game (TextEnv calls these)
    def start(self, task) -> str:
        self.words = list(task.source)
        self._results = None  # (public, hidden) of the current source, run once per source
        self.edited = False
        return task.prompt

    def act(self, verb: str, args: list):
        if verb == 'edit':
            if not args:
                raise InvalidCall('edit needs an op')
            if args[0] not in OPS:
                raise InvalidCall('unknown op')
            if self.edited:  # one edit per episode: trying every op in turn would solve a task without reading it
                raise InvalidCall('already edited')
            new = apply_op(args[0], self.words, self.task.public_tests)
            self.edited = True
            changed = new != self.words
            self.words, self._results = new, None
            return ('edited' if changed else 'no change') + ' : public tests ' + self._public(), False
        if verb not in ('read', 'test', 'submit'):
            raise InvalidCall('unknown call')
        if args:
            raise InvalidCall('call too long')
        if verb == 'submit':
            return 'submitted', True
        if verb == 'read':
            return ' '.join(self.words), False
        return 'public tests ' + self._public(), False

    def checks(self):
        """(hidden, public): whether the current source passes the hidden and the public tests."""
        public, hidden = self._tests()
        return hidden, public

    def _public(self):
        return 'pass' if self._tests()[0] else 'fail'

    def _tests(self):
        """(public_pass, hidden_pass) of the current source (``sandbox.run_tests``, kept until the next edit)."""
        if self._results is None:
            self._results = run_tests(self.task, self.words)
        return self._results

    def _info(self, final: bool = True) -> dict:
        """The info of every step: the task and its family, the calls so far, and whether the source passes now."""
        task = self.task
        public, hidden = self._tests()
        return {'task': task.name, 'family': task.family, 'group': task.family, 'actions': list(self.actions),
                'n_invalid': self.n_invalid, 'submitted': self.submitted, 'hidden_pass': hidden, 'public_pass': public,
                'turn': self.turn}
