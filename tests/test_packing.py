"""``arl.packed_forward``: a padded batch through the decoder as one packed row is the plain forward of each row alone
(at every real token, to float32 rounding), gradients included, on the path TRL's GRPOTrainer calls."""
from __future__ import annotations

import copy

import pytest

pytest.importorskip('transformers', reason="transformers is not installed (pip install -e '.[hf]')")

import torch

import agentrl as arl
from agentrl.policies.packing import plan_packing

SHARED = 7


def batch(vocab: int, seed: int = 0):
    """Four rows that start with the same 7 tokens, of 9 to 20 real tokens each, padded as TRL pads them: the prompt
    part on the left, the rest on the right -> (ids, attention_mask, each row's real tokens)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(3, vocab, (SHARED,), generator=g)
    rows, prompt_pad = [], [2, 0, 1, 3]
    for extra in (2, 13, 6, 9):
        rows.append(torch.cat([start, torch.randint(3, vocab, (extra,), generator=g)]))
    T = max(p + len(r) for p, r in zip(prompt_pad, rows))
    ids, mask = torch.zeros(len(rows), T, dtype=torch.long), torch.zeros(len(rows), T, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_pad, rows)):
        ids[i, p:p + len(r)], mask[i, p:p + len(r)] = r, 1
    return ids, mask, rows


def model_pair(attention: str):
    from hfkit import tiny_llama
    model, _ = tiny_llama()
    model.set_attn_implementation(attention)
    return model, arl.packed_forward(copy.deepcopy(model))


def assert_each_row_alone(plain, packed, ids, mask, rows):
    """The packed model's logits at each row's real tokens, and the gradients of a weighted sum of them, equal the
    plain model's on each row alone."""
    out = packed(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, T, V)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * weights * mask[..., None]).sum().backward()
    loss = 0
    for i, r in enumerate(rows):
        alone = plain(input_ids=r[None], use_cache=False).logits[0]  # (len, V)
        real = mask[i].bool()
        torch.testing.assert_close(out[i][real], alone, rtol=0, atol=1e-5)
        loss = loss + (alone * weights[i][real]).sum()
    loss.backward()
    for (name, p), q in zip(plain.named_parameters(), packed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_the_plan_runs_the_shared_start_once_and_each_rows_other_tokens_at_their_own_positions():
    ids, mask, rows = batch(50)
    plan = plan_packing(ids, mask)
    assert plan.ids.shape[1] == SHARED + sum(len(r) - SHARED for r in rows)
    assert plan.ids[0, :SHARED].tolist() == rows[0][:SHARED].tolist()
    assert plan.positions[0, :SHARED].tolist() == list(range(SHARED))
    for i, r in enumerate(rows):  # every real cell reads its own token back from the packed row; pads read N
        where = plan.index[i][mask[i].bool()]
        assert plan.ids[0, where].tolist() == r.tolist()
        assert plan.positions[0, where].tolist() == list(range(len(r)))
        assert bool((plan.index[i][~mask[i].bool()] == plan.ids.shape[1]).all())
    assert plan_packing(ids, mask, min_shared=SHARED + 1).ids.shape[1] == sum(len(r) for r in rows)  # pads dropped only


@pytest.mark.parametrize('attention', ['sdpa', 'eager'])
def test_packed_logits_and_gradients_equal_each_row_run_alone(attention):
    plain, packed = model_pair(attention)
    ids, mask, rows = batch(plain.config.vocab_size)
    assert_each_row_alone(plain, packed, ids, mask, rows)


def test_trls_fused_output_layer_reads_the_same_log_probs_from_the_packed_decoder():
    pytest.importorskip('trl', reason="TRL is not installed (pip install -e '.[trl]')")
    from trl.trainer.utils import add_fused_lm_head  # the call GRPOTrainer makes to score its batch
    plain, packed = model_pair('sdpa')
    ids, mask, _ = batch(plain.config.vocab_size, seed=3)
    labels = ids.masked_fill(mask == 0, -100)
    got = []
    for model in (plain, packed):
        add_fused_lm_head(model, outputs=('log_probs', 'entropy'))
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        got.append((out.log_probs, out.entropy))
    # where a token and the one it follows are real (TRL scores a row's first token from the pad before it, a value
    # its loss masks); TRL's own padded forward counts positions from column 0, RoPE sees only their differences
    scored = (mask[:, :-1] * mask[:, 1:]).bool()
    assert int(scored.sum()) > 40
    for a, b in zip(*got):
        torch.testing.assert_close(b[scored], a[scored], rtol=0, atol=1e-5)


def test_calls_it_cannot_pack_run_the_decoder_as_before():
    plain, packed = model_pair('sdpa')
    ids, mask, _ = batch(plain.config.vocab_size)
    holes = mask.clone()
    holes[1, 3] = 0  # a row whose real tokens are not one run
    assert plan_packing(ids, holes) is None
    torch.testing.assert_close(packed(input_ids=ids, attention_mask=holes, use_cache=False).logits,
                               plain(input_ids=ids, attention_mask=holes, use_cache=False).logits, rtol=0, atol=0)
    many = arl.packed_forward(copy.deepcopy(plain), max_tokens=10)  # a batch of more real tokens: the plain forward
    torch.testing.assert_close(many(input_ids=ids, attention_mask=mask, use_cache=False).logits,
                               plain(input_ids=ids, attention_mask=mask, use_cache=False).logits, rtol=0, atol=0)
    cached = packed(input_ids=ids[:, :4], attention_mask=torch.ones_like(ids[:, :4]), use_cache=True)
    assert cached.cache is not None  # a cache asked for: the plain forward, which keeps it


def test_an_attention_without_custom_masks_or_a_wrapped_model_is_refused_with_the_fix():
    from hfkit import tiny_llama
    model, _ = tiny_llama()
    model.config._attn_implementation = 'flash_attention_2'
    with pytest.raises(ValueError, match="set_attn_implementation\\('sdpa'\\)"):
        arl.packed_forward(model)
    with pytest.raises(TypeError, match='before peft or TRL wrap it'):
        arl.packed_forward(torch.nn.Linear(2, 2))


def test_rows_of_the_same_tokens_are_packed_once_with_each_rows_values_and_gradients():
    """Rows 0 and 2 are the same tokens in the same columns, row 3 row 0's tokens one column further right: the packed
    row holds 3 distinct rows, every row's logits and gradients are its own run alone; with a dropout in training each row
    is packed (its own noise), in eval the copies merge again."""
    plain, packed = model_pair('sdpa')
    ids, mask, rows = batch(plain.config.vocab_size)
    ids[2], mask[2], rows[2] = ids[0], mask[0], rows[0]
    ids[3], mask[3], rows[3] = 0, 0, rows[0]
    ids[3, 3:3 + len(rows[0])], mask[3, 3:3 + len(rows[0])] = rows[0], 1  # row 0 starts in column 2
    plan = plan_packing(ids, mask, merge_copies=True)
    assert plan.ids.shape[1] == SHARED + sum(len(r) - SHARED for r in rows[:2]) + len(rows[3]) - SHARED
    assert plan_packing(ids, mask).ids.shape[1] == SHARED + sum(len(r) - SHARED for r in rows)  # merging asked for only
    assert_each_row_alone(plain, packed, ids, mask, rows)

    from agentrl.policies import packing
    seen, real_plan = [], packing.plan_packing
    packing.plan_packing = lambda *a, **k: seen.append(k.get('merge_copies')) or real_plan(*a, **k)
    try:
        packed.config.attention_dropout = 0.5
        packed.train()
        packed(input_ids=ids, attention_mask=mask, use_cache=False)
        packed.eval()
        packed(input_ids=ids, attention_mask=mask, use_cache=False)
    finally:
        packing.plan_packing = real_plan
    assert seen == [False, True, None]  # in eval the merged rows' plan (no copies left to merge)
