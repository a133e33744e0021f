"""``agentrl bench --policy smollm2``: what a pretrained language model costs in agentrl, against bare ``transformers``.

The policy is the pretrained model (``pretrained.load_pretrained``: LoRA adapters of ``lora_rank``, the precision
``precision.resolve`` picks) after ``sft_steps`` oracle SFT steps on the chapter's gym, so its episodes are the short,
valid ones a chapter run samples. Three comparisons, each interleaved (one warm-up call of each side, then rounds in
alternating order) with the median of the per-round ratios as its figure (``timing.py``):

(1) ``engine_vs_generate_loop``: episodes/s of ``rollout_batch`` (one key/value cache per episode, the output layer
    only at the rows that sample) over those of the plain ``transformers`` agent loop (``hf_loop.py``: one batched
    ``generate`` per turn over every live conversation), on the same episodes in the same precision.
(2) ``sft_step_vs_bare``: seconds of one ``sft_train`` step (collate, masked NLL, backward, AdamW) over one bare
    ``transformers`` step of the same batch: the model's own forward (logits at every position), the masked
    cross-entropy, backward and AdamW on the same trained weights, in the same precision.
(3) ``bf16_vs_fp32``: seconds of the same SFT step, and of one cached decoding step (every episode of (1) sampling a
    token), in float32 over bfloat16 autocast (a second copy of the model in float32): the speed the automatic
    choice of ``precision.resolve`` buys or would cost on this machine.
(4) ``decode_vs_matmuls``: how far a cached step is from its arithmetic. One decoding step of ``limit_rows`` rows,
    one new token each after ``limit_cached`` cached tokens (``forward_cached``, the engine's call), over the same
    step's weight products alone: each weight matrix of the model (every projection of every layer, and the output
    layer) multiplied by an input of those rows, in the precision the step runs in (``matmul_products``). 1.0 would
    be a step that costs nothing but its products. ``prefill_vs_matmuls`` does the same for a prefill chunk of
    ``limit_chunk`` tokens a row (a tool's reply). Both in the policy's precision and in the other one.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ...recipes.sft import sft_train
from ...rendering.trajectory import collate
from ...rollouts.engine import scripted_rollout
from .hf_loop import CHAPTER, bench_engine_vs_generate
from .timing import pair_ratio, timed_interleaved


def bare_step_fn(policy, batch, lr: float):
    """One bare ``transformers`` SFT step on ``batch``: the model's forward (every position's logits), the masked
    cross-entropy, backward, AdamW on the trained weights, under the policy's autocast."""
    model, ids, mask = policy.model, batch['ids'], batch['action_mask']  # (B, T), (B, T-1)

    def step():
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        with policy.precision.autocast():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, :-1].float()  # (B, T-1, V)
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction='none')
        loss = (nll.view_as(mask) * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def ours_step_fn(policy, trajs, tok, lr: float):
    """One step of ``sft_train`` on exactly ``trajs`` (batch = all of them, drawn with replacement as the recipe does)."""
    def step():
        return sft_train(policy, trajs, tok, steps=1, lr=lr, batch_size=len(trajs), seed=0)[0]
    return step


def decode_step_fn(policy, batch: int, prompt_len: int, seed: int = 0):
    """One cached decoding step of ``batch`` rows after a prefill of ``prompt_len`` tokens (prefill not timed)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(policy.vocab_size, (batch, prompt_len), generator=g)

    def step():
        cache = policy.new_cache(batch)
        with torch.no_grad():
            policy.forward_cached(ids, torch.full((batch,), prompt_len), cache)
            t0 = time.perf_counter()
            policy.forward_cached(ids[:, :1], torch.ones(batch, dtype=torch.long), cache)
        return time.perf_counter() - t0
    return step


def matmul_products(policy, rows: int, dtype: torch.dtype):
    """The weight products of one step of ``rows`` tokens -> a callable that multiplies each weight matrix of
    ``policy``'s model (every linear layer, LoRA adapters merged into their layer as the step uses them, and the
    output layer) by an input of ``rows`` rows in ``dtype``, one product per matrix (``x @ W.T``)."""
    import torch.nn.functional as F
    from ...policies.llama_sampler import _effective_weight, _lora_layer
    head = policy.model.get_output_embeddings()
    inside = lambda name: 'lora_' in name or name.endswith('base_layer')  # noqa: E731  (a LoRA layer's parts)
    mats = [_effective_weight(m).to(dtype) for name, m in policy.model.named_modules()
            if _lora_layer(m) is not None or (isinstance(m, torch.nn.Linear) and not inside(name) and m is not head)]
    mats.append(head.weight.detach().to(dtype))
    g = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(rows, n, generator=g).to(dtype) for n in {w.shape[1] for w in mats}}

    @torch.no_grad()
    def products():
        for w in mats:
            F.linear(inputs[w.shape[1]], w)
    return products


def cached_step_fn(policy, rows: int, cached: int, chunk: int = 1, seed: int = 0):
    """One ``forward_cached`` call of ``chunk`` new tokens on each of ``rows`` rows after ``cached`` tokens (random
    ids): the cache is filled once and rewound before each call, so every call does the same work."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(policy.vocab_size, (rows, cached + chunk), generator=g)
    cache = policy.new_cache(rows)
    with torch.no_grad():
        policy.forward_cached(ids[:, :cached], torch.full((rows,), cached), cache)
    start, n_new = cache.lengths.clone(), torch.full((rows,), chunk)

    @torch.no_grad()
    def step():
        cache.lengths = start.clone()  # rewind: the same slots are written and read again
        return policy.forward_cached(ids[:, cached:], n_new, cache)
    return step


def limit_ratios(policy, repeats: int, rows: int, cached: int, chunk: int) -> dict:
    """(4): a decoding step and a prefill chunk against their weight products, interleaved -> the ratios."""
    dtype = policy.sampling_dtype
    out = {}
    for name, width in (('decode', 1), ('prefill', chunk)):
        s = timed_interleaved({'step': cached_step_fn(policy, rows, cached, width),
                               'products': matmul_products(policy, rows * width, dtype)}, repeats)
        r = pair_ratio(s, 'step', 'products')
        out[name] = {'ratio': r['median'], 'step_seconds': s['median']['step'],
                     'products_seconds': s['median']['products'], 'pairs': r['pairs']}
    return out


def run(source: str = 'smollm2', repeats: int = 3, episodes_per_task: int = 2, sft_steps: int = 20,
        sft_batch: int = 8, lora_rank: int = 16, lr: float = 2e-3, limit_rows: int = 40, limit_cached: int = 250,
        limit_chunk: int = 32, log=print) -> dict:
    """Every comparison of the module docstring -> one JSON-serialisable dict."""
    from ...policies.pretrained import load_pretrained
    t_start = time.perf_counter()
    policy = load_pretrained(source, lora_rank=lora_rank, quiet=True)
    tok = policy.renderer()
    train = CHAPTER.tasks('train')
    demos = [scripted_rollout(CHAPTER.player('oracle'), CHAPTER.make(), t, tok) for t in train]
    log(f'{policy!r}: oracle SFT, {sft_steps} steps of {sft_batch} episodes')
    t0 = time.perf_counter()
    sft_train(policy, demos, tok, steps=sft_steps, lr=lr, batch_size=sft_batch, seed=0)
    setup_s = time.perf_counter() - t0
    tasks = [t for t in train for _ in range(episodes_per_task)]

    log(f'(1) {len(tasks)} episodes: our lockstep engine vs one batched generate per turn, x (1 + {repeats}) each')
    loop = bench_engine_vs_generate(policy, tasks, tok, repeats)
    ours = loop['engine']

    g = torch.Generator().manual_seed(0)
    idx = torch.randint(len(demos), (sft_batch,), generator=g).tolist()
    step_trajs = [demos[i] for i in idx]
    batch = collate(step_trajs, tok.pad_id)
    log(f'(2) SFT step, batch {tuple(batch["ids"].shape)}: sft_train vs a bare transformers forward + backward')
    s2 = timed_interleaved({'ours': ours_step_fn(policy, step_trajs, tok, lr),
                            'bare': bare_step_fn(policy, batch, lr)}, repeats)
    sft_vs_bare = pair_ratio(s2, 'ours', 'bare')

    other = 'fp32' if policy.precision.dtype == 'bf16' else 'bf16'
    log(f'(3) the SFT step and a decoding step ({len(tasks)} rows): {policy.precision.dtype} vs {other}')
    twin = load_pretrained(source, dtype=other, device=policy.precision.device, lora_rank=lora_rank, quiet=True)
    prompt_len = round(ours['mean_tokens'])
    s3 = timed_interleaved({policy.precision.dtype: ours_step_fn(policy, step_trajs, tok, lr),
                            other: ours_step_fn(twin, step_trajs, tok, lr)}, repeats)
    dec = {name: decode_step_fn(p, len(tasks), prompt_len) for name, p in ((policy.precision.dtype, policy), (other, twin))}
    decode = {name: sorted(fn() for _ in range(repeats + 1))[1:] for name, fn in dec.items()}  # a warm-up dropped
    decode_median = {name: sorted(v)[len(v) // 2] for name, v in decode.items()}

    log(f'(4) one cached step of {limit_rows} rows after {limit_cached} tokens (1 token, then a chunk of {limit_chunk}) '
        'vs its weight products, in each precision')
    limits = {p.precision.dtype: limit_ratios(p, max(repeats, 5), limit_rows, limit_cached, limit_chunk)
              for p in (policy, twin)}
    ours_limit = limits[policy.precision.dtype]
    return {
        'policy': repr(policy), 'source': source, 'precision': str(policy.precision),
        'decode_vs_matmuls': ours_limit['decode']['ratio'], 'prefill_vs_matmuls': ours_limit['prefill']['ratio'],
        'limits': limits, 'lean_decoding': policy.lean_reason() or 'on', 'native_kernels': _native_state(),
        'engine_vs_generate_loop': loop['ratio'], 'sft_step_vs_bare': sft_vs_bare['median'],
        'bf16_vs_fp32_sft_step': (s3['median']['fp32'] / s3['median']['bf16']),
        'bf16_vs_fp32_decode_step': decode_median['fp32'] / decode_median['bf16'],
        'engine': loop['engine'], 'generate_loop': loop['generate_loop'],
        'sft_step_seconds': {'ours': s2['median']['ours'], 'bare': s2['median']['bare']},
        'precision_sft_step_seconds': s3['median'], 'decode_step_seconds': decode_median,
        'ratios': {'engine_vs_generate_loop': loop['ratios']['hf_engine_vs_generate_loop'], 'sft_step_vs_bare': sft_vs_bare,
                   'bf16_vs_fp32_sft_step': pair_ratio(s3, 'fp32', 'bf16')},
        'settings': {'repeats': repeats, 'episodes': len(tasks), 'sft_steps': sft_steps, 'sft_batch': sft_batch,
                     'lora_rank': lora_rank, 'lr': lr, 'threads': torch.get_num_threads(), 'setup_seconds': setup_s,
                     'limit_rows': limit_rows, 'limit_cached': limit_cached, 'limit_chunk': limit_chunk},
        'total_seconds': time.perf_counter() - t_start}


def _native_state() -> str:
    from ...policies.native import kernels, why_not
    lib = kernels()
    if lib is None:
        return f'off: {why_not()}'
    return 'on (AVX512-BF16)' if lib.agentrl_avx512_bf16() else 'on (portable C)'


def render(res: dict, say=print) -> None:
    """The three comparisons as lines a person reads."""
    e, g = res['engine'], res['generate_loop']
    say(res['policy'])
    say(f"engine vs generate loop: {res['engine_vs_generate_loop']:.2f}x episodes/s ({e['episodes_per_s']:.2f} vs "
        f"{g['episodes_per_s']:.2f}; {e['episodes']} episodes, {e['mean_turns']:.1f} calls, {e['mean_tokens']:.0f} tokens "
        'each)')
    s = res['sft_step_seconds']
    say(f"SFT step vs bare forward + backward: {res['sft_step_vs_bare']:.2f}x the time ({s['ours']:.2f} s vs "
        f"{s['bare']:.2f} s, the same batch and precision)")
    p, d = res['precision_sft_step_seconds'], res['decode_step_seconds']
    say(f"bf16 vs fp32: SFT step {res['bf16_vs_fp32_sft_step']:.2f}x faster ({p['bf16']:.2f} s vs {p['fp32']:.2f} s), "
        f"decoding step {res['bf16_vs_fp32_decode_step']:.2f}x ({d['bf16'] * 1000:.0f} ms vs {d['fp32'] * 1000:.0f} ms); "
        f"chosen here: {res['precision']}")
    st = res['settings']
    for dtype, lim in res['limits'].items():
        d, f = lim['decode'], lim['prefill']
        say(f"{dtype}: decode_vs_matmuls {d['ratio']:.2f} ({d['step_seconds'] * 1000:.0f} ms vs "
            f"{d['products_seconds'] * 1000:.0f} ms of products; {st['limit_rows']} rows after {st['limit_cached']} "
            f"tokens), prefill_vs_matmuls {f['ratio']:.2f} ({st['limit_chunk']} tokens a row: {f['step_seconds'] * 1000:.0f} "
            f"ms vs {f['products_seconds'] * 1000:.0f} ms)")
    say(f"lean decoding: {res['lean_decoding']}; native kernels: {res['native_kernels']}")
    say(f"{res['total_seconds']:.0f} s, {res['settings']['threads']} torch threads")
