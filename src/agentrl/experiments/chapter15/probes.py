"""The SFT checkpoints that sections 15.5 and 15.6 start from and probe, and the labels a run's figures give them.

Oracle SFT (15.2) keeps two checkpoints: the cold start RL begins from (``cold_start_step``; the file keeps the
name ``sft_step20``) and the last step (``sft_steps``; ``sft_step60``). 15.6 probes both beside the weak base, and
its figures are keyed by what it probed: ``'SFT step N'`` with the run's own steps (the chapter's: 20 and 60).
The claims, the reports and ``compare`` find the two by their role (``probe_roles``), whatever the steps.
"""
from __future__ import annotations

import re

WEAK = 'weak base'
"""The probe's row of the weak base."""
_SFT = re.compile(r'^SFT step (\d+)$')


def sft_label(step: int) -> str:
    """The label of the SFT checkpoint after ``step`` steps: ``'SFT step 20'``."""
    return f'SFT step {step}'


def probe_labels(cold_start_step: int, sft_steps: int) -> list:
    """15.6's probe rows, in order -> [(label, checkpoint name)]: the weak base, the cold start, the last SFT step."""
    return [(WEAK, 'weak'), (sft_label(cold_start_step), 'sft_step20'), (sft_label(sft_steps), 'sft_step60')]


def probe_roles(probe: dict) -> tuple:
    """A probe's rows (``results['15.6']['probe']``) -> (cold-start label, last-step label), ordered by step; the
    same label twice when the cold start is the last step. KeyError when it has no SFT row."""
    steps = sorted((int(m.group(1)), key) for key in probe if (m := _SFT.match(key)))
    if not steps:
        raise KeyError('no SFT checkpoint in the probe')
    return steps[0][1], steps[-1][1]
