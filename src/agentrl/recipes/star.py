"""STaR rationalization for any environment with a scripted oracle (exercise 3; sections 15.3 and 15.6).

Expert iteration (section 15.3) only clones what the sampler already does: a task it never solves
(the weak base's whole ``init`` family, in BugFix) contributes nothing. STaR's rationalization (Zelikman
et al. 2022) regenerates, for each problem the model failed, a rationale *given the right answer*.
In an environment the "answer" is what the scripted oracle writes after a call's verb: the arguments of
each oracle call that has any (``envs.play.oracle_calls``; in BugFix, ``edit <op>`` with the task's fixing
op). A rationalized episode is a rollout of the current model in which, whenever the model's call so far
is the verb of an answer call it has not yet made (``edit``), the call is completed with the oracle's
arguments and the stop token (``edit fix_init <stop>``). The model still chooses everything else: whether
to read first, when to act, whether and when to submit. Successful rationalized episodes join the kept set.

The forced tokens (the arguments and the stop after them) are the answer, not the model's decision, so by
default (``mask_forced=True``) their action-mask entries are 0 and SFT does not train them: the model is
taught the episode around the answer (the read, the ``edit`` verb, the submit) but not the answer.
``mask_forced=False`` trains it too.
Either way the result is still filtered behaviour cloning: it imitates episodes a verifier
accepted, now drawn from a policy conditioned on the answer.

One round::

    sample n_samples episodes per task                      (the current policy)
    for every task with no success this round:
        roll out n_samples episodes with the op forced      (rationalization)
    kept = successes + rationalized successes              (forced op masked out)
    sft_train(model, kept)                                  (filtered behaviour cloning)
"""
from __future__ import annotations

import torch

from ..envs.play import oracle_calls
from ..envs.protocol import DEFAULT_ENV
from ..loggers.protocol import as_reporter
from ..rendering.protocols import as_renderer
from ..rendering.trajectory import Trajectory
from ..rollouts.engine import rollout_groups
from ..runtime.threads import small_model_threads
from .evaluation import group_pass  # noqa: F401 (re-exported: star_iteration(evaluate=...) users import it from here)
from .monitors import round_metrics
from .outcomes import DEFAULT_THRESHOLD, check_threshold, is_success, warn_no_signal
from .rounds import run_rounds
from .sft import sft_train


def answer_ids(task, renderer, env=DEFAULT_ENV, threshold: float = DEFAULT_THRESHOLD) -> list:
    """The oracle's answer calls on ``task`` as the renderer writes them -> [(ids with the stop, verb length)].

    An answer call is an oracle call with arguments (``edit fix_init``; ``read`` and ``submit`` have none).
    Its verb is its first word, which the model must write itself before the rest is forced."""
    out = []
    for call in oracle_calls(task, env, threshold):
        words = call.split()
        if len(words) < 2:
            continue
        ids, verb = renderer.encode_call(call), renderer.encode_call(words[0])[:-1]
        if ids[:len(verb)] == verb:  # the verb's tokens are a prefix of the call's (always, word by word)
            out.append((ids, len(verb)))
    return out


def answer_forcer(answers):
    """A ``rollout_batch`` ``force`` callable: episode b's calls that start with an answer's verb get its arguments.

    ``answers[b]`` is ``answer_ids`` of episode b's task. When the call so far is an unused answer's verb
    (``edit``), it emits the answer's next token, through the stop token, so the forced call is
    well-formed (``edit fix_init <stop>``); that answer is then used. (Forcing the op alone let the model
    write a third word after an op it had never seen, ``edit fix_init guard_zero``: an invalid call, and not
    one rationalized ``init`` episode passed.)
    """
    used = [set() for _ in answers]

    def force(b, call):
        n = len(call)
        for k, (ids, verb) in enumerate(answers[b]):
            if k not in used[b] and verb <= n < len(ids) and tuple(ids[:n]) == call:
                if n + 1 == len(ids):
                    used[b].add(k)
                return ids[n]
        return None
    return force


def mask_forced_tokens(traj: Trajectory) -> Trajectory:
    """A copy of ``traj`` whose action mask is 0 on its forced tokens (``info['forced_positions']``)."""
    mask = traj.action_mask.clone()  # [T-1]
    for p in traj.info.get('forced_positions', []):
        mask[p - 1] = 0.0  # entry p - 1 predicts token p
    return Trajectory(traj.ids, mask, traj.logprobs, traj.reward, traj.info, traj.owner, traj.turn,
                      turn_rewards=traj.turn_rewards, vocab=traj.vocab)


@small_model_threads
def rationalize(model, tasks, tok, n_samples, generator=None, mask=True, env=DEFAULT_ENV,
                threshold: float = DEFAULT_THRESHOLD) -> list:
    """Roll the model out ``n_samples`` times per task with the oracle's answers forced (``answer_forcer``) -> trajectories.

    Every trajectory has ``info['forced_positions']`` (indices into ``ids``; empty if the model
    never wrote an answer's verb); with ``mask`` their action-mask entries are 0. Behaviour log-probs of
    forced tokens are 0 (the behaviour chose them with probability 1). The oracle's episode of each task
    must reach ``threshold`` for its calls to count as the answer.
    """
    renderer = as_renderer(tok)
    answers = {t.name: answer_ids(t, renderer, env, threshold) for t in tasks}
    force = answer_forcer([answers[t.name] for t in tasks for _ in range(n_samples)])
    trajs = rollout_groups(model, tasks, tok, n_samples, env=env, generator=generator, force=force)
    return [mask_forced_tokens(t) for t in trajs] if mask else trajs


def _star_metrics(row: dict) -> dict:
    """What a round of STaR adds to the logged round (``star/*``): its rationalized successes, the tasks it
    rationalized, and (when there were any) the pass rate of the rationalized rollouts."""
    out = {'star/rationalized': row['n_rationalized'], 'star/failed_tasks': len(row['failed'])}
    if row['forced_rate'] is not None:
        out['star/forced_rate'] = row['forced_rate']
    return out


@small_model_threads
def star_iteration(model, tasks, tok, rounds=4, n_samples=16, steps=15, seed=0, mask_forced=True, evaluate=None,
                   lr=3e-3, batch_size=32, env=DEFAULT_ENV, threshold=DEFAULT_THRESHOLD, loggers=None) -> list:
    """Rounds of STaR with rationalization in ``env``, in place -> one dict per round (exercise 3).

    All rollouts (plain and rationalized, in that order each round) draw from one
    ``torch.Generator`` seeded with ``seed``; round k's SFT uses seed ``seed + k``. A success is an
    episode whose return reaches ``threshold`` (``recipes.outcomes``). Each dict holds:

    - ``round``; ``rate``: the plain sample's pass rate (its mean return);
    - ``solved``: tasks with a plain success; ``failed``: the others (rationalized this round);
    - ``rationalized``: tasks with a rationalized success; ``n_rationalized``: those episodes;
      ``forced_rate``: pass rate of the rationalized rollouts (None if no task failed);
    - ``n_plain`` and ``n_kept``: plain successes, and all kept episodes; ``kept``: the kept trajectories;
    - whatever ``evaluate(model)`` returns (a dict, e.g. ``group_pass``), after the round's SFT.

    A round with nothing kept warns (``recipes.outcomes.NoSignalWarning``) and trains on nothing.

    ``loggers`` (``agentrl.loggers``) get, each round, what the plain sample shows (``reward``,
    ``informative`` ...), what was kept (``filter/*``, ``star/rationalized``, ``star/forced_rate``), then every
    SFT step's ``loss``, ``grad_norm``, ``entropy``, and ``evaluate``'s figures under ``eval/``
    (the step axis: ``recipes.rounds``).
    """
    threshold = check_threshold(threshold)
    tasks = list(tasks)
    gen = torch.Generator().manual_seed(seed)
    rep = as_reporter(loggers)

    def one_round(k):
        started = rep.clock()
        sample = rollout_groups(model, tasks, tok, n_samples, env=env, generator=gen)
        plain = [t for t in sample if is_success(t, threshold)]
        solved = {t.info['task'] for t in plain}
        failed = [t for t in tasks if t.name not in solved]
        forced = rationalize(model, failed, tok, n_samples, generator=gen, mask=mask_forced, env=env,
                             threshold=threshold) if failed else []
        rationalized = [t for t in forced if is_success(t, threshold)]
        kept = plain + rationalized
        row = {'round': k, 'rate': sum(t.reward for t in sample) / len(sample), 'solved': sorted(solved),
               'failed': [t.name for t in failed], 'rationalized': sorted({t.info['task'] for t in rationalized}),
               'n_rationalized': len(rationalized),
               'forced_rate': sum(t.reward for t in forced) / len(forced) if forced else None,
               'n_plain': len(plain), 'n_kept': len(kept), 'kept': kept}
        rep.log(k * steps, lambda: {**round_metrics(k, sample, kept, n_samples, threshold, env),
                                    **_star_metrics(row)}, started=started, episodes=len(sample) + len(forced))
        if not kept:
            warn_no_signal(f'star_iteration round {k}', f'no episode, plain or rationalized, reached the threshold '
                           f'{threshold:g}', sample + forced)
            return row, None
        return row, lambda: sft_train(model, kept, tok, steps=steps, lr=lr, batch_size=batch_size, seed=seed + k,
                                      loggers=rep.shifted(k * steps))

    return run_rounds(model, rounds, one_round, evaluate, rep, steps, 'star_iteration')
