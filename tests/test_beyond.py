"""The "beyond the chapter" recipes: STaR, RFT with a group baseline, online DPO, checkpoint
selection, and the clipped group policy-gradient trainer (chapter 15 exercises 1, 3, 4; 15.6).

Smoke runs on tiny budgets, the exact gradient identities the recipes rest on, and STaR's forcing.
"""
from __future__ import annotations

import copy
import math
import random

import pytest
import torch

import agentrl as arl
from agentrl.recipes.grpo import GRPOConfig, aggregate, group_advantages, grpo_loss, train_grpo
from agentrl.recipes.online_dpo import train_online_dpo
from agentrl.recipes.rft_baseline import (group_baseline_weights, rft_baseline_iteration, weighted_sft_loss,
                                          weighted_sft_train)
from agentrl.recipes.select import select_sft_checkpoint
from agentrl.recipes.star import group_pass, rationalize, star_iteration

POLICY = arl.OWNER['policy']


@pytest.fixture(autouse=True, scope='module')
def _one_thread():
    """torch.set_num_threads(1) for this module (tiny models run far faster on one thread; see conftest),
    restored afterwards so a module-level call does not leak into test_bench's process default."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def flat_grad(loss, model):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)])


def all_finite(row):
    return all(math.isfinite(v) for v in row.values() if isinstance(v, (int, float)) and not isinstance(v, bool))


@pytest.fixture(scope='module')
def model64(trained_model):
    """A float64 copy of the shared small model, for gradient identities."""
    return copy.deepcopy(trained_model).double()


@pytest.fixture(scope='module')
def mixed(train_oracle_demos, blind_trajs):
    """Episodes with both outcomes: 3 oracle demos (pass) and 9 blind episodes (mostly fail)."""
    trajs = train_oracle_demos[:3] + blind_trajs[:9]
    rewards = [t.reward for t in trajs]
    assert 0 < sum(rewards) < len(rewards)
    return trajs


# --- exercise 1: RFT is the 0/1 policy gradient, under either aggregation ---------------------------

def test_rft_equals_01_policy_gradient_token_and_sequence_mean(model64, mixed, tok):
    kept = [t for t in mixed if t.reward == 1.0]
    b_all, b_kept = arl.collate(mixed, tok.pad_id), arl.collate(kept, tok.pad_id)
    logp = arl.sequence_log_probs(model64, b_all['ids'])  # [B, T-1]
    kept_logp = arl.sequence_log_probs(model64, b_kept['ids'])  # [K, T-1]
    mask, rewards = b_all['action_mask'], b_all['rewards'][:, None].double()  # [B, T-1], [B, 1]
    for agg, ratio in [('token', b_kept['action_mask'].sum() / mask.sum()), ('seq', len(kept) / len(mixed))]:
        g_pg = flat_grad(-aggregate(rewards * logp, mask, agg), model64)
        g_rft = flat_grad(-aggregate(kept_logp, b_kept['action_mask'], agg), model64)
        assert (g_pg - ratio * g_rft).abs().max().item() < 1e-6, agg
        assert g_rft.abs().max().item() > 1e-3  # not vacuous
    # the token mean of the kept batch is sft_loss itself
    assert torch.allclose(-aggregate(kept_logp, b_kept['action_mask'], 'token'), arl.sft_loss(model64, b_kept))


def test_aggregate_rejects_unknown_names():
    with pytest.raises(ValueError, match="'grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo'"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 2), 'mean')


# --- exercise 4: RFT with a group baseline ----------------------------------------------------------

def test_group_baseline_weights():
    rewards = torch.tensor([[1., 0., 0., 0.], [1., 1., 1., 1.], [0., 0., 0., 0.], [1., 1., 0., 1.]])
    w = group_baseline_weights(rewards)
    expected = torch.tensor([[1, -1 / 3, -1 / 3, -1 / 3], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, -3, 1]])
    assert torch.allclose(w, expected)
    assert torch.allclose(group_baseline_weights(rewards, keep_all_pass=False)[1], torch.zeros(4))
    # a mixed group's weights are its baseline advantages over (1 - R_bar)
    r_bar = rewards[3].mean()
    assert torch.allclose(w[3], (rewards[3] - r_bar) / (1 - r_bar))
    with pytest.raises(ValueError):
        group_baseline_weights(torch.tensor([[0.5, 1.0]]))


def test_weighted_loss_gradient_is_the_baseline_policy_gradient(model64, mixed, tok):
    b = arl.collate(mixed, tok.pad_id)
    R = b['rewards'].double()  # [G], one group
    r_bar = R.mean()
    assert 0 < r_bar < 1
    weights = group_baseline_weights(R[None, :]).view(-1)  # [G]
    g_weighted = flat_grad(weighted_sft_loss(model64, b, weights), model64)
    logp, mask = arl.sequence_log_probs(model64, b['ids']), b['action_mask']  # [G, T-1] each
    g_pg = flat_grad(-((R - r_bar)[:, None] * logp * mask).sum() / mask.sum(), model64)
    assert (g_weighted - g_pg / (1 - r_bar)).abs().max().item() < 1e-6
    assert g_pg.abs().max().item() > 1e-3


def test_weighted_sft_train_with_unit_weights_is_sft_train(trained_model, blind_trajs, tok):
    a, b = copy.deepcopy(trained_model), copy.deepcopy(trained_model)
    arl.sft_train(a, blind_trajs[:12], tok, steps=2, batch_size=4, seed=3)
    weighted_sft_train(b, blind_trajs[:12], [1.0] * 12, tok, steps=2, batch_size=4, seed=3)
    assert all(torch.allclose(p, q, atol=1e-7) for p, q in zip(a.parameters(), b.parameters()))


def test_rft_baseline_iteration_smoke(trained_model, train_tasks, tok):
    model = copy.deepcopy(trained_model)
    hist = rft_baseline_iteration(model, train_tasks[::2], tok, rounds=2, n_samples=3, steps=2, batch_size=8,
                                  evaluate=lambda m: {'train': arl.pass_rate(m, train_tasks[:2], tok, 1)[0]})
    assert len(hist) == 2
    for row in hist:
        assert {'round', 'rate', 'n_pos', 'n_neg', 'min_weight', 'solved', 'informative', 'train'} <= set(row)
        assert all_finite(row) and row['min_weight'] <= 0


# --- exercise 3: STaR rationalization ----------------------------------------------------------------

def test_rollout_without_force_is_unchanged(trained_model, train_tasks, tok):
    batch = [t for t in train_tasks[::3] for _ in range(2)]

    def run(**kw):
        gen = torch.Generator().manual_seed(11)
        return arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch], batch, tok, generator=gen, **kw)

    plain, none, never = run(), run(force=None), run(force=lambda b, call: None)
    for a, b, c in zip(plain, none, never):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.logprobs, b.logprobs) and a.info == b.info
        assert 'forced_positions' not in a.info
        # a forcer that never forces draws the same samples; only the bookkeeping key is added
        assert torch.equal(a.ids, c.ids) and torch.equal(a.logprobs, c.logprobs) and c.info['forced_positions'] == []
    with pytest.raises(TypeError):
        run(force=3)


def test_star_forces_the_fixing_op_and_masks_it(trained_model, train_tasks, tok):
    tasks = train_tasks[::2]
    edit_id = tok.token_to_id['edit']
    runs = {}
    for mask in (True, False):
        runs[mask] = rationalize(trained_model, tasks, tok, 2, generator=torch.Generator().manual_seed(0), mask=mask)
    n_forced = 0
    for t_mask, t_plain in zip(runs[True], runs[False]):
        assert torch.equal(t_mask.ids, t_plain.ids)  # the same episode, masked or not
        op_id = tok.token_to_id[{x.name: x for x in tasks}[t_mask.info['task']].fix]
        ids, owner = t_mask.ids.tolist(), t_mask.owner.tolist()
        forced = t_mask.info['forced_positions']
        ops = [p for p in forced if ids[p] == op_id]
        assert [p for p in forced if p not in ops] == [p + 1 for p in ops]  # each forced op is followed by a forced stop
        for p in ops:
            assert ids[p - 1] == edit_id and ids[p + 1] == tok.stop_id  # `edit <op> <stop>`
            assert owner[p - 1] == owner[p] == owner[p + 1] == POLICY and owner[p - 2] != POLICY  # the call starts with edit
        for p in forced:
            assert t_mask.logprobs[p - 1] == 0.0
            assert t_mask.action_mask[p - 1] == 0.0 and t_plain.action_mask[p - 1] == 1.0
        if ops:  # the forced call reached the env well-formed
            assert f" edit {tok.vocab[op_id]} " in t_mask.info['actions']
        # every `edit` that starts a call was forced, and nothing else differs between the masks
        starts = [i for i in range(1, len(ids)) if ids[i] == edit_id and owner[i] == POLICY and owner[i - 1] != POLICY]
        assert [i + 1 for i in starts] == ops
        differ = (t_mask.action_mask != t_plain.action_mask).nonzero().view(-1).tolist()
        assert differ == [p - 1 for p in forced]
        n_forced += len(ops)
    assert n_forced >= 3


@pytest.mark.parametrize('mask_forced', [True, False])
def test_star_iteration_smoke(trained_model, train_tasks, tok, mask_forced):
    model, tasks = copy.deepcopy(trained_model), train_tasks[::2]
    hist = star_iteration(model, tasks, tok, rounds=2, n_samples=2, steps=2, seed=0, mask_forced=mask_forced,
                          batch_size=8, evaluate=lambda m: {'family': group_pass(m, tasks, tok, 1)})
    assert len(hist) == 2
    for row in hist:
        assert {'round', 'rate', 'solved', 'failed', 'rationalized', 'n_rationalized', 'forced_rate', 'n_plain',
                'n_kept', 'kept', 'family'} <= set(row)
        assert row['n_kept'] == row['n_plain'] + row['n_rationalized'] == len(row['kept'])
        assert set(row['family']) == {t.family for t in tasks} and all(0 <= v <= 1 for v in row['family'].values())
        assert all(t.reward == 1.0 for t in row['kept'])
    rationalized = [t for row in hist for t in row['kept'] if t.info.get('forced_positions')]
    assert rationalized, 'the smoke budget should rationalize at least one success'
    for t in rationalized:
        assert all(t.action_mask[p - 1] == (0.0 if mask_forced else 1.0) for p in t.info['forced_positions'])


# --- online DPO ---------------------------------------------------------------------------------------

def test_online_dpo_smoke(trained_model, train_tasks, tok):
    policy = copy.deepcopy(trained_model)
    log = train_online_dpo(policy, train_tasks[:8], tok, steps=4, regen_every=2, n_samples=4, nll_weight=1.0,
                           loss='ipo', every=2, evaluate=lambda m: {'train': arl.pass_rate(m, train_tasks[:2], tok, 1)[0]})
    assert [r['step'] for r in log] == [2, 4] and [r['round'] for r in log] == [0, 1]
    for row in log:
        assert {'step', 'round', 'pairs', 'sample_pass', 'invalid', 'd_chosen', 'd_rejected', 'loss', 'train'} <= set(row)
        assert all_finite(row)
    assert any(r['pairs'] > 0 for r in log)
    with pytest.raises(ValueError, match="'sigmoid', 'ipo', 'ipo_sum', 'hinge'"):
        train_online_dpo(policy, train_tasks[:2], tok, steps=1, loss='kto')


# --- SFT checkpoint selection (15.6) ------------------------------------------------------------------

def test_select_sft_checkpoint(trained_model, train_oracle_demos, heldout_tasks, tok):
    model = copy.deepcopy(trained_model)
    sel = select_sft_checkpoint(model, train_oracle_demos, tok, heldout_tasks[::3], steps=4, every=2, group=3,
                                batch_size=8, include_start=True)
    best, step, table, last = sel
    assert [row[0] for row in table] == [0, 2, 4] and all(len(row) == 4 for row in table)
    informative = [row[2] for row in table]
    assert step == table[informative.index(max(informative))][0]  # the highest, the earliest of ties
    assert last is model and best is not model
    if step == 4:
        assert all(torch.equal(p, q) for p, q in zip(best.parameters(), last.parameters()))
    with pytest.raises(ValueError):
        select_sft_checkpoint(model, train_oracle_demos, tok, heldout_tasks, steps=4, every=0)


# --- the clipped group policy-gradient trainer --------------------------------------------------------

@pytest.mark.parametrize('temperature', [1.0, 0.7, 1.5])
def test_grpo_first_pass_gradient_equals_reinforce(trained_model, train_tasks, tok, temperature):
    """With num_iterations = minibatches = 1, no clip binding, mean advantages and token aggregation, the first
    pass's gradient is REINFORCE's with the group baseline on the tempered policy log pi_T, at any temperature
    (every log-prob of the update is taken at T, the distribution the episodes were drawn from)."""
    model = trained_model
    batch_tasks = [t for t in train_tasks[:4] for _ in range(4)]
    for seed in range(2, 12):  # the first sample with both outcomes (else every advantage is 0)
        trajs = arl.rollout_batch(model, [arl.BugFixEnv() for _ in batch_tasks], batch_tasks, tok,
                                  temperature=temperature, generator=torch.Generator().manual_seed(seed))
        b = arl.collate(trajs, tok.pad_id)
        rewards = b['rewards'].view(4, 4)  # [tasks, G]
        if 0 < rewards.mean() < 1:
            break
    assert 0 < rewards.mean() < 1
    # REINFORCE with the group baseline on log pi_T, written out: -(1/N) sum_t A_t log pi_T(a_t)
    advantages = (rewards - rewards.mean(1, keepdim=True)).view(-1, 1)  # [B, 1]
    logits = model(b['ids'], lengths=b['lengths'])[:, :-1] / temperature  # [B, T-1, V]
    logp = torch.log_softmax(logits, -1).gather(-1, b['ids'][:, 1:, None]).squeeze(-1)  # [B, T-1]
    mask = b['action_mask']
    g_reinforce = flat_grad(-(advantages * logp * mask).sum() / mask.sum(), model)
    cfg = GRPOConfig(n_tasks=4, num_generations=4, num_iterations=1, minibatches=1, epsilon=1e9,
                     scale_rewards='none', loss_type='bnpo', temperature=temperature)
    loss, stats = grpo_loss(model, b, group_advantages(rewards, 'none').view(-1), cfg)
    g_grpo = flat_grad(loss, model)
    assert (g_grpo - g_reinforce).abs().max().item() < 1e-6
    assert g_reinforce.abs().max().item() > 1e-3
    # ratio = 1 on the first pass: the sampler's log-probs at T are the trainer's (float rounding apart)
    assert stats['clip_frac'] == 0.0 and abs(stats['approx_kl']) < 1e-6


def test_grpo_step_is_a_reinforce_step(trained_model, train_tasks, tok):
    a, b = copy.deepcopy(trained_model), copy.deepcopy(trained_model)
    cfg = GRPOConfig(n_tasks=2, group=4, epochs=1, minibatches=1, clip=1e9, lr=1e-3, seed=1)
    _, logs = train_grpo(a, train_tasks, tok, 1, cfg)
    reward = arl.reinforce_step(b, torch.optim.AdamW(b.parameters(), lr=1e-3), train_tasks, tok, random.Random(1),
                                torch.Generator().manual_seed(1), 2, 4)
    assert logs[0]['reward'] == reward
    # AdamW's first step is about lr * sign(grad): equal up to float rounding on tiny gradients (a flip would be 2e-3)
    assert all(torch.allclose(p, q, atol=1e-4) for p, q in zip(a.parameters(), b.parameters()))


def test_grpo_smoke_all_knobs(trained_model, train_tasks, tok):
    model = copy.deepcopy(trained_model)
    cfg = GRPOConfig(n_tasks=2, group=4, epochs=2, minibatches=2, adv_norm='std', agg='seq', kl_coef=0.1,
                     ent_coef=0.01, temperature=1.2, seed=0)
    history, logs = train_grpo(model, train_tasks, tok, 2, cfg, every=1,
                               evaluate=lambda m: (arl.pass_rate(m, train_tasks[:2], tok, 1)[0],))
    assert [h[0] for h in history] == [0, 1, 2]
    assert len(logs) == 2
    for row in logs:
        assert {'step', 'reward', 'informative', 'entropy', 'clip_frac', 'approx_kl', 'pg_loss', 'kl'} <= set(row)
        assert all_finite(row) and row['kl'] >= 0 and 0 <= row['clip_frac'] <= 1
    _, logs = train_grpo(copy.deepcopy(trained_model), train_tasks, tok, 1, GRPOConfig(n_tasks=2, group=2))
    assert 'kl' not in logs[0]  # no reference without kl_coef or ref_model


def test_grpo_std_advantages():
    rewards = torch.tensor([[1., 0., 0., 0.], [1., 1., 1., 1.]])
    adv = group_advantages(rewards, 'std')
    assert torch.allclose(adv[0], (rewards[0] - 0.25) / (rewards[0].std() + 1e-4)) and torch.equal(adv[1], torch.zeros(4))


@pytest.mark.parametrize('field, value', [('adv_norm', 'rank'), ('agg', 'sample')])
def test_grpo_config_rejects_unknown_names(field, value):
    with pytest.raises(ValueError, match='valid choices'):
        GRPOConfig(**{field: value})
