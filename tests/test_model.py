"""TinyAgent, sequence_log_probs and entropy_from_logits."""
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


def _masked_nll(logits, ids, mask):
    """The chapter's sft_loss on given logits: logits [B, T, V], ids [B, T], mask [B, T-1] -> scalar."""
    logp = -F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction='none')  # [B, T-1]
    return -(logp * mask).sum() / mask.sum()


def _ending_in_pad(tok, task):
    """A truncated episode whose last call is ``edit <pad> <pad>``: its own last two tokens are id 0."""
    from agentrl.rendering.trajectory import EpisodeBuilder
    ep = EpisodeBuilder(tok)
    ep.prompt(task.prompt)
    ep.call(tok.encode('read') + [tok.stop_id])
    ep.reply(' '.join(task.source))
    ep.call(tok.encode('edit') + [tok.pad_id, tok.pad_id])
    return ep.build(0.0, {})


def test_padding_free_forward_matches_padded_forward(small_model, oracle_demos, blind_trajs, tok):
    """The padding-free training forward (rows bucketed by length, padding never computed) against
    the plain padded forward of every column: same logits at real positions, same gradients."""
    from agentrl.policies.tinyagent import length_buckets, lengths_from_padding
    batch = arl.collate(oracle_demos[:16] + blind_trajs[:16], tok.pad_id)
    ids, lengths, mask = batch['ids'], batch['lengths'], batch['action_mask']
    assert tok.pad_id == 0 and len(set(lengths.tolist())) >= 4
    assert len(length_buckets(lengths)) >= 2, 'the batch must really be split into buckets'
    # trailing id 0 is padding: read off the ids, the lengths are collate's, so the buckets are the same
    assert torch.equal(lengths_from_padding(ids), lengths)
    real = batch['attention_mask'].bool()  # [B, T]
    with torch.no_grad():
        plain = small_model._forward(ids)  # [B, T, V], every column computed
        derived, explicit = small_model(ids), small_model(ids, lengths=lengths)
    assert torch.equal(derived, explicit)  # bit for bit: the ids-only call (the notebook's) and lengths= agree
    assert (derived[real] - plain[real]).abs().max() <= 1e-5
    assert (derived[~real] == 0).any(), 'padding past a bucket is never computed'
    # sequence_log_probs: with or without lengths, the same numbers
    with torch.no_grad():
        assert torch.equal(arl.sequence_log_probs(small_model, ids), arl.sequence_log_probs(small_model, ids, lengths))
    # the training gradient: sft_loss (lengths passed) vs the notebook's ids-only call vs the padded forward
    params = [p for p in small_model.parameters() if p.requires_grad]
    g_lib = torch.autograd.grad(arl.sft_loss(small_model, batch), params)
    notebook_loss = -(arl.sequence_log_probs(small_model, ids) * mask).sum() / mask.sum()  # the chapter's sft_loss
    g_ids = torch.autograd.grad(notebook_loss, params)
    g_pad = torch.autograd.grad(_masked_nll(small_model._forward(ids), ids, mask), params)
    for a, b, c in zip(g_lib, g_ids, g_pad):
        assert torch.equal(a, b)
        assert torch.allclose(a, c, rtol=1e-4, atol=1e-7), (a - c).abs().max()


def test_full_length_rows_take_the_plain_forward(small_model, oracle_demos, tok, monkeypatch):
    import agentrl.policies.tinyagent as M
    ids = torch.stack([oracle_demos[0].ids, oracle_demos[0].ids.flip(0)])  # [2, T], no row ends in id 0
    assert (ids[:, -1] != 0).all()
    with torch.no_grad():
        plain = small_model._forward(ids)
        monkeypatch.setattr(M, 'length_buckets', lambda *a, **k: pytest.fail('a full batch was bucketed'))
        assert torch.equal(small_model(ids), plain)
        assert torch.equal(small_model(ids, lengths=torch.tensor([ids.shape[1]] * 2)), plain)
        # and explicit full lengths keep the plain forward even when the ids end in 0s
        padded = torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], 1)
        assert torch.equal(small_model(padded, lengths=[padded.shape[1]] * 2), small_model._forward(padded))


def test_lengths_read_off_trailing_pad_ids(small_model, oracle_demos, train_tasks, tok):
    from agentrl.policies.tinyagent import lengths_from_padding
    # a 0 inside a row is a token; only the trailing run is padding; an all-pad row has length 0
    ids = torch.tensor([[5, 0, 0, 7], [5, 0, 7, 0], [5, 7, 0, 0], [0, 0, 0, 0]])
    assert lengths_from_padding(ids).tolist() == [4, 3, 2, 0]
    with torch.no_grad():
        out = small_model(ids)  # the all-pad row computes its first position and stays finite
        assert torch.isfinite(out).all()
        for b, n in enumerate([4, 3, 2]):
            assert (out[b, :n] - small_model._forward(ids[b:b + 1, :n])[0]).abs().max() <= 1e-5
    # a single padded row takes the padding-free path too
    one = torch.cat([oracle_demos[0].ids, torch.zeros(9, dtype=torch.long)])[None]  # [1, T + 9]
    n = len(oracle_demos[0].ids)
    with torch.no_grad():
        out = small_model(one)
        assert (out[0, :n] - small_model._forward(one[:, :n])[0]).abs().max() <= 1e-5
        assert (out[0, n:] == 0).all()
    # an episode whose own last tokens are id 0 (a sampled <pad>): read off the ids they count as
    # padding, so its length must be passed; with lengths every real position is computed
    odd = _ending_in_pad(tok, train_tasks[0])
    assert odd.ids[-2:].tolist() == [0, 0]
    batch = arl.collate([odd, oracle_demos[3]], tok.pad_id)
    assert lengths_from_padding(batch['ids'])[0] == len(odd) - 2 and batch['lengths'][0] == len(odd)
    real = batch['attention_mask'].bool()
    with torch.no_grad():
        plain = small_model._forward(batch['ids'])
        given = small_model(batch['ids'], lengths=batch['lengths'])
        assert (given[real] - plain[real]).abs().max() <= 1e-5
        lp = arl.sequence_log_probs(small_model, batch['ids'], batch['lengths'])
        lp_plain = torch.log_softmax(plain, -1)[:, :-1].gather(2, batch['ids'][:, 1:, None]).squeeze(2)
        assert (lp - lp_plain)[real[:, 1:]].abs().max() <= 1e-5
        assert torch.allclose(arl.sft_loss(small_model, batch), _masked_nll(plain, batch['ids'], batch['action_mask']),
                              atol=1e-6)


def test_forward_checks_lengths(small_model, tok):
    ids = torch.ones(2, 6, dtype=torch.long)
    for bad in (torch.tensor([6]), torch.tensor([[6, 6]]), torch.tensor([6.0, 6.0]), torch.tensor([7, 6]),
                torch.tensor([-1, 6]), torch.tensor([True, True])):
        with pytest.raises(ValueError, match='lengths'):
            small_model(ids, lengths=bad)


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
