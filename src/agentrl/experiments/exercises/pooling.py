"""Figures pooled over the seeds of an exercise sweep (each module's ``pooled``): means and ranges of per-seed figures."""
from __future__ import annotations


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def spread(values) -> list:
    """[min, max] of the values given (None left out)."""
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else [None, None]


def rounded(d, digits: int = 3):
    """Every float of a nested dict or list rounded (exercise.json stays readable)."""
    if isinstance(d, dict):
        return {k: rounded(v, digits) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [rounded(v, digits) for v in d]
    return round(d, digits) if isinstance(d, float) else d
