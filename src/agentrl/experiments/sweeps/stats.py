"""Statistics over seeds and between variants, shared by ``agentrl sweep`` and ``agentrl compare``.

- per figure over seeds: ``summarize`` (mean, standard error, 95% CI with Student's t);
- the figures of one seed: ``flatten`` every numeric leaf of ``results.json``'s sections, plus ``derived`` counts and shares;
- over seeds: ``aggregate`` (figures), ``aggregate_findings`` (bands), ``aggregate_verdicts`` (the chapter's claims,
  those that do not apply counted apart), ``aggregate_claims`` (beyond-the-chapter claims);
- between two variants: ``welch`` (difference of means, Welch's t-test and its 95% CI), on an exact Student-t
  distribution (``t_cdf`` via the regularized incomplete beta function; no scipy needed).
"""
from __future__ import annotations

import math
import re

from ..chapter15.findings import hold_rates

EXCLUDE = re.compile(r'15\.3/first_kept(/|$)|15\.3/rounds/\d+/first_actions(/|$)')
"""Numeric leaves that are not one figure across seeds: per-seed rankings and counts keyed by action text."""

T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
        2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
        2.0518, 2.0484, 2.0452, 2.0423)
"""Student-t 0.975 quantiles for 1..30 degrees of freedom."""
Z975 = 1.959964


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom.

    A table for df 1..30; beyond, the normal quantile with the Cornish-Fisher correction
    z + (z^3 + z) / 4df + (5z^5 + 16z^3 + 3z) / 96df^2 (within 1e-4 of the exact value there,
    and tending to the normal 1.96).
    """
    if df < 1:
        raise ValueError(f'need at least 1 degree of freedom, got {df}')
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def summarize(values) -> dict:
    """Mean, stderr (sample std / sqrt(n)), 95% CI (mean +- t_{0.975,n-1} stderr) and half-width of a list.

    With one value, stderr and the CI are None (no spread to estimate).
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError('no values to summarize')
    mean = sum(xs) / n
    if n < 2:
        return {'n': n, 'mean': mean, 'std': None, 'stderr': None, 'half_width': None, 'ci95': None}
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    stderr = std / math.sqrt(n)
    half = t975(n - 1) * stderr
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


# --- two variants: Welch's t-test

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom (any real df, as Welch's test needs)."""
    if not df > 0:
        raise ValueError(f'need df > 0, got {df}')
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on ``t_cdf``, to 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f'need 0 < p < 1, got {p}')
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def welch(a, b) -> dict:
    """Difference of means ``mean(b) - mean(a)`` with Welch's unequal-variance t-test -> dict.

    Keys: ``diff``, ``se`` (sqrt(s_a^2/n_a + s_b^2/n_b)), ``t``, ``df`` (Welch-Satterthwaite), ``p`` (two-sided)
    and ``ci95`` (diff +- t_{0.975, df} se). With fewer than two values on a side there is no spread to test
    against: only ``diff`` is given (the rest None). With no spread on either side, a zero difference has
    p = 1 and any other p = 0 (the formal limit; every seed agrees).
    """
    xs, ys = [float(v) for v in a], [float(v) for v in b]
    if not xs or not ys:
        raise ValueError('welch needs values on both sides')
    ma, mb = sum(xs) / len(xs), sum(ys) / len(ys)
    out = {'diff': mb - ma, 'se': None, 't': None, 'df': None, 'p': None, 'ci95': None}
    if len(xs) < 2 or len(ys) < 2:
        return out
    va = sum((x - ma) ** 2 for x in xs) / (len(xs) - 1) / len(xs)  # squared standard errors
    vb = sum((y - mb) ** 2 for y in ys) / (len(ys) - 1) / len(ys)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return {**out, 'se': 0.0, 'p': 1.0 if mb == ma else 0.0, 'ci95': [mb - ma, mb - ma]}
    df = (va + vb) ** 2 / ((va ** 2 / (len(xs) - 1) if va else 0.0) + (vb ** 2 / (len(ys) - 1) if vb else 0.0))
    t = (mb - ma) / se
    q = t_quantile(0.975, df)
    return {**out, 'se': se, 't': t, 'df': df, 'p': min(1.0, 2.0 * (1.0 - t_cdf(abs(t), df))),
            'ci95': [mb - ma - q * se, mb - ma + q * se]}
