"""Rollouts: scripted episodes, and lockstep batched sampling from a TinyAgent (sections 15.1-15.2).

Both go through ``render.EpisodeBuilder``, so a demo and a sampled episode of the same calls are token-identical, and
both take each turn with ``envs.play.EpisodeState.step``. Both play any environment of the text-env protocol
(``envs.protocol``) through its checked ``reset`` / ``step``: an environment that raises stops the rollout with an
``EnvStepError`` naming its class, the task, the turn and the call (the original exception chained), and one that
returns malformed values or never ends raises ``EnvProtocolError`` naming the rule.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import torch

from ..envs.play import EpisodeState
from ..envs.protocol import DEFAULT_ENV, EnvStepError, make_env_factory
from ..rendering.protocols import as_renderer
from ..rendering.trajectory import Trajectory, render_play
from ..runtime.threads import small_model_threads


def scripted_rollout(policy, env, task, tok) -> Trajectory:
    """Play one episode of ``task`` with a scripted ``policy`` in ``env`` -> Trajectory (section 15.1).

    Rendered exactly as ``rollout_batch`` renders a model's episode (``render.render_play``). ``tok`` is our
    word-level tokenizer or any renderer (``agentrl.rendering.protocols``), such as ``chat.ChatRenderer``.
    """
    return render_play(env, task, policy, as_renderer(tok))


# --- model rollouts ------------------------------------------------------------------------------

_CELL = 2.0 ** -24
"""The spacing of ``torch.rand``'s float32 draws: each is k / 2**24, k uniform on 0 .. 2**24 - 1 (24 random bits)."""
_AROUND = torch.tensor([[-6 * _CELL, 0.0, 7 * _CELL]])  # (1, 3): where ``sample_next`` checks float32's token


def sample_next(logits: torch.Tensor, temperature: float = 1.0, generator=None):
    """Draw one token per row from softmax(logits / temperature) -> (tokens (m,), their log-probs (m,)).

    Inverse-CDF sampling: one uniform number per row, located in the row's cumulative
    probabilities (``torch.multinomial`` draws one exponential per vocabulary entry, 7x slower
    at the rollout's batch of 320). Exact for any probability: a token of probability 0 is never
    drawn, and every other one is drawn with its probability, however small (the exponential of
    the log-prob returned, in float32, over the row's sum; to float64's rounding). A float32 uniform has 24
    random bits: it picks one of 2**24 equal cells of [0, 1), and float32 cumulative sums round to
    about 6e-8 near 1, so on its own it would draw a token below that with probability 0 or 6e-8.
    The float32 answer stands where the token's interval holds the whole cell with room to spare
    for that rounding (nearly every row); a row near a boundary is settled in float64
    (``_exact_tokens``), drawing a float64 uniform within its cell only if the cell holds a
    boundary (at most V - 1 of the 2**24 cells do). Every other row draws one float32 number.

    ``temperature=0`` is greedy decoding: each row's argmax (of equal maxima, the lowest id), with
    no draw from ``generator``, and the log-prob returned is the chosen token's under
    softmax(logits), the policy at temperature 1, which a trainer scores.
    """
    if temperature == 0:
        tokens = logits.argmax(-1)  # (m,): torch returns the first of equal maxima
        return tokens, torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None]).squeeze(1)
    logp = torch.log_softmax(logits / temperature, dim=-1)  # (m, V)
    p = logp.float().exp()  # (m, V): the probabilities drawn from, in float32 whatever the logits' dtype
    cdf = p.cumsum(-1)  # (m, V): torch sums in float64 and rounds each sum to float32
    u = torch.rand(cdf.shape[0], 1, generator=generator)  # (m, 1): the cell [u, u + _CELL) of [0, 1)
    # the tokens at u and at 6 cells before and 7 after: where all three agree, float32's token is exact (a float32
    # sum, total or product is off by at most a cell's width of the total, so the token's exact interval holds the cell)
    around = torch.searchsorted(cdf, (u + _AROUND) * cdf[:, -1:], right=True)  # (m, 3)
    tokens = around[:, 1:2]  # (m, 1)
    near = (around[:, 0] != around[:, 2]).nonzero().squeeze(1)  # (s,): rows near a boundary
    if len(near):
        tokens[near] = _exact_tokens(p[near], u[near].double(), generator)
    return tokens.squeeze(1), logp.gather(1, tokens).squeeze(1)


def _exact_tokens(p: torch.Tensor, u: torch.Tensor, generator) -> torch.Tensor:
    """The tokens of rows near a boundary: probabilities p (s, V), their cells' starts u (s, 1, float64) -> (s, 1).

    In float64 cumulative sums, the token at the cell's start, unless the cell holds a boundary: then a float64
    uniform places the row within the cell (those rows only, in order), so every token gets exactly its share."""
    cdf = p.cumsum(-1, dtype=torch.float64)  # (s, V)
    total = cdf[:, -1:]  # (s, 1)
    tokens = torch.searchsorted(cdf, u * total, right=True)  # (s, 1): the token at the cell's start
    last = torch.searchsorted(cdf, (u + _CELL) * total)  # (s, 1): the token just before the cell's end
    split = (tokens != last).squeeze(1).nonzero().squeeze(1)  # (r,): rows whose cell holds a boundary
    if len(split):
        w = torch.rand(len(split), 1, generator=generator, dtype=torch.float64)  # (r, 1): where in the cell
        x = (u[split] + w * _CELL) * total[split]  # (r, 1)
        tokens[split] = torch.searchsorted(cdf[split], x, right=True).clamp_(min=tokens[split], max=last[split])
    return tokens.clamp_(max=cdf.shape[1] - 1)


class _CachedDecoder:
    """Feeds chunks through the model's key/value cache: each step costs only the new tokens."""

    def __init__(self, model, batch):
        self.model, self.cache = model, model.new_cache(batch)
        self.fed = False

    def feed(self, chunks):
        """chunks: one list of new token ids per row (may be empty) -> logits (B, V) after each row's last."""
        if not self.fed:  # a policy that can runs the prompts' common start once (``HFPolicy.prefill_shared``)
            self.fed = True
            share = getattr(self.model, 'prefill_shared', None)
            done = share(chunks, self.cache) if share is not None else 0
            chunks = [c[done:] for c in chunks]
        n_new = torch.tensor([len(c) for c in chunks])
        C = max(int(n_new.max()), 1)
        ids = torch.tensor([c + [0] * (C - len(c)) for c in chunks], dtype=torch.long)  # (B, C), padded with 0
        return self.model.forward_cached(ids, n_new, self.cache)

    def keep(self, rows):
        self.cache.keep(rows)


class _FullDecoder:
    """The no-cache reference: re-runs every row's whole prefix at each step (for tests and the benchmark)."""

    def __init__(self, model, batch):
        self.model, self.seqs = model, [[] for _ in range(batch)]

    def feed(self, chunks):
        for s, c in zip(self.seqs, chunks):
            s.extend(c)
        lengths = torch.tensor([len(s) for s in self.seqs])
        T = int(lengths.max())
        ids = torch.tensor([s + [0] * (T - len(s)) for s in self.seqs], dtype=torch.long)  # (B, T), right-padded
        # every column counts as real: the reference computes every position, padding included (a row
        # may end in a sampled id 0, which the model would otherwise take for padding)
        logits = self.model(ids, lengths=torch.full_like(lengths, T))  # (B, T, V)
        return logits[torch.arange(len(self.seqs)), lengths - 1]  # (B, V)

    def keep(self, rows):
        self.seqs = [self.seqs[i] for i in rows.tolist()]


def _check_rollout_args(model, envs, tasks, tok, temperature, generator):
    envs, tasks = list(envs), list(tasks)
    if len(envs) != len(tasks):
        raise ValueError(f'rollout_batch needs one env per task: got {len(envs)} envs and {len(tasks)} tasks')
    if not envs:
        raise ValueError('rollout_batch needs at least one (env, task) pair')
    if (not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not math.isfinite(temperature)
            or temperature < 0):
        raise ValueError(f'temperature must be a finite number >= 0 (0: greedy decoding, the argmax), '
                         f'got {temperature!r}')
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f'generator must be a torch.Generator or None, got {type(generator).__name__}')
    tok = as_renderer(tok)
    if getattr(model, 'vocab_size', tok.vocab_size) != tok.vocab_size:
        raise ValueError(f'model vocab_size {model.vocab_size} does not match the tokenizer ({tok.vocab_size})')
    block = getattr(getattr(model, 'config', None), 'block_size', None)
    for env in envs:
        if block is not None and env.max_tokens > block:
            raise ValueError(f'env max_tokens ({env.max_tokens}) exceeds the model block_size ({block})')
    return envs, tasks, tok


@torch.no_grad()
@small_model_threads
def rollout_batch(model, envs, tasks, tok, temperature: float = 1.0, generator=None, use_cache: bool = True,
                  force=None, env_workers: int | None = None):
    """Sample one episode per (env, task) pair, all in lockstep -> list of Trajectory (section 15.2).

    Every live episode advances together: a turn is one batched forward per sampled call token
    (over every live episode, through a key/value cache), then each env answers its call, then one
    batched prefill appends all the replies. Episodes that end leave the batch. ``logprobs`` hold
    the behaviour log-probs of the sampled tokens (at ``temperature``). The same model, inputs and
    ``generator`` state give the same trajectories. ``temperature=0`` decodes greedily: each token
    is the argmax (of equal maxima, the lowest id) and nothing is drawn from ``generator``; then
    ``logprobs`` hold the chosen tokens' log-probs under the policy at temperature 1 (the behaviour
    chose them with probability 1), so a trainer can still score them. ``use_cache=False`` re-runs each full prefix
    at every step instead (the reference the benchmark compares against). ``model`` is any policy
    and ``tok`` our word-level tokenizer or any renderer (both protocols: ``agentrl.rendering.protocols``).

    ``force`` (default None: plain sampling) lets a caller override tokens, as STaR's
    rationalization does (``recipes.star``): ``force(episode_index, call_so_far)`` is called
    before each call token of every live episode, with the call's tokens so far (a tuple), and
    returns a token id to emit instead of the sampled one, or None to keep the sample. A forced
    token's behaviour log-prob is recorded as 0 (the behaviour policy chose it with probability
    1), and every trajectory gets ``info['forced_positions']``: the indices into ``traj.ids`` of
    its forced tokens (entry ``p - 1`` of ``action_mask`` and ``logprobs`` predicts token ``p``).

    Every step's reward is kept: a trajectory's ``turn_rewards`` are its steps' rewards and its ``reward``
    their sum (the return). ``env_workers`` (default: the environments' own ``env_workers`` attribute, else
    1) > 1 runs each turn's ``reset`` / ``step`` calls of the live episodes in a pool of that many threads,
    for environments whose steps wait (a subprocess, a sandbox, a service). Each environment answers only
    its own call and sampling never waits on their order, so the trajectories are the same, byte for byte,
    as with the serial path; an environment that raises still stops the rollout with its ``EnvStepError``
    (the first in episode order).
    """
    envs, tasks, renderer = _check_rollout_args(model, envs, tasks, tok, temperature, generator)
    if env_workers is None:
        env_workers = getattr(envs[0], 'env_workers', 1)
    if not isinstance(env_workers, int) or isinstance(env_workers, bool) or env_workers < 1:
        raise ValueError(f'env_workers must be a positive int (1: step the environments one after another), '
                         f'got {env_workers!r}')
    if force is not None and not callable(force):
        raise TypeError(f'force must be a callable (episode_index, call_so_far) -> token id or None, '
                        f'got {type(force).__name__}')
    was_training = model.training
    model.eval()
    pool = _EnvPool(min(env_workers, len(envs))) if env_workers > 1 and len(envs) > 1 else None
    try:  # an environment's error leaves the model in the mode it was in
        return _lockstep(model, envs, tasks, renderer, temperature, generator, use_cache, force, pool)
    finally:
        model.train(was_training)
        if pool is not None:
            pool.close()


class _EnvPool:
    """Threads that answer one turn's environment calls: the live episodes split into one contiguous share per
    thread (a handful of tasks per turn, not one per episode, so a fast environment pays almost nothing)."""

    def __init__(self, workers: int):
        self.workers, self.executor = workers, ThreadPoolExecutor(workers, thread_name_prefix='agentrl-env')

    def each(self, fn, items) -> list:
        """``[fn(x) for x in items]`` (results in order; the first error in order is raised)."""
        items = list(items)
        size = -(-len(items) // self.workers)  # ceil
        shares = [items[i:i + size] for i in range(0, len(items), size)]
        return [y for share in self.executor.map(lambda xs: [fn(x) for x in xs], shares) for y in share]

    def close(self):
        self.executor.shutdown(wait=True, cancel_futures=True)


def _each(pool, fn, items) -> list:
    """``[fn(x) for x in items]``, through the pool when there is one."""
    return [fn(x) for x in items] if pool is None else pool.each(fn, items)


def _lockstep(model, envs, tasks, renderer, temperature, generator, use_cache, force, pool=None) -> list:
    """The lockstep loop of ``rollout_batch`` (its arguments checked, the model in eval mode)."""
    forced_at = [[] for _ in envs] if force is not None else None  # per episode: forced indices into ids
    B = len(envs)
    episodes = [renderer.new_episode(env) for env in envs]
    results: list[Trajectory | None] = [None] * B
    live = list(range(B))  # episode index of each row of the batch
    states = _each(pool, lambda b: EpisodeState(envs[b], tasks[b]), range(B))  # what each episode has said and paid
    chunks = [ep.prompt(state.episode.prompt) for ep, state in zip(episodes, states)]
    decoder = (_CachedDecoder if use_cache else _FullDecoder)(model, B)
    stop = renderer.stop_id
    while live:
        logits = decoder.feed(chunks)  # (n, V): next-token logits of every live row
        n = len(live)
        calls = [[] for _ in range(n)]
        call_lp = [[] for _ in range(n)]
        calling = list(range(n))  # rows still writing their call
        limits = [renderer.call_limit(envs[b]) for b in live]
        for step in range(max(limits)):
            sampled, lps = sample_next(logits[calling], temperature, generator)  # (m,) each
            tokens, lps = sampled.tolist(), lps.tolist()
            if force is not None:  # a forced token replaces the sample; the behaviour chose it with prob. 1
                for k, i in enumerate(calling):
                    f = force(live[i], tuple(calls[i]))
                    if f is not None:
                        tokens[k], lps[k] = int(f), 0.0
                        forced_at[live[i]].append(len(episodes[live[i]].ids) + len(calls[i]))
            still, feed = [], [[] for _ in range(n)]
            for i, t, lp in zip(calling, tokens, lps):
                calls[i].append(t)
                call_lp[i].append(lp)
                if t != stop and len(calls[i]) < limits[i]:
                    still.append(i)
                    feed[i] = [t]
            calling = still
            if not calling:
                break
            logits = decoder.feed(feed)  # (n, V); rows not in `calling` stay put
        # every call is written: each env answers, finished episodes leave
        texts = [renderer.call_text(c) for c in calls]
        replies = _each(pool, lambda i: states[live[i]].step(texts[i]), range(n))
        chunks, keep = [], []
        for i, b in enumerate(live):
            episodes[b].call(calls[i], call_lp[i])
            reply = episodes[b].reply(replies[i], final=states[b].done) if replies[i] else []
            if states[b].done:
                results[b] = episodes[b].finish(states[b].episode)
                if force is not None:
                    results[b].info['forced_positions'] = forced_at[b]
            else:
                keep.append(i)
                chunks.append([calls[i][-1]] + reply)  # the last call token is not fed yet
        if len(keep) < n:
            decoder.keep(torch.tensor(keep, dtype=torch.long))
        live = [live[i] for i in keep]
    return results


@small_model_threads
def rollout_groups(model, tasks, tok, group: int, env=DEFAULT_ENV, reward: str = 'hidden', temperature: float = 1.0,
                   generator=None, force=None, env_workers: int | None = None) -> list:
    """``group`` episodes of each task, task-major (task 0's group first), one fresh environment each, sampled in
    lockstep by ``rollout_batch`` -> list of Trajectory (the sample every recipe draws; sections 15.2-15.5).

    ``env``: a factory or Gymnasium id (``envs.protocol.make_env_factory``), built with ``reward``; the rest
    is ``rollout_batch``'s. ``force``, when given, is called with the index into this task-major list."""
    make = make_env_factory(env, reward)
    batch_tasks = [t for t in tasks for _ in range(group)]
    try:
        return rollout_batch(model, [make() for _ in batch_tasks], batch_tasks, tok, temperature=temperature,
                             generator=generator, force=force, env_workers=env_workers)
    except EnvStepError as e:
        if env == DEFAULT_ENV and '.reset raised' in str(e):  # a user's tasks, played in the default gym
            raise EnvStepError(f'{e}. No env= was given, so the episodes were played in the default environment, '
                               f'{DEFAULT_ENV!r}: if these tasks belong to another environment, pass it as env= '
                               '(every recipe and evaluator takes env=)') from e.__cause__
        raise
