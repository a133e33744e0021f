"""TinyAgent, sequence_log_probs and entropy_from_logits (DESIGN.md §4)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import agentrl as arl

from conftest import SMALL


@pytest.fixture(scope='module')
def small_model(tok):
    torch.manual_seed(1)
    return arl.TinyAgent(tok.vocab_size, **SMALL).eval()


def test_forward_shape(fresh_model, tok):
    ids = torch.randint(tok.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
    logits = fresh_model(ids)
    assert logits.shape == (3, 17, tok.vocab_size)
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
    assert isinstance(fresh_model, torch.nn.Module)


def test_right_padding_is_safe(fresh_model, oracle_demos, tok):
    ids = oracle_demos[0].ids[None]  # [1, T]
    T = ids.shape[1]
    with torch.no_grad():
        base = fresh_model(ids)
        for pad in (tok.pad_id, tok.stop_id, 7):
            padded = torch.cat([ids, torch.full((1, 23), pad)], dim=1)
            assert (fresh_model(padded)[:, :T] - base).abs().max() <= 1e-5
        # and in a batch beside a longer sequence
        batch = arl.collate([oracle_demos[0], oracle_demos[9]], tok.pad_id)['ids']
        assert batch.shape[1] > T
        assert (fresh_model(batch)[0, :T] - base[0]).abs().max() <= 1e-5


def test_causal(fresh_model, tok):
    g = torch.Generator().manual_seed(3)
    a = torch.randint(tok.vocab_size, (1, 20), generator=g)
    b = a.clone()
    b[0, 12:] = torch.randint(tok.vocab_size, (8,), generator=g)
    with torch.no_grad():
        assert (fresh_model(a)[:, :12] - fresh_model(b)[:, :12]).abs().max() <= 1e-5


def test_loss_at_init_near_uniform(fresh_model, train_oracle_demos, tok):
    batch = arl.collate(train_oracle_demos, tok.pad_id)
    with torch.no_grad():
        loss = arl.sft_loss(fresh_model, batch).item()
    assert abs(loss - math.log(tok.vocab_size)) <= 0.4, (loss, math.log(tok.vocab_size))


def test_sequence_log_probs_matches_manual(small_model, oracle_demos, tok):
    ids = arl.collate(oracle_demos[:4], tok.pad_id)['ids']
    B, T = ids.shape
    with torch.no_grad():
        lp = arl.sequence_log_probs(small_model, ids)
        manual = torch.log_softmax(small_model(ids), dim=-1)[:, :-1].gather(2, ids[:, 1:, None]).squeeze(2)
    assert lp.shape == (B, T - 1)
    assert torch.allclose(lp, manual, atol=1e-5)
    assert (lp <= 0).all()


def test_sequence_log_probs_has_gradients(small_model, oracle_demos, tok):
    ids = oracle_demos[0].ids[None]
    lp = arl.sequence_log_probs(small_model, ids)
    lp.sum().backward()
    grads = [p.grad for p in small_model.parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    small_model.zero_grad(set_to_none=True)


def _manual_entropy(logits):
    p = torch.softmax(logits.double(), -1)
    return -(p * torch.log(p)).sum(-1)


def test_entropy_matches_manual_on_random_logits():
    logits = torch.randn(5, 7, 31, generator=torch.Generator().manual_seed(0)) * 3
    ent = arl.entropy_from_logits(logits)
    assert ent.shape == (5, 7)
    assert torch.allclose(ent.double(), _manual_entropy(logits), atol=1e-5)
    # uniform rows: log V
    assert torch.allclose(arl.entropy_from_logits(torch.zeros(4, 31)), torch.full((4,), math.log(31)), atol=1e-5)


def test_entropy_shapes():
    for shape in [(11,), (3, 11), (2, 3, 11), (2, 3, 4, 11)]:
        logits = torch.randn(shape, generator=torch.Generator().manual_seed(1))
        ent = arl.entropy_from_logits(logits)
        assert ent.shape == shape[:-1]
        assert torch.allclose(ent.double(), _manual_entropy(logits), atol=1e-5)


def test_entropy_peaked_and_infinite_rows():
    peaked = torch.zeros(3, 50)
    peaked[:, 0] = 1e4
    assert torch.equal(arl.entropy_from_logits(peaked), torch.zeros(3))
    with_inf = torch.tensor([[0.0, 0.0, float('-inf'), float('-inf')],
                             [float('-inf'), 5.0, float('-inf'), float('-inf')]])
    ent = arl.entropy_from_logits(with_inf)
    assert torch.isfinite(ent).all()
    assert torch.allclose(ent, torch.tensor([math.log(2), 0.0]), atol=1e-6)
    all_inf = torch.full((2, 6), float('-inf'))
    ent = arl.entropy_from_logits(all_inf)
    assert not torch.isnan(ent).any()
    assert torch.equal(ent, torch.zeros(2))
    # half precision input and huge logits stay finite
    assert torch.isfinite(arl.entropy_from_logits(torch.randn(4, 9).half() * 1e3)).all()


def test_entropy_gradient_finite():
    logits = torch.tensor([[0.0, 1.0, float('-inf')], [1e4, 0.0, 0.0]], requires_grad=True)
    arl.entropy_from_logits(logits).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_config_validation():
    with pytest.raises(ValueError, match='vocab_size'):
        arl.TinyAgent(vocab_size=0)
    with pytest.raises(ValueError, match=r'd_model.*n_heads'):
        arl.TinyAgent(vocab_size=100, d_model=10, n_heads=4)
    m = arl.TinyAgent(vocab_size=100, d_model=16, n_layers=1, n_heads=2, block_size=32)
    with pytest.raises(ValueError, match='block_size'):
        m(torch.zeros(1, 33, dtype=torch.long))
