"""The chapter's recipes: the 15.3 gradient identity, the 15.4 DPO values, gradient isolation in every
recipe's loss, and a few-step smoke run of each recipe."""
from __future__ import annotations

import copy
import random

import pytest
import torch

from agentrl.rollouts.engine import rollout_groups

import agentrl as arl
from agentrl.recipes import reinforce as reinforce_module
from agentrl.recipes.dpo import action_tokens, episode_logp, preference_loss
from agentrl.recipes.grpo import GRPOConfig, group_advantages, grpo_loss
from agentrl.recipes.rft_baseline import group_baseline_weights, weighted_sft_loss
from agentrl.recipes.star import mask_forced_tokens

from conftest import SMALL
from gradcheck import LogitGrads, assert_only_policy_positions, reinforce_step_logit_grads

POLICY = arl.OWNER['policy']


@pytest.fixture(scope='module')
def model(tok):
    torch.manual_seed(3)
    return arl.TinyAgent(tok.vocab_size, **SMALL)


@pytest.fixture(scope='module')
def mixed(train_oracle_demos, blind_trajs):
    """Successes and failures: the 20 oracle demos and 40 blind episodes (about a fifth of them pass)."""
    return train_oracle_demos + blind_trajs[:40]


def flat_grad(loss, model):
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)])


# --- 15.3: the 0/1 policy gradient is the RFT gradient times the token ratio

def test_gradient_identity_15_3(model, mixed, tok):
    kept = [t for t in mixed if t.reward == 1.0]
    assert 0 < len(kept) < len(mixed)
    b_all, b_kept = arl.collate(mixed, tok.pad_id), arl.collate(kept, tok.pad_id)
    logp = arl.sequence_log_probs(model, b_all['ids'])  # [B, T-1]
    mask, rewards = b_all['action_mask'], b_all['rewards'][:, None]  # [B, T-1], [B, 1]
    g_pg = flat_grad(-(rewards * logp * mask).sum() / mask.sum(), model)
    g_rft = flat_grad(arl.sft_loss(model, b_kept), model)
    ratio = b_kept['action_mask'].sum() / mask.sum()
    assert g_pg.abs().max() > 1e-3  # a real gradient, not two zeros
    assert (g_pg - ratio * g_rft).abs().max().item() <= 1e-6


# --- 15.4: the DPO loss at the chapter's three points

@pytest.mark.parametrize('chosen, rejected, expected', [(0, 0, 0.6931), (2, -2, 0.1269), (-2, 2, 2.1269)])
def test_dpo_loss_values(chosen, rejected, expected):
    zero = torch.zeros(1)
    loss = arl.dpo_loss(torch.tensor([float(chosen)]), torch.tensor([float(rejected)]), zero, zero, beta=0.5)
    assert round(loss.item(), 4) == expected


def test_dpo_loss_ignores_reference_gradients():
    pc, pr = torch.tensor([1.0], requires_grad=True), torch.tensor([-1.0], requires_grad=True)
    rc, rr = torch.tensor([0.5], requires_grad=True), torch.tensor([0.2], requires_grad=True)
    arl.dpo_loss(pc, pr, rc, rr).backward()
    assert rc.grad is None and rr.grad is None and pc.grad.item() < 0 < pr.grad.item()


# --- gradient isolation: only policy tokens are ever trained, in every recipe's loss

def test_sft_loss_trains_only_policy_tokens(model, mixed, tok):
    m = copy.deepcopy(model)
    with LogitGrads(m) as g:
        arl.sft_loss(m, arl.collate(mixed, tok.pad_id)).backward()
    assert_only_policy_positions(g.seen, mixed)


def test_rft_with_group_baseline_trains_only_policy_tokens(model, mixed, tok):
    m = copy.deepcopy(model)
    rewards = torch.tensor([t.reward for t in mixed[:40]]).view(5, 8)  # 5 groups of 8
    weights = group_baseline_weights(rewards).flatten()  # [40]
    with LogitGrads(m) as g:
        weighted_sft_loss(m, arl.collate(mixed[:40], tok.pad_id), weights).backward()
    assert_only_policy_positions(g.seen, mixed[:40])


@pytest.mark.parametrize('loss', ['sigmoid', 'ipo', 'ipo_sum', 'hinge'])
@pytest.mark.parametrize('nll_weight', [0.0, 1.0])
def test_dpo_trains_only_policy_tokens(model, train_oracle_demos, blind_trajs, tok, loss, nll_weight):
    m, ref = copy.deepcopy(model), copy.deepcopy(model)
    chosen, rejected = train_oracle_demos[:6], blind_trajs[:6]
    b_c, b_r = arl.collate(chosen, tok.pad_id), arl.collate(rejected, tok.pad_id)
    with torch.no_grad():
        ref_c, ref_r = episode_logp(ref, b_c), episode_logp(ref, b_r)
    with LogitGrads(m) as g:
        total = preference_loss(episode_logp(m, b_c), episode_logp(m, b_r), ref_c, ref_r, beta=0.5, loss=loss,
                                chosen_tokens=action_tokens(b_c), rejected_tokens=action_tokens(b_r))
        if nll_weight:
            total = total + nll_weight * arl.sft_loss(m, b_c)
        total.backward()
    assert len(g.seen) == (3 if nll_weight else 2)  # chosen, rejected (, chosen again for the NLL term)
    assert_only_policy_positions(g.seen[:1], chosen)
    assert_only_policy_positions(g.seen[1:2], rejected)
    if nll_weight:
        assert_only_policy_positions(g.seen[2:], chosen)


def test_reinforce_step_trains_only_policy_tokens(trained_model, train_tasks, tok, monkeypatch):
    seen, sampled = reinforce_step_logit_grads(copy.deepcopy(trained_model), train_tasks, tok, monkeypatch)
    rewards = torch.tensor([t.reward for t in sampled]).view(10, 8)
    assert (rewards.std(1) > 0).any(), 'no informative group: nothing to check'
    assert_only_policy_positions(seen, sampled)


@pytest.mark.parametrize('temperature, bonus', [(1.0, 0.0), (2.5, 0.0), (2.5, 0.3)])
def test_reinforce_remedies_of_15_6(trained_model, train_tasks, tok, monkeypatch, temperature, bonus):
    """A hotter rollout samples at that temperature and scores there (the tempered policy's gradient); the entropy
    bonus subtracts bonus x the mean action-token entropy: one SGD step moves the weights by exactly the gradient of
    -A log softmax(logits / T) (token mean) - bonus * entropy of softmax(logits / T) (token mean)."""
    before, m = copy.deepcopy(trained_model), copy.deepcopy(trained_model)
    sampled, temps = [], []

    def rollout_and_keep(*args, **kwargs):
        temps.append(kwargs['temperature'])
        trajs = rollout_groups(*args, **kwargs)
        sampled.extend(trajs)
        return trajs

    monkeypatch.setattr(reinforce_module, 'rollout_groups', rollout_and_keep)
    arl.reinforce_step(m, torch.optim.SGD(m.parameters(), lr=1.0), train_tasks, tok, random.Random(0),
                       torch.Generator().manual_seed(0), n_tasks=4, group=4, temperature=temperature, entropy_bonus=bonus)
    assert temps == [temperature]
    b = arl.collate(sampled, tok.pad_id)
    rewards = b['rewards'].view(4, 4)
    adv, mask = (rewards - rewards.mean(1, keepdim=True)).view(-1, 1), b['action_mask']
    logits = before(b['ids'])[:, :-1] / temperature  # [B, T-1, V]
    logp = torch.log_softmax(logits, -1).gather(-1, b['ids'][:, 1:, None]).squeeze(-1)  # [B, T-1]
    loss = -(adv * logp * mask).sum() / mask.sum() - bonus * (arl.entropy_from_logits(logits) * mask).sum() / mask.sum()
    grads = torch.autograd.grad(loss, list(before.parameters()))
    for p_new, p_old, g in zip(m.parameters(), before.parameters(), grads):
        assert torch.allclose(p_new, p_old - g, atol=1e-6)
    if bonus:
        assert any(g.abs().sum() > 0 for g in torch.autograd.grad(
            (arl.entropy_from_logits(before(b['ids'])[:, :-1]) * mask).sum(), list(before.parameters())))


@pytest.mark.parametrize('agg', ['token', 'seq'])
def test_clipped_trainer_loss_trains_only_policy_tokens(model, trained_model, train_tasks, tok, agg):
    batch_tasks = [t for t in train_tasks[:4] for _ in range(4)]
    trajs = arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch_tasks], batch_tasks, tok,
                              generator=torch.Generator().manual_seed(2))
    rewards = torch.tensor([t.reward for t in trajs]).view(4, 4)
    advantages = group_advantages(rewards, 'std').flatten() + 0.1  # nonzero for every episode
    m = copy.deepcopy(trained_model)
    cfg = GRPOConfig(agg=agg, kl_coef=0.1, ent_coef=0.01)
    with LogitGrads(m) as g:
        loss, stats = grpo_loss(m, arl.collate(trajs, tok.pad_id), advantages, cfg, ref_model=copy.deepcopy(model))
        loss.backward()
    assert_only_policy_positions(g.seen, trajs)
    assert set(stats) >= {'pg_loss', 'entropy', 'clip_frac', 'approx_kl', 'kl'}


def test_star_masked_forced_tokens_get_no_gradient(model, train_oracle_demos, tok):
    demo = train_oracle_demos[0]
    op_at = [i for i in range(1, len(demo.ids)) if demo.owner[i] == POLICY and tok.vocab[int(demo.ids[i])] in arl.OPS]
    assert len(op_at) == 1, 'the oracle demo has one edit op token'
    forced = arl.Trajectory(demo.ids, demo.action_mask, demo.logprobs, demo.reward,
                            dict(demo.info, forced_positions=op_at), demo.owner, demo.turn)
    masked = mask_forced_tokens(forced)
    m = copy.deepcopy(model)
    with LogitGrads(m) as g:
        arl.sft_loss(m, arl.collate([masked], tok.pad_id)).backward()
    per_pos = g.seen[0].grad.abs().sum(-1)[0]  # (T,)
    for p in op_at:
        assert per_pos[p - 1].item() == 0.0  # the forced op is not trained
    assert_only_policy_positions(g.seen, [demo])  # and nothing outside the policy's tokens either


# --- each recipe runs for a few steps

def test_recipes_smoke(trained_model, train_tasks, heldout_tasks, train_oracle_demos, tok):
    tasks = train_tasks[:6]
    model = copy.deepcopy(trained_model)
    losses = arl.sft_train(model, train_oracle_demos, tok, steps=3, batch_size=8)
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))

    rounds = arl.expert_iteration(copy.deepcopy(trained_model), tasks, tok, rounds=2, n_samples=4, steps=2,
                                  dedup=True, per_task_cap=2)
    assert len(rounds) == 2
    for r in rounds:
        assert all(t.reward == 1.0 for t in r['kept'])
        assert len({(t.info['task'], tuple(t.info['actions'])) for t in r['kept']}) == len(r['kept'])  # deduped
        assert all(sum(t.info['task'] == name for t in r['kept']) <= 2 for name in r['solved'])  # capped

    hacks = arl.expert_iteration(copy.deepcopy(trained_model), tasks, tok, rounds=1, n_samples=4, steps=2, reward='public')
    assert hacks[0]['hacks'] == sum(not t.info['hidden_pass'] for t in hacks[0]['kept'])

    _, sample = arl.pass_rate(trained_model, tasks, tok, 8, seed=1)
    pairs = arl.make_pairs(sample, tasks) or [(train_oracle_demos[0], sample[0])]
    log = arl.train_dpo(copy.deepcopy(trained_model), pairs, tok, steps=2, every=1, nll_weight=1.0,
                        evaluate=lambda m: {'train': 0.0})
    assert [row['step'] for row in log] == [1, 2]

    hist = arl.train_rl(copy.deepcopy(trained_model), tasks, tok, steps=2, n_tasks=2, group=4, every=1,
                        evaluate=lambda m: (0.0,))
    assert [h[0] for h in hist] == [0, 1, 2]

    rate, informative, entropy = arl.probe(trained_model, heldout_tasks[:3], tok, group=4)
    assert 0 <= rate <= 1 and 0 <= informative <= 1 and entropy >= 0

    stripped = [arl.strip_wrappers(t) for t in train_oracle_demos[:3]]
    assert all((s.owner != arl.OWNER['template']).sum() == len(s.ids) - 1 for s in stripped)  # only <bos> left
    assert arl.check_rendering(stripped, tok) and not arl.check_rendering(train_oracle_demos[:3], tok)


def test_expert_iteration_rejects_bad_rounds(trained_model, train_tasks, tok):
    with pytest.raises(ValueError, match='rounds'):
        arl.expert_iteration(trained_model, train_tasks, tok, rounds=0)


def test_ipo_regresses_the_per_token_margin_as_its_authors_define_it():
    """IPO (Azar et al. 2023; TRL's loss_type='ipo'): each episode's log-ratio averaged over its action tokens, the
    margin regressed to 1 / (2 beta). Worked by hand: ratios chosen (1, 1) over 4 and 2 tokens, rejected (-2, -1)
    over 5 and 3: margins 0.25 + 0.4 = 0.65 and 0.5 + 1/3; beta 0.5 puts the target at 1."""
    pc, pr = torch.tensor([-10., -4.]), torch.tensor([-12., -9.])
    rc, rr = torch.tensor([-11., -5.]), torch.tensor([-10., -8.])
    nc, nr = torch.tensor([4., 2.]), torch.tensor([5., 3.])
    expected = ((0.65 - 1) ** 2 + (0.5 + 1 / 3 - 1) ** 2) / 2  # 0.0751389
    assert preference_loss(pc, pr, rc, rr, beta=0.5, loss='ipo', chosen_tokens=nc, rejected_tokens=nr).item() == \
        pytest.approx(expected, abs=1e-6)
    # the summed form, by its own name: margins 1 + 2 = 3 and 1 + 1 = 2
    assert preference_loss(pc, pr, rc, rr, beta=0.5, loss='ipo_sum').item() == pytest.approx(((3 - 1) ** 2 + 1) / 2)
    with pytest.raises(ValueError, match="loss='ipo_sum'"):  # IPO without the counts says what it needs
        preference_loss(pc, pr, rc, rr, beta=0.5, loss='ipo')
    with pytest.raises(ValueError, match='positive counts'):
        preference_loss(pc, pr, rc, rr, beta=0.5, loss='ipo', chosen_tokens=torch.tensor([4., 0.]), rejected_tokens=nr)


def test_preference_loss_rejects_unknown_loss():
    z = torch.zeros(1)
    with pytest.raises(ValueError, match='sigmoid'):
        preference_loss(z, z, z, z, loss='nope')


def test_reads_first_tells_reading_from_editing_at_once(train_oracle_demos, blind_trajs, tok):
    """15.5's road of an RL policy: the oracle reads first in every episode, blind play in none."""
    from agentrl.recipes.diagnostics import reads_first
    assert reads_first(train_oracle_demos) == 1.0 and reads_first(blind_trajs) == 0.0
    assert reads_first(train_oracle_demos[:3] + blind_trajs[:1]) == 0.75
    with pytest.raises(ValueError, match='at least one episode'):
        reads_first([])


@pytest.mark.parametrize('credit, bonus', [('episode', 0.0), ('turn', 0.0), ('episode', 0.2)])
def test_micro_batches_give_the_one_batch_update(trained_model, train_tasks, tok, credit, bonus):
    """REINFORCE over micro-batches of 3 episodes: the same update as one batch (the token count of the whole batch
    divides every part), with the episodes whose advantage is zero left out unless the entropy bonus reads them."""
    grads = {}
    forwarded = []
    for micro in (None, 3):
        m = copy.deepcopy(trained_model)
        real = m.forward
        m.forward = lambda ids, *a, **kw: forwarded.append((micro, ids.shape[0])) or real(ids, *a, **kw)
        opt = torch.optim.SGD(m.parameters(), lr=1.0)
        before = [p.detach().clone() for p in m.parameters()]
        arl.reinforce_step(m, opt, train_tasks, tok, random.Random(0), torch.Generator().manual_seed(0), n_tasks=4,
                           group=4, credit=credit, entropy_bonus=bonus, micro_batch=micro)
        grads[micro] = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, m.parameters())])  # lr 1: the gradient
    assert grads[None].abs().max() > 1e-4
    assert torch.allclose(grads[None], grads[3], atol=1e-6)
    chunks = [n for micro, n in forwarded if micro == 3]
    assert max(chunks) <= 3 and (sum(chunks) == 16 if bonus else sum(chunks) < 16)
    with pytest.raises(ValueError, match='micro_batch must be None'):
        arl.reinforce_step(trained_model, torch.optim.SGD(trained_model.parameters(), lr=0.0), train_tasks, tok,
                           random.Random(0), torch.Generator(), n_tasks=2, group=2, micro_batch=0)
