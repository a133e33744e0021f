"""The chat renderer: token for token what ``apply_chat_template`` gives, with owners and the mask.

Shown on two templates (ChatML, and role headers in the style of Llama 3), each on a byte-level BPE
tokenizer trained in the test on the gym's text. Nothing is downloaded.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip('tokenizers')
pytest.importorskip('transformers')

import agentrl as arl  # noqa: E402
from agentrl.rendering.chat import ChatRenderer, chat_ids, episode_messages  # noqa: E402
from agentrl.rendering.protocols import Renderer, as_renderer  # noqa: E402

from hfkit import STYLES, bpe_tokenizer  # noqa: E402

POLICY, TOOL, PROMPT, TEMPLATE = (arl.OWNER[k] for k in ('policy', 'tool', 'prompt', 'template'))


@pytest.fixture(scope='module', params=STYLES)
def renderer(request):
    return ChatRenderer(bpe_tokenizer(request.param))


def scripted(renderer, kind, seed, tasks):
    return [arl.scripted_rollout(arl.scripted_policy(kind, seed=seed), arl.BugFixEnv(), t, renderer) for t in tasks]


def messages_of(traj, renderer, env=arl.BugFixEnv):
    """The conversation of a trajectory, read off its owners and turns; the system message is ``env``'s description
    of its calls (which the renderer puts first)."""
    ids, owner, turn = traj.ids.tolist(), traj.owner.tolist(), traj.turn.tolist()
    prompt = renderer.decode([i for i, o in zip(ids, owner) if o == PROMPT])
    calls, replies = [], []
    for k in range(1, max(turn) + 1):
        calls.append(renderer.call_text([i for i, o, t in zip(ids, owner, turn) if t == k and o == POLICY]))
        reply = [i for i, o, t in zip(ids, owner, turn) if t == k and o == TOOL]
        if reply:
            replies.append(renderer.decode(reply))
    return episode_messages(prompt, calls, replies, system=arl.describe_calls(env.calls))


def test_renderer_protocol(renderer):
    assert isinstance(renderer, Renderer) and as_renderer(renderer) is renderer
    assert renderer.vocab_size == len(renderer.tokenizer)
    assert renderer.encode_call('read')[-1] == renderer.stop_id
    assert renderer.call_text(renderer.encode_call('edit swap_minmax')) == 'edit swap_minmax'


@pytest.mark.parametrize('kind, seed', [('oracle', 0), ('blind', 1), ('random', 2), ('random', 3)])
def test_scripted_demos_equal_apply_chat_template(renderer, tasks, kind, seed):
    """All 30 tasks: ids equal apply_chat_template(messages, tokenize=True); the mask is 1 exactly on
    assistant content plus its end-of-turn marker (the template's own {% generation %} mask)."""
    tk = renderer.tokenizer
    n_tokens = n_masked = 0
    for traj in scripted(renderer, kind, seed, tasks):
        msgs = messages_of(traj, renderer)
        assert [m['content'] for m in msgs if m['role'] == 'assistant'] == [a.strip() for a in traj.info['actions']]
        ref = tk.apply_chat_template(msgs, tokenize=True)
        assert traj.ids.tolist() == chat_ids(ref), traj.info['task']
        out = tk.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assistant = torch.tensor(out['assistant_masks'])  # 1 on assistant content and its end-of-turn marker
        assert torch.equal((traj.owner == POLICY).long(), assistant)
        assert torch.equal(traj.action_mask, assistant[1:].float())
        # each call ends with the end-of-turn marker, which the policy owns; no other marker is the policy's
        ends = [i for i in range(len(traj.ids)) if traj.owner[i] == POLICY and
                (i + 1 == len(traj.ids) or traj.owner[i + 1] != POLICY)]
        assert ends and all(int(traj.ids[i]) == renderer.stop_id for i in ends)
        specials = set(tk.all_special_ids)
        for i in range(len(traj.ids)):
            if int(traj.ids[i]) in specials and traj.owner[i] == POLICY:
                assert int(traj.ids[i]) == renderer.stop_id
        assert set(traj.owner.tolist()) == {TEMPLATE, PROMPT, POLICY, TOOL}
        assert traj.turn.max().item() == len(traj.info['actions'])
        n_tokens += len(traj.ids)
        n_masked += int(traj.action_mask.sum())
    assert 0 < n_masked < n_tokens


def test_render_messages_round_trip(renderer, tasks):
    """Rendering the messages of an episode gives the same ids, owners and turns."""
    for traj in scripted(renderer, 'random', 0, tasks[:10]):
        again = renderer.render_messages(messages_of(traj, renderer), traj.reward, traj.info)
        assert torch.equal(again.ids, traj.ids) and torch.equal(again.owner, traj.owner)
        assert torch.equal(again.turn, traj.turn) and torch.equal(again.action_mask, traj.action_mask)


def test_truncated_episode_ends_with_the_templates_closing(renderer, tasks):
    """An episode cut after a call (no reply) still renders as apply_chat_template does."""
    env = arl.BugFixEnv(max_turns=2)
    traj = arl.scripted_rollout(arl.scripted_policy('oracle'), env, tasks[0], renderer)  # read, edit: cut
    msgs = messages_of(traj, renderer)
    assert traj.info['turn'] == 2 and not traj.info['submitted'] and msgs[-1]['role'] == 'assistant'
    assert traj.ids.tolist() == renderer.apply_chat_template(msgs)


def test_cut_call_has_no_end_of_turn(renderer):
    """A call cut at the length limit: the sampled ids are kept and no end-of-turn marker is invented."""
    ep = renderer.new_episode()
    ep.prompt('fix clamp : tests fail')
    cut = renderer.encode('read read read')
    ep.call(cut)
    ep.reply('error : call too long', final=True)
    traj = ep.build(0.0, {})
    msgs = [{'role': 'user', 'content': 'fix clamp : tests fail'},
            {'role': 'assistant', 'content': 'read read read', 'end_of_turn': False},
            {'role': 'tool', 'content': 'error : call too long'}]
    again = renderer.render_messages(msgs)
    assert torch.equal(again.ids, traj.ids)
    assert renderer.stop_id not in traj.ids[traj.owner == POLICY].tolist()


def test_rejects_a_template_that_renders_turns_differently():
    tk = bpe_tokenizer('chatml')
    odd = ("{% for m in messages %}{% if loop.index0 == 3 %}<|im_start|>{{ m['content'] }}"
           "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}")
    with pytest.raises(ValueError, match='differently|order|end-of-turn'):
        ChatRenderer(tk, chat_template=odd)
