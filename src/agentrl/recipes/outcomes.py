"""Success and preference, said once for any reward: returns, thresholds and margins (sections 15.3-15.4).

An episode's return is the sum of its per-turn rewards (``Trajectory.reward``). The chapter's gyms pay one 0/1
reward at the end, so there a return is 0 or 1 and "success" needs no definition. An environment from
elsewhere pays partial credit (GEM's guessing game pays ``1 - distance / range``), penalties (-0.1 for a
malformed guess) and rewards at every step. The recipes that split episodes into successes and failures take
the rule as an argument, with the chapter's behaviour as the default:

- **success**: a return that reaches ``threshold`` (default 1.0: the chapter's 0/1 filter), ``reaches``;
- **preference**: a chosen episode and a rejected one of the same task whose return is lower by at least
  ``margin`` (default 1.0: the chapter's 1-vs-0 pairs), ``recipes.dpo.make_pairs``.

"Reaches" allows ``RETURN_TOL`` of rounding (ten steps of 0.1 sum to 0.9999999999999999). ``pass_rate`` keeps
the chapter's name and meaning, the mean return, which for 0/1 rewards is the share of successes; for partial
credit the two differ, and ``success_rate`` and ``mean_return`` give each (``zero_one`` says whether they can). A recipe whose episodes give it
nothing to learn from (no success, no pair) says so with a ``NoSignalWarning`` naming the rule and the returns
it saw, instead of a silent empty round.
"""
from __future__ import annotations

import math
import warnings

from ..envs.protocol import RETURN_TOL

DEFAULT_THRESHOLD = 1.0
"""The return a success reaches by default: the chapter's 0/1 filter (``reward == 1``)."""
DEFAULT_MARGIN = 1.0
"""The least return gap of a default preference pair: the chapter's success-vs-failure pairs (1 vs 0)."""


class NoSignalWarning(UserWarning):
    """A round or a batch had nothing to learn from: no episode reached the threshold, or no pair was found."""


def check_threshold(threshold) -> float:
    """``threshold`` as a float, or ``ValueError`` if it is not a finite number."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f'threshold must be a finite number (the return a success reaches), got {threshold!r}')
    return float(threshold)


def check_margin(margin) -> float:
    """``margin`` as a float, or ``ValueError`` if it is not a finite number > 0."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin <= 0:
        raise ValueError(f'margin must be a finite number > 0 (the least return gap of a pair), got {margin!r}')
    return float(margin)


def reaches(ret: float, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Whether a return ``ret`` reaches ``threshold`` (within ``RETURN_TOL`` of rounding)."""
    return ret >= threshold - RETURN_TOL


def is_success(traj, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """Whether an episode's return reaches ``threshold`` (section 15.3's filter, for any reward)."""
    return reaches(traj.reward, threshold)


def mean_return(trajs) -> float:
    """The mean return of some episodes (what ``pass_rate`` reports: for 0/1 rewards, the share that pass)."""
    trajs = list(trajs)
    if not trajs:
        raise ValueError('mean_return needs at least one episode, got none')
    return sum(t.reward for t in trajs) / len(trajs)


def success_rate(trajs, threshold: float = DEFAULT_THRESHOLD) -> float:
    """The share of episodes whose return reaches ``threshold``."""
    trajs = list(trajs)
    if not trajs:
        raise ValueError('success_rate needs at least one episode, got none')
    return sum(is_success(t, threshold) for t in trajs) / len(trajs)


def zero_one(trajs) -> bool:
    """Whether every episode's return is exactly 0 or 1 (the chapter's gyms): there ``pass_rate``'s mean return is
    the share of successes, and a table may call it a pass rate; elsewhere it is a mean return."""
    return all(t.reward in (0, 1) for t in trajs)


def returns_seen(trajs, most: int = 6) -> str:
    """A short account of the returns of some episodes, for messages: ``'min 0, max 0.89, 9 distinct (0, 0.2, ...)'``."""
    values = sorted({round(t.reward, 6) for t in trajs})
    if not values:
        return 'no episodes'
    shown = ', '.join(f'{v:g}' for v in values[:most]) + (', ...' if len(values) > most else '')
    return f'min {values[0]:g}, max {values[-1]:g}, {len(values)} distinct ({shown})'


def warn_no_signal(where: str, rule: str, trajs) -> None:
    """Warn that ``where`` had nothing to learn from under ``rule``, naming the returns it saw."""
    warnings.warn(f'{where}: {rule} (returns seen over {len(list(trajs))} episodes: {returns_seen(trajs)}); '
                  'nothing was trained on. Lower the threshold or margin if your environment pays partial credit.',
                  NoSignalWarning, stacklevel=3)
