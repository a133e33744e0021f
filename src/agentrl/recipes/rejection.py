"""Rejection sampling and expert iteration (sections 15.3 and 15.6).

One round samples episodes from the current policy, keeps those the filter accepts (a return that reaches
``threshold``: reward 1 in the chapter, ``recipes.outcomes``), and fine-tunes on them with ``sft_train``:
filtered behaviour cloning. Repeating it is expert
iteration. Because the filter is the reward, running it with ``reward='public'`` is the chapter's
reward-hacking experiment: every round records how many kept episodes fail the hidden tests.
"""
from __future__ import annotations

import random
from collections import Counter

from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..runtime.threads import small_model_threads
from .evaluation import pass_rate
from .monitors import round_metrics
from .outcomes import DEFAULT_THRESHOLD, check_threshold, is_success, warn_no_signal
from .rounds import run_rounds
from .sft import sft_train


def keep_successes(trajs, threshold: float = DEFAULT_THRESHOLD) -> list:
    """The episodes the filter accepts: a return that reaches ``threshold`` (default 1.0, the chapter's reward 1)
    (section 15.3)."""
    threshold = check_threshold(threshold)
    return [t for t in trajs if is_success(t, threshold)]


def dedup_by_actions(trajs) -> list:
    """One episode per (task, action sequence), the first seen of each (section 15.6, option a)."""
    unique = {}
    for t in trajs:
        unique.setdefault((t.info['task'], tuple(t.info['actions'])), t)
    return list(unique.values())


def cap_per_task(trajs, cap: int, seed: int = 0) -> list:
    """At most ``cap`` episodes per task, drawn at random with ``seed`` (section 15.6, option b)."""
    if not isinstance(cap, int) or cap < 1:
        raise ValueError(f'cap must be a positive int, got {cap!r}')
    rng = random.Random(seed)
    by_task = {}
    for t in trajs:
        by_task.setdefault(t.info['task'], []).append(t)
    out = []
    for task in by_task:
        group = by_task[task]
        out += group if len(group) <= cap else rng.sample(group, cap)
    return out


def family_share(trajs, groups=None) -> dict:
    """Share of ``trajs`` from each task group (``info['group']``; BugFix: each family), rounded to 2 decimals (15.6).

    ``groups``: the groups to report, in order, absent ones as 0.0 (section 15.6 passes every family of the train
    tasks); default: the groups of ``trajs``, in the order they first appear."""
    trajs = list(trajs)
    if groups is None:
        groups = list(dict.fromkeys(t.info.get('group') for t in trajs))
    if not trajs:
        return {g: 0.0 for g in groups}
    return {g: round(sum(t.info.get('group') == g for t in trajs) / len(trajs), 2) for g in groups}


def _hacks(kept):
    """Kept episodes that fail the hidden check (None when the environment reports none)."""
    if not all('hidden_pass' in t.info for t in kept):
        return None
    return sum(not t.info['hidden_pass'] for t in kept)


@small_model_threads
def expert_iteration(model, tasks, tok, rounds=4, n_samples=16, steps=15, sample_seed=100, sft_seed=0,
                     reward='hidden', dedup=False, per_task_cap=None, lr=3e-3, batch_size=32, evaluate=None,
                     temperature=1.0, env=DEFAULT_ENV, threshold=DEFAULT_THRESHOLD, loggers=None, checkpoint=None,
                     progress=None):
    """Rounds of sample -> filter -> SFT from the current model, in place -> one dict per round (section 15.3).

    Round k samples ``n_samples`` episodes per task with seed ``sample_seed + k``, keeps the
    successes under ``reward`` (a return that reaches ``threshold``; optionally deduplicated by action
    sequence and capped per task), and runs ``steps`` SFT steps on them with seed ``sft_seed + k``. Each
    round's dict holds the sample pass rate (its mean return), the kept episodes, the solved task names,
    ``hacks`` (kept episodes that fail the hidden tests: the exploit under ``reward='public'``), and
    whatever ``evaluate(model)`` returns (a dict), measured after the round's SFT. Episodes are sampled at
    ``temperature`` in ``env`` (a factory or Gymnasium id; ``hacks`` is None when its episodes report no
    ``info['hidden_pass']``). A round in which no episode reaches the threshold trains on nothing and warns
    (``recipes.outcomes.NoSignalWarning``), naming the threshold and the returns it saw.

    ``loggers`` (``agentrl.loggers``) get, each round, what its sample shows (``reward``, ``informative``,
    ``invalid_calls``, ``reads_first`` ...) and what the filter kept (``filter/kept``, ``filter/kept_distinct``,
    ``filter/hacks``: the gap to the hidden check), then every SFT step's ``loss``, ``grad_norm``, ``entropy``,
    and ``evaluate``'s figures under ``eval/`` (the step axis: ``recipes.rounds``). ``checkpoint`` and ``progress``:
    ``recipes.loop``, a round a step.
    """
    threshold = check_threshold(threshold)
    rep = as_reporter(loggers)

    def one_round(k):
        started = rep.clock()
        rate, sample = pass_rate(model, tasks, tok, n_samples, temperature=temperature, seed=sample_seed + k,
                                 reward=reward, env=env)
        kept = keep_successes(sample, threshold)
        if dedup:
            kept = dedup_by_actions(kept)
        if per_task_cap is not None:
            kept = cap_per_task(kept, per_task_cap, seed=sft_seed + k)
        row = {'round': k, 'rate': rate, 'kept': kept, 'solved': sorted({t.info['task'] for t in kept}),
               'hacks': _hacks(kept),
               'first_actions': Counter(t.info['actions'][0] for t in kept)}
        rep.log(k * steps, lambda: round_metrics(k, sample, kept, n_samples, threshold, env), started=started,
                episodes=len(sample))
        if not kept:
            warn_no_signal(f'expert_iteration round {k}', f'no episode reached the threshold {threshold:g}', sample)
            return row, None
        return row, lambda: sft_train(model, kept, tok, steps=steps, lr=lr, batch_size=batch_size, seed=sft_seed + k,
                                      loggers=rep.shifted(k * steps))

    return run_rounds(model, rounds, one_round, evaluate, rep, steps, 'expert_iteration', checkpoint, progress)
