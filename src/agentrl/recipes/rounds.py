"""The round skeleton that expert iteration, STaR and RFT with a baseline share (sections 15.3 and 15.6).

Each of them repeats, from the current model, in place::

    for k in range(rounds):
        sample from the policy, choose what to train on     (the recipe's own round: row, train)
        train on it, if anything was chosen                 (SFT or weighted SFT)
        row.update(evaluate(model))                         (optional, after the round's training)

The logged records (``loggers=``) share one step axis, the SFT steps: round k's sample is reported at step
``k * steps``, its SFT steps at ``k * steps + 1 ... (k + 1) * steps``, its evaluation (``eval/...``) at
``(k + 1) * steps``, whether or not the round trained.
"""
from __future__ import annotations

from ..loggers.protocol import Reporter, merge_eval
from .loop import RecipeLoop


def check_rounds(rounds) -> int:
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f'rounds must be a positive int, got {rounds!r}')
    return rounds


def run_rounds(model, rounds: int, one_round, evaluate=None, rep: Reporter | None = None, steps: int = 0,
               recipe: str = 'a round', checkpoint=None, progress=None) -> list:
    """``rounds`` rounds of ``one_round(k) -> (row, train)`` -> one dict per round.

    ``row`` is the round's dict; ``train`` a callable that trains the model on what the round chose, or None
    when it chose nothing (the recipe has already warned). ``evaluate(model)`` (a dict) is merged into the row
    after the round's training (ValueError if one of its keys is the row's own), and reported to ``rep`` under
    ``eval/`` at step ``(k + 1) * steps``. ``checkpoint`` saves the model and the rows at round boundaries (a round is
    a step of ``recipes.loop``: each round's SFT makes its own optimizer, and its seeds come from ``k``)."""
    history = []
    loop = RecipeLoop(recipe, check_rounds(rounds), model, outputs={'history': history}, checkpoint=checkpoint,
                      progress=progress)
    for k in (step - 1 for step in loop.steps()):  # rounds from 0
        row, train = one_round(k)
        if train is not None:
            train()
        if evaluate is not None:
            values = evaluate(model)
            merge_eval(row, values, recipe)
            if rep is not None:
                rep.log_eval((k + 1) * steps, values)
        history.append(row)
    return history
