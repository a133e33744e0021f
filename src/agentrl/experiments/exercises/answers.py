"""An exercise's answers: each a sentence, the figure that decides it, and its verdict on one run.

An answer is stated before it is checked, like the chapter's claims (``chapter15/claims.py``): ``says`` is the
answer in words, ``test`` the figure that decides it and its threshold, ``check(parts)`` reads the exercise's
figures (its ``results.json`` parts) and returns the verdict with the measured figure. A verdict is True, False
or None: None when the run has nothing to decide it with (say, no kept episode to measure), with the reason as
its figure. Its verdict on a run is a ``findings.Finding``, as a claim's is, shown by the same tables; over a sweep
each answer gets a hold rate (``seeds.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..chapter15.findings import Finding


@dataclass(frozen=True)
class Answer:
    """One answer of an exercise."""
    key: str
    """A short name (the tables and ``exercise.json`` use it)."""
    says: str
    """The answer in words, as a sentence."""
    test: str
    """The figure that decides it, and its threshold."""
    check: Callable
    """``check(parts) -> (holds, measured)``: ``parts`` the exercise's figures; ``holds`` True, False or None."""


class Undecided(LookupError):
    """Raised by a check when the run has nothing to decide its answer with (the message says why)."""


def check_answers(answers, parts: dict) -> list:
    """Every answer's verdict on one run -> [Finding]."""
    rows = []
    for a in answers:
        try:
            holds, measured = a.check(parts)
            holds = None if holds is None else bool(holds)
        except Undecided as e:
            holds, measured = None, f'undecided: {e}'
        rows.append(Finding('answer', a.key, '', a.says, a.test, holds, measured))
    return rows


def as_records(findings) -> list:
    """Answers' verdicts as an exercise's ``results.json`` keeps them: [{'key', 'says', 'test', 'holds', 'measured'}]."""
    return [{'key': f.key, 'says': f.statement, 'test': f.rule, 'holds': f.verdict, 'measured': f.measured}
            for f in findings]
