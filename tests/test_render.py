"""The one renderer: owners, turns, the action mask, collate, and the template-mismatch diagnostics."""
from __future__ import annotations

import pytest
import torch

import agentrl as arl
from agentrl.recipes.diagnostics import check_rendering, rerender, strip_wrappers

POLICY, TOOL, TEMPLATE, PROMPT = (arl.OWNER[k] for k in ('policy', 'tool', 'template', 'prompt'))


def assert_mask_invariant(traj):
    T = len(traj.ids)
    assert traj.ids.shape == traj.owner.shape == traj.turn.shape == (T,)
    assert traj.action_mask.shape == traj.logprobs.shape == (T - 1,)
    assert traj.action_mask.dtype.is_floating_point
    expected = (traj.owner[1:] == POLICY).float()
    assert torch.equal(traj.action_mask, expected)
    assert set(traj.action_mask.unique().tolist()) <= {0.0, 1.0}


def test_owner_codes():
    assert arl.OWNER == {'template': 0, 'prompt': 1, 'policy': 2, 'tool': 3}


def test_trajectory_fields_are_positional_in_order():
    import dataclasses
    assert [f.name for f in dataclasses.fields(arl.Trajectory) if not f.kw_only] == \
        ['ids', 'action_mask', 'logprobs', 'reward', 'info', 'owner', 'turn']
    assert [f.name for f in dataclasses.fields(arl.Trajectory) if f.kw_only] == ['turn_rewards', 'vocab']  # optional


def test_owner_shares_of_oracle_demos(train_oracle_demos):
    owners = torch.cat([d.owner[1:] for d in train_oracle_demos])  # predicted positions
    policy = (owners == POLICY).float().mean().item()
    tool = (owners == TOOL).float().mean().item()
    assert 0.10 <= policy <= 0.30, policy
    assert tool >= 0.45, tool


def test_oracle_demo_layout(oracle_demos, tok):
    """<bos> prompt, then per turn: call <stop>, <tool> reply </tool>; turns count the calls."""
    d = oracle_demos[0]
    ids, owner, turn = d.ids.tolist(), d.owner.tolist(), d.turn.tolist()
    assert ids[0] == tok.bos_id and owner[0] == TEMPLATE and turn[0] == 0
    n_prompt = len(tok.encode('fix clamp : tests fail'))
    assert owner[1:1 + n_prompt] == [PROMPT] * n_prompt and turn[1:1 + n_prompt] == [0] * n_prompt
    assert tok.decode(ids).startswith('fix clamp : tests fail read def clamp')
    assert max(turn) == 3 == len(d.info['actions'])
    for k in (1, 2, 3):
        pos = [i for i, t in enumerate(turn) if t == k]
        assert pos == list(range(pos[0], pos[-1] + 1)), 'a turn is contiguous'
        toks = [ids[i] for i in pos]
        own = [owner[i] for i in pos]
        n_call = own.index(TEMPLATE)
        assert own[:n_call] == [POLICY] * n_call and toks[n_call - 1] == tok.stop_id
        assert toks[n_call] == tok.tool_id and toks[-1] == tok.end_tool_id
        assert own[n_call + 1:-1] == [TOOL] * (len(pos) - n_call - 2) and own[-1] == TEMPLATE
    assert tok.decode(ids[-3:], skip_special=False) == '<tool> submitted </tool>'


@pytest.mark.parametrize('kind', ['oracle', 'blind', 'random'])
def test_mask_invariant_scripted(kind, request):
    trajs = request.getfixturevalue({'oracle': 'oracle_demos', 'blind': 'blind_trajs', 'random': 'random_trajs'}[kind])
    for traj in trajs:
        assert_mask_invariant(traj)
        assert traj.action_mask.sum() > 0
        assert not traj.logprobs.any(), 'scripted episodes carry no behaviour log-probs'


@pytest.mark.parametrize('which', ['fresh_rollouts', 'trained_rollouts'])
def test_mask_invariant_model_rollouts(which, request):
    trajs = request.getfixturevalue(which)
    for traj in trajs:
        assert_mask_invariant(traj)
        assert torch.equal(traj.logprobs != 0, traj.action_mask.bool()), 'log-probs exactly on sampled tokens'
        assert (traj.logprobs <= 0).all()


@pytest.mark.parametrize('kind', ['oracle_demos', 'blind_trajs', 'random_trajs', 'fresh_rollouts', 'trained_rollouts'])
def test_mask_invariant_on_collated_batch(kind, request, tok):
    trajs = request.getfixturevalue(kind)[:24]
    batch = arl.collate(trajs, tok.pad_id)
    B, T = batch['ids'].shape
    assert B == len(trajs) and T == max(len(t) for t in trajs)
    assert batch['action_mask'].shape == batch['logprobs'].shape == (B, T - 1)
    assert batch['attention_mask'].shape == batch['owner'].shape == (B, T)
    assert batch['rewards'].tolist() == [t.reward for t in trajs]
    for b, traj in enumerate(trajs):
        n = len(traj)
        assert batch['lengths'][b] == n
        assert batch['attention_mask'][b].tolist() == [1] * n + [0] * (T - n)
        assert torch.equal(batch['ids'][b, :n], traj.ids)
        assert (batch['ids'][b, n:] == tok.pad_id).all()
        real = batch['attention_mask'][b, 1:].bool()  # predicted positions that are real tokens
        expected = (batch['owner'][b, 1:] == POLICY).float()
        assert torch.equal(batch['action_mask'][b][real], expected[real])
        assert not batch['action_mask'][b][~real].any(), 'no action token on padding'
        assert torch.equal(batch['logprobs'][b, :n - 1], traj.logprobs)


def test_strip_wrappers_keeps_mask_invariant(oracle_demos, tok):
    for demo in oracle_demos:
        stripped = strip_wrappers(demo)
        assert_mask_invariant(stripped)
        ids = stripped.ids.tolist()
        assert ids[0] == tok.bos_id
        assert tok.tool_id not in ids and tok.end_tool_id not in ids
        assert len(ids) == len(demo.ids) - 2 * len(demo.info['actions'])
        assert stripped.action_mask.sum() == demo.action_mask.sum(), 'the same action tokens'


def test_check_rendering_flags_stripped_demos(oracle_demos, tok):
    assert check_rendering(oracle_demos, tok) == []
    problems = check_rendering([strip_wrappers(d) for d in oracle_demos[:5]], tok)
    assert len(problems) == 5
    assert all('<tool>' in p for p in problems)
    assert problems[0].startswith(oracle_demos[0].info['task'])


def test_rerender_scripted_is_identical(oracle_demos, random_trajs, tok):
    for traj in oracle_demos + random_trajs:
        again = rerender(traj, tok)
        assert torch.equal(again.ids, traj.ids)
        assert torch.equal(again.owner, traj.owner) and torch.equal(again.turn, traj.turn)


def test_collate_pads_owner_and_turn(oracle_demos, tok):
    short, long = sorted(oracle_demos[:2] + [strip_wrappers(oracle_demos[2])], key=len)[::2]
    batch = arl.collate([long, short], tok.pad_id)
    n = len(short)
    assert (batch['owner'][1, n:] == -1).all() and (batch['turn'][1, n:] == -1).all()


def test_trajectory_html_view(oracle_demos):
    html = oracle_demos[0]._repr_html_()
    assert isinstance(html, str) and 'clamp' in html
