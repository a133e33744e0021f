"""The lean sampling path of Llama models (``policies/llama_sampler.py``, ``policies/native.py``): cached logits equal a
full forward, LoRA adapters merged for sampling follow the trained ones, the compiled kernels compute what torch does,
and a rollout's behaviour log-probs are the trainer's to bfloat16's rounding. Nothing is downloaded: a random Llama
saved as a model folder, and SmolLM2 where its wheel is installed."""
from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip('transformers')
pytest.importorskip('peft')

import agentrl as arl  # noqa: E402
from agentrl.policies import llama_sampler, native  # noqa: E402
from agentrl.policies.hf import HFCache, make_policy  # noqa: E402
from agentrl.policies.pretrained import PretrainedError, load_pretrained, smollm2_file  # noqa: E402

from feeding import feed_schedules  # noqa: E402
from hfkit import tiny_llama_folder  # noqa: E402

TRAIN = arl.make_tasks('train')


@pytest.fixture(scope='module')
def tiny_folder(tmp_path_factory):
    """A random Llama with grouped key/value heads (4 query heads, 2 key/value heads) and a ChatML tokenizer."""
    return tiny_llama_folder(tmp_path_factory.mktemp('tiny-llama'), max_positions=512)


def perturbed(policy, seed=0, size=0.05):
    """``policy`` with its adapters moved off zero (a fresh adapter's B matrix is 0: the policy would be the base)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(size * torch.randn(p.shape, generator=g))
    return policy


def episodes(renderer, n=6):
    kinds = ('oracle', 'random', 'blind')
    return [arl.scripted_rollout(arl.scripted_policy(kinds[i % 3], seed=i), arl.BugFixEnv(), TRAIN[i], renderer)
            for i in range(n)]


def cached_vs_full(policy, trajs, mode, leave_at=None):
    """Feed ``trajs`` through ``policy``'s cache on a ``mode`` schedule -> (largest |cached - full| logit over every
    fed step, the cache). At step ``leave_at`` the odd rows leave the batch, as finished episodes do."""
    rows = list(range(len(trajs)))
    worst = 0.0
    with torch.no_grad():
        full = [policy(t.ids[None])[0] for t in trajs]  # (T, V) each: a causal model's logits at every prefix
        cache = policy.new_cache(len(trajs))
        schedules = feed_schedules(trajs, mode, random.Random(0))
        for r in range(max(len(s) for s in schedules)):
            if r == leave_at:
                keep = [i for i, b in enumerate(rows) if b % 2 == 0]
                cache.keep(torch.tensor(keep))
                rows = [rows[i] for i in keep]
            chunks = [schedules[b][r] if r < len(schedules[b]) else (0, 0) for b in rows]
            n_new = torch.tensor([e - s for s, e in chunks])
            if not int(n_new.sum()):
                continue
            ids = torch.zeros(len(rows), max(int(n_new.max()), 1), dtype=torch.long)
            for i, (b, (s, e)) in enumerate(zip(rows, chunks)):
                ids[i, :e - s] = trajs[b].ids[s:e]
            logits = policy.forward_cached(ids, n_new, cache)
            for i, (b, (s, e)) in enumerate(zip(rows, chunks)):
                if e > s:
                    worst = max(worst, (logits[i] - full[b][e - 1]).abs().max().item())
                else:
                    assert logits[i].abs().max().item() == 0.0  # a row that is not fed gets zeros
    return worst, cache


@pytest.mark.parametrize('mode', ['turns', 'tokens', 'ragged'])
def test_the_lean_cache_gives_the_full_forwards_logits_with_grouped_heads_and_adapters(tiny_folder, mode):
    policy = perturbed(load_pretrained(tiny_folder, dtype='fp32', device='cpu', lora_rank=4))
    assert policy.lean_reason() is None
    worst, cache = cached_vs_full(policy, episodes(policy.renderer()), mode, leave_at=3)
    assert isinstance(cache, llama_sampler.LockstepCache) and cache.capacity % llama_sampler.BLOCK == 0
    assert worst <= 1e-4, worst


def test_sampling_weights_follow_training_and_adapter_switches(tiny_folder):
    policy = perturbed(load_pretrained(tiny_folder, dtype='fp32', device='cpu', lora_rank=4))
    renderer = policy.renderer()
    trajs = episodes(renderer, 4)
    assert cached_vs_full(policy, trajs, 'turns')[0] <= 1e-4
    before = policy._sampler
    arl.sft_train(policy, trajs, renderer, steps=2, lr=1e-2, batch_size=4)  # the adapters move: rebuilt at the next cache
    assert cached_vs_full(policy, trajs, 'turns')[0] <= 1e-4 and policy._sampler is not before
    policy.new_adapter()
    arl.sft_train(policy, trajs, renderer, steps=2, lr=1e-2, batch_size=4)
    with policy.adapter_off():  # DPO's reference: the newest adapter off, in sampling too
        assert cached_vs_full(policy, trajs, 'turns')[0] <= 1e-4
    assert cached_vs_full(policy, trajs, 'turns')[0] <= 1e-4


def test_a_model_the_lean_path_does_not_read_keeps_transformers_forward(tok):
    gpt2 = make_policy('gpt2', tok)
    assert gpt2.lean_reason() == 'gpt2 is not a Llama' and isinstance(gpt2.new_cache(2), HFCache)
    llama = make_policy('llama', tok)
    llama.lean_decoding = False
    assert llama.lean_reason() == 'lean_decoding is off' and isinstance(llama.new_cache(2), HFCache)


def test_at_most_kept_policies_hold_sampling_weights(tiny_folder):
    policies = [load_pretrained(tiny_folder, dtype='fp32', device='cpu', lora_rank=4, seed=s) for s in range(3)]
    for p in policies:
        p.new_cache(1)
    held = [p._sampler is not None for p in policies]
    assert held == [False, True, True] and llama_sampler.KEPT == 2


def test_the_native_kernels_compute_what_torch_computes(tiny_folder, monkeypatch):
    if native.kernels() is None:
        pytest.skip(f'the decoding kernels are not built here: {native.why_not()}')
    policy = perturbed(load_pretrained(tiny_folder, dtype='bf16', device='cpu', lora_rank=4))
    trajs = episodes(policy.renderer())
    got = {}
    for kind in ('native', 'torch'):
        if kind == 'torch':
            monkeypatch.setattr(native, 'kernels', lambda: None)
        with torch.no_grad():
            cache = policy.new_cache(len(trajs))
            prompts = [t.ids[:20] for t in trajs]
            out = [policy.forward_cached(torch.stack(prompts), torch.full((len(trajs),), 20), cache)]  # a chunk
            for i in range(20, 40):  # then one token a row: the decoding kernel
                out.append(policy.forward_cached(torch.stack([t.ids[i:i + 1] for t in trajs]),
                                                 torch.ones(len(trajs), dtype=torch.long), cache))
        got[kind] = torch.log_softmax(torch.stack(out), -1)
    with torch.no_grad():
        full = torch.log_softmax(torch.stack([policy(t.ids[None, :40])[0, 19:40] for t in trajs], 1), -1)
    # both round to bfloat16 in their own order: each within bf16's reach of the full forward, and of each other
    for kind, lp in got.items():
        assert (lp - full).abs().max().item() < 0.05, kind
    assert (got['native'] - got['torch']).abs().max().item() < 0.05


def test_smollm2_samples_with_the_trainers_log_probs_to_bf16_rounding():
    try:
        smollm2_file()
    except PretrainedError as e:
        pytest.skip(str(e))
    policy = perturbed(load_pretrained('smollm2', lora_rank=16, quiet=True), size=0.005)
    assert policy.lean_reason() is None and policy.precision.dtype == 'bf16' or policy.precision.dtype == 'fp32'
    renderer = policy.renderer()
    tasks = TRAIN[:3]  # three episodes of about 250 tokens: several hundred of the policy's tokens compared
    trajs = arl.rollout_batch(policy, [arl.BugFixEnv() for _ in tasks], tasks, renderer,
                              generator=torch.Generator().manual_seed(0))
    batch = arl.collate(trajs, renderer.pad_id)
    mask = batch['action_mask'].bool()
    with torch.no_grad():
        trainer = arl.sequence_log_probs(policy, batch['ids'], batch['lengths'], mask=batch['action_mask'])
    gap = (trainer - batch['logprobs'])[mask].abs()
    assert gap.mean().item() < 0.05 and gap.max().item() < 1.0, (gap.mean().item(), gap.max().item())
