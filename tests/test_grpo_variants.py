"""The clipped trainer's policy-gradient variants (``recipes.pg_losses``, ``GRPOConfig`` under TRL's names).

Each loss is checked against its paper's formula worked out by hand on one fixed batch (the numbers are written
here, never the code's output), with its gradient; TRL's clip monitors against TRL's definition; then the
config's names, dynamic sampling, the truncation mask and truncated importance sampling on the trainer.
"""
from __future__ import annotations

import copy
import math
import statistics

import pytest
import torch

import agentrl as arl
from agentrl.recipes import grpo as G
from agentrl.recipes.grpo import GRPOConfig, grpo_loss, train_grpo
from agentrl.recipes.pg_losses import (aggregate, clip_ratios, group_advantages, kl_k3, policy_loss, sampler_gap,
                                       sampler_weights)

E = math.exp

# --- the fixed batch ------------------------------------------------------------------------------------------------
# two episodes, three next-token positions; episode 1's last position is padding
LOGP = [[-1.0, -0.5, -2.0], [-0.3, -1.2, 0.0]]
OLD = [[-1.2, -0.5, -1.0], [-0.3, -0.2, 0.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
ADV = [[1.0], [-2.0]]
# the ratios r = exp(logp - old): episode 0: e^0.2, 1, e^-1; episode 1: 1, e^-1


def batch():
    """(logp as a leaf that needs grad, old, mask, advantages)."""
    return (torch.tensor(LOGP, dtype=torch.float64, requires_grad=True), torch.tensor(OLD, dtype=torch.float64),
            torch.tensor(MASK, dtype=torch.float64), torch.tensor(ADV, dtype=torch.float64))


def loss_and_grad(**knobs):
    cfg = GRPOConfig(**knobs)
    logp, old, mask, A = batch()
    loss, _ = policy_loss(logp, old, A, mask, cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.item(), grad.tolist()


def close(got, want, tol=1e-9):
    got, want = torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
    assert got.shape == want.shape and torch.allclose(got, want, atol=tol, rtol=0), (got, want)


# PPO's clipped surrogate, eps = 0.2 (Schulman et al. 2017), worked out per token: -min(r A, clip(r, 0.8, 1.2) A)
#   ep 0 (A = 1):  r = e^0.2 > 1.2 -> -1.2 (clipped, no gradient); r = 1 -> -1; r = e^-1 -> -e^-1 (unclipped)
#   ep 1 (A = -2): r = 1 -> 2;  r = e^-1 < 0.8 -> max(2 e^-1, 1.6) = 1.6 (clipped, no gradient)
PPO_TOKENS = [[-1.2, -1.0, -E(-1)], [2.0, 1.6]]
# d(-r A)/d logp = -r A where the unclipped term is taken, 0 where the clip binds
PPO_GRAD = [[0.0, -1.0, -E(-1)], [2.0, 0.0, 0.0]]
PPO_SUM = -1.2 - 1.0 - E(-1) + 2.0 + 1.6


def test_bnpo_is_the_token_mean_of_ppos_surrogate():
    loss, grad = loss_and_grad(loss_type='bnpo')
    assert loss == pytest.approx(PPO_SUM / 5, abs=1e-12)
    close(grad, [[g / 5 for g in row] for row in PPO_GRAD])


def test_grpo_is_the_mean_of_each_episodes_token_mean():
    loss, grad = loss_and_grad(loss_type='grpo')  # Shao et al. 2024: 1/G sum_i 1/|o_i| sum_t
    assert loss == pytest.approx(((-1.2 - 1.0 - E(-1)) / 3 + (2.0 + 1.6) / 2) / 2, abs=1e-12)
    close(grad, [[g / 3 / 2 for g in PPO_GRAD[0]], [g / 2 / 2 for g in PPO_GRAD[1]]])


def test_dr_grpo_divides_by_a_constant():
    loss, grad = loss_and_grad(loss_type='dr_grpo', max_completion_length=4)  # Liu et al. 2025: / (G * L_max)
    assert loss == pytest.approx(PPO_SUM / (2 * 4), abs=1e-12)
    close(grad, [[g / 8 for g in row] for row in PPO_GRAD])


def test_dapo_divides_by_the_whole_batchs_tokens():
    cfg = GRPOConfig(loss_type='dapo')
    logp, old, mask, A = batch()
    loss, _ = policy_loss(logp, old, A, mask, cfg, num_items=10)  # a step's batch of 20 tokens, 2 minibatches
    (grad,) = torch.autograd.grad(loss, logp)
    assert loss.item() == pytest.approx(PPO_SUM / 10, abs=1e-12)
    close(grad.tolist(), [[g / 10 for g in row] for row in PPO_GRAD])
    assert loss_and_grad(loss_type='dapo')[0] == pytest.approx(PPO_SUM / 5, abs=1e-12)  # alone: its own tokens


def test_clip_higher_lets_a_rare_token_grow():
    loss, grad = loss_and_grad(epsilon_high=0.28)  # DAPO: clip(r, 1 - 0.2, 1 + 0.28); e^0.2 = 1.221 < 1.28
    assert loss == pytest.approx((-E(0.2) - 1.0 - E(-1) + 2.0 + 1.6) / 5, abs=1e-12)
    close(grad, [[-E(0.2) / 5, -1 / 5, -E(-1) / 5], [2 / 5, 0.0, 0.0]])


def test_delta_caps_the_ratio_of_a_negative_advantage():
    cfg = GRPOConfig(delta=1.5)  # INTELLECT-2: -min(min(r, delta) A, clip(r) A)
    logp = torch.tensor([[0.5]], dtype=torch.float64, requires_grad=True)
    old, mask, A = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64), -torch.ones(1, 1)
    loss, _ = policy_loss(logp, old, A.double(), mask, cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    assert loss.item() == pytest.approx(1.5) and grad.item() == 0.0  # capped: e^0.5 = 1.65 -> 1.5
    loss, _ = policy_loss(logp, old, A.double(), mask, GRPOConfig())
    assert loss.item() == pytest.approx(E(0.5))  # without it the ratio grows unbounded


def test_gspo_clips_one_length_normalised_ratio_per_sequence():
    # Zheng et al. 2025: s_i = exp(mean_t (logp - old)). ep 0: exp(-0.8 / 3) = 0.766, below 0.8 with A > 0: the min
    # takes s_0 itself (unclipped); ep 1: exp(-1 / 2) = 0.607, below 0.8 with A < 0: clipped, 2 * 0.8 = 1.6
    s0 = E((0.2 + 0.0 - 1.0) / 3)
    loss, grad = loss_and_grad(importance_sampling_level='sequence', loss_type='grpo')
    assert loss == pytest.approx((-s0 + 1.6) / 2, abs=1e-12)
    close(grad, [[-s0 / 3 / 2] * 3, [0.0, 0.0, 0.0]])  # ds0/dlogp_t = s0 / |o_0|; every token of episode 0


def test_cispo_keeps_every_tokens_gradient():
    # MiniMax-M1: -sg(min(r, eps_max)) A log pi; eps_max = 1.1: weights ep 0: 1.1, 1, e^-1; ep 1: 1, e^-1
    w = [[1.1, 1.0, E(-1)], [1.0, E(-1)]]
    tokens = [-w[0][0] * 1 * -1.0, -w[0][1] * 1 * -0.5, -w[0][2] * 1 * -2.0, -w[1][0] * -2 * -0.3,
              -w[1][1] * -2 * -1.2]
    loss, grad = loss_and_grad(loss_type='cispo', epsilon_high=1.1)
    assert loss == pytest.approx(sum(tokens) / 5, abs=1e-12)  # aggregated as DAPO (alone: its own 5 tokens)
    close(grad, [[-1.1 / 5, -1 / 5, -E(-1) / 5], [2 / 5, 2 * E(-1) / 5, 0.0]])  # -w A / N, none dropped


def test_truncated_importance_sampling_weights_each_tokens_loss():
    # Yao et al. 2025: w = min(pi_train / pi_sample, C); the trainer is at OLD, the sampler a little off
    sampler = torch.tensor([[-1.0, -0.5, -1.1], [-0.3, -0.9, 0.0]], dtype=torch.float64)
    _, old, mask, _ = batch()
    w = sampler_weights(old, sampler, mask, 'token_truncate', None, 1.1)
    close(w.tolist(), [[E(-0.2), 1.0, 1.1], [1.0, 1.1, 1.0]])  # e^0.1 = 1.105 and e^0.7 = 2.01 capped at 1.1
    seq = sampler_weights(old, sampler, mask, 'sequence_truncate', None, 3.0)
    close(seq.tolist(), [[E(-0.2 + 0.1)], [E(0.7)]])
    masked = sampler_weights(old, sampler, mask, 'token_mask', None, 1.1)
    close(masked.tolist(), [[E(-0.2), 1.0, 0.0], [1.0, 0.0, 1.0]])
    logp, old, mask, A = batch()
    loss, _ = policy_loss(logp, old, A, mask, GRPOConfig(), sampler_weight=w)
    tokens = [PPO_TOKENS[0][0] * E(-0.2), PPO_TOKENS[0][1], PPO_TOKENS[0][2] * 1.1, PPO_TOKENS[1][0],
              PPO_TOKENS[1][1] * 1.1]
    assert loss.item() == pytest.approx(sum(tokens) / 5, abs=1e-12)
    gap = sampler_gap(old, sampler, mask)
    assert gap['sampling/sampling_logp_difference/mean'] == pytest.approx((0.2 + 0 + 0.1 + 0 + 0.7) / 5)
    assert gap['sampling/sampling_logp_difference/max'] == pytest.approx(0.7)
    assert gap['sampler_gap/outside_share'] == pytest.approx(1 / 5)  # e^0.7 = 2.01 only; e^-0.2 = 0.82 is inside


def test_trls_clip_monitors_count_only_where_the_clip_binds():
    # TRL: low = r < 1 - eps and A < 0; high = r > 1 + eps_high and A > 0; means over the action tokens
    # ep 0 (A = 1): e^0.2 > 1.2 -> high; e^-1 < 0.8 but A > 0 -> neither.  ep 1 (A = -2): e^-1 < 0.8 -> low
    logp, old, mask, A = batch()
    r = (logp.detach() - old).mul(mask).exp()
    got = clip_ratios(r, A, mask, GRPOConfig())
    assert got == pytest.approx({'clip_ratio/low_mean': 1 / 5, 'clip_ratio/high_mean': 1 / 5,
                                 'clip_ratio/region_mean': 2 / 5, 'clip_ratio/low_min': 0.0,
                                 'clip_ratio/high_max': 1 / 3})
    # agentrl's clip_frac counts every ratio outside [0.8, 1.2] whatever its advantage: 3 of 5 tokens
    assert clip_ratios(r, A, mask, GRPOConfig(loss_type='cispo', epsilon_high=1.1)) == \
        pytest.approx({'cispo_clip_ratio': 1 / 5})
    seq = clip_ratios(torch.tensor([[0.7], [1.3]]), torch.tensor([[-1.0], [-1.0]]), mask, GRPOConfig())
    assert seq['clip_ratio/region_mean'] == pytest.approx(1 / 2)  # sequence ratios: a share of the episodes


def test_k3_kl():
    logp, _, mask, _ = batch()
    ref = torch.tensor([[-1.5, -0.5, -1.0], [0.0, -1.2, 3.0]], dtype=torch.float64)
    d = [[-0.5, 0.0, 1.0], [0.3, 0.0, 0.0]]  # log pi_ref - log pi; 0 on the padding
    close(kl_k3(logp.detach(), ref, mask).tolist(), [[E(x) - 1 - x for x in row] for row in d])


REWARDS = [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]


@pytest.mark.parametrize('estimator, scale, want', [
    ('grpo', 'none', [[0.5, -0.5, -0.5, 0.5], [0.0] * 4, [-0.25, -0.25, -0.25, 0.75]]),
    # RLOO: R_i - mean of the other three
    ('rloo', 'none', [[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0.0] * 4, [-1 / 3, -1 / 3, -1 / 3, 1.0]]),
    ('grpo', 'group', [[x / (statistics.stdev(REWARDS[0]) + 1e-4) for x in (0.5, -0.5, -0.5, 0.5)], [0.0] * 4,
                       [x / (statistics.stdev(REWARDS[2]) + 1e-4) for x in (-0.25, -0.25, -0.25, 0.75)]]),
    ('grpo', 'batch', [[x / (statistics.stdev([r for row in REWARDS for r in row]) + 1e-4) for x in row] for row in
                       ([0.5, -0.5, -0.5, 0.5], [0.0] * 4, [-0.25, -0.25, -0.25, 0.75])]),
])
def test_advantages(estimator, scale, want):
    close(group_advantages(torch.tensor(REWARDS, dtype=torch.float64), scale, estimator).tolist(), want, 1e-12)


def test_aggregate_takes_the_former_names():
    x, m = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]), torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(x, m, 'token').item() == pytest.approx(10 / 4) == aggregate(x, m, 'bnpo').item()
    assert aggregate(x, m, 'seq').item() == pytest.approx((2 + 4) / 2) == aggregate(x, m, 'grpo').item()


# --- the config -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('old, value, new, want', [
    ('group', 4, 'num_generations', 4), ('lr', 0.01, 'learning_rate', 0.01), ('epochs', 3, 'num_iterations', 3),
    ('clip', 0.3, 'epsilon', 0.3), ('agg', 'seq', 'loss_type', 'grpo'), ('agg', 'token', 'loss_type', 'bnpo'),
    ('adv_norm', 'std', 'scale_rewards', 'group'), ('adv_norm', 'mean', 'scale_rewards', 'none'),
    ('kl_coef', 0.1, 'beta', 0.1), ('ent_coef', 0.01, 'entropy_coef', 0.01),
    ('vllm_importance_sampling_cap', 2.0, 'vllm_importance_sampling_clip_max', 2.0)])
def test_former_names_still_work(old, value, new, want):
    assert getattr(GRPOConfig(**{old: value}), new) == want
    with pytest.raises(ValueError, match=f'{old} is the former name of {new}'):
        GRPOConfig(**{old: value, new: want if want != getattr(GRPOConfig(), new) else value})


def test_the_defaults_are_the_trainer_of_before():
    cfg = GRPOConfig()
    assert (cfg.loss_type, cfg.scale_rewards, cfg.num_iterations, cfg.minibatches, cfg.epsilon, cfg.beta,
            cfg.entropy_coef, cfg.learning_rate) == ('bnpo', 'none', 2, 2, 0.2, 0.0, 0.0, 1e-3)
    assert GRPOConfig(scale_rewards=True).scale_rewards == 'group' and GRPOConfig(scale_rewards=False).scale_rewards \
        == 'none'  # TRL's booleans


@pytest.mark.parametrize('knobs, match', [
    ({'loss_type': 'sapo'}, "'grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo'"),
    ({'importance_sampling_level': 'episode'}, "'token', 'sequence'"),
    ({'scale_rewards': 'std'}, "'none', 'group', 'batch'"),
    ({'advantage_estimator': 'gae'}, "'grpo', 'rloo'"),
    ({'vllm_importance_sampling_mode': 'clip'}, "'token_truncate', 'token_mask'"),
    ({'agg': 'sample'}, r"\['token', 'seq'\].*former name of loss_type"),
    ({'adv_norm': 'rank'}, r"\['mean', 'std'\].*former name of scale_rewards"),
    ({'delta': 0.9}, 'delta must be'), ({'epsilon_high': 0.0}, 'epsilon_high must be'),
    ({'num_generations': 1, 'advantage_estimator': 'rloo'}, 'num_generations >= 2'),
    ({'vllm_importance_sampling_clip_min': 2.0, 'vllm_importance_sampling_clip_max': 1.0}, 'must be below'),
    ({'dynamic_sampling': 1}, 'True or False'), ({'max_num_gen_batches': 0}, 'positive int')])
def test_bad_settings_name_the_valid_ones(knobs, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**knobs)


# --- on the trainer -------------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def sample(trained_model, train_tasks, tok):
    """16 sampled episodes of 4 tasks, mixed outcomes, and their batch."""
    batch_tasks = [t for t in train_tasks[:4] for _ in range(4)]
    trajs = arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch_tasks], batch_tasks, tok,
                              generator=torch.Generator().manual_seed(2))
    return trajs, arl.collate(trajs, tok.pad_id)


def test_entropy_and_kl_are_token_means_for_every_loss_type(trained_model, sample, tok):
    _, b = sample
    model = copy.deepcopy(trained_model)
    ref = copy.deepcopy(trained_model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    adv = torch.linspace(-1, 1, len(b['ids']))
    _, stats = grpo_loss(model, b, adv, GRPOConfig(loss_type='grpo', beta=0.1, temperature=1.3), ref)
    mask = b['action_mask']
    with torch.no_grad():  # TRL's: the mean over every action token of the batch, at the temperature
        logits = model(b['ids'], lengths=b['lengths'])[:, :-1] / 1.3
        logp = torch.log_softmax(logits, -1).gather(-1, b['ids'][:, 1:, None]).squeeze(-1)
        ref_logp = torch.log_softmax(ref(b['ids'], lengths=b['lengths'])[:, :-1] / 1.3, -1).gather(
            -1, b['ids'][:, 1:, None]).squeeze(-1)
        ent = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
        d = ref_logp - logp
    assert stats['entropy'] == pytest.approx(((ent * mask).sum() / mask.sum()).item(), rel=1e-5)
    assert stats['kl'] == pytest.approx((((d.exp() - 1 - d) * mask).sum() / mask.sum()).item(), rel=1e-4)


def test_truncated_episodes_are_recorded_and_masked_out(trained_model, train_tasks, tok, sample):
    oracle = arl.scripted_policy('oracle')
    cut = arl.scripted_rollout(oracle, arl.BugFixEnv(max_turns=1), train_tasks[0], tok)
    whole = arl.scripted_rollout(oracle, arl.BugFixEnv(), train_tasks[0], tok)
    assert cut.info['truncated'] is True and whole.info['truncated'] is False
    trajs, _ = sample
    trajs = [copy.copy(t) for t in trajs]
    for k, t in enumerate(trajs):
        t.info = dict(t.info, truncated=k % 3 == 0)
    b = arl.collate(trajs, tok.pad_id)
    assert b['truncated'].tolist() == [k % 3 == 0 for k in range(len(trajs))]
    kept = [t for k, t in enumerate(trajs) if k % 3]
    adv = torch.linspace(-1, 1, len(trajs))
    cfg = GRPOConfig(mask_truncated_completions=True)
    loss, _ = grpo_loss(trained_model, b, adv, cfg)
    want, _ = grpo_loss(trained_model, arl.collate(kept, tok.pad_id), adv[[k for k in range(len(trajs)) if k % 3]],
                        GRPOConfig())
    assert loss.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)  # the token mean over the others alone
    with pytest.raises(ValueError, match="'truncated'"):
        grpo_loss(trained_model, {k: v for k, v in b.items() if k != 'truncated'}, adv, cfg)


class _Episode:
    def __init__(self, reward):
        self.reward, self.info = reward, {}


def test_dynamic_sampling_draws_until_the_batch_is_informative(monkeypatch):
    batches = iter([[0, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]])  # groups of 2: (0 0) (0 1) | (1 1) (1 0) | ...
    monkeypatch.setattr(G, 'rollout_groups', lambda *a, **k: [_Episode(r) for r in next(batches)])
    cfg = GRPOConfig(n_tasks=2, num_generations=2, minibatches=1, dynamic_sampling=True)
    trajs, sampled, drawn = G._sample(None, ['a', 'b', 'c'], None, cfg, __import__('random').Random(0), None, None)
    assert [t.reward for t in trajs] == [0, 1, 1, 0] and len(sampled) == 8 and drawn == 2
    batches = iter([[0, 0, 0, 1], [1, 1, 0, 0]])
    capped = GRPOConfig(n_tasks=2, num_generations=2, minibatches=1, dynamic_sampling=True, max_num_gen_batches=2)
    trajs, sampled, drawn = G._sample(None, ['a', 'b', 'c'], None, capped, __import__('random').Random(0), None, None)
    assert [t.reward for t in trajs] == [0, 1, 0, 0] and len(sampled) == 8 and drawn == 2  # filled up at the cap


def test_dynamic_sampling_and_tis_on_the_trainer(trained_model, train_tasks, tok):
    cfg = GRPOConfig(n_tasks=2, num_generations=4, num_iterations=1, minibatches=1, dynamic_sampling=True,
                     vllm_importance_sampling_correction=True, loss_type='dapo', epsilon_high=0.28, seed=3)
    log = arl.MemoryLogger()
    _, logs = train_grpo(copy.deepcopy(trained_model), train_tasks, tok, 2, cfg, loggers=log)
    for row in logs:
        assert row['dynamic_sampling/episodes'] == 8 * row['dynamic_sampling/batches']
        assert 1 <= row['dynamic_sampling/batches'] <= cfg.max_num_gen_batches
        # the TinyAgent samples with the trainer's own weights: the gap is float rounding, every weight about 1
        assert row['sampling/sampling_logp_difference/mean'] < 1e-4 and row['sampler_gap/outside_share'] == 0
        assert abs(row['sampling/importance_sampling_ratio/mean'] - 1) < 1e-4
    assert [v for _, v in log.series('dynamic_sampling/episodes')] == [r['dynamic_sampling/episodes'] for r in logs]
    assert {'clip_ratio/low_mean', 'clip_ratio/high_mean', 'clip_ratio/region_mean'} <= log.names()


def test_tis_weights_the_first_pass_against_the_sampler(trained_model, sample, tok):
    _, b = sample
    model = copy.deepcopy(trained_model)
    off = dict(b, logprobs=b['logprobs'] + 0.3 * b['action_mask'] * torch.sign(torch.randn(
        b['logprobs'].shape, generator=torch.Generator().manual_seed(1))))  # a sampler 0.3 nats off either way
    adv = torch.linspace(-1, 1, len(b['ids']))
    cfg = GRPOConfig(vllm_importance_sampling_correction=True, vllm_importance_sampling_clip_max=1.2)
    loss, stats = grpo_loss(model, off, adv, cfg)
    mask = b['action_mask']
    with torch.no_grad():
        logp = torch.log_softmax(model(b['ids'], lengths=b['lengths'])[:, :-1], -1).gather(
            -1, b['ids'][:, 1:, None]).squeeze(-1)
    w = torch.clamp((logp - off['logprobs']).exp(), max=1.2)  # min(pi_train / pi_sample, C); ratio to pi_train is 1
    assert loss.item() == pytest.approx((-(adv[:, None] * w * mask).sum() / mask.sum()).item(), rel=1e-5)
    assert stats['sampling/importance_sampling_ratio/max'] == pytest.approx(1.2)


@pytest.mark.parametrize('knobs', [
    {'loss_type': 'grpo', 'importance_sampling_level': 'sequence', 'epsilon': 3e-4, 'epsilon_high': 4e-4},  # GSPO
    {'loss_type': 'cispo', 'epsilon_high': 5.0, 'advantage_estimator': 'rloo', 'scale_rewards': 'batch'},
    {'loss_type': 'dr_grpo', 'mask_truncated_completions': True, 'max_grad_norm': 0.5, 'beta': 0.05,
     'use_bias_correction_kl': True, 'delta': 2.0, 'credit': 'turn', 'scale_rewards': 'group'}])
def test_every_variant_trains(trained_model, train_tasks, tok, knobs):
    cfg = GRPOConfig(n_tasks=2, num_generations=4, seed=1, **knobs)
    model = copy.deepcopy(trained_model)
    _, logs = train_grpo(model, train_tasks, tok, 1, cfg)
    assert all(math.isfinite(v) for v in logs[0].values() if isinstance(v, float))
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), trained_model.parameters()))
