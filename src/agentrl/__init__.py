"""agentrl: post-training language-model agents on text environments, small and fast on a CPU.

``import agentrl as arl`` gives the chapter's API (docs/api.md): the BugFix gym (``make_tasks``,
``FAMILIES``, ``BugFixEnv``, ``scripted_policy``), the renderer (``build_tokenizer``,
``Trajectory``, ``OWNER``, ``collate``), the model (``TinyAgent``, ``sequence_log_probs``,
``entropy_from_logits``), rollouts (``scripted_rollout``, ``rollout_batch``) and the recipes; and
for your own environment, the text-env protocol (``check_text_env``, ``make_env_factory``, the
``env=`` keyword of every recipe: see ``agentrl.envs.protocol``).

Names are loaded on first use (PEP 562), so ``import agentrl`` and the ``agentrl`` command start
without importing torch: ``agentrl --help`` or a mistyped ``--set`` answers in a fraction of a
second. Only the protocol is imported at once: it registers ``agentrl/BugFix-v0`` with Gymnasium.
"""
from importlib import import_module

from . import envs  # noqa: F401 (registers agentrl/BugFix-v0; no torch, no gym code)

_LAZY = {
    'BugFixEnv': 'envs.bugfix', 'FAMILIES': 'envs.bugfix', 'OPS': 'envs.bugfix', 'make_tasks': 'envs.bugfix',
    'scripted_policy': 'envs.bugfix',
    'EnvProtocolError': 'envs', 'EnvStepError': 'envs', 'check_text_env': 'envs', 'episode_texts': 'envs',
    'make_env_factory': 'envs', 'TextEnv': 'envs', 'InvalidCall': 'envs',
    'Arg': 'envs.calls', 'Call': 'envs.calls', 'describe_calls': 'envs.calls',  # calls, described for a language model
    'from_gem': 'envs.adapters.gem', 'from_textarena': 'envs.adapters.textarena',  # other libraries' environments
    'SeedTask': 'envs.adapters.seeds', 'seed_splits': 'envs.adapters.seeds', 'seed_tasks': 'envs.adapters.seeds',
    'load_model': 'policies.checkpoint', 'save_checkpoint': 'policies.checkpoint',
    'JsonlLogger': 'loggers', 'Logger': 'loggers', 'MemoryLogger': 'loggers', 'TensorBoardLogger': 'loggers',
    'open_run': 'loggers', 'read_jsonl': 'loggers',
    'TinyAgent': 'policies.tinyagent', 'TinyAgentConfig': 'policies.tinyagent', 'entropy_from_logits': 'policies.scoring', 'sequence_log_probs': 'policies.scoring',
    'HFPolicy': 'policies.hf', 'ChatRenderer': 'rendering.chat', 'Policy': 'rendering.protocols',  # transformers policies, chat templates
    'packed_forward': 'policies.packing',  # a padded batch through the decoder as one packed row (TRL's loss)
    'load_pretrained': 'policies.pretrained',  # a pretrained model offline: 'smollm2', a model folder or a .gguf file
    'check_rendering': 'recipes.diagnostics', 'describe': 'recipes.diagnostics',
    'informative_fraction': 'recipes.diagnostics', 'probe': 'recipes.diagnostics', 'strip_wrappers': 'recipes.diagnostics',
    'dpo_loss': 'recipes.dpo', 'episode_logp': 'recipes.dpo', 'make_pairs': 'recipes.dpo', 'preference_loss': 'recipes.dpo',
    'train_dpo': 'recipes.dpo',
    'action_entropy': 'recipes.evaluation', 'group_pass': 'recipes.evaluation', 'pass_rate': 'recipes.evaluation',
    'PassAtK': 'recipes.evaluation', 'greedy_pass': 'recipes.evaluation', 'pass_at_k': 'recipes.evaluation',
    'pass_at_k_curve': 'recipes.evaluation', 'pass_at_k_from_episodes': 'recipes.evaluation',
    'GRPOConfig': 'recipes.grpo', 'train_grpo': 'recipes.grpo',
    'train_online_dpo': 'recipes.online_dpo',
    'reinforce_step': 'recipes.reinforce', 'train_rl': 'recipes.reinforce',
    'cap_per_task': 'recipes.rejection', 'dedup_by_actions': 'recipes.rejection', 'expert_iteration': 'recipes.rejection',
    'family_share': 'recipes.rejection', 'keep_successes': 'recipes.rejection',
    'group_baseline_weights': 'recipes.rft_baseline', 'rft_baseline_iteration': 'recipes.rft_baseline',
    'weighted_sft_loss': 'recipes.rft_baseline',
    'select_sft_checkpoint': 'recipes.select',
    'sft_loss': 'recipes.sft', 'sft_train': 'recipes.sft',
    'star_iteration': 'recipes.star',
    'OWNER': 'rendering.trajectory', 'Trajectory': 'rendering.trajectory', 'collate': 'rendering.trajectory',
    'rollout_batch': 'rollouts.engine', 'rollout_groups': 'rollouts.engine', 'scripted_rollout': 'rollouts.engine',
    'NoSignalWarning': 'recipes.outcomes', 'mean_return': 'recipes.outcomes', 'success_rate': 'recipes.outcomes',
    'with_env_workers': 'envs.protocol',
    'Tokenizer': 'rendering.tokenizer', 'build_tokenizer': 'rendering.tokenizer',
    'trl_environment': 'integrations.trl', 'trl_monitors': 'integrations.trl', 'trl_rollout': 'integrations.trl_rollout',  # TRL's GRPOTrainer: environment_factory, rollout_func
}
"""Every public name -> the module (relative to the package) that defines it."""

__all__ = list(_LAZY)
__version__ = '0.4.0'


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value = getattr(import_module(f'.{module}', __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
