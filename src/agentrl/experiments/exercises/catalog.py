"""The chapter's seven exercises: number, title, question (in the chapter's words) and the module that answers it.

Kept apart from the exercise modules so that ``agentrl exercise --list`` and the checks of a command line
import no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Spec:
    """One exercise as the command line knows it."""
    number: int
    title: str
    question: str
    module: str
    """The module under ``agentrl.experiments.exercises`` that runs it (``run``, ``NEEDS``, ``ANSWERS``)."""

    def load(self):
        """The exercise's module."""
        return import_module(f'{__package__}.{self.module}')


EXERCISES = {s.number: s for s in (
    Spec(1, 'Aggregation and the gradient identity',
         'Show that the gradients of the token-averaged 0/1 policy-gradient loss and of the token-averaged SFT loss on '
         'the kept episodes differ by exactly (kept action tokens) / (all action tokens), and check the same for '
         "sequence-averaged aggregation. Which aggregation makes RFT's effective step depend on episode length?",
         'ex1_aggregation'),
    Spec(2, 'A weak base from random play only',
         'Change one assumption: train the weak base on random play alone instead of blind and random play. How does '
         'the set of tasks the base can solve change? What does expert iteration converge to?',
         'ex2_random_base'),
    Spec(3, 'STaR with rationalization',
         'For the tasks with no success in a round, roll the current model out with the right answer forced at its '
         'action, keep the successes, and mask the forced tokens out of the loss. Does the family expert iteration '
         'never covers become learnable? Is the result still filtered behaviour cloning?',
         'ex3_star'),
    Spec(4, 'RFT with a group baseline',
         'Also train RFT on the failures, weighted -R/(1-R) per group (R the group mean). Show that this recovers the '
         'baseline policy gradient up to a scale, and measure whether it moves the plateau of section 15.3.',
         'ex4_group_baseline'),
    Spec(5, 'DPO pairs from the step-20 SFT checkpoint',
         'Build the preference pairs from the step-20 oracle-SFT checkpoint instead of the weak base, train 100 steps, '
         'and compare invalid calls and held-out pass with section 15.4. Explain the difference by what the chosen '
         'episodes contain.',
         'ex5_dpo_from_sft'),
    Spec(6, 'SFT -> RL from three checkpoints',
         'Run SFT then RL from the step-10, step-20 and step-40 checkpoints, and plot the final held-out pass against '
         'the share of informative groups at the start.',
         'ex6_cold_start'),
    Spec(7, 'The design review',
         'Your team has 2,000 human demonstrations, a test-based verifier and the budget for one stage before RL: SFT '
         'on the demonstrations, RFT from the SFT model, or DPO on (demonstration, model failure) pairs? Which '
         'dashboard metric tells you early that the choice was wrong?',
         'ex7_design_review'),
)}


def get_spec(number) -> Spec:
    """The exercise ``number`` (1..7); ValueError naming the valid numbers otherwise."""
    if isinstance(number, str) and number.strip().isdigit():
        number = int(number)
    if number not in EXERCISES or isinstance(number, bool):
        raise ValueError(f'no exercise {number!r}; the exercises are {", ".join(map(str, EXERCISES))} '
                         '(agentrl exercise --list shows them)')
    return EXERCISES[number]
