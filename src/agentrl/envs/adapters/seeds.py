"""Tasks that are seeds: a game from another library is one episode per seed, so a task is a name and a seed.

Any object with a ``name`` (a stable str, e.g. ``'guess/17'``) and an int ``seed`` is a task of an adapted
game (``adapters.gem``, ``adapters.textarena``): ``reset(options={'task': task})`` starts the game with
``task.seed``. ``SeedTask`` is the plain one, ``seed_tasks`` makes a run of them, and ``seed_splits`` makes
the train and held-out splits the chapter's sections need (disjoint seeds, so held-out games are ones the
policy never trained on).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeedTask:
    """One episode of an adapted game: the game as its seed deals it."""
    name: str
    """A stable name, unique among the tasks (``'<prefix>/<seed>'`` by default, e.g. ``'guess/17'``)."""
    seed: int
    """The seed the game's ``reset`` gets; the same seed deals the same game."""
    group: str = 'seeds'
    """The task's group (per-group pass rates read it); all seeds share one unless told otherwise."""
    split: str = 'all'
    """``'train'``, ``'heldout'`` or ``'all'``: which split made it (for reading, not used by the games)."""


def task_seed(task) -> int:
    """The seed of a task: ``task.seed``, or the number after the last ``/`` of a name such as ``'guess/17'``.

    Raises ``ValueError`` for anything else (a task must carry its seed)."""
    seed = getattr(task, 'seed', None)
    if seed is None and isinstance(task, str) and '/' in task:
        tail = task.rsplit('/', 1)[1]
        seed = int(tail) if tail.isdigit() else None
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f'a task of an adapted game is an object with a name and an int seed >= 0 (or a name '
                         f"'prefix/SEED'), got {task!r}")
    return seed


def seed_tasks(prefix: str, seeds, group: str = 'seeds', split: str = 'all') -> list:
    """One ``SeedTask`` per seed, named ``'<prefix>/<seed>'`` -> list.

    ``seeds``: ints >= 0 (e.g. ``range(40)``); ``group``: the group every task gets; ``split``: its label."""
    if not isinstance(prefix, str) or not prefix or '/' in prefix:
        raise ValueError(f"prefix must be a non-empty str without '/', got {prefix!r}")
    tasks = []
    for seed in seeds:
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f'seeds must be ints >= 0, got {seed!r}')
        tasks.append(SeedTask(f'{prefix}/{seed}', seed, group, split))
    if len({t.seed for t in tasks}) != len(tasks):
        raise ValueError(f'the seeds of {prefix!r} repeat: every task needs its own seed')
    return tasks


def seed_splits(prefix: str, n_train: int, n_heldout: int, start: int = 0, group: str = 'seeds') -> tuple:
    """Train and held-out tasks on disjoint seeds -> ``(train, heldout)``.

    Seeds ``start .. start+n_train-1`` train and the next ``n_heldout`` are held out, so the held-out games
    are dealt by seeds the training never saw."""
    for label, n in (('n_train', n_train), ('n_heldout', n_heldout), ('start', start)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f'{label} must be an int >= 0, got {n!r}')
    train = seed_tasks(prefix, range(start, start + n_train), group, 'train')
    heldout = seed_tasks(prefix, range(start + n_train, start + n_train + n_heldout), group, 'heldout')
    return train, heldout
