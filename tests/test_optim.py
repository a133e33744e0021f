"""The trainer hygiene every recipe shares (``recipes/optim.py``), and the clipped trainer's gradient accumulation and
resume: the learning rate's schedule by its formula, norms and biases undecayed, the gradient clipped, a minibatch's
parts adding up to its update for every loss type, and a stopped run continuing to the same weights and logs."""
from __future__ import annotations

import copy
import math

import pytest
import torch

import agentrl as arl
from agentrl.recipes.grpo import GRPOConfig, train_grpo
from agentrl.recipes.loop import Checkpoint
from agentrl.recipes.optim import OptimConfig, lr_factor, make_optimizer, make_scheduler, optimizer_step


def test_warmup_then_the_schedule_by_its_formula():
    warm = OptimConfig(warmup_steps=4, lr_scheduler_type='linear')
    # linear warmup from 0: step k of the warmup runs at (k + 1) / (warmup + 1)
    assert [lr_factor(k, 14, warm) for k in range(4)] == [0.2, 0.4, 0.6, 0.8]
    # then linear decay: 1 at the warmup's end, 0 at the last step (10 steps after it)
    assert lr_factor(4, 14, warm) == 1.0 and lr_factor(9, 14, warm) == pytest.approx(0.5)
    cos = OptimConfig(lr_scheduler_type='cosine')
    assert lr_factor(5, 10, cos) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))  # half way: 0.5
    assert lr_factor(3, 10, OptimConfig()) == 1.0 and make_scheduler(None, OptimConfig(), 10) is None
    with pytest.raises(ValueError, match="'constant', 'linear', 'cosine'"):
        OptimConfig(lr_scheduler_type='step')


def test_norms_and_biases_can_be_left_undecayed(trained_model):
    opt = make_optimizer(trained_model, 1e-3, OptimConfig(decay_norms_and_biases=False, weight_decay=0.1))
    decayed, kept = opt.param_groups
    assert decayed['weight_decay'] == 0.1 and kept['weight_decay'] == 0.0
    assert all(p.dim() >= 2 for p in decayed['params']) and all(p.dim() == 1 for p in kept['params'])
    assert len(decayed['params']) + len(kept['params']) == len(list(trained_model.parameters()))
    plain = make_optimizer(trained_model, 1e-3)  # the chapter's: one group, torch's 0.01 on every weight
    assert len(plain.param_groups) == 1 and plain.param_groups[0]['weight_decay'] == 0.01


def test_the_gradient_is_clipped_to_max_grad_norm():
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))  # its gradient below is (3, 4): norm 5
    opt = torch.optim.SGD([w], lr=1.0)
    (0.5 * (w ** 2).sum()).backward()
    m = torch.nn.Module()
    m.w = w
    optimizer_step(m, opt, None, OptimConfig(max_grad_norm=1.0))
    assert torch.allclose(w.detach(), torch.tensor([3 - 0.6, 4 - 0.8]))  # the step is the gradient scaled to norm 1


@pytest.mark.parametrize('loss_type', ['bnpo', 'grpo', 'dr_grpo', 'dapo', 'cispo'])
def test_a_minibatchs_parts_add_up_to_its_gradient(trained_model, train_tasks, tok, loss_type):
    """Gradient accumulation: the parts' losses, each divided by the whole minibatch's counts (``norm``), add up to the
    minibatch's gradient, whatever the loss's normaliser (episodes, tokens, a constant, the step's batch), with a KL
    and an entropy term on; and the trainer with ``micro_batch`` takes the whole minibatch's step."""
    from agentrl.recipes.grpo import grpo_loss
    from agentrl.recipes.pg_losses import loss_mask
    batch_tasks = [t for t in train_tasks[:3] for _ in range(4)]
    trajs = arl.rollout_batch(trained_model, [arl.BugFixEnv() for _ in batch_tasks], batch_tasks, tok,
                              generator=torch.Generator().manual_seed(2))
    cfg = GRPOConfig(n_tasks=3, num_generations=4, loss_type=loss_type, beta=0.05, entropy_coef=0.01,
                     epsilon_high=5.0 if loss_type == 'cispo' else None)
    adv = torch.linspace(-1, 1, len(trajs))  # [B], any advantages
    params = list(trained_model.parameters())
    ref = copy.deepcopy(trained_model)
    whole = arl.collate(trajs, tok.pad_id)
    num_items = loss_mask(whole, cfg).sum() if loss_type in ('dapo', 'cispo') else None
    g_whole = torch.autograd.grad(grpo_loss(trained_model, whole, adv, cfg, ref, num_items)[0], params, allow_unused=True)
    norm = (len(trajs), int(loss_mask(whole, cfg).sum()))
    g_parts = [torch.zeros_like(p) for p in params]
    for rows in torch.arange(len(trajs)).split(5):
        part = arl.collate([trajs[i] for i in rows.tolist()], tok.pad_id)
        g = torch.autograd.grad(grpo_loss(trained_model, part, adv[rows], cfg, ref, num_items, norm)[0], params,
                                allow_unused=True)
        g_parts = [a + (0 if b is None else b) for a, b in zip(g_parts, g)]
    assert max((a - (0 if b is None else b)).abs().max().item() for a, b in zip(g_parts, g_whole)) < 1e-6
    assert max(0 if b is None else b.abs().max().item() for b in g_whole) > 1e-4
    out = {}
    for micro in (0, 3):  # the trainer: AdamW's step on the same gradient (to its rounding: a flip would be lr)
        m = copy.deepcopy(trained_model)
        train_grpo(m, train_tasks, tok, 1, GRPOConfig(n_tasks=2, num_generations=4, minibatches=1, num_iterations=1,
                                                      loss_type=loss_type, micro_batch=micro, seed=3,
                                                      epsilon_high=5.0 if loss_type == 'cispo' else None))
        out[micro] = m
    assert max((p - q).abs().max().item() for p, q in zip(out[0].parameters(), out[3].parameters())) < 1e-4


def test_the_clipped_trainer_resumes_to_the_same_weights_and_logs(trained_model, train_tasks, tok, tmp_path):
    cfg = GRPOConfig(n_tasks=2, num_generations=4, minibatches=2, warmup_steps=2, lr_scheduler_type='cosine',
                     beta=0.05, seed=1)
    plain = copy.deepcopy(trained_model)
    expected = train_grpo(plain, train_tasks, tok, 5, cfg, every=2,
                          evaluate=lambda m: (arl.pass_rate(m, train_tasks[:2], tok, 1)[0],))

    class Stop(Exception):
        pass

    def stop(recipe, step, total, seconds, first):
        if step == 4:
            raise Stop
    ck = lambda: Checkpoint(tmp_path / 'grpo.safetensors', every=3)  # noqa: E731
    with pytest.raises(Stop):
        train_grpo(copy.deepcopy(trained_model), train_tasks, tok, 5, cfg, every=2, checkpoint=ck(), progress=stop,
                   evaluate=lambda m: (arl.pass_rate(m, train_tasks[:2], tok, 1)[0],))
    resumed = copy.deepcopy(trained_model)
    got = train_grpo(resumed, train_tasks, tok, 5, cfg, every=2, checkpoint=ck(),
                     evaluate=lambda m: (arl.pass_rate(m, train_tasks[:2], tok, 1)[0],))
    assert got == expected
    assert all(torch.equal(p, q) for p, q in zip(plain.parameters(), resumed.parameters()))
