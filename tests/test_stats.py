"""The statistics of ``agentrl sweep`` and ``agentrl compare`` (``sweeps/stats.py``) on inputs whose answers are worked
out here: Student's t quantiles from the printed table, a paired t statistic by its formula, its p by integrating the
t density, Wilcoxon's exact signed-rank distribution counted by hand, Welch's test as R gives it, Holm's step-down on a
hand-sorted list, and the Wilson interval by its closed form."""
from __future__ import annotations

import math

import numpy as np
import pytest

from agentrl.experiments.chapter15.findings import Finding, rates_table
from agentrl.experiments.sweeps import stats as S

T975 = {3: 3.1824, 9: 2.2622, 29: 2.0452, 120: 1.9799}
"""Student's t 0.975 quantiles as printed tables give them (four decimals)."""


def t_two_sided_p(t: float, df: float) -> float:
    """2 P(T > |t|) by Simpson's rule on the t density from |t| to far in the tail (the tail beyond: < 1e-12)."""
    pdf = lambda x: (math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)  # noqa: E731
                     * (1 + x * x / df) ** (-(df + 1) / 2))
    lo, hi, n = abs(t), 400.0, 200_000
    h = (hi - lo) / n
    return 2 * h / 3 * sum((1 if i in (0, n) else 4 if i % 2 else 2) * pdf(lo + i * h) for i in range(n + 1))


# --- one sample: mean and 95% t interval

def test_summarize_known_values():
    s = S.summarize([1, 2, 3, 4])
    assert s['n'] == 4 and s['mean'] == 2.5
    assert s['std'] == pytest.approx(math.sqrt(5 / 3))
    assert s['stderr'] == pytest.approx(math.sqrt(5 / 3) / 2)  # 0.6455
    assert s['half_width'] == pytest.approx(T975[3] * math.sqrt(5 / 3) / 2, abs=1e-4)
    assert s['ci95'] == pytest.approx([2.5 - 2.05428, 2.5 + 2.05428], abs=1e-4)


@pytest.mark.parametrize('df', sorted(T975))
def test_the_interval_uses_students_t_quantile(df):
    xs = [float(i * i % 7) for i in range(df + 1)]  # any values with spread: half-width / stderr is the quantile
    s = S.summarize(xs)
    assert s['half_width'] / s['stderr'] == pytest.approx(T975[df], abs=1e-4)


def test_summarize_constant_and_single():
    s = S.summarize([0.3] * 5)
    assert s['mean'] == pytest.approx(0.3) and s['stderr'] == pytest.approx(0.0) and s['ci95'] == pytest.approx([0.3, 0.3])
    one = S.summarize([7])
    assert one['mean'] == 7 and one['stderr'] is None and one['ci95'] is None and one['half_width'] is None
    with pytest.raises(ValueError):
        S.summarize([])


# --- two variants paired by seed

BASE = [0.52, 0.61, 0.48, 0.70, 0.55, 0.66, 0.59, 0.50, 0.63, 0.57]
"""A figure at ten seeds: the seeds differ far more than the change below."""
SHIFT = [0.03, 0.05, 0.02, 0.04, 0.03, 0.01, 0.04, 0.03, 0.05, 0.02]
"""What a variant adds at each seed."""


def test_paired_t_test_is_its_formula_on_the_differences():
    other = [a + s for a, s in zip(BASE, SHIFT)]
    r = S.paired(BASE, other)
    d = np.array(other) - np.array(BASE)
    se = d.std(ddof=1) / math.sqrt(len(d))
    t = d.mean() / se
    assert r['test'] == 'paired t-test' and r['n'] == 10 and r['df'] == 9
    assert r['diff'] == pytest.approx(d.mean()) and r['se'] == pytest.approx(se) and r['statistic'] == pytest.approx(t)
    assert r['ci95'] == pytest.approx([d.mean() - T975[9] * se, d.mean() + T975[9] * se], abs=1e-5)
    assert r['p'] == pytest.approx(t_two_sided_p(t, 9), rel=1e-4)
    small = S.paired([1, 2, 3, 4], [2, 4, 6, 8])  # differences 1, 2, 3, 4: t = 2.5 / (sqrt(5/3) / 2) = sqrt(15)
    assert small['statistic'] == pytest.approx(math.sqrt(15)) and small['p'] == pytest.approx(t_two_sided_p(math.sqrt(15), 3), rel=1e-4)


def test_pairing_by_seed_sees_a_change_the_spread_between_seeds_hides():
    other = [a + s for a, s in zip(BASE, SHIFT)]
    assert S.paired(BASE, other)['p'] < 1e-4
    assert S.welch(BASE, other)['p'] > 0.2  # the same numbers unpaired: the seeds' spread swamps the change


def test_wilcoxon_exact_p_counted_by_hand():
    # differences 0.5, -0.2, 0.3, 0, 0.1: the zero dropped, ranks of |d| 4, 2, 3, 1; the negative rank sum is 2.
    # Of the 2^4 = 16 equally likely sign patterns, those with a negative rank sum <= 2 are {}, {1}, {2}: p = 2 * 3/16
    r = S.paired([1.0] * 5, [1.5, 0.8, 1.3, 1.0, 1.1], test='wilcoxon')
    assert r['test'] == 'Wilcoxon signed-rank test' and r['statistic'] == 2 and r['p'] == pytest.approx(6 / 16)
    assert r['diff'] == pytest.approx(0.14) and r['df'] is None
    # every one of ten seeds moves from fails to holds: only all-positive or all-negative signs are as extreme
    flip = S.paired([0.0] * 10, [1.0] * 10, test='wilcoxon')
    assert flip['p'] == pytest.approx(2 / 2 ** 10) and flip['ci95'] == [1.0, 1.0]
    assert S.paired([0.0] * 10, [1.0] * 10)['p'] is None  # the t-test has no spread to divide by


def test_no_spread_beyond_rounding_is_no_spread():
    # 0.3 - 0.2 and 0.4 - 0.3 differ in their last bits: a t-test on that would call +0.1 certain
    r = S.paired([0.2, 0.3, 0.5], [0.3, 0.4, 0.6])
    assert r['diff'] == pytest.approx(0.1) and r['se'] == 0.0 and r['p'] is None and r['ci95'] == pytest.approx([0.1, 0.1])
    assert S.paired([0.2, 0.3, 0.5], [0.2, 0.3, 0.5], test='wilcoxon')['p'] is None  # nothing differs
    assert S.welch([0.1 + 0.2, 0.3], [0.5, 0.5])['p'] is None


def test_paired_refuses_bad_input():
    with pytest.raises(ValueError, match="valid tests are \\['t', 'wilcoxon'\\]"):
        S.paired([1, 2], [2, 3], test='sign')
    with pytest.raises(ValueError, match='equal length'):
        S.paired([1, 2, 3], [2, 3])
    assert S.paired([1], [3]) == {'test': 'paired t-test', 'n': 1, 'diff': 2.0, 'se': None, 'statistic': None,
                                  'df': None, 'p': None, 'ci95': None}


# --- two variants that share no seeds: Welch's test

def test_welch_known_values():
    w = S.welch([1, 2, 3, 4], [2, 4, 6, 8])
    # by hand: diff 2.5, se sqrt(5/12 + 20/12), t = sqrt(3), df = (25/12)^2 / ((5/12)^2/3 + (20/12)^2/3) = 4.4118
    assert w['test'] == "Welch's t-test" and w['n'] == [4, 4]
    assert w['diff'] == 2.5 and w['se'] == pytest.approx(math.sqrt(25 / 12)) and w['statistic'] == pytest.approx(math.sqrt(3))
    assert w['df'] == pytest.approx(4.411765, abs=1e-5) and w['p'] == pytest.approx(0.1516, abs=2e-4)
    assert w['p'] == pytest.approx(t_two_sided_p(math.sqrt(3), w['df']), rel=1e-4)  # at a df no table prints
    lo, hi = w['ci95']  # symmetric about the difference, its ends where the two-sided p is 0.05
    assert (lo + hi) / 2 == pytest.approx(2.5) and t_two_sided_p((hi - 2.5) / w['se'], w['df']) == pytest.approx(0.05, rel=1e-4)
    back = S.welch([2, 4, 6, 8], [1, 2, 3, 4])
    assert back['diff'] == -2.5 and back['p'] == pytest.approx(w['p'])
    assert S.welch([0.5], [0.7, 0.9])['p'] is None and S.welch([0.5], [0.7])['diff'] == pytest.approx(0.2)
    flat = S.welch([1, 1, 1], [0, 1, 1])  # one side without spread: se = sqrt(1/9), t = -1, df = 2, where
    assert flat['statistic'] == pytest.approx(-1) and flat['df'] == pytest.approx(2)  # P(|T| > 1) = 1 - 1/sqrt(3)
    assert flat['p'] == pytest.approx(1 - 1 / math.sqrt(3))
    assert S.welch([1, 1], [1, 1])['p'] is None and S.welch([0, 0], [1, 1])['ci95'] == [1.0, 1.0]  # no spread
    with pytest.raises(ValueError):
        S.welch([], [1])


def test_versus_pairs_on_the_shared_seeds_and_falls_back_to_welch():
    a = {0: 0.50, 1: 0.62, 2: 0.41, 3: 0.70}
    b = {1: 0.66, 2: 0.47, 3: 0.73, 4: 0.10}
    r = S.versus(a, b)
    assert r['test'] == 'paired t-test' and r['seeds'] == [1, 2, 3] and r['n'] == 3
    assert r['diff'] == pytest.approx((0.04 + 0.06 + 0.03) / 3)  # seed 0 and seed 4 are in no pair
    w = S.versus({0: 0.5, 1: 0.6}, {2: 0.7, 3: 0.9}, test='wilcoxon')  # no seed shared: no pairs to rank
    assert w['test'] == "Welch's t-test" and w['seeds'] == [] and w['diff'] == pytest.approx(0.25)
    one = S.versus({0: 0.5, 1: 0.6}, {1: 0.7, 2: 0.9})  # one shared seed is no pairing
    assert one['test'] == "Welch's t-test"
    with pytest.raises(ValueError, match='valid tests'):
        S.versus({0: 0.5}, {1: 0.7}, test='ttest')


# --- many comparisons: Holm's step-down

def test_holm_on_a_list_worked_by_hand():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04, raised to 0.06 to keep order)
    assert S.holm([0.01, 0.04, 0.03, 0.005, None]) == pytest.approx([0.03, 0.06, 0.06, 0.02, None])
    assert S.holm([0.001, 0.2, 0.012]) == pytest.approx([0.003, 0.2, 0.024])
    assert S.holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    assert S.holm([None, None]) == [None, None] and S.holm([]) == []
    assert S.holm([0.04]) == [0.04]  # one comparison: nothing to adjust


# --- a hold rate: the Wilson interval

def wilson_closed_form(k: int, n: int, z: float = 1.959964) -> tuple:
    """(p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


@pytest.mark.parametrize('k, n', [(9, 10), (0, 10), (10, 10), (3, 7), (1, 2)])
def test_wilson_interval_is_its_closed_form(k, n):
    assert S.wilson(k, n) == pytest.approx(wilson_closed_form(k, n), abs=1e-6)


def test_wilson_known_values_and_bad_counts():
    assert S.wilson(9, 10) == pytest.approx([0.5958, 0.9821], abs=1e-4)  # 9 of 10 seeds: far from a sure 90%
    assert S.wilson(0, 0) is None
    with pytest.raises(ValueError, match='0 <= held <= n'):
        S.wilson(11, 10)


def test_the_rates_table_shows_each_hold_rate_with_its_wilson_interval():
    band = lambda name, ok: Finding('band', name, '15.1', name, '', ok, '', 'x')  # noqa: E731
    rows = S.aggregate_findings({s: [band('a', s != 3), band('b', None)] for s in range(10)})
    md = rates_table('band', rows)
    assert '| hold rate | 95% CI (Wilson) | held |' in md
    assert '| a | x | 90% | [60%, 98%] | 9/10 | 3 |' in md and '| b | x | n/a | — | — |' in md
