"""The environments the chapter runs on (``agentrl reproduce --env ENV``): what a run needs of each, and what each has.

A ``ChapterEnv`` names an environment (a Gymnasium id or any environment factory), its tasks by split,
its tokenizer and its scripted players, and the budgets that must differ from the chapter's for it
(applied before ``--set``, so they are settable like any other key). Sections 15.1-15.6 run the same
recipe code on every one of them. It also says what the environment has that some of the chapter's
claims and tables need (``lacks``): a public check beside the hidden one, a call that only reads,
task groups, and bands around the chapter's own figures. The harness asks it; it never asks which
environment it is.

``--env`` takes a built-in name (``ENVIRONMENTS``), a user's ``ChapterEnv`` by import path
(``mypackage.module:NAME``; the current directory is importable, as uvicorn does it) or the name of an
entry point in the group ``agentrl.chapter_envs`` that a user's package declares (``get_env``).
This module is the only one of the experiments that imports a gym's own code.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from ...envs.bugfix import make_tasks as bugfix_tasks
from ...envs.protocol import env_attr, env_name, make_env_factory
from ...envs.wiring import make_tasks as wiring_tasks
from ...rendering.tokenizer import build_tokenizer
from .bands import check_transcript

SPLITS = ('train', 'heldout', 'all')
ENTRY_POINTS = 'agentrl.chapter_envs'
"""The entry-point group in which a package declares its ``ChapterEnv`` objects (``NAME = module:ATTRIBUTE``)."""
CAPABILITIES = ('public check', 'read call', 'task groups', 'bands')
"""What an environment may have that a claim or a table needs (``ChapterEnv.lacks`` says which it lacks, and why)."""


@dataclass(frozen=True)
class ChapterEnv:
    """One environment as the chapter's experiments use it."""
    name: str
    """The ``--env`` name. A ``ChapterEnv`` loaded by import path or entry point carries what ``--env`` was given
    (``get_env`` sets it), so that a run folder, a resume and the workers of a sweep find it again."""
    title: str
    """How the report and the tables name it."""
    env_id: object
    """What every recipe is given as ``env=``: a registered Gymnasium id, or an environment factory (the class
    itself, a ``functools.partial`` of it, any callable returning a fresh environment)."""
    tasks: Callable[[str], list]
    """``tasks(split)`` for ``'train'``, ``'heldout'`` and ``'all'``."""
    budgets: dict = field(default_factory=dict)
    """``Ch15Config`` keys whose value differs from the chapter's for this environment (settable with ``--set``)."""
    task_label: str = 'tasks'
    """What its tasks are, in the report's prose (BugFix: functions)."""
    check_label: str = 'check'
    """What its hidden and public checks are called in the figures and the report (BugFix: tests, as the chapter
    says; ``hidden check`` elsewhere)."""
    bands: Callable | None = None
    """``bands(transcript) -> [(finding, holds, figure)]``: the chapter's findings as bands around its own printed
    figures, for the environment those figures were measured on (BugFix); None elsewhere. Where set, ``reproduce``
    checks them and the reports set the chapter's figures beside the run's."""

    def tokenizer(self):
        """The word-level tokenizer of its text: every task's words, or (tasks that list none) its scripted play."""
        tasks = self.tasks('all')
        return build_tokenizer(tasks) if hasattr(tasks[0], 'words') else build_tokenizer(tasks, env=self.env_id)

    def player(self, kind: str, seed: int = 0):
        """Its scripted player of ``kind`` (``'oracle'``, ``'blind'``, ``'random'``)."""
        return env_attr(self.env_id, 'scripted_policy')(kind, seed=seed)

    def make(self):
        """A fresh environment (its hidden reward)."""
        return make_env_factory(self.env_id)()

    def groups(self) -> list:
        """Its task groups, in the order of its tasks (BugFix: ``FAMILIES``); empty when its tasks have none."""
        return [g for g in dict.fromkeys(getattr(t, 'group', None) for t in self.tasks('all')) if g is not None]

    def read_call(self):
        """Its ``is_read_call(call) -> bool`` (a call that only looks at the task), or None when it has none."""
        return env_attr(self.env_id, 'is_read_call')

    def public_check(self) -> bool:
        """Whether it has a public check beside the hidden one: it is built with ``reward='public'`` (15.6's filter)."""
        try:
            make_env_factory(self.env_id, reward='public')
        except ValueError:
            return False
        return True

    def lacks(self) -> dict:
        """What of ``CAPABILITIES`` it lacks -> {capability: why}; a claim that needs one of them does not apply."""
        what = env_name(self.env_id)
        out = {}
        if not self.public_check():
            out['public check'] = f"{what} has no public check beside the hidden one (it is not built with reward='public')"
        if self.read_call() is None:
            out['read call'] = f'{what} has no call that only reads (no is_read_call)'
        if not self.groups():
            out['task groups'] = f'the tasks of {self.title} have no group'
        if self.bands is None:
            out['bands'] = f"the chapter's bands are figures of the BugFix gym, not of {self.title}"
        return out


ENVIRONMENTS = {
    'bugfix': ChapterEnv('bugfix', 'the BugFix gym', 'agentrl/BugFix-v0', bugfix_tasks, task_label='functions',
                         check_label='tests', bands=check_transcript),
    'wiring': ChapterEnv('wiring', 'the Wiring gym', 'agentrl/Wiring-v0', wiring_tasks, task_label='registries'),
}
"""The built-in environments ``--env`` takes by name; the first is the chapter's own."""
GAMES = {'guess': 'agentrl.experiments.chapter15.guess_game:GUESS'}
"""Built-in names of games from other libraries, by import path: loaded on first use (each needs its extra)."""
DEFAULT = next(iter(ENVIRONMENTS))
"""The environment a run uses unless told (and that runs written before ``results.json`` named one used)."""
ENV_HELP = (f"{', '.join([*ENVIRONMENTS, *GAMES])} (default {DEFAULT}, the chapter's own), a ChapterEnv by import path, "
            f'MODULE:NAME (e.g. examples.mailroom:CHAPTER; the current directory is importable), or the name of an '
            f'entry point a package declares in the group {ENTRY_POINTS}').replace('%', '%%')
"""What ``--env`` takes, for every command's ``--help`` (argparse formats it: ``%`` doubled)."""


def run_env(run_dir) -> ChapterEnv:
    """The environment a reproduction folder was run on (its ``results.json``'s ``env``; runs before it: ``DEFAULT``)."""
    from pathlib import Path

    from ..run_folder import peek
    return get_env((peek(Path(run_dir) / 'results.json') or {}).get('env', DEFAULT))


def get_env(name: str) -> ChapterEnv:
    """The environment ``--env name`` means: a built-in name, ``module:ATTRIBUTE`` (an import path) or the name of an
    entry point in ``ENTRY_POINTS``; ValueError saying what is wrong (naming the valid names) otherwise."""
    if not isinstance(name, str) or not name:
        raise ValueError(f'an environment is given by name, got {name!r}; {_valid()}')
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    if name in GAMES:
        return _as(name, load_path(GAMES[name]))
    if ':' in name:
        return _as(name, load_path(name))
    point = entry_points().get(name)
    if point is not None:
        return _as(name, _load_entry_point(name, point))
    raise ValueError(f'unknown environment {name!r}; {_valid()}')


def load_path(spec: str):
    """The object at ``module:ATTRIBUTE`` (dotted attributes allowed), checked to be a ``ChapterEnv``; the current
    directory is importable. ValueError naming what is missing: the module, the attribute, or a ``ChapterEnv``."""
    module_name, _, attr = spec.partition(':')
    if not module_name or not attr:
        raise ValueError(f'--env {spec!r}: an import path is MODULE:NAME, e.g. examples.mailroom:CHAPTER')
    importable_cwd()
    import importlib
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + '.')):
            raise ValueError(f'--env {spec}: no module named {e.name!r} (looked in the current directory, '
                             f'{os.getcwd()}, and on sys.path)') from None
        raise ValueError(f'--env {spec}: importing {module_name} failed: {_said(e)}') from None
    except Exception as e:  # the user's module raised while it was imported
        raise ValueError(f'--env {spec}: importing {module_name} failed: {_said(e)}') from None
    obj = module
    for part in attr.split('.'):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            have = sorted(k for k, v in vars(module).items() if isinstance(v, ChapterEnv))
            hint = f"; its ChapterEnv objects: {', '.join(have)}" if have else '; it defines no ChapterEnv'
            raise ValueError(f'--env {spec}: module {module_name} ({_where(module)}) has no attribute {attr!r}{hint}') from None
    return _checked(spec, obj)


def importable_cwd() -> None:
    """Put the current directory first on ``sys.path`` (as uvicorn does) unless it is there: ``--env examples.x:Y``
    then finds ``./examples/x.py``. Worker processes started afterwards inherit the path."""
    cwd = os.getcwd()
    if cwd not in sys.path and '' not in sys.path:
        sys.path.insert(0, cwd)


def entry_points() -> dict:
    """The entry points of ``ENTRY_POINTS`` that installed packages declare -> {name: entry point}."""
    from importlib.metadata import entry_points as found
    return {p.name: p for p in found(group=ENTRY_POINTS)}


def _load_entry_point(name: str, point):
    try:
        obj = point.load()
    except Exception as e:
        raise ValueError(f'--env {name}: the entry point {name} = {point.value} ({ENTRY_POINTS}) does not load: '
                         f'{_said(e)}') from None
    return _checked(f'{name} (entry point {point.value})', obj)


def _checked(what: str, obj) -> ChapterEnv:
    if not isinstance(obj, ChapterEnv):
        raise ValueError(f'--env {what} is a {type(obj).__name__}, not a ChapterEnv: give a ChapterEnv(name, title, '
                         'env, tasks, ...) from agentrl.experiments.chapter15.env_registry')
    return obj


def _as(name: str, env: ChapterEnv) -> ChapterEnv:
    """``env`` carrying ``name``, the ``--env`` that finds it again (in a run folder, a resume, a sweep's workers)."""
    return env if env.name == name else dataclasses.replace(env, name=name)


def _said(e: BaseException) -> str:
    """An exception in one line: its type, message and the line of the user's code that raised it."""
    import traceback
    frames = traceback.extract_tb(e.__traceback__)
    at = f' ({frames[-1].filename}, line {frames[-1].lineno})' if frames else ''
    return f'{type(e).__name__}: {e}{at}'


def _where(module) -> str:
    return getattr(module, '__file__', None) or module.__name__


def _valid() -> str:
    points = sorted(set(entry_points()) - set(ENVIRONMENTS))
    return (f"valid environments are {', '.join([*ENVIRONMENTS, *GAMES])}"
            + (f", the entry points {', '.join(points)} ({ENTRY_POINTS})" if points else '')
            + ', or a ChapterEnv by import path, MODULE:NAME (e.g. examples.mailroom:CHAPTER)')
