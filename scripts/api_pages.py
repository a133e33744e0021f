#!/usr/bin/env python3
"""Write docs/api.md, the API reference: one mkdocstrings directive per public name of ``agentrl``.

usage: python scripts/api_pages.py [--check]

``agentrl._LAZY`` maps every public name to the module that defines it (names are loaded lazily, so
mkdocstrings cannot resolve ``agentrl.NAME`` statically). Each name is documented at that module,
``::: agentrl.<module>.<name>``, in one of the groups below (a layer of the library, with a short
introduction). A public name in no group, or a group naming a name that is not public, stops the
script. ``--check`` writes nothing and exits 1 if docs/api.md is not what the script would write
(``tests/test_docs.py`` checks the page itself).
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'src'))
import agentrl  # noqa: E402  (light: the names load lazily, no torch)

PAGE = ROOT / 'docs' / 'api.md'

# (heading, introduction, modules whose docstring is shown first (without their members: a name's docstring
# that says "see the module docstring" needs it), names in reading order)
GROUPS = [
    ('The text-environment protocol',
     'What an environment gives agentrl: Gymnasium\'s `reset` / `step` with text in and text out. '
     'The library builds one environment per episode from an `env=` factory or Gymnasium id '
     '(`make_env_factory`), renders the episode itself and never shows the environment a token. '
     '`TextEnv` keeps the protocol\'s bookkeeping so a new environment writes only its game; '
     '`check_text_env` checks any environment against every rule and names the one it breaks. '
     'See [Your own environment](own-environment.md) for a worked example.',
     ['agentrl.envs.base'],
     ['TextEnv', 'InvalidCall', 'check_text_env', 'make_env_factory', 'with_env_workers', 'episode_texts',
      'EnvProtocolError', 'EnvStepError']),
    ('The BugFix gym',
     'The chapter\'s environment: 30 buggy Python functions in five bug families, fixed by reading, '
     'editing and submitting, with hidden tests that decide the reward and public tests an exploit can '
     'game. Registered with Gymnasium as `agentrl/BugFix-v0`, the default `env` of every recipe. '
     'See [The BugFix gym](bugfix.md).',
     [],
     ['make_tasks', 'FAMILIES', 'OPS', 'BugFixEnv', 'scripted_policy']),
    ('Environments from other libraries',
     'GEM\'s and TextArena\'s text games behind the protocol: each factory is an `env=` for every recipe, '
     'its tasks are seeds, and the game\'s global seeding never moves the caller\'s random state. Needs the '
     '`gem` or `textarena` extra. See [Environments from other libraries](other-libraries.md).',
     ['agentrl.envs.adapters'],
     ['from_gem', 'from_textarena', 'SeedTask', 'seed_tasks', 'seed_splits']),
    ('Rendering',
     'Episodes become token sequences here, once, for scripted demos and model rollouts alike: '
     'the word-level tokenizer, the `Trajectory` with each token\'s owner and turn, and `collate`, '
     'where the action mask is built (1 exactly where the next token is the policy\'s).',
     [],
     ['Tokenizer', 'build_tokenizer', 'OWNER', 'Trajectory', 'collate']),
    ('The model',
     'The TinyAgent, a 2-layer causal transformer with a key/value cache, the two quantities every '
     'recipe is built from (per-token log-probs and entropies), and safetensors checkpoints that '
     'carry the model config and the vocabulary. See [The TinyAgent](tinyagent.md) for why it looks '
     'the way it does.',
     [],
     ['TinyAgent', 'TinyAgentConfig', 'sequence_log_probs', 'entropy_from_logits', 'save_checkpoint',
      'load_model']),
    ('Rollouts',
     'Episodes played through the renderer: a scripted player\'s (the demos) or a policy\'s, sampled in '
     'lockstep over many environments with a key/value cache and batched prefill of the tool replies.',
     [],
     ['scripted_rollout', 'rollout_batch', 'rollout_groups']),
    ('Recipes: supervised fine-tuning',
     'Masked SFT on multi-turn trajectories (section 15.1): only the policy\'s tokens are trained.',
     [],
     ['sft_loss', 'sft_train']),
    ('Recipes: rejection sampling and expert iteration',
     'Sample, keep what the filter accepts, fine-tune on it, repeat (section 15.3), and the two '
     'remedies of section 15.6 for a kept set that repeats itself.',
     [],
     ['keep_successes', 'expert_iteration', 'dedup_by_actions', 'cap_per_task', 'family_share']),
    ('Recipes: DPO',
     'Preference pairs from the policy\'s own episodes and the DPO loss on summed action log-probs '
     '(section 15.4), with the NLL term of section 15.6 and the IPO and hinge variants.',
     [],
     ['episode_logp', 'dpo_loss', 'preference_loss', 'make_pairs', 'train_dpo']),
    ('Recipes: REINFORCE',
     'Policy gradient with a per-task group-mean baseline (section 15.5), from the weak base or from '
     'an SFT checkpoint.',
     [],
     ['reinforce_step', 'train_rl']),
    ('Recipes beyond the chapter',
     'Recipes of the chapter\'s exercises and the remedies it points to (`agentrl exercise N`, '
     '`agentrl reproduce --extended`): STaR with rationalization, RFT with a group baseline (with a trust region '
     'on its failures), online DPO, SFT checkpoint selection by informative groups, and a clipped '
     'group-policy-gradient trainer.',
     [],
     ['star_iteration', 'group_baseline_weights', 'weighted_sft_loss', 'rft_baseline_iteration',
      'train_online_dpo', 'select_sft_checkpoint', 'GRPOConfig', 'train_grpo']),
    ('Evaluation and diagnostics',
     'What the chapter measures about a policy (pass rates, per group, action entropy, invalid calls, '
     'the share that reads) and the checks of section 15.6: informative groups for RL, a demo '
     'pipeline that forgot the template wrappers, and a token-by-token comparison of two renderings.',
     [],
     ['pass_rate', 'success_rate', 'mean_return', 'NoSignalWarning', 'group_pass', 'action_entropy', 'describe',
      'probe', 'informative_fraction', 'strip_wrappers', 'check_rendering']),
    ('pass@k and greedy decoding',
     'What papers report: pass@k from n samples per task with the unbiased estimator of Chen et al. (2021), '
     'for k = 1, 2, 4, ..., n, per task and averaged over tasks (`pass_at_k_curve` samples the episodes once, '
     '`pass_at_k_from_episodes` scores episodes already sampled, such as `pass_rate`\'s), and the pass of greedy '
     'decoding (temperature 0: the most likely token at every step). Both count successes, a return that reaches '
     'the threshold (`success_rate`), so a game that pays partial credit counts its wins.',
     [],
     ['pass_at_k', 'pass_at_k_curve', 'pass_at_k_from_episodes', 'PassAtK', 'greedy_pass']),
    ('Watching a run',
     'Every recipe takes `loggers=`: a logger is any object with `log(metrics, step)`. The run\'s monitors '
     '(section 15.6) go to a JSON Lines file per run, to TensorBoard with the `tensorboard` extra, or to any '
     'tracker in a few lines. See [Watching a run](watching.md) for the names and what each shows.',
     ['agentrl.loggers'],
     ['Logger', 'open_run', 'JsonlLogger', 'read_jsonl', 'TensorBoardLogger', 'MemoryLogger']),
    ('Real models',
     'The policy protocol the recipes and `rollout_batch` need, `HFPolicy` (any `transformers` causal '
     'LM, rolled out on its own cache) and `ChatRenderer` (any chat template, with owners and the '
     'action mask per token). Needs the `hf` extra. `load_pretrained` loads a pretrained model offline (SmolLM2-135M-'
     'Instruct by name, a model folder or a GGUF file; the `pretrained` extra), with LoRA adapters and the precision '
     'the machine runs fastest; environments describe their calls to it (`Call`, `Arg`, `describe_calls`). '
     'See [Real models](real-models.md).',
     ['agentrl.rendering.protocols', 'agentrl.policies.hf', 'agentrl.policies.pretrained', 'agentrl.policies.lora', 'agentrl.policies.precision', 'agentrl.envs.calls'],
     ['Policy', 'HFPolicy', 'ChatRenderer', 'load_pretrained', 'Call', 'Arg', 'describe_calls']),
    ('Training at scale with TRL',
     'Any agentrl environment and its tasks as TRL\'s `GRPOTrainer` takes them: `trl_environment` for its '
     '`environment_factory` (TRL generates, with vLLM on GPUs, and parses the tool calls), `trl_rollout` for its '
     '`rollout_func` (agentrl\'s engine plays the episodes through any chat template or a word-level vocabulary); '
     '`trl_monitors` logs the chapter\'s monitors TRL does not. Needs the `trl` extra. `packed_forward` makes a '
     'model\'s decoder run TRL\'s padded batch as one packed row: every real token once, the system message every '
     'episode starts with once per batch. See [Training at scale with TRL](trl.md).',
     ['agentrl.integrations.trl', 'agentrl.integrations.trl_rollout', 'agentrl.policies.packing'],
     ['trl_environment', 'trl_rollout', 'trl_monitors', 'packed_forward']),
]

HEADER = """# API reference

`import agentrl as arl` gives every name below as `arl.NAME`. Names load on first use, so each is
documented here at the module that defines it (`agentrl._LAZY` maps one to the other). The chapter's
sections name these functions; [The chapter](chapter.md) says which section uses which.

<!-- Written by scripts/api_pages.py from agentrl._LAZY; edit the script, not this page. -->
"""


def path_of(name: str) -> str:
    return f'agentrl.{agentrl._LAZY[name]}.{name}'


def render() -> str:
    listed = [n for *_, names in GROUPS for n in names]
    public = list(agentrl._LAZY)
    dup = sorted({n for n in listed if listed.count(n) > 1})
    missing = [n for n in public if n not in listed]
    extra = [n for n in listed if n not in agentrl._LAZY]
    if dup or missing or extra:
        sys.exit(f'api_pages.py: groups out of date: in no group {missing}, not public {extra}, twice {dup}')
    out = [HEADER]
    for heading, intro, modules, names in GROUPS:
        out.append(f'## {heading}\n\n{intro}\n')
        for module in modules:
            out.append(f'::: {module}\n    options:\n      show_root_full_path: true\n      members: false\n')
        for name in names:
            out.append(f'::: {path_of(name)}\n')
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--check', action='store_true', help='exit 1 if docs/api.md is out of date; write nothing')
    a = ap.parse_args()
    text = render()
    if a.check:
        current = PAGE.read_text() if PAGE.exists() else ''
        if current != text:
            sys.exit('docs/api.md is out of date: run python scripts/api_pages.py')
        print('docs/api.md is current')
        return
    PAGE.write_text(text)
    print(f'wrote {PAGE.relative_to(ROOT)}: {len(agentrl._LAZY)} names in {len(GROUPS)} groups')


if __name__ == '__main__':
    main()
