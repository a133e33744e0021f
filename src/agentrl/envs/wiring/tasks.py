"""The 28 Wiring tasks: small service registries, each with one setting of ``web`` to copy from another service.

A task is a registry named after a star (``orion``) holding four services, one of them ``web``. Each
service's record shows a ``host``, a ``port`` and a ``user``, whose values are typed words (``h3``,
``p7``, ``u2``). The prompt says which value ``web`` needs (``wire orion : web needs the port of db``);
only the registry knows it. Four groups, seven tasks each (five train, two held out):

- ``port``, ``host``, ``user``: the value is in the named service's record;
- ``moved``: the named service's record says ``moved to cache``: the value is in *that* record (a
  second lookup), and it is always a port of the archive range ``p9``-``p12``.

The properties the chapter's findings rest on are built here on purpose (the tests measure each):

- **A prompt-to-answer shortcut on train tasks only.** A registry's name identifies its answer on a
  train task; held-out registries have names no train task has, and answers other than the one the
  train tasks make most common for their field, so a table from prompts to answers solves none.
- **An open argument, copied from a reply.** The answer is never in the prompt; it is one of 20
  value words, read off the reply of ``get``.
- **What the policy writes, train tasks also make it write.** Every value and service a held-out
  oracle writes, some train oracle writes too (the write-vocabulary trap of a first stock-room
  design: held-out calls that needed never-written words were never solved).
- **What the policy reads is new on held-out tasks.** Their names are new and their records list
  the fields in orders no train record uses (train: ``host`` or ``port`` first; held-out: ``user``
  first, or ``host user port``).
- **A part blind or random play never covers.** ``moved`` answers are archive ports, which the
  scripted blind and random players never write.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from .vocab import ARCHIVE, COMMON, FIELDS, SERVICES, task_words

GROUPS = ('port', 'host', 'user', 'moved')
"""The four task groups, in order."""
TRAIN_ORDERS = (('host', 'port', 'user'), ('port', 'host', 'user'), ('port', 'user', 'host'), ('host', 'user', 'port'))
HELD_ORDERS = (('user', 'host', 'port'), ('user', 'port', 'host'))
"""Field orders of the records: held-out records list ``user`` first, which no train record does."""
NAMES = ('orion', 'lyra', 'vega', 'draco', 'cygnus', 'hydra', 'carina', 'pavo', 'tucana', 'corvus', 'lupus', 'ara',
         'crux', 'musca', 'volans', 'norma', 'pyxis', 'antlia', 'fornax', 'sextans', 'lacerta', 'vulpecula', 'sagitta',
         'delphinus', 'equuleus', 'pegasus', 'perseus', 'cetus')
"""Registry names: the first 20 go to train tasks, the last 8 to held-out ones."""
SPLITS = ('train', 'heldout', 'all')
PER_GROUP = (5, 2)
"""Train and held-out tasks per group."""


@dataclass(frozen=True)
class Task:
    """One Wiring task. ``name`` is ``'group/registry'``; ``records`` maps each service to its record (an ordered
    tuple of ``(field, value)`` pairs, or ``('moved', target)``)."""
    group: str
    registry: str
    split: str
    source: str
    """The service the prompt names."""
    needs: str
    """The field ``web`` needs (``port`` for ``moved`` tasks)."""
    answer: str
    """The value ``web`` needs: the field of the source's record, or of the record it moved to."""
    records: tuple = field(repr=False)
    """((service, record), ...), in the registry's order; a record is ((field, value), ...) or (('moved', target),)."""

    @property
    def name(self) -> str:
        return f'{self.group}/{self.registry}'

    @property
    def prompt(self) -> str:
        """The issue: which value ``web`` needs, from which service; never the value, never whether it moved."""
        return f'wire {self.registry} : web needs the {self.needs} of {self.source}'

    @property
    def words(self) -> frozenset:
        """Every word an episode of this task can show or take (``build_tokenizer(tasks)`` reads it)."""
        return task_words(self)

    def record(self, service: str):
        """The record of ``service`` (None if the registry has no such service)."""
        return dict(self.records).get(service)


def _record(order, values):
    return tuple((f, values[f]) for f in order)


def _build(group: str, split: str, registry: str, answer: str, source: str | None = None) -> Task:
    """One task, every choice drawn from its own seeded generator (the same task on every machine); ``source``: the
    service the prompt names (default: drawn too)."""
    rng = random.Random(f'wiring:{registry}')
    services = rng.sample(SERVICES, len(SERVICES))
    if source is not None:
        services.remove(source)
        services.insert(0, source)
    source, *others = services[:4]
    orders = TRAIN_ORDERS if split == 'train' else HELD_ORDERS
    needs = 'port' if group == 'moved' else group
    records, used = [], {answer}

    def values(force=None):
        out = {}
        for f in FIELDS:
            out[f] = rng.choice([v for v in COMMON[f] if v not in used])
            used.add(out[f])
        out.update(force or {})
        return out

    if group == 'moved':
        target = others.pop(0)
        records.append((source, (('moved', target),)))
        records.append((target, _record(rng.choice(orders), values({'port': answer}))))
    else:
        records.append((source, _record(rng.choice(orders), values({needs: answer}))))
    records.append(('web', _record(rng.choice(orders), values())))
    for other in others[:4 - len(records)]:
        records.append((other, _record(rng.choice(orders), values())))
    rng.shuffle(records)
    return Task(group, registry, split, source, needs, answer, tuple(records))


def _all_tasks() -> list:
    """Train tasks first: their answers spread over the values. Then each held-out task's answer: one that a train
    task of its group writes, but neither the answer most train tasks of its field have nor any train answer of its
    (field, service) pair, so no table from the prompt's words to the answer solves it."""
    rng = random.Random('wiring:answers')
    n_train, n_held = PER_GROUP
    names, held_names = iter(NAMES[:20]), iter(NAMES[20:])
    train = {}
    for group in GROUPS:
        pool = list(ARCHIVE if group == 'moved' else COMMON[group])
        answers = rng.sample(pool, n_train) if len(pool) >= n_train else [pool[i % len(pool)] for i in range(n_train)]
        train[group] = [_build(group, 'train', next(names), a) for a in answers]
    by_field, by_pair = {}, {}
    for t in (t for ts in train.values() for t in ts):
        by_field.setdefault(t.needs, []).append(t.answer)
        by_pair.setdefault((t.needs, t.source), set()).add(t.answer)
    most = {f: max(sorted(set(a)), key=a.count) for f, a in by_field.items()}
    tasks = []
    for group in GROUPS:
        needs = 'port' if group == 'moved' else group
        candidates = sorted({t.answer for t in train[group]} - {most[needs]})
        rng.shuffle(candidates)
        tasks += train[group]
        for _ in range(n_held):
            registry = next(held_names)
            sources = random.Random(f'wiring:{registry}:source').sample(SERVICES, len(SERVICES))
            source, answer = next((src, a) for src in sources for a in candidates if a not in by_pair.get((needs, src), ()))
            candidates.remove(answer)
            tasks.append(_build(group, 'heldout', registry, answer, source))
    return tasks


_TASKS = _all_tasks()


def make_tasks(split: str = 'all') -> list:
    """The Wiring tasks of one split -> list of Task: ``'train'`` (20: 5 per group), ``'heldout'`` (8: 2 per group,
    new registry names and field orders), ``'all'`` (28). Ordered by group (``GROUPS``), then train before held-out."""
    if split not in SPLITS:
        raise ValueError(f'unknown split {split!r}; valid splits are {list(SPLITS)}')
    return [t for t in _TASKS if split == 'all' or t.split == split]
