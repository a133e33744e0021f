"""``agentrl bench``: rollout, cache and SFT-step throughput, side by side with a Hugging Face peer.

What is measured (each item: one warm-up call, then the median of ``repeats`` timed calls,
``time.perf_counter``):

(a) ``rollout_batch`` over the 20 train tasks x 16 episodes (320, ``BugFixEnv()``, temperature 1,
    a seeded generator) from a fresh TinyAgent and from an oracle-SFT one (weak base on blind and
    random scripted play, 150 steps, then 60 steps on the 20 oracle demos, as in section 15.2):
    episodes/s, tokens/s (every token of the returned trajectories) and sampled (policy) tokens/s.
(b) ``rollout_vs_forward``: rollout seconds / seconds of ONE teacher-forced forward over the same
    trajectories (``model(collate(trajs, pad_id)['ids'])`` under ``no_grad``).
(c) ``kv_cache_speedup``: the same rollouts with ``use_cache=False`` (same model, same generator
    seed), no-cache seconds / cache seconds; the trajectories must be identical. The headline
    figures of (b) and (c) are the SFT model's; ``*_fresh`` are the fresh model's (longer episodes).
(d) ``sampling_vs_hf``: our sampled policy tokens per second of rollout wall time (env and prefill
    work included) / tokens per second of ``GPT2LMHeadModel.generate`` at the same batch size,
    width, depth, heads and vocabulary (random init, nothing downloaded), generating M tokens per
    row after a prompt of our mean prompt length, M = our mean sampled tokens per episode.
    ``sampling_vs_hf_same_shape`` runs our model through the same workload (prefill, then M cached
    sampling steps, no env) to separate the model's speed from the rollout's extra work.
(e) ``sft_step_vs_hf``: padded tokens (B*T) per second of one masked-NLL AdamW step on 32 weak-play
    trajectories, TinyAgent (``sft_loss``) vs the same-size GPT2 (same loss from its logits).

(f) ``hf_engine_vs_generate_loop``: a GPT-2 ``HFPolicy`` of the same shape, trained as in (a), played on the
    same 320 episodes by ``rollout_batch`` (one key/value cache per episode, batched reply prefill) and by the
    plain ``transformers`` agent loop (each turn one batched, left-padded ``generate`` over every live
    conversation, its own cache, none kept across turns): episodes/s of ours / theirs (``experiments/hf_loop.py``);
    ``*_fresh``: the same on the untrained GPT-2, whose episodes run to the turn limit.

``transformers`` is optional (``pip install -e '.[bench]'``); without it the peer rows are skipped.
"""
from __future__ import annotations

import copy
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from ..env import BugFixEnv
from ..model import TinyAgent
from ..policies import scripted_policy
from ..recipes.sft import sft_loss, sft_train
from ..render import OWNER, collate
from ..rollout import rollout_batch, scripted_rollout
from ..tasks import make_tasks
from ..tokenizer import build_tokenizer

PEER_MISSING = ("transformers is not installed: skipping the Hugging Face peer rows "
                "(install it with: pip install -e '.[bench]')")
_POLICY = OWNER['policy']


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed(fn, repeats: int):
    """Call ``fn`` once to warm up, then ``repeats`` times -> (median seconds, all seconds, last result)."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f'repeats must be a positive int, got {repeats!r}')
    fn()
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


# --- setup ----------------------------------------------------------------------------------------

def build_models(n_tasks: int | None = None, weak_steps: int = 150, sft_steps: int = 60, log=_stderr):
    """Tokenizer, train tasks, weak-play trajectories, a fresh TinyAgent and an oracle-SFT one (section 15.2)."""
    tok = build_tokenizer(make_tasks('all'))
    train = make_tasks('train')[:n_tasks]
    weak_play = [scripted_rollout(scripted_policy(kind, seed=s), BugFixEnv(), t, tok)
                 for kind in ['blind', 'random'] for s in range(4) for t in train]
    demos = [scripted_rollout(scripted_policy('oracle'), BugFixEnv(), t, tok) for t in train]
    torch.manual_seed(0)
    fresh = TinyAgent(tok.vocab_size)
    torch.manual_seed(0)
    weak = TinyAgent(tok.vocab_size)
    t0 = time.perf_counter()
    sft_train(weak, weak_play, tok, steps=weak_steps, seed=0)
    sft = copy.deepcopy(weak)
    sft_train(sft, demos, tok, steps=sft_steps, seed=0)
    log(f'setup: weak base {weak_steps} steps + oracle SFT {sft_steps} steps in {time.perf_counter() - t0:.1f} s')
    return {'tok': tok, 'train': train, 'weak_play': weak_play, 'fresh': fresh, 'sft': sft}


# --- (a)-(c) rollouts -----------------------------------------------------------------------------

def _rollout(model, tasks, tok, seed, use_cache=True):
    envs = [BugFixEnv() for _ in tasks]
    return rollout_batch(model, envs, tasks, tok, temperature=1.0,
                         generator=torch.Generator().manual_seed(seed), use_cache=use_cache)


def bench_rollout(model, tasks, tok, repeats: int, seed: int = 0, no_cache: bool = False) -> dict:
    """Rollout throughput, one teacher-forced forward over the result, and optionally the no-cache path."""
    sec, times, trajs = timed(lambda: _rollout(model, tasks, tok, seed), repeats)
    n_tok = sum(len(t) for t in trajs)
    n_pol = sum(int((t.owner == _POLICY).sum()) for t in trajs)
    n_prompt = [int((t.turn == 0).sum()) for t in trajs]
    ids = collate(trajs, tok.pad_id)['ids']

    def forward():
        with torch.no_grad():
            return model(ids)

    fwd, _, _ = timed(forward, repeats)
    out = {'episodes': len(trajs), 'seconds': sec, 'seconds_all': times,
           'episodes_per_s': len(trajs) / sec, 'tokens': n_tok, 'tokens_per_s': n_tok / sec,
           'policy_tokens': n_pol, 'policy_tokens_per_s': n_pol / sec,
           'mean_policy_tokens': n_pol / len(trajs), 'mean_prompt_tokens': sum(n_prompt) / len(trajs),
           'mean_tokens': n_tok / len(trajs), 'mean_turns': sum(int(t.turn.max()) for t in trajs) / len(trajs),
           'pass_rate': sum(t.reward for t in trajs) / len(trajs),
           'forward_shape': list(ids.shape), 'forward_seconds': fwd, 'rollout_vs_forward': sec / fwd}
    if no_cache:
        nc_sec, nc_times, nc_trajs = timed(lambda: _rollout(model, tasks, tok, seed, use_cache=False), repeats)
        same = len(nc_trajs) == len(trajs) and all(torch.equal(a.ids, b.ids) for a, b in zip(trajs, nc_trajs))
        if not same:
            _stderr('WARNING: use_cache=False gave different trajectories than the cached rollout')
        out.update({'no_cache_seconds': nc_sec, 'no_cache_seconds_all': nc_times,
                    'no_cache_episodes_per_s': len(nc_trajs) / nc_sec,
                    'no_cache_tokens_per_s': sum(len(t) for t in nc_trajs) / nc_sec,
                    'no_cache_identical': bool(same), 'kv_cache_speedup': nc_sec / sec})
    out['trajectories'] = trajs
    return out


# --- (d) the peer's sampling ----------------------------------------------------------------------

def hf_model(model, tok, attn: str = 'sdpa'):
    """A randomly initialised GPT2LMHeadModel of the same width, depth, heads and vocabulary (nothing downloaded).

    Dropout is off (TinyAgent has none), so the SFT step compares the same work. GPT2 differs from
    TinyAgent in its details (learned absolute positions, tied head, tanh GELU, no QK-norm or rotary).
    """
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
    transformers.logging.set_verbosity_error()  # no padding advice: the loss masks pads, attention is causal
    c = model.config
    cfg = GPT2Config(vocab_size=c.vocab_size, n_embd=c.d_model, n_layer=c.n_layers, n_head=c.n_heads,
                     n_positions=max(512, c.block_size), bos_token_id=tok.bos_id, eos_token_id=tok.stop_id,
                     pad_token_id=tok.pad_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # no dropout, like ours
    torch.manual_seed(0)
    try:
        return GPT2LMHeadModel._from_config(cfg, attn_implementation=attn)
    except (TypeError, AttributeError):  # older transformers
        cfg._attn_implementation = attn
        return GPT2LMHeadModel(cfg)


def bench_hf_generate(model, tok, batch: int, prompt_ids: torch.Tensor, new_tokens: int, repeats: int,
                      attns=('sdpa', 'eager')) -> dict:
    """GPT2 ``generate`` (sampling, KV cache) of ``new_tokens`` tokens per row -> the fastest attention's figures."""
    assert prompt_ids.shape[0] == batch
    best, by_attn = None, {}
    for attn in attns:
        hf = hf_model(model, tok, attn).eval()

        def gen():
            torch.manual_seed(0)
            with torch.no_grad():
                return hf.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=True,
                                   max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=True,
                                   pad_token_id=tok.pad_id, top_k=0, top_p=1.0, temperature=1.0)

        sec, times, out = timed(gen, repeats)
        assert out.shape == (batch, prompt_ids.shape[1] + new_tokens), out.shape
        row = {'attn': attn, 'seconds': sec, 'seconds_all': times, 'batch': batch,
               'prompt_tokens': prompt_ids.shape[1], 'new_tokens': new_tokens,
               'generated_tokens': batch * new_tokens, 'generated_tokens_per_s': batch * new_tokens / sec}
        by_attn[attn] = sec
        if best is None or sec < best['seconds']:
            best = row
    best['by_attn'] = by_attn
    return best


@torch.no_grad()
def _sample_same_shape(model, prompt_ids, new_tokens, seed=0, temperature=1.0):
    """rollout_batch's sampling loop without the env: prefill ``prompt_ids`` then sample ``new_tokens`` per row."""
    B, L = prompt_ids.shape
    gen = torch.Generator().manual_seed(seed)
    cache = model.new_cache(B)
    logits = model.forward_cached(prompt_ids, torch.full((B,), L), cache)  # (B, V)
    one = torch.ones(B, dtype=torch.long)
    out = []
    for i in range(new_tokens):
        logp = torch.log_softmax(logits / temperature, dim=-1)
        t = torch.multinomial(logp.exp(), 1, generator=gen)  # (B, 1)
        out.append(t)
        if i < new_tokens - 1:
            logits = model.forward_cached(t, one, cache)
    return torch.cat(out, dim=1)


def bench_sample_same_shape(model, prompt_ids, new_tokens, repeats: int) -> dict:
    """Our model alone on the peer's workload (one prompt prefill, then ``new_tokens`` cached sampling steps)."""
    model.eval()
    sec, times, out = timed(lambda: _sample_same_shape(model, prompt_ids, new_tokens), repeats)
    return {'seconds': sec, 'seconds_all': times, 'generated_tokens': out.numel(),
            'generated_tokens_per_s': out.numel() / sec}


# --- (e) SFT step ---------------------------------------------------------------------------------

def _masked_nll(logits, batch):
    """The sft_loss objective from logits: masked mean NLL of the next token over policy tokens."""
    ids, mask = batch['ids'], batch['action_mask']
    logits = logits[:, :-1]  # (B, T-1, V)
    B, T1, V = logits.shape
    logp = -F.cross_entropy(logits.reshape(B * T1, V), ids[:, 1:].reshape(B * T1), reduction='none').view(B, T1)
    return -(logp * mask).sum() / mask.sum()


def _step_timer(model, loss_fn, lr=3e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()

    def step():
        loss = loss_fn()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def bench_sft_step(model, batch, repeats: int) -> dict:
    """One sft_loss + backward + AdamW step on TinyAgent (a copy of ``model``) -> padded tokens/s."""
    m = copy.deepcopy(model)
    sec, times, _ = timed(_step_timer(m, lambda: sft_loss(m, batch)), repeats)
    n = batch['ids'].numel()
    return {'seconds': sec, 'seconds_all': times, 'shape': list(batch['ids'].shape), 'tokens_per_s': n / sec}


def bench_hf_sft_step(model, tok, batch, repeats: int, attns=('sdpa', 'eager')) -> dict:
    """The same masked NLL + backward + AdamW step on the same-size GPT2 -> the fastest attention's figures."""
    best, by_attn = None, {}
    n = batch['ids'].numel()
    for attn in attns:
        hf = hf_model(model, tok, attn)
        sec, times, _ = timed(_step_timer(hf, lambda: _masked_nll(hf(batch['ids']).logits, batch)), repeats)
        row = {'attn': attn, 'seconds': sec, 'seconds_all': times, 'shape': list(batch['ids'].shape),
               'tokens_per_s': n / sec}
        by_attn[attn] = sec
        if best is None or sec < best['seconds']:
            best = row
    best['by_attn'] = by_attn
    return best


# --- the whole benchmark --------------------------------------------------------------------------

def _loadavg():
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def machine_info(threads: int) -> dict:
    return {'loadavg_1m_start': _loadavg(), 'torch': torch.__version__, 'threads': threads, 'torch_threads': torch.get_num_threads(),
            'cpu_count': os.cpu_count(), 'python': platform.python_version(), 'platform': platform.platform(),
            'processor': platform.processor() or platform.machine(),
            'transformers': _transformers_version()}


def _transformers_version():
    try:
        import transformers
        return transformers.__version__
    except ImportError:
        return None


def run(repeats: int = 5, threads: int = 2, n_tasks: int | None = None, episodes_per_task: int = 16,
        weak_steps: int = 150, sft_steps: int = 60, sft_batch: int = 32, peer: bool = True,
        peer_attns=('sdpa', 'eager'), log=_stderr) -> dict:
    """Run every measurement -> one dict (JSON-serialisable) with the four ratios at the top level.

    ``threads`` sets ``torch.set_num_threads`` for the run (restored afterwards; 0 leaves it alone).
    The peer ratios are ``None`` when ``peer`` is false or transformers is missing.
    """
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run(repeats, threads or before, n_tasks, episodes_per_task, weak_steps, sft_steps, sft_batch, peer,
                    peer_attns, log)
    finally:
        torch.set_num_threads(before)


def _run(repeats, threads, n_tasks, episodes_per_task, weak_steps, sft_steps, sft_batch, peer, peer_attns, log):
    t_start = time.perf_counter()
    load = _loadavg()
    if load is not None and load > 0.5:
        log(f'note: 1-minute load average is {load:.1f} on {os.cpu_count()} CPUs; other processes will make the '
            f'figures noisy (many small ops per rollout step make rollouts suffer most)')
    machine = machine_info(threads)
    setup = build_models(n_tasks, weak_steps, sft_steps, log)
    tok, train = setup['tok'], setup['train']
    tasks = [t for t in train for _ in range(episodes_per_task)]
    log(f'rollouts: fresh TinyAgent, cached and no-cache, {len(tasks)} episodes x (1 + {repeats}) each')
    fresh = bench_rollout(setup['fresh'], tasks, tok, repeats, no_cache=True)
    log(f'rollouts: oracle-SFT TinyAgent, cached and no-cache, {len(tasks)} episodes x (1 + {repeats}) each')
    sft = bench_rollout(setup['sft'], tasks, tok, repeats, no_cache=True)
    trajs = sft.pop('trajectories')
    fresh.pop('trajectories')
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(len(setup['weak_play']), (sft_batch,), generator=g).tolist()
    step_batch = collate([setup['weak_play'][i] for i in idx], tok.pad_id)
    log(f'SFT step: TinyAgent, batch {tuple(step_batch["ids"].shape)}')
    ours_step = bench_sft_step(setup['sft'], step_batch, repeats)

    res = {'rollout_vs_forward': sft['rollout_vs_forward'], 'kv_cache_speedup': sft['kv_cache_speedup'],
           'sampling_vs_hf': None, 'sft_step_vs_hf': None,
           'rollout_vs_forward_fresh': fresh['rollout_vs_forward'], 'kv_cache_speedup_fresh': fresh['kv_cache_speedup'],
           'sampling_vs_hf_same_shape': None, 'no_cache_identical': sft['no_cache_identical'] and fresh['no_cache_identical'],
           'episodes_per_s': sft['episodes_per_s'], 'tokens_per_s': sft['tokens_per_s'],
           'policy_tokens_per_s': sft['policy_tokens_per_s'],
           'rollout_fresh': fresh, 'rollout_sft': sft, 'sft_step': ours_step,
           'hf_generate': None, 'hf_sft_step': None, 'ours_same_shape': None, 'peer_skipped': None,
           'hf_engine_vs_generate_loop': None, 'hf_engine_vs_generate_loop_fresh': None, 'hf_engine': None,
           'settings': {'repeats': repeats, 'episodes': len(tasks), 'tasks': len(train),
                        'episodes_per_task': episodes_per_task, 'weak_steps': weak_steps, 'sft_steps': sft_steps,
                        'sft_batch': sft_batch, 'temperature': 1.0},
           'machine': machine}
    if peer and not have_transformers():
        log(PEER_MISSING)
        res['peer_skipped'] = PEER_MISSING
    elif peer:
        M = max(1, round(sft['mean_policy_tokens']))
        L = max(1, round(sft['mean_prompt_tokens']))
        L = min(L, min(len(t) for t in trajs))
        prompt = torch.stack([t.ids[:L] for t in trajs])  # (B, L): the first L tokens of each of our episodes
        log(f'peer: GPT2LMHeadModel.generate, batch {len(trajs)}, prompt {L}, {M} new tokens ({" and ".join(peer_attns)})')
        hf_gen = bench_hf_generate(setup['sft'], tok, len(trajs), prompt, M, repeats, peer_attns)
        log(f'ours on the same shape: prefill {L}, then {M} cached sampling steps, batch {len(trajs)}')
        same = bench_sample_same_shape(setup['sft'], prompt, M, repeats)
        log(f'peer: GPT2 SFT step, batch {tuple(step_batch["ids"].shape)} ({" and ".join(peer_attns)})')
        hf_step = bench_hf_sft_step(setup['sft'], tok, step_batch, repeats, peer_attns)
        res.update({'hf_generate': hf_gen, 'hf_sft_step': hf_step, 'ours_same_shape': same,
                    'sampling_vs_hf_same_shape': same['generated_tokens_per_s'] / hf_gen['generated_tokens_per_s'],
                    'sampling_vs_hf': sft['policy_tokens_per_s'] / hf_gen['generated_tokens_per_s'],
                    'sft_step_vs_hf': ours_step['tokens_per_s'] / hf_step['tokens_per_s']})
        # (f) issue 13: the same HFPolicy GPT-2 through our lockstep engine vs one batched generate per turn
        from . import hf_loop
        loop = hf_loop.run(tok, train, setup['weak_play'], weak_steps, sft_steps, repeats, timed, episodes_per_task, log)
        res.update({'hf_engine': loop, 'hf_engine_vs_generate_loop': loop['sft']['ratio'],
                    'hf_engine_vs_generate_loop_fresh': loop['fresh']['ratio']})
    res['machine']['loadavg_1m_end'] = _loadavg()
    res['total_seconds'] = time.perf_counter() - t_start
    return res


# --- output ---------------------------------------------------------------------------------------

def _f(x, unit=''):
    if x is None:
        return '-'
    if isinstance(x, bool):
        return 'yes' if x else 'NO'
    if isinstance(x, str):
        return x
    if abs(x) >= 100:
        return f'{x:,.0f}{unit}'
    if abs(x) >= 1:
        return f'{x:.2f}{unit}'
    return f'{x:.4f}{unit}'


def render(res: dict, console=None) -> None:
    """Print the result as a rich table (figure, ours, peer, ratio)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    fr, sf, hg, hs, st = res['rollout_fresh'], res['rollout_sft'], res['hf_generate'], res['hf_sft_step'], res['sft_step']
    s, m = res['settings'], res['machine']
    load = m.get('loadavg_1m_start')
    t = Table(title=f"agentrl bench: {s['episodes']} episodes ({s['tasks']} tasks x {s['episodes_per_task']}), "
                    f"median of {s['repeats']} | torch {m['torch']}, {m['torch_threads']} threads, "
                    f"{m['cpu_count']} CPUs" + (f', load {load:.1f}' if load is not None else ''))
    for col, just in (('figure', 'left'), ('ours', 'right'), ('peer', 'right'), ('ratio', 'right')):
        t.add_column(col, justify=just)
    for label, r in (('oracle-SFT TinyAgent', sf), ('fresh TinyAgent', fr)):
        t.add_section()
        t.add_row(f'[bold]rollout_batch, {label}[/bold]', '', '', '')
        t.add_row('  episodes/s', _f(r['episodes_per_s']), '', '')
        t.add_row('  tokens/s (all trajectory tokens)', _f(r['tokens_per_s']), '', '')
        t.add_row('  sampled policy tokens/s', _f(r['policy_tokens_per_s']), '', '')
        t.add_row('  tokens / policy tokens / turns per episode; pass rate',
                  f"{r['mean_tokens']:.1f} / {r['mean_policy_tokens']:.1f} / {r['mean_turns']:.1f}; "
                  f"{r['pass_rate']:.2f}", '', '')
        t.add_row(f"  rollout s | one forward {tuple(r['forward_shape'])} s [bold](rollout_vs_forward)[/bold]",
                  _f(r['seconds'], ' s'), _f(r['forward_seconds'], ' s'), _f(r['rollout_vs_forward'], 'x'))
        t.add_row('  cached s | no-cache s [bold](kv_cache_speedup)[/bold]', _f(r['seconds'], ' s'),
                  _f(r['no_cache_seconds'], ' s'), _f(r['kv_cache_speedup'], 'x'))
        t.add_row('  no-cache trajectories identical', _f(r['no_cache_identical']), '', '')
    t.add_section()
    if hg is not None:
        same = res['ours_same_shape']
        t.add_row(f"[bold]sampling vs HF GPT2.generate[/bold] (batch {hg['batch']}, prompt {hg['prompt_tokens']}, "
                  f"{hg['new_tokens']} new, attn={hg['attn']})", '', '', '')
        t.add_row('  sampled tokens/s: rollout_batch (env, replies) | generate [bold](sampling_vs_hf)[/bold]',
                  _f(sf['policy_tokens_per_s']), _f(hg['generated_tokens_per_s']), _f(res['sampling_vs_hf'], 'x'))
        t.add_row('  sampled tokens/s: our model on generate\'s workload | generate',
                  _f(same['generated_tokens_per_s']), _f(hg['generated_tokens_per_s']),
                  _f(res['sampling_vs_hf_same_shape'], 'x'))
        t.add_section()
        t.add_row(f"[bold]SFT step[/bold] (masked NLL + backward + AdamW, batch {tuple(st['shape'])}, "
                  f"GPT2 attn={hs['attn']})", '', '', '')
        t.add_row('  padded tokens/s [bold](sft_step_vs_hf)[/bold]', _f(st['tokens_per_s']), _f(hs['tokens_per_s']),
                  _f(res['sft_step_vs_hf'], 'x'))
    if res.get('hf_engine'):
        t.add_section()
        t.add_row('[bold]HFPolicy GPT-2: our lockstep engine | one batched generate per turn[/bold]', '', '', '')
        for key, label in (('sft', 'oracle SFT'), ('fresh', 'fresh')):
            r = res['hf_engine'][key]
            e, g = r['engine'], r['generate_loop']
            name = 'hf_engine_vs_generate_loop' + ('' if key == 'sft' else '_fresh')
            t.add_row(f"  {label}: episodes/s ({e['mean_turns']:.1f} turns, {e['mean_tokens']:.0f} tokens; pass "
                      f"{e['pass_rate']:.2f} | {g['pass_rate']:.2f}) [bold]({name})[/bold]",
                      _f(e['episodes_per_s']), _f(g['episodes_per_s']), _f(r['ratio'], 'x'))
    if hg is None:
        t.add_row(f"[bold]SFT step[/bold] (masked NLL + backward + AdamW, batch {tuple(st['shape'])})", '', '', '')
        t.add_row('  padded tokens/s', _f(st['tokens_per_s']), '-', '-')
    console.print(t)
    if hg is None:
        console.print(f"[yellow]{res.get('peer_skipped') or 'peer rows skipped'}[/yellow]")
    else:
        console.print(f"sampling_vs_hf counts our sampled policy tokens per second of rollout_batch wall time, which "
                      f"also covers the env steps, the prompt and tool-reply prefills ({sf['mean_tokens']:.0f} tokens "
                      f"per episode for {sf['mean_policy_tokens']:.0f} sampled) and a batch that shrinks as episodes "
                      f"end; GPT2.generate prefills a {hg['prompt_tokens']}-token prompt (the first tokens of our "
                      f"episodes) then samples {hg['new_tokens']} tokens on every row (top_k=0, temperature 1). "
                      f"Fastest attention kept: generate {_by(hg)}; SFT step {_by(hs)}.", highlight=False)
    console.print(f"total {res['total_seconds']:.0f} s", highlight=False)


def _by(row):
    return ', '.join(f'{k} {v:.3f} s' for k, v in row['by_attn'].items())


def main(args) -> int:
    import json
    threads = args.threads
    res = run(repeats=args.repeats, threads=threads)
    if args.json:
        sys.stdout.write(json.dumps(res, indent=2, default=float) + '\n')
    else:
        render(res)
    return 0
