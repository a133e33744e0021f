"""The monitors' names: what each means, its TRL name where TRL logs the same quantity, and who reports it.

``METRICS`` is the table the "Watching a run" page of the docs shows (a test checks the two agree);
``RECIPE_METRICS`` lists, per recipe, the names every one of its runs reports (a test runs each recipe and
checks them); ``CONDITIONAL`` the names reported only when the data exists. Names follow TRL's
(``reward``, ``reward_std``, ``frac_reward_zero_std``, ``entropy``, ``grad_norm``, ``num_tokens``,
``rewards/chosen`` ...) where the quantity is the same.
"""
from __future__ import annotations

from typing import NamedTuple


class Metric(NamedTuple):
    """One monitor: its name (the TensorBoard tag, the JSON Lines key), meaning, TRL name, section."""
    name: str
    """The logged name."""
    meaning: str
    """What it measures (one line, for the docs' table)."""
    trl: str
    """TRL's name for the same quantity, or '' if TRL logs none."""
    section: str
    """The chapter section whose advice it serves."""


_STEP = [
    Metric('loss', "the step's training loss (SFT's masked NLL, DPO's loss, the policy-gradient surrogate)", 'loss',
           '15.1'),
    Metric('grad_norm', 'L2 norm of the whole gradient before the optimizer step (mean over a step\'s updates)',
           'grad_norm', '15.6'),
    Metric('entropy', "mean next-token entropy over action tokens, from the loss's own logits", 'entropy', '15.6'),
    Metric('num_tokens', 'tokens (non-padding) trained on so far in the run', 'num_tokens', ''),
    Metric('tokens_per_second', "this step's trained tokens per second of its wall time", '', ''),
    Metric('step_time', 'wall time of the step (or of a round\'s sampling), seconds', 'step_time', ''),
]
_SAMPLE = [
    Metric('reward', 'mean return of the sampled episodes', 'reward', '15.2'),
    Metric('reward_std', 'mean over task groups of the std of their returns', 'reward_std', '15.6'),
    Metric('success_rate', 'share of sampled episodes whose return reaches the threshold', '', '15.3'),
    Metric('frac_reward_zero_std', 'share of task groups whose returns are all equal (they teach nothing)',
           'frac_reward_zero_std', '15.6'),
    Metric('informative', 'share of task groups with reward variance: 1 - frac_reward_zero_std', '', '15.6'),
    Metric('invalid_calls', 'invalid calls per sampled episode (environments that count them)', '', '15.6'),
    Metric('reads_first', 'share of sampled episodes whose first call only looks (BugFix: read)', '', '15.5'),
    Metric('completions/mean_length', 'mean action tokens per sampled episode', 'completions/mean_length', '15.2'),
    Metric('episodes_per_second', 'episodes sampled per second of the step (or of the round\'s sampling)',
           'eps', ''),
    Metric('round', 'the round (expert iteration, STaR, RFT with a baseline, online DPO)', '', '15.3'),
]
_FILTER = [
    Metric('filter/kept', 'episodes the filter kept this round (RFT with a baseline: those of positive weight)', '',
           '15.3'),
    Metric('filter/kept_distinct', "share of the kept episodes with a distinct (task, action sequence)", '', '15.6'),
    Metric('filter/tasks_solved', 'tasks with a kept episode', '', '15.3'),
    Metric('filter/hacks', 'kept episodes that fail the hidden check (the history\'s hacks)', '', '15.6'),
    Metric('filter/hack_share', 'filter/hacks / filter/kept', '', '15.6'),
    Metric('filter/pass_gap', "the filter's pass rate on the sample minus the hidden check's", '', '15.6'),
    Metric('star/rationalized', 'rationalized episodes kept (STaR)', '', '15.3'),
    Metric('star/failed_tasks', 'tasks with no plain success, rationalized this round (STaR)', '', '15.3'),
    Metric('star/forced_rate', 'pass rate of the rationalized rollouts (STaR; rounds with a failed task)', '', '15.3'),
    Metric('rft/negatives', 'episodes trained with a negative weight (RFT with a baseline)', '', '15.3'),
    Metric('rft/min_weight', 'the most negative weight of the round (RFT with a baseline)', '', '15.3'),
]
_DPO = [
    Metric('d_chosen', "mean change of the chosen episodes' log-prob from the reference, before the step", '',
           '15.4'),
    Metric('d_rejected', "mean change of the rejected episodes' log-prob from the reference, before the step", '',
           '15.4'),
    Metric('rewards/chosen', 'beta * d_chosen', 'rewards/chosen', '15.4'),
    Metric('rewards/rejected', 'beta * d_rejected', 'rewards/rejected', '15.4'),
    Metric('rewards/margins', 'mean of rewards/chosen - rewards/rejected over the pairs', 'rewards/margins', '15.4'),
    Metric('rewards/accuracies', "share of pairs whose chosen log-ratio exceeds the rejected's", 'rewards/accuracies',
           '15.4'),
    Metric('logps/chosen', "mean summed action log-prob of the chosen episodes under the policy", 'logps/chosen',
           '15.4'),
    Metric('logps/rejected', "mean summed action log-prob of the rejected episodes under the policy",
           'logps/rejected', '15.4'),
    Metric('pairs', "this round's preference pairs (online DPO)", '', '15.6'),
]
_GRPO = [
    Metric('pg_loss', 'the policy term of the loss alone, no KL or entropy term (mean over the step\'s updates)', '',
           '15.5'),
    Metric('clip_frac', 'share of action tokens whose ratio lies outside [1 - epsilon, 1 + epsilon_high], whatever '
           'the sign of their advantage', '', '15.5'),
    Metric('clip_ratio/low_mean', 'share of action tokens where the clip binds below: ratio < 1 - epsilon and A < 0',
           'clip_ratio/low_mean', '15.5'),
    Metric('clip_ratio/high_mean', 'share of action tokens where the clip binds above: ratio > 1 + epsilon_high and '
           'A > 0', 'clip_ratio/high_mean', '15.5'),
    Metric('clip_ratio/region_mean', 'share of action tokens where the clip binds, below or above (of the episodes, '
           'for sequence-level ratios)', 'clip_ratio/region_mean', '15.5'),
    Metric('clip_ratio/low_min', 'the least share of low clips of an episode', 'clip_ratio/low_min', '15.5'),
    Metric('clip_ratio/high_max', 'the greatest share of high clips of an episode', 'clip_ratio/high_max', '15.5'),
    Metric('cispo_clip_ratio', "share of action tokens whose weight CISPO caps: ratio > epsilon_high and A > 0",
           'cispo_clip_ratio', '15.5'),
    Metric('approx_kl', 'token mean of (ratio - 1) - log ratio: KL(behaviour || new)', '', '15.5'),
    Metric('kl', 'k3 estimate of KL(new || reference), token mean (times the ratio with use_bias_correction_kl)',
           'kl', '15.5'),
    Metric('sampling/sampling_logp_difference/mean', "mean absolute difference of log pi_train and log pi_sample over "
           "the action tokens: the trainer's log-probs before the step's updates against the sampler's",
           'sampling/sampling_logp_difference/mean', '15.5'),
    Metric('sampling/sampling_logp_difference/max', 'the largest absolute difference of log pi_train and log pi_sample',
           'sampling/sampling_logp_difference/max', '15.5'),
    Metric('sampler_gap/outside_share', 'share of action tokens whose pi_train / pi_sample lies outside [0.8, 1.25]',
           '', '15.5'),
    Metric('sampling/importance_sampling_ratio/min', "the least truncated-importance-sampling weight of the step",
           'sampling/importance_sampling_ratio/min', '15.5'),
    Metric('sampling/importance_sampling_ratio/mean', 'the mean truncated-importance-sampling weight',
           'sampling/importance_sampling_ratio/mean', '15.5'),
    Metric('sampling/importance_sampling_ratio/max', 'the greatest truncated-importance-sampling weight',
           'sampling/importance_sampling_ratio/max', '15.5'),
    Metric('dynamic_sampling/episodes', "episodes dynamic sampling drew this step, every batch included", '', '15.5'),
    Metric('dynamic_sampling/batches', 'batches of n_tasks groups dynamic sampling drew this step', '', '15.5'),
]
_PROBE = [
    Metric('probe/reward', 'mean return of the probe episodes', '', '15.6'),
    Metric('probe/informative', 'share of probe groups with reward variance: what chooses the checkpoint', '', '15.6'),
    Metric('probe/entropy', 'action entropy on the probe episodes', '', '15.6'),
    Metric('probe/best_step', 'the SFT step of the best checkpoint so far', '', '15.6'),
]

METRICS = tuple(_STEP + _SAMPLE + _FILTER + _DPO + _GRPO + _PROBE)
"""Every monitor a recipe reports (besides an evaluation's ``eval/...``), in the docs' order."""

_TRAIN = ('loss', 'grad_norm', 'entropy', 'num_tokens', 'tokens_per_second', 'step_time')
_SAMPLED = ('reward', 'reward_std', 'success_rate', 'frac_reward_zero_std', 'informative', 'reads_first',
            'completions/mean_length', 'episodes_per_second', 'step_time')
_KEPT = ('filter/kept', 'filter/kept_distinct', 'filter/tasks_solved')
_PREFERENCE = ('loss', 'grad_norm', 'd_chosen', 'd_rejected', 'rewards/chosen', 'rewards/rejected', 'rewards/margins',
               'rewards/accuracies', 'logps/chosen', 'logps/rejected', 'num_tokens', 'tokens_per_second', 'step_time')

RECIPE_METRICS = {
    'sft_train': _TRAIN,
    'weighted_sft_train': _TRAIN,
    'expert_iteration': _TRAIN + _SAMPLED + _KEPT + ('round',),
    'star_iteration': _TRAIN + _SAMPLED + _KEPT + ('round', 'star/rationalized', 'star/failed_tasks'),
    'rft_baseline_iteration': _TRAIN + _SAMPLED + ('round', 'filter/kept', 'filter/tasks_solved', 'rft/negatives',
                                                   'rft/min_weight'),
    'train_dpo': _PREFERENCE,
    'train_online_dpo': _PREFERENCE + _SAMPLED + ('round', 'pairs'),
    'train_rl': _TRAIN + _SAMPLED + ('sampling/sampling_logp_difference/mean',),
    'train_grpo': _TRAIN + _SAMPLED + ('pg_loss', 'clip_frac', 'approx_kl', 'sampling/sampling_logp_difference/mean',
                                       'sampling/sampling_logp_difference/max', 'sampler_gap/outside_share'),
    'select_sft_checkpoint': _TRAIN + ('probe/reward', 'probe/informative', 'probe/entropy', 'probe/best_step'),
}
"""Per recipe, the names every run of it reports (an ``evaluate`` adds ``eval/...``)."""

CONDITIONAL = {
    'invalid_calls': "the environment's episodes count invalid calls (info['n_invalid'])",
    'filter/hacks': "the environment's episodes report the hidden check (info['hidden_pass'])",
    'filter/hack_share': 'as filter/hacks, and the round kept an episode',
    'filter/pass_gap': 'as filter/hacks',
    'star/forced_rate': 'a round with a task that had no plain success',
    'kl': 'train_grpo with a reference (ref_model, or beta > 0)',
    **{name: "train_grpo with a clipped loss_type (every one but 'cispo')" for name in (
        'clip_ratio/low_mean', 'clip_ratio/high_mean', 'clip_ratio/region_mean', 'clip_ratio/low_min',
        'clip_ratio/high_max')},
    'cispo_clip_ratio': "train_grpo with loss_type='cispo'",
    **{f'sampling/importance_sampling_ratio/{s}': 'train_grpo with vllm_importance_sampling_correction'
       for s in ('min', 'mean', 'max')},
    'dynamic_sampling/episodes': 'train_grpo with dynamic_sampling',
    'dynamic_sampling/batches': 'train_grpo with dynamic_sampling',
}
"""Names reported only when their data exists: name -> when."""
