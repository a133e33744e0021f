"""The chapter's claims, stated so that any environment can be checked against them (``agentrl claims``).

The bands (``bands.py``, docs/bands.md) hold BugFix's numbers: bands around the chapter's figures. A claim is the lesson behind a
finding, as a direction or a relation that means the same on any environment, with the figure of
``results.json`` that decides it and its threshold. Where a band is already a relation (the
gradient identity, the signal gap, the entropy order, DPO + NLL against DPO) the claim keeps the
band's threshold; where the band is a BugFix number, the claim states the relation the number
illustrates (oracle SFT's held-out pass *far above the weak base's* instead of ``>= 0.75``).
Each claim names the bands of the same finding, so its verdict on BugFix can be set beside theirs.

A claim may need what an environment need not have (``envs.CAPABILITIES``: a public check beside the
hidden one, a call that only reads, task groups): on an environment that lacks it (``ChapterEnv.lacks``)
the claim does not apply, and says why, instead of failing. A check may also find that a run's
settings leave nothing to compare (``NotApplicable``, e.g. a cold start at the last SFT step).

The list was written, and committed, before the second gym's first run (``docs/lessons.md`` sets
every claim's hold rate on BugFix beside the Wiring gym's). ``check_claims(results, env)`` -> one ``findings.Finding``
per claim, its verdict True, False or None (not applicable); ``findings.summary`` counts them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from .findings import Finding
from .probes import probe_roles
from .tables import table


@dataclass(frozen=True)
class Claim:
    """One of the chapter's claims."""
    key: str
    """A short name (``agentrl claims`` and the tables of ``docs/lessons.md`` use it)."""
    section: str
    """The section that makes it."""
    lesson: str
    """The claim in words."""
    test: str
    """The figure that decides it, and its threshold."""
    bands: tuple
    """The band rows about the same finding on BugFix (``bands.CHAPTER`` keys)."""
    check: Callable
    """``check(R, ctx) -> (holds, measured)``: ``R`` a run's ``results.json`` sections, ``ctx`` a ``Context``; it
    raises ``NotApplicable`` when the run's settings leave nothing to compare."""
    needs: tuple = ()
    """What of ``envs.CAPABILITIES`` the environment must have for the claim to apply."""


@dataclass(frozen=True)
class Context:
    """What a claim may need besides the figures: which calls of the environment only look, and what it lacks."""
    is_read: Callable = lambda call: False  # noqa: E731
    lacks: dict = field(default_factory=dict)
    """``ChapterEnv.lacks()``: {capability: why the environment lacks it}."""


class NotApplicable(LookupError):
    """A claim's figures are there, but the run's settings leave nothing for it to compare (the message says why)."""


def _share(d, key):
    return d[key] / sum(d.values())


def _last(R, name):
    return R['15.5']['curves'][name][-1]  # [step, train, held]


def _mask_minority(R, ctx):
    p = _share(R['15.1']['owner_counts'], 'policy')
    return p < 0.5, f'policy {p:.0%} of predicted tokens'


def _uniform_init(R, ctx):
    s = R['15.1']
    lv = s['log_vocab']
    if s.get('pretrained'):
        raise NotApplicable(f"a pretrained policy ({s['pretrained']}) does not start from random weights: masked loss "
                            f"{s['loss_masked']:.3f} / unmasked {s['loss_unmasked']:.3f} vs log V {lv:.3f}")
    ok = abs(s['loss_masked'] - lv) <= 0.4 and abs(s['loss_unmasked'] - lv) <= 0.4
    return ok, f"masked {s['loss_masked']:.3f} / unmasked {s['loss_unmasked']:.3f} vs log V {lv:.3f}"


def _weak_format(R, ctx):
    w = R['15.2']['weak']
    return w['invalid'] <= 0.2, f"{w['invalid']:.2f} invalid calls per episode"


def _weak_no_skill(R, ctx):
    w = R['15.2']['weak']
    return (0.03 <= w['train'] <= 0.30 and 0.03 <= w['held'] <= 0.30), f"train {w['train']:.3f} / held {w['held']:.3f}"


def _sft_skill(R, ctx):
    s = R['15.2']['oracle_sft']
    return s['train'] >= 0.90, f"train {s['train']:.3f}"


def _sft_transfer(R, ctx):
    s, w = R['15.2']['oracle_sft'], R['15.2']['weak']
    return s['held'] >= w['held'] + 0.5, f"held {s['held']:.3f} vs weak base {w['held']:.3f}"


def _sft_decisive(R, ctx):
    s, w = R['15.2']['oracle_sft'], R['15.2']['weak']
    return (s['reads'] >= 0.95 and s['entropy'] <= w['entropy'] / 3,
            f"reads {s['reads']:.2f}, entropy {s['entropy']:.3f} vs weak base {w['entropy']:.3f}")


def _grad_identity(R, ctx):
    gap = R['15.3']['grad_gap']
    return (gap is not None and gap <= 1e-6), f'max gap {gap:.1e}' if gap is not None else 'no success to compare'


def _rft_cosine(R, ctx):
    c = R['15.3']['cosine']
    return (c is not None and 0.80 <= c <= 0.999), f'cosine {c:.3f}' if c is not None else 'no success to compare'


def _ever_solved(R):
    return set().union(*(set(r['solved']) for r in R['15.3']['rounds']))


def _rft_plateau(R, ctx):
    n_train = R['setup']['train_tasks']
    ever, train = len(_ever_solved(R)), R['15.3']['after_rft']['train']
    return train <= ever / n_train, f'train {train:.3f} vs {ever} of {n_train} tasks ever solved ({ever / n_train:.2f})'


def _rft_no_transfer(R, ctx):
    rft, sft = R['15.3']['after_rft']['held'], R['15.2']['oracle_sft']['held']
    return rft <= sft - 0.4, f'held {rft:.3f} vs oracle SFT {sft:.3f}'


def _uncovered(R, ctx):
    n_train = R['setup']['train_tasks']
    never = n_train - len(_ever_solved(R))
    return never >= 1, f'{never} of {n_train} train tasks solved in no round'


def _acts_first(R, ctx):
    first = R['15.3']['rounds'][0]['first_actions']
    total = sum(first.values())
    act = sum(n for call, n in first.items() if not ctx.is_read(call))
    return (total > 0 and act > total / 2), f'{act} of {total} kept episodes act first'


def _dpo_values(R, ctx):
    v = R['15.4']['loss_values']
    return v == [0.6931, 0.1269, 2.1269], ' / '.join(f'{x:.4f}' for x in v)


def _dpo_last(R):
    log = R['15.4']['log']
    if not log:
        raise LookupError('no DPO log (no preference pair)')
    return log[-1]


def _dpo_breaks(R, ctx):
    d, w = _dpo_last(R), R['15.2']['weak']
    ok = d['d_rejected'] <= -15 and d['invalid'] >= 0.5 and d['invalid'] >= 5 * w['invalid']
    return ok, f"d_rejected {d['d_rejected']:.2f}, invalid {d['invalid']:.2f} vs weak base {w['invalid']:.2f}"


def _dpo_no_skill(R, ctx):
    d = _dpo_last(R)
    return d['held'] <= 0.15, f"held {d['held']:.2f} at step {d['step']}"


def _nll_format(R, ctx):
    pair = R['15.6']['dpo_vs_dpo_nll']
    if len(pair) < 2:
        raise LookupError('no DPO log (no preference pair)')
    dpo, nll = pair
    ok = nll['invalid'] <= dpo['invalid'] / 2 and nll['train'] > dpo['train']
    return ok, f"invalid {nll['invalid']:.2f} vs {dpo['invalid']:.2f}; train {nll['train']:.2f} vs {dpo['train']:.2f}"


def _cold_start_learns(R, ctx):
    _, train, held = _last(R, 'SFT -> RL')
    return train >= 0.88 and held >= 0.80, f'train {train:.2f} / held {held:.2f}'


def _cold_start_wins(R, ctx):
    cold, only = _last(R, 'SFT -> RL')[2], _last(R, 'RL only')[2]
    return cold >= only + 0.25, f'held {cold:.2f} vs RL only {only:.2f}'


def _rl_only_slow(R, ctx):
    cold, only = _last(R, 'SFT -> RL')[1], _last(R, 'RL only')[1]
    return only <= cold - 0.25, f'train {only:.2f} vs SFT -> RL {cold:.2f}'


def _sft_probes(R):
    """15.6's probe rows of the cold-start and the last SFT checkpoint -> (cold label, last label); NotApplicable when
    they are one checkpoint (``cold_start_step`` = ``sft_steps``)."""
    cold, last = probe_roles(R['15.6']['probe'])
    if cold == last:
        raise NotApplicable(f'the cold start is the last SFT step ({cold}): one SFT checkpoint, nothing to compare')
    return cold, last


def _signal_gap(R, ctx):
    p = R['15.6']['probe']
    cold, last = _sft_probes(R)
    a, b = p[cold]['signal'], p[last]['signal']
    return a >= b + 0.25, f'groups with signal: {cold} {a:.2f} vs {last} {b:.2f}'


def _entropy_falls(R, ctx):
    p = R['15.6']['probe']
    e = [p[k]['entropy'] for k in ('weak base', *_sft_probes(R))]
    return e[0] > e[1] > e[2], ' > '.join(f'{x:.3f}' for x in e)


def _mismatch(R, ctx):
    m, s = R['15.6']['mismatch'], R['15.2']['oracle_sft']
    ok = m['reads'] >= 0.9 and m['train'] <= 0.40 and m['train'] <= s['train'] / 2 and m['nll'] >= 0.3
    return ok, f"reads {m['reads']:.2f}, train {m['train']:.3f} vs SFT {s['train']:.3f}, NLL {m['nll']:.3f}"


def _dedup(R, ctx):
    d = R['15.6']['dedup']
    return d['distinct'] < d['kept'] / 2, f"{d['distinct']} distinct of {d['kept']} kept"


def _hacks_grow(R, ctx):
    rounds = R['15.6']['hacking']
    if not rounds:
        raise LookupError('no public-filter round')
    hacks = [r['hacks'] for r in rounds]
    if any(h is None for h in hacks) or not rounds[-1]['kept']:
        return False, 'no hidden check, or nothing kept'
    share = rounds[-1]['hacks'] / rounds[-1]['kept']
    grow = all(a < b for a, b in zip(hacks, hacks[1:]))
    return grow and share >= 0.40, f"kept hacks {' -> '.join(map(str, hacks))}, {share:.0%} of the last round's kept"


def _hidden_flat(R, ctx):
    rounds = R['15.6']['hacking']
    if not rounds:
        raise LookupError('no public-filter round')
    first, last = rounds[0], rounds[-1]
    ok = last['public'] >= 0.85 and last['hidden'] <= 0.55 and last['hidden'] <= first['hidden'] + 0.1
    return ok, (f"public {last['public']:.2f}; hidden {first['hidden']:.2f} -> {last['hidden']:.2f} "
                f"over {len(rounds)} rounds")


CLAIMS = (
    Claim('mask-minority', '15.1', "masked SFT trains only the policy's tokens, and they are a minority of those predicted",
          "policy tokens < 50% of the predicted tokens in the train oracle demos", ('15.1 policy share 10-30%',), _mask_minority),
    Claim('uniform-init', '15.1', 'an untrained policy starts near uniform, with or without the mask',
          'masked and unmasked loss at init each within 0.4 of log V', ('15.1 init losses near log V',), _uniform_init),
    Claim('weak-format', '15.2', 'SFT on unskilled play teaches the format',
          "weak base's invalid calls per episode <= 0.2", ('15.2 weak invalid <= 0.2',), _weak_format),
    Claim('weak-no-skill', '15.2', '... but not the skill',
          "weak base's train and held-out pass each 0.03 to 0.30", ('15.2 weak train/held 0.03-0.30',), _weak_no_skill),
    Claim('sft-skill', '15.2', 'oracle SFT from the weak base then teaches the skill on the train tasks',
          "oracle SFT's train pass >= 0.90", ('15.2 oracle SFT train >= 0.90, held >= 0.75',), _sft_skill),
    Claim('sft-transfer', '15.2', 'oracle SFT lifts held-out pass far above the weak base',
          "oracle SFT's held-out pass >= the weak base's + 0.5", ('15.2 oracle SFT train >= 0.90, held >= 0.75',),
          _sft_transfer),
    Claim('sft-decisive', '15.2', 'oracle SFT reads first and decides',
          "oracle SFT reads in >= 95% of episodes; its action entropy <= a third of the weak base's",
          ('15.2 oracle SFT reads >= 0.95, entropy <= weak/3',), _sft_decisive, needs=('read call',)),
    Claim('grad-identity', '15.3', 'RFT on fresh samples is the 0/1 policy gradient, scaled',
          'max abs(g_pg - ratio * g_rft) <= 1e-6', ('15.3 gradient identity <= 1e-6',), _grad_identity),
    Claim('rft-baseline-close', '15.3', 'a baseline changes the direction little',
          'cosine(baseline PG, RFT) 0.80 to 0.999', ('15.3 cosine 0.80-0.999',), _rft_cosine),
    Claim('rft-plateau', '15.3', 'expert iteration ends at or below the share of train tasks it ever solves',
          'RFT train pass <= the share of train tasks solved in any round', ('15.3 RFT train 0.45-0.88, held <= 0.35',),
          _rft_plateau),
    Claim('rft-no-transfer', '15.3', '... and far below oracle SFT on held-out tasks',
          "RFT held-out pass <= oracle SFT's - 0.4", ('15.3 RFT train 0.45-0.88, held <= 0.35',), _rft_no_transfer),
    Claim('uncovered-stays', '15.3', 'what unskilled play never covers, expert iteration never learns',
          '>= 1 train task solved in no round of expert iteration', ('15.3 init never solved by weak base',), _uncovered),
    Claim('acts-first', '15.3', "the successes expert iteration keeps mostly act without reading",
          "> half of round 0's kept episodes start with a call that does not only look",
          ('15.3 kept episodes mostly start with an edit',), _acts_first, needs=('read call',)),
    Claim('dpo-values', '15.4', 'the DPO loss is the logistic loss of the log-ratio margin',
          'loss at ratios (0,0), (+2,-2), (-2,+2), beta 0.5: 0.6931 / 0.1269 / 2.1269', ('15.4 DPO loss values exact',),
          _dpo_values),
    Claim('dpo-breaks-format', '15.4', 'offline DPO from a weak base pushes the rejected down and raises invalid calls',
          "at the last DPO step d_rejected <= -15 and invalid calls >= 0.5 and >= 5x the weak base's",
          ('15.4 DPO d_rejected <= -15', '15.4 DPO invalid >= 0.5 and >= 5x weak'), _dpo_breaks),
    Claim('dpo-no-skill', '15.4', '... and does not teach the skill', 'DPO held-out pass <= 0.15 at the last step',
          ('15.4 DPO held <= 0.15',), _dpo_no_skill),
    Claim('nll-holds-format', '15.6', 'an NLL term on the chosen episodes holds the format',
          "DPO + NLL invalid calls <= half of DPO's, and train pass above DPO's", ('15.6 DPO+NLL invalid <= half, train above',),
          _nll_format),
    Claim('cold-start-learns', '15.5', 'RL from an SFT checkpoint reaches high pass',
          'SFT -> RL final train >= 0.88 and held-out >= 0.80', ('15.5 SFT->RL train >= 0.88, held >= 0.80',),
          _cold_start_learns),
    Claim('cold-start-wins', '15.5', 'SFT -> RL beats RL alone on held-out tasks',
          "SFT -> RL held-out >= RL only's + 0.25", ('15.5 RL only train <= 0.65, held <= SFT->RL - 0.25',), _cold_start_wins),
    Claim('rl-only-slow', '15.5', 'RL from the weak base alone is slow on the train tasks too',
          "RL only final train <= SFT -> RL's - 0.25", ('15.5 RL only train <= 0.65, held <= SFT->RL - 0.25',), _rl_only_slow),
    Claim('signal-gap', '15.6', 'an early SFT checkpoint leaves RL informative groups; a late one does not',
          'groups with signal at the cold-start SFT checkpoint (cold_start_step) >= at the last (sft_steps) + 0.25',
          ('15.6 signal: step20 >= step60 + 0.25',), _signal_gap),
    Claim('entropy-falls', '15.6', 'SFT makes the policy ever more certain',
          'action entropy: weak base > cold-start SFT checkpoint > last SFT checkpoint',
          ('15.6 entropy weak > SFT20 > SFT60',), _entropy_falls),
    Claim('mismatch-breaks', '15.6', 'demos rendered without the template break the policy on rollouts',
          "mismatched SFT reads >= 0.9, train <= 0.40 and <= half of oracle SFT's, NLL on rendered demos >= 0.3",
          ('15.6 mismatch reads >= 0.9, train <= 0.40 and <= half of SFT, NLL >= 0.3',), _mismatch, needs=('read call',)),
    Claim('dedup-collapses', '15.6', 'the kept set repeats itself', "distinct action sequences < half of round 1's kept",
          ('15.6 dedup distinct < half',), _dedup),
    Claim('filter-gamed', '15.6', "a filter you can see gets gamed: its kept hacks grow round by round",
          'kept episodes failing the hidden check increase every round, >= 40% of the last round',
          ('15.6 hack share last round >= 40% and > round 0',), _hacks_grow, needs=('public check',)),
    Claim('hidden-flat', '15.6', '... while the true pass rate stays flat',
          'after the last round: public pass >= 0.85, hidden <= 0.55 and <= after the first round + 0.1',
          ('15.6 hack public >= 0.85, hidden <= 0.55',), _hidden_flat, needs=('public check',)),
)
"""Every claim, in the chapter's order."""


def context(env) -> Context:
    """A ``Context`` for an environment: a ``ChapterEnv``, or its ``--env`` name."""
    from .env_registry import get_env
    env = get_env(env) if isinstance(env, str) else env
    return Context(is_read=env.read_call() or (lambda call: False), lacks=env.lacks())


def check_claims(results: dict, env=None) -> list:
    """Every claim on a run's ``results.json`` sections -> [Finding]; ``env``: its ``ChapterEnv`` or ``--env`` name
    (default the chapter's). A claim that does not apply (the environment lacks what it needs, or the settings leave
    nothing to compare) has the verdict None, and ``'n/a: why'`` as what was measured. A figure the run lacks fails
    its claim."""
    from .env_registry import DEFAULT
    ctx = context(DEFAULT if env is None else env)
    rows = []
    for claim in CLAIMS:
        missing = [ctx.lacks[need] for need in claim.needs if need in ctx.lacks]
        try:
            if missing:
                raise NotApplicable('; '.join(missing))
            ok, measured = claim.check(results, ctx)
            ok = False if isinstance(ok, float) and math.isnan(ok) else bool(ok)
        except NotApplicable as e:
            ok, measured = None, f'n/a: {e}'
        except (KeyError, LookupError, TypeError, ZeroDivisionError) as e:
            ok, measured = False, f'missing: {e}'
        rows.append(Finding('claim', claim.key, claim.section, claim.lesson, claim.test, ok, measured))
    return rows


def markdown() -> str:
    """The list as a Markdown table (``docs/claims.md`` holds it; a test keeps the two equal)."""
    return table(['#', 'section', 'claim', 'decided by', 'applies to an environment with', 'BugFix bands of the same finding'],
                 [(i, c.section, f'`{c.key}`: {c.lesson}', c.test, ', '.join(c.needs) or 'any', '; '.join(c.bands))
                  for i, c in enumerate(CLAIMS, 1)]) + '\n'
