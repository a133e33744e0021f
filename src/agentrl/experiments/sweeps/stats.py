"""Statistics over seeds and between variants, shared by ``agentrl sweep`` and ``agentrl compare``.

Every quantile and p-value comes from ``scipy.stats``; this module decides which test fits the design.

- per figure over seeds: ``summarize`` (mean, standard error, 95% CI with Student's t);
- a hold rate k of n: ``wilson`` (its 95% Wilson score interval; ``chapter15.findings``, where hold rates are counted);
- the figures of one seed: ``flatten`` every numeric leaf of ``results.json``'s sections, plus ``derived`` counts and
  shares;
- over seeds: ``aggregate`` (figures), ``aggregate_findings`` (bands), ``aggregate_verdicts`` (the chapter's claims,
  those that do not apply counted apart), ``aggregate_claims`` (beyond-the-chapter claims);
- between two variants: ``versus`` pairs them by seed where they share seeds (``paired``: the paired t-test or the
  Wilcoxon signed-rank test on the per-seed differences) and falls back to ``welch`` (unequal-variance t-test)
  where they do not; ``holm`` adjusts a table's p-values for the number of comparisons in it.
"""
from __future__ import annotations

import math
import re
import warnings

from scipy import stats as sp

from ..chapter15.findings import hold_rates, wilson  # noqa: F401 (wilson: a hold rate's interval, counted there)

EXCLUDE = re.compile(r'15\.3/first_kept(/|$)|15\.3/rounds/\d+/first_actions(/|$)|rl/logs(/|$)|rl/pass_at_k/\w+/successes(/|$)')
"""Numeric leaves that are not one figure across seeds: per-seed rankings and counts keyed by action text, the RL
section's step logs (their means are its ``monitors``) and its per-task successes."""


def _mean_sd(xs: list) -> tuple:
    """Mean and sample standard deviation (n - 1 in the denominator) of a list of two or more floats."""
    mean = sum(xs) / len(xs)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def _rounding(of: list) -> float:
    """How far apart two figures computed from ``of`` may be by float rounding alone (0.3 - 0.2 and 0.4 - 0.3 differ
    in their last bits): a test that took that for spread would divide by rounding noise and call a difference
    certain."""
    return 1e-12 * max(1.0, *(abs(x) for x in of))


def _flat(xs: list, of: list) -> bool:
    """No spread in ``xs`` beyond the float rounding of the figures ``of``."""
    return max(xs) - min(xs) <= _rounding(of)


def summarize(values) -> dict:
    """Mean, stderr (sample std / sqrt(n)), 95% CI (mean +- t_{0.975,n-1} stderr) and half-width of a list.

    With one value, stderr and the CI are None (no spread to estimate).
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError('no values to summarize')
    if n < 2:
        return {'n': n, 'mean': xs[0], 'std': None, 'stderr': None, 'half_width': None, 'ci95': None}
    mean, std = _mean_sd(xs)
    stderr = std / math.sqrt(n)
    half = float(sp.t.ppf(0.975, n - 1)) * stderr
    return {'n': n, 'mean': mean, 'std': std, 'stderr': stderr, 'half_width': half, 'ci95': [mean - half, mean + half]}


# --- figures of one seed

def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def flatten(obj, prefix: str = '') -> dict:
    """Every numeric leaf of nested dicts / lists -> {'a/b/0/1': value} (bools, strings and None skipped)."""
    out = {}
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        if _is_num(obj):
            out[prefix] = obj
        return out
    for k, v in items:
        path = f'{prefix}/{k}' if prefix else str(k)
        if EXCLUDE.match(path):
            continue
        out.update(flatten(v, path))
    return out


def derived(sections: dict) -> dict:
    """Figures the bands and tables use that are not leaves themselves: counts of name lists, shares."""
    out = {}
    s1 = sections.get('15.1', {})
    counts = s1.get('owner_counts') or {}
    total = sum(counts.values())
    for k, v in counts.items():
        if total:
            out[f'15.1/owner_share/{k}'] = v / total
    s3 = sections.get('15.3', {})
    for k, r in enumerate(s3.get('rounds', [])):
        out[f'15.3/rounds/{k}/n_solved'] = len(r.get('solved', []))
    if 'never_solved' in s3:
        out['15.3/n_never_solved'] = len(s3['never_solved'])
    for k, r in enumerate(sections.get('15.6', {}).get('hacking', [])):
        if r.get('kept'):
            out[f'15.6/hacking/{k}/hack_share'] = r['hacks'] / r['kept']
    return out


def seed_figures(sections: dict) -> dict:
    return {**flatten(sections), **derived(sections)}


def aggregate(per_seed: dict) -> tuple:
    """{seed: sections} -> (figures, partial): summaries of figures numeric in every seed, and of the rest.

    Each summary also lists the seeds and their values. ``partial`` holds figures present (or
    numeric) in only some seeds, e.g. the gradient gap of a seed whose sample had no success.
    """
    flat = {seed: seed_figures(s) for seed, s in per_seed.items()}
    seeds = sorted(flat)
    keys = sorted({k for f in flat.values() for k in f})
    full, partial = {}, {}
    for key in keys:
        have = [s for s in seeds if key in flat[s]]
        summary = {**summarize([flat[s][key] for s in have]), 'seeds': have, 'values': [flat[s][key] for s in have]}
        if len(have) < len(seeds):
            summary['partial'] = True
        (full if len(have) == len(seeds) else partial)[key] = summary
    return full, partial


def aggregate_findings(per_seed_findings: dict) -> dict:
    """The chapter's bands over seeds: {seed: [Finding]} -> {name: chapter figure, hold rate, held, n, per-seed
    outcome and figure} (``findings.hold_rates``)."""
    return hold_rates(per_seed_findings, lambda f: {'chapter': f.chapter})


def aggregate_verdicts(per_seed_claims: dict) -> dict:
    """The chapter's claims over seeds: {seed: [Finding]} -> {key: section, lesson, test, hold rate, held, n, per-seed
    outcome and figure}, in the claims' order; a claim that does not apply (verdict None) is counted apart."""
    return hold_rates(per_seed_claims, lambda f: {'section': f.section, 'lesson': f.statement, 'test': f.rule})


def aggregate_claims(per_seed: dict) -> dict:
    """Beyond-the-chapter claims (report.BEYOND_CLAIMS) over the seeds that ran --extended -> per claim its
    support rate among the seeds where it was measurable, and each seed's figure."""
    from ..chapter15.report import beyond_claims
    rows = hold_rates({seed: beyond_claims(s) for seed, s in per_seed.items() if 'beyond' in s}, lambda f: {})
    return {key: {'per_seed': r['per_seed'], 'n': r['n'], 'supported': r['held'], 'support_rate': r['hold_rate']}
            for key, r in rows.items()}


# --- two variants: paired by seed where they can be, Welch's test where they cannot

TESTS = {'t': 'paired t-test', 'wilcoxon': 'Wilcoxon signed-rank test'}
"""The tests of a paired comparison (``paired``'s ``test``), by the name ``agentrl compare --test`` takes."""


def paired(a, b, test: str = 't') -> dict:
    """``b - a`` paired item by item (``a[i]`` and ``b[i]``: the same seed) -> dict.

    Keys: ``test`` (``TESTS[test]``), ``n`` (pairs), ``diff`` (mean of the differences), ``se`` (their std / sqrt(n)),
    ``statistic`` (t, or Wilcoxon's W), ``df`` (n - 1; None for Wilcoxon), ``p`` (two-sided) and ``ci95``: the t
    interval of the mean difference, diff +- t_{0.975, n-1} se, whichever test gives p (the interval
    ``scipy.stats.ttest_rel`` gives; a signed-rank test has no interval for a mean). Pairing takes out what the two
    variants share at a seed (its tasks, its weak base), so it tests the change against the spread of its effect
    alone. With fewer than two pairs only ``diff`` is given. When every difference is the same there is no spread for
    a t-test: p is None (the Wilcoxon test still has one unless every difference is zero)."""
    if test not in TESTS:
        raise ValueError(f'unknown test {test!r}; valid tests are {list(TESTS)}')
    xs, ys = [float(v) for v in a], [float(v) for v in b]
    if len(xs) != len(ys) or not xs:
        raise ValueError(f'paired needs two lists of one value per seed, of equal length; got {len(xs)} and {len(ys)}')
    d = [y - x for x, y in zip(xs, ys)]
    diff = sum(d) / len(d)
    out = {'test': TESTS[test], 'n': len(d), 'diff': diff, 'se': None, 'statistic': None, 'df': None, 'p': None,
           'ci95': None}
    if len(d) < 2:
        return out
    tol = _rounding(xs + ys)
    ranked = [round(x / tol) * tol for x in d]  # differences within rounding of each other are ties, of 0 zeros
    if _flat(d, xs + ys):  # no spread: the interval is a point, and only a rank test has a p
        out.update(se=0.0, ci95=[diff, diff])
    else:
        r = sp.ttest_rel(ys, xs)
        ci = r.confidence_interval(0.95)
        out.update(se=_mean_sd(d)[1] / math.sqrt(len(d)), ci95=[float(ci.low), float(ci.high)])
        if test == 't':
            out.update(statistic=float(r.statistic), df=int(r.df), p=float(r.pvalue))
    if test == 'wilcoxon' and any(ranked):  # zeros dropped (Wilcoxon's rule); exact, or every sign flip with ties
        w = sp.wilcoxon(ranked)
        out.update(statistic=float(w.statistic), p=float(w.pvalue))
    return out


def welch(a, b) -> dict:
    """Difference of means ``mean(b) - mean(a)`` of two unpaired samples with Welch's unequal-variance t-test -> dict.

    Keys as ``paired``'s: ``test`` ("Welch's t-test"), ``n`` ([n_a, n_b]), ``diff``, ``se`` (sqrt(s_a^2/n_a +
    s_b^2/n_b)), ``statistic`` (t), ``df`` (Welch-Satterthwaite), ``p`` (two-sided) and ``ci95`` (diff +- t_{0.975, df}
    se; ``scipy.stats.ttest_ind(equal_var=False)``). With fewer than two values on a side there is no spread to test
    against: only ``diff`` is given. With no spread on either side the interval is the point ``diff`` and p is None.
    """
    xs, ys = [float(v) for v in a], [float(v) for v in b]
    if not xs or not ys:
        raise ValueError('welch needs values on both sides')
    diff = sum(ys) / len(ys) - sum(xs) / len(xs)
    out = {'test': "Welch's t-test", 'n': [len(xs), len(ys)], 'diff': diff, 'se': None, 'statistic': None,
           'df': None, 'p': None, 'ci95': None}
    if len(xs) < 2 or len(ys) < 2:
        return out
    if _flat(xs, xs + ys) and _flat(ys, xs + ys):
        return {**out, 'se': 0.0, 'ci95': [diff, diff]}
    with warnings.catch_warnings():  # one side with no spread is a variance term of 0, not a loss of precision
        warnings.filterwarnings('ignore', 'Precision loss occurred', RuntimeWarning)
        r = sp.ttest_ind(ys, xs, equal_var=False)
    ci = r.confidence_interval(0.95)
    se = math.sqrt(_mean_sd(xs)[1] ** 2 / len(xs) + _mean_sd(ys)[1] ** 2 / len(ys))
    return {**out, 'se': se, 'statistic': float(r.statistic), 'df': float(r.df), 'p': float(r.pvalue),
            'ci95': [float(ci.low), float(ci.high)]}


def versus(a: dict, b: dict, test: str = 't') -> dict:
    """Variant ``b`` against ``a``, each ``{seed: value}`` -> ``paired`` on the seeds both have when they share two or
    more (each side's other seeds left out of the test), else ``welch`` on all their values; the result's ``seeds``
    are the seeds paired (empty for Welch's test)."""
    shared = [s for s in a if s in b]
    if len(shared) >= 2:
        return {**paired([a[s] for s in shared], [b[s] for s in shared], test), 'seeds': shared}
    if test not in TESTS:
        raise ValueError(f'unknown test {test!r}; valid tests are {list(TESTS)}')
    return {**welch(list(a.values()), list(b.values())), 'seeds': []}


def holm(ps) -> list:
    """Holm's step-down adjustment of p-values for the number m of them (None: no test, not counted) -> the adjusted
    p-values in the same order.

    Sorted ascending, the k-th smallest (k from 1) becomes min(1, (m - k + 1) p_(k)), raised to the largest value
    before it so the order is kept. Rejecting where the adjusted p < 0.05 keeps the chance of any false rejection
    among the m at most 0.05, whatever their dependence (Holm 1979); Bonferroni's m p_(k) for all k rejects less.
    """
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    out, running = [None] * len(ps), 0.0
    for k, i in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - k) * ps[i]))
        out[i] = running
    return out
