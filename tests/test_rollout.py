"""rollout_batch: the key/value cache, behaviour log-probs, determinism, and one renderer."""
from __future__ import annotations

import math
import random

import pytest
import torch

import agentrl as arl
from agentrl.envs.play import play
from agentrl.recipes.diagnostics import check_rendering, rerender
from agentrl.rendering.protocols import as_renderer
from agentrl.rollouts.engine import sample_next

from conftest import SMALL
from feeding import feed_schedules

POLICY = arl.OWNER['policy']


def calls_end_with_stop(traj, tok):
    """Whether every policy call in ``traj`` ended with the stop token (none was cut at the length limit)."""
    ids, owner = traj.ids.tolist(), traj.owner.tolist()
    ends = [i for i in range(len(ids)) if owner[i] == POLICY and (i + 1 == len(ids) or owner[i + 1] != POLICY)]
    return all(ids[i] == tok.stop_id for i in ends)


@pytest.fixture(scope='module')
def multi_turn(trained_rollouts):
    """Eight multi-turn rollouts of different lengths from the briefly trained model."""
    trajs = sorted((t for t in trained_rollouts if len(t.info['actions']) >= 2), key=len)
    assert len(trajs) >= 8 and sum(len(t.info['actions']) >= 3 for t in trajs) >= 3
    pick = [trajs[round(i * (len(trajs) - 1) / 7)] for i in range(8)]
    assert len({len(t) for t in pick}) >= 4, 'rows of different lengths'
    return pick


@pytest.mark.parametrize('model_name', ['trained_model', 'fresh_model'])
@pytest.mark.parametrize('mode, capacity', [('turns', None), ('turns', 4), ('tokens', None), ('ragged', 16)])
def test_kv_cache_equals_full_forward(model_name, mode, capacity, multi_turn, tok, request):
    model = request.getfixturevalue(model_name)
    trajs = multi_turn
    B = len(trajs)
    with torch.no_grad():
        full = model(arl.collate(trajs, tok.pad_id)['ids'])  # [B, T, V], right padding is safe
        cache = model.new_cache(B) if capacity is None else model.new_cache(B, capacity=capacity)
        schedules = feed_schedules(trajs, mode, random.Random(0))
        n_compared = 0
        for r in range(max(len(s) for s in schedules)):
            chunks = [s[r] if r < len(s) else (0, 0) for s in schedules]
            n_new = torch.tensor([e - s for s, e in chunks])
            ids = torch.full((B, max(int(n_new.max()), 1)), tok.pad_id)
            for b, (s, e) in enumerate(chunks):
                ids[b, :e - s] = trajs[b].ids[s:e]
            logits = model.forward_cached(ids, n_new, cache)  # [B, V] at each row's last new token
            assert logits.shape == (B, tok.vocab_size)
            for b, (s, e) in enumerate(chunks):
                if e > s:
                    diff = (logits[b] - full[b, e - 1]).abs().max().item()
                    assert diff <= 1e-5, f'row {b}, chunk {r} ({s}:{e}): max abs diff {diff:.2e}'
                    n_compared += 1
        assert cache.lengths.tolist() == [len(t) for t in trajs]
    assert n_compared >= sum(len(s) for s in schedules)


@pytest.mark.parametrize('n_fed', [1, 2, 8])
def test_one_token_step_of_a_few_rows_equals_full_forward(n_fed, trained_model, multi_turn, tok):
    """A sampling step with new tokens on only some rows (fewer than a quarter run alone, more run all rows
    with dummies) gives those rows the full forward's logits and leaves the other rows' caches as they were."""
    trajs, B = multi_turn, len(multi_turn)
    with torch.no_grad():
        full = trained_model(arl.collate(trajs, tok.pad_id)['ids'])  # [B, T, V]
        cache = trained_model.new_cache(B)
        prefix = [len(t) - 2 for t in trajs]
        ids = torch.full((B, max(prefix)), tok.pad_id)
        for b, t in enumerate(trajs):
            ids[b, :prefix[b]] = t.ids[:prefix[b]]
        trained_model.forward_cached(ids, torch.tensor(prefix), cache)
        fed = list(range(0, B, B // n_fed))[:n_fed]
        step = torch.tensor([[trajs[b].ids[prefix[b]].item() if b in fed else 0] for b in range(B)])
        logits = trained_model.forward_cached(step, torch.tensor([int(b in fed) for b in range(B)]), cache)  # [B, V]
        for b in range(B):
            if b in fed:
                assert (logits[b] - full[b, prefix[b]]).abs().max().item() <= 1e-5
                assert cache.lengths[b] == prefix[b] + 1
            else:
                assert not logits[b].any() and cache.lengths[b] == prefix[b]
        # the rows left out continue exactly where they were
        rest = [b for b in range(B) if b not in fed]
        step = torch.tensor([[trajs[b].ids[prefix[b]].item() if b in rest else 0] for b in range(B)])
        logits = trained_model.forward_cached(step, torch.tensor([int(b in rest) for b in range(B)]), cache)
        for b in rest:
            assert (logits[b] - full[b, prefix[b]]).abs().max().item() <= 1e-5


@pytest.mark.parametrize('rollouts, model_name', [('trained_rollouts', 'trained_model'), ('fresh_rollouts', 'fresh_model')])
def test_behaviour_logprobs_match_full_forward(rollouts, model_name, request, tok):
    trajs, model = request.getfixturevalue(rollouts), request.getfixturevalue(model_name)
    with torch.no_grad():
        for traj in trajs:
            lp = arl.sequence_log_probs(model, traj.ids[None])[0]
            mask = traj.action_mask.bool()
            assert mask.any()
            assert torch.allclose(traj.logprobs[mask], lp[mask], atol=1e-4), traj.info['task']


def test_behaviour_logprobs_at_temperature(trained_model, tasks, tok):
    batch = tasks[:6]
    trajs = arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch], batch, tok, temperature=0.5,
                              generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for traj in trajs:
            logits = trained_model(traj.ids[None])[0, :-1] / 0.5
            lp = torch.log_softmax(logits, -1).gather(1, traj.ids[1:, None]).squeeze(1)
            mask = traj.action_mask.bool()
            assert torch.allclose(traj.logprobs[mask], lp[mask], atol=1e-4)


def test_rollouts_are_multi_turn_and_consistent(trained_rollouts, tasks, tok):
    """The sampled calls are what the env saw: decoding each turn's policy tokens gives info['actions']."""
    assert sum(len(t.info['actions']) >= 3 for t in trained_rollouts) >= 3
    names = [t.name for t in tasks for _ in range(2)]
    for traj, name in zip(trained_rollouts, names):
        assert traj.info['task'] == name
        assert len(traj.ids) <= arl.BugFixEnv().max_tokens
        ids, owner, turn = traj.ids.tolist(), traj.owner.tolist(), traj.turn.tolist()
        for k, action in enumerate(traj.info['actions'], start=1):
            call = [i for i, o, t in zip(ids, owner, turn) if t == k and o == POLICY]
            assert 1 <= len(call) <= arl.BugFixEnv().max_call_tokens
            words = call[:-1] if call[-1] == tok.stop_id else call
            assert ' ' + ' '.join(tok.vocab[i] for i in words) + ' ' == action


def _sample(model, tasks, tok, seed, **kw):
    return arl.rollout_batch(model, [arl.BugFixEnv() for _ in tasks], tasks, tok,
                             generator=torch.Generator().manual_seed(seed), **kw)


def test_same_seed_same_trajectories(trained_model, tasks, tok):
    batch = tasks[::3]
    a, b = _sample(trained_model, batch, tok, 7), _sample(trained_model, batch, tok, 7)
    for x, y in zip(a, b):
        assert torch.equal(x.ids, y.ids)
        assert torch.equal(x.logprobs, y.logprobs)
        assert x.info == y.info and x.reward == y.reward
    c = _sample(trained_model, batch, tok, 8)
    assert any(not torch.equal(x.ids, z.ids) for x, z in zip(a, c))


def test_cache_and_no_cache_agree(trained_model, tasks, tok):
    batch = tasks[1::4]
    cached, full = _sample(trained_model, batch, tok, 11), _sample(trained_model, batch, tok, 11, use_cache=False)
    assert any(len(t.info['actions']) >= 2 for t in cached)
    for x, y in zip(cached, full):
        assert torch.equal(x.ids, y.ids)
        assert torch.allclose(x.logprobs, y.logprobs, atol=1e-4)
        assert x.info == y.info


def test_rollout_runs_without_grad_and_restores_mode(tok, tasks):
    torch.manual_seed(2)
    model = arl.TinyAgent(tok.vocab_size, **SMALL)
    model.train()
    assert torch.is_grad_enabled()
    trajs = _sample(model, tasks[:4], tok, 0)
    assert model.training, 'rollout_batch must restore training mode'
    for t in trajs:
        for tensor in (t.ids, t.action_mask, t.logprobs, t.owner, t.turn):
            assert not tensor.requires_grad
    model.eval()
    _sample(model, tasks[:2], tok, 0)
    assert not model.training


def test_mixed_call_limits_in_one_batch(trained_model, tasks, tok):
    envs = [arl.BugFixEnv(max_call_words=w) for w in (1, 2, 3, 1, 2, 3)]
    trajs = arl.rollout_batch(trained_model, envs, tasks[:6], tok, generator=torch.Generator().manual_seed(0))
    for env, traj in zip(envs, trajs):
        owner, turn = traj.owner.tolist(), traj.turn.tolist()
        for k in range(1, len(traj.info['actions']) + 1):
            n = sum(1 for o, t in zip(owner, turn) if t == k and o == POLICY)
            assert 1 <= n <= env.max_call_tokens


def test_model_rollouts_render_like_scripted_play(trained_rollouts, tok):
    """Replaying a sampled episode's calls through scripted play gives the same tokens (when every call
    ended with the stop token)."""
    complete = [t for t in trained_rollouts if calls_end_with_stop(t, tok)]
    assert len(complete) >= 10
    for traj in complete:
        again = rerender(traj, tok)
        assert torch.equal(again.ids, traj.ids), traj.info['actions']
        assert torch.equal(again.owner, traj.owner)
        assert again.reward == traj.reward
    assert check_rendering(complete, tok) == []


def test_check_rendering_accepts_all_model_rollouts(fresh_rollouts, tok):
    assert check_rendering(fresh_rollouts, tok) == []


def test_fresh_model_calls_are_cut_at_the_limit(fresh_rollouts, tok):
    """The premise of the test above: an untrained model rarely samples <stop>, so its calls are cut."""
    cut = [t for t in fresh_rollouts if not calls_end_with_stop(t, tok)]
    assert cut
    for t in cut:
        assert t.info['n_invalid'] >= 1


CHI2_99_99 = {1: 15.14, 2: 18.42, 3: 21.11, 4: 23.51}
"""The chi-square distribution's 99.99% quantile by degrees of freedom (scipy.stats.chi2.ppf(0.9999, df)): a correct
sampler fails a test with this bound once in 10,000 runs."""


def chi_square(counts, expected) -> float:
    """Pearson's statistic: the sum over categories of (observed - expected)**2 / expected."""
    return sum((o - e) ** 2 / e for o, e in zip(counts, expected))


def test_sample_next_draws_from_the_softmax_and_never_a_zero_probability_token():
    """The rollout's inverse-CDF sampler: frequencies match softmax(logits / T), log-probs are exact, masked tokens never come."""
    logits = torch.tensor([[0.0, 1.0, 2.0, float('-inf'), -1.0]]).repeat(40_000, 1)  # (n, V)
    gen = torch.Generator().manual_seed(0)
    tokens, logp = sample_next(logits, temperature=2.0, generator=gen)
    p = torch.softmax(logits[0] / 2.0, dim=-1)
    counts = torch.bincount(tokens, minlength=5)
    assert counts[3] == 0, 'a -inf logit was drawn'
    live = [0, 1, 2, 4]
    stat = chi_square(counts[live].tolist(), (len(tokens) * p[live]).tolist())
    assert stat < CHI2_99_99[len(live) - 1], (counts, p)
    assert torch.allclose(logp, p.log()[tokens])
    again, _ = sample_next(logits, temperature=2.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens, again)
    first = torch.tensor([[float('-inf'), 0.0, 0.0]]).repeat(1000, 1)  # u = 0 must not pick the leading zero
    assert (sample_next(first, 1.0, torch.Generator().manual_seed(1))[0] > 0).all()


def place_in_cell(monkeypatch, k):
    """Make ``sample_next``'s float32 uniforms all k / 2**24 (every row in the k-th of torch.rand's 2**24 cells);
    its float64 draws, which place a row within a cell that holds a boundary, stay random."""
    real = torch.rand

    def rand(*size, dtype=None, **kw):
        if dtype is None:
            return torch.full(size, k / 2 ** 24)  # exactly representable in float32, as torch.rand's draws are
        return real(*size, dtype=dtype, **kw)
    monkeypatch.setattr(torch, 'rand', rand)


@pytest.mark.parametrize('k', [2 ** 23 - 1, 2 ** 23])
def test_a_token_of_probability_1e_9_is_drawn_at_its_rate(monkeypatch, k):
    """softmax([0, log 1e-9, 0]) gives the middle token 1e-9 / (2 + 1e-9), in [0.5 - 2.5e-10, 0.5 + 2.5e-10):
    float32 sums round both its ends to 0.5 (never drawn), and a float32 uniform's 2**24 values never land in
    it. Placed in either cell that holds a piece of it, 100,000 rows draw it at (its piece) / (the cell's width)."""
    logits = torch.tensor([[0.0, math.log(1e-9), 0.0]]).repeat(100_000, 1)  # (n, 3)
    place_in_cell(monkeypatch, k)
    tokens, logp = sample_next(logits, 1.0, torch.Generator().manual_seed(0))
    z = 2 + 1e-9
    ends = [0.0, 1 / z, (1 + 1e-9) / z, 1.0]  # the cumulative probabilities
    lo, hi = k / 2 ** 24, (k + 1) / 2 ** 24  # the cell
    share = [max(0.0, min(hi, ends[i + 1]) - max(lo, ends[i])) / (hi - lo) for i in range(3)]
    assert 0.004 < share[1] < 0.0043  # 2.5e-10 of a cell 2**-24 = 6e-8 wide
    counts = torch.bincount(tokens, minlength=3).tolist()
    drawn = [i for i in range(3) if share[i] > 0]
    assert all(counts[i] == 0 for i in range(3) if share[i] == 0)
    assert chi_square([counts[i] for i in drawn], [len(tokens) * share[i] for i in drawn]) < CHI2_99_99[len(drawn) - 1]
    assert torch.allclose(logp[tokens == 1].double(), torch.tensor(math.log(1e-9 / z), dtype=torch.float64))


def test_sample_next_equals_the_float64_inverse_cdf_of_its_uniforms():
    """Every row's token is the one float64 sums give its float32 uniform u (the generator's first draws), or for a
    cell [u, u + 2**-24) that holds a boundary, one of the tokens the cell meets. 2**15 tokens of similar
    probabilities put boundaries 2**9 cells apart, so a few percent of the rows are settled in float64."""
    torch.manual_seed(0)
    logits = (torch.randn(1, 2 ** 15) * 0.3).repeat(400, 1)  # (n, V)
    tokens, _ = sample_next(logits, 1.0, torch.Generator().manual_seed(5))
    u = torch.rand(400, generator=torch.Generator().manual_seed(5)).double()  # (n,)
    cdf = torch.log_softmax(logits[0], -1).exp().cumsum(-1, dtype=torch.float64)  # (V,): sums of the probabilities
    # whose logs sample_next returns
    first = torch.searchsorted(cdf, u * cdf[-1], right=True)  # (n,): the token at the cell's start
    last = torch.searchsorted(cdf, (u + 2 ** -24) * cdf[-1])  # (n,): the token just before its end
    assert ((first <= tokens) & (tokens <= last)).all()
    assert torch.equal(tokens[first == last], first[first == last])
    assert (first != last).sum() < 20, 'most cells hold no boundary'


def test_sample_next_draws_one_float32_number_per_row_when_no_cell_holds_a_boundary():
    """Two equal logits put the one boundary at 0.5, a cell's edge: no row needs the float64 draw, so the generator
    advances exactly as by one float32 torch.rand per row, and the token is 1 exactly when u >= 0.5."""
    gen = torch.Generator().manual_seed(3)
    tokens, _ = sample_next(torch.zeros(1000, 2), 1.0, gen)
    ref = torch.Generator().manual_seed(3)
    u = torch.rand(1000, generator=ref)
    assert torch.equal(gen.get_state(), ref.get_state())
    assert torch.equal(tokens, (u >= 0.5).long())


def test_greedy_sample_next_takes_the_lowest_argmax_and_draws_nothing():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [float('-inf'), -2.0, -1.0, -1.0]])  # (2, 4)
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    tokens, logp = sample_next(logits, 0.0, gen)
    assert tokens.tolist() == [1, 2]
    assert torch.equal(gen.get_state(), state), 'greedy decoding drew from the generator'
    # the log-prob under the policy at temperature 1: log(e**3 / (e + 2 e**3 + 1)) and log(e**-1 / (e**-2 + 2 e**-1))
    want = [3 - math.log(math.e + 2 * math.e ** 3 + 1), -1 - math.log(math.e ** -2 + 2 * math.e ** -1)]
    assert torch.allclose(logp, torch.tensor(want), atol=1e-6)


def test_greedy_rollouts_take_the_full_forward_argmax_at_every_step(trained_model, tasks, tok):
    """temperature=0: every action token is the argmax of the full forward at its position, its log-prob the
    temperature-1 one there, and any generator (or none) gives the same episodes."""
    batch = tasks[::3]
    runs = [arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch], batch, tok, temperature=0, generator=g)
            for g in (None, torch.Generator().manual_seed(0), torch.Generator().manual_seed(9))]
    for a, b in zip(runs[0], runs[1]):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.logprobs, b.logprobs) and a.reward == b.reward
    assert all(torch.equal(a.ids, c.ids) for a, c in zip(runs[0], runs[2]))
    assert sum(len(t.info['actions']) >= 2 for t in runs[0]) >= 2
    with torch.no_grad():
        for traj in runs[0]:
            logits = trained_model(traj.ids[None])[0, :-1]  # (T-1, V): the next-token logits at each position
            mask = traj.action_mask.bool()
            assert torch.equal(logits.argmax(-1)[mask], traj.ids[1:][mask]), traj.info['task']
            lp = torch.log_softmax(logits, -1).gather(1, traj.ids[1:, None]).squeeze(1)
            assert torch.allclose(traj.logprobs[mask], lp[mask], atol=1e-4)


def _scripted_setup(name):
    """(env factory, tasks, tokenizer, player kinds, a call that never ends an episode) of ``name``: per-step rewards
    (``keypad``), truncation by turns and by tokens (``bugfix``, ``bugfix-48``), and an adapted game (``guess``, an
    ``AdaptedEnv``: the game ends every episode itself; needs GEM)."""
    if name == 'keypad':
        from test_rewards import CODES, Keypad
        return Keypad, CODES, arl.build_tokenizer(CODES), ('oracle', 'random'), 'press 0'
    if name == 'guess':
        pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]'")
        from agentrl.experiments.chapter15.guess_game import guess_factory, guess_tasks
        make, tasks = guess_factory(), guess_tasks('train')[:4]
        return make, tasks, arl.build_tokenizer(tasks, env=make, texts=make.spec.texts), make().scripted_kinds, '25'
    make, tasks = arl.BugFixEnv if name == 'bugfix' else (lambda: arl.BugFixEnv(max_tokens=48)), arl.make_tasks('all')
    return make, tasks[::5], arl.build_tokenizer(tasks), ('oracle', 'blind', 'random'), 'read'


@pytest.mark.parametrize('name', ['bugfix', 'bugfix-48', 'keypad', 'guess'])
def test_lockstep_engine_and_scripted_play_give_the_same_episodes(name):
    """The lockstep engine, forced to write a scripted player's calls, plays the episodes ``play`` plays: the same
    tokens, per-step rewards, return, number of turns, end (terminated or truncated) and final info."""
    make, tasks, tok, kinds, stuck = _scripted_setup(name)
    renderer, proto = as_renderer(tok), make()
    players = [lambda seed, kind=kind: proto.scripted_policy(kind, seed) for kind in kinds]
    players.append(lambda seed: lambda observation: stuck)
    played, scripted, runs = [], [], []
    for player in players:
        for seed, task in enumerate(tasks):
            played.append(play(make(), task, player(seed)))
            scripted.append(arl.scripted_rollout(player(seed), make(), task, renderer))
            runs.append(task)
    calls = [[[i for i, o, k in zip(t.ids.tolist(), t.owner.tolist(), t.turn.tolist()) if o == POLICY and k == turn]
              for turn in range(1, int(t.turn.max()) + 1)] for t in scripted]
    turn = [0] * len(runs)

    def force(e, so_far):  # the scripted call's next token (a new call starts with an empty one)
        turn[e] += not so_far
        return calls[e][turn[e] - 1][len(so_far)]

    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size, **{**SMALL, 'block_size': proto.max_tokens})
    trajs = arl.rollout_batch(model, [make() for _ in runs], runs, renderer, force=force,
                              generator=torch.Generator().manual_seed(0))
    ended = {'terminated': 0, 'truncated': 0}
    for ep, want, got in zip(played, scripted, trajs):
        assert all(torch.equal(getattr(got, k), getattr(want, k)) for k in ('ids', 'owner', 'turn', 'action_mask'))
        assert got.turn_rewards == want.turn_rewards == ep.rewards
        assert got.reward == want.reward == ep.reward
        assert int(got.turn.max()) == len(ep.calls) == len(got.info['actions'])
        forced = got.info.pop('forced_positions')
        assert got.info == want.info == ep.info
        assert forced == [p for p, o in enumerate(got.owner.tolist()) if o == POLICY]
        assert ep.truncated == (not got.info['submitted'])
        ended['truncated' if ep.truncated else 'terminated'] += 1
    assert ended['terminated'] and (ended['truncated'] or name == 'guess'), ended
