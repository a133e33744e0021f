"""STaR rationalization for the gym (exercise 3; sections 15.3 and 15.6).

Expert iteration (section 15.3) only clones what the sampler already does: a task it never solves
(the weak base's whole ``init`` family) contributes nothing. STaR's rationalization (Zelikman et
al. 2022) regenerates, for each problem the model failed, a rationale *given the right answer*.
In the gym the "answer" is the task's fixing op (``task.fix``), and a rationalized episode is a
rollout of the current model in which, whenever the model's call so far is exactly ``edit``, the
call is completed as ``edit <op> <stop>``. The model still chooses everything else: whether to read first,
when to edit, whether and when to submit. Successful rationalized episodes join the kept set.

The forced tokens (the op and the stop after it) are the answer, not the model's decision, so by
default (``mask_forced=True``) their action-mask entries are 0 and SFT does not train them: the model is taught the episode around the
op (the read, the ``edit`` verb, the submit) but not the op. ``mask_forced=False`` trains it too.
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

from ..env import BugFixEnv
from ..render import Trajectory
from ..rollout import rollout_batch
from .evaluation import family_pass  # noqa: F401 (re-exported: star_iteration(evaluate=...) users import it from here)
from .sft import sft_train


def edit_forcer(op_ids, tok):
    """A ``rollout_batch`` ``force`` callable that completes episode b's edit call as ``edit op_ids[b] <stop>``.

    When the call so far is exactly ``edit`` it emits the op; when it is ``edit op_ids[b]`` it
    emits ``<stop>``, so the forced call is well-formed. (Forcing the op alone let the model write
    a third word after an op it had never seen, ``edit fix_init guard_zero``: an invalid call, and
    not one rationalized ``init`` episode passed.)
    """
    edit_id, stop_id = tok.token_to_id['edit'], tok.stop_id

    def force(b, call):
        if call == (edit_id,):
            return op_ids[b]
        if call == (edit_id, op_ids[b]):
            return stop_id
        return None
    return force


def mask_forced_tokens(traj: Trajectory) -> Trajectory:
    """A copy of ``traj`` whose action mask is 0 on its forced tokens (``info['forced_positions']``)."""
    mask = traj.action_mask.clone()  # [T-1]
    for p in traj.info.get('forced_positions', []):
        mask[p - 1] = 0.0  # entry p - 1 predicts token p
    return Trajectory(traj.ids, mask, traj.logprobs, traj.reward, traj.info, traj.owner, traj.turn)


def rationalize(model, tasks, tok, n_samples, generator=None, mask=True) -> list:
    """Roll the model out ``n_samples`` times per task with each task's fixing op forced at its edits -> trajectories.

    Every trajectory has ``info['forced_positions']`` (indices into ``ids``; empty if the model
    never wrote ``edit``); with ``mask`` their action-mask entries are 0. Behaviour log-probs of
    forced tokens are 0 (the behaviour chose them with probability 1).
    """
    b_tasks = [t for t in tasks for _ in range(n_samples)]
    op_ids = [tok.token_to_id[t.fix] for t in b_tasks]
    trajs = rollout_batch(model, [BugFixEnv() for _ in b_tasks], b_tasks, tok, generator=generator,
                          force=edit_forcer(op_ids, tok))
    return [mask_forced_tokens(t) for t in trajs] if mask else trajs


def star_iteration(model, tasks, tok, rounds=4, n_samples=16, steps=15, seed=0, mask_forced=True, evaluate=None,
                   lr=3e-3, batch_size=32) -> list:
    """Rounds of STaR with rationalization, in place -> one dict per round (exercise 3).

    All rollouts (plain and rationalized, in that order each round) draw from one
    ``torch.Generator`` seeded with ``seed``; round k's SFT uses seed ``seed + k``. Each dict holds:

    - ``round``; ``rate``: the plain sample's pass rate;
    - ``solved``: tasks with a plain success; ``failed``: the others (rationalized this round);
    - ``rationalized``: tasks with a rationalized success; ``n_rationalized``: those episodes;
      ``forced_rate``: pass rate of the rationalized rollouts (None if no task failed);
    - ``n_plain`` and ``n_kept``: plain successes, and all kept episodes; ``kept``: the kept trajectories;
    - whatever ``evaluate(model)`` returns (a dict, e.g. ``family_pass``), after the round's SFT.
    """
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f'rounds must be a positive int, got {rounds!r}')
    tasks = list(tasks)
    gen = torch.Generator().manual_seed(seed)
    history = []
    for k in range(rounds):
        b_tasks = [t for t in tasks for _ in range(n_samples)]
        sample = rollout_batch(model, [BugFixEnv() for _ in b_tasks], b_tasks, tok, generator=gen)
        plain = [t for t in sample if t.reward == 1.0]
        solved = {t.info['task'] for t in plain}
        failed = [t for t in tasks if t.name not in solved]
        forced = rationalize(model, failed, tok, n_samples, generator=gen, mask=mask_forced) if failed else []
        rationalized = [t for t in forced if t.reward == 1.0]
        kept = plain + rationalized
        row = {'round': k, 'rate': sum(t.reward for t in sample) / len(sample), 'solved': sorted(solved),
               'failed': [t.name for t in failed], 'rationalized': sorted({t.info['task'] for t in rationalized}),
               'n_rationalized': len(rationalized),
               'forced_rate': sum(t.reward for t in forced) / len(forced) if forced else None,
               'n_plain': len(plain), 'n_kept': len(kept), 'kept': kept}
        if kept:  # nothing passed: this round cannot teach anything
            sft_train(model, kept, tok, steps=steps, lr=lr, batch_size=batch_size, seed=seed + k)
        if evaluate is not None:
            row.update(evaluate(model))
        history.append(row)
    return history
