"""The word-level tokenizer."""
from __future__ import annotations

import pytest

import agentrl as arl
from agentrl.envs.bugfix.vocab import reachable_sources
from agentrl.rendering.tokenizer import SPECIALS, Tokenizer

ALL = arl.make_tasks('all')


def test_build_is_deterministic(tok):
    again = arl.build_tokenizer(arl.make_tasks('all'))
    assert again == tok
    assert again.vocab == tok.vocab
    assert again.token_to_id == tok.token_to_id
    assert Tokenizer.from_json(tok.to_json()) == tok


def test_vocab_size_and_special_ids(tok):
    assert 100 <= tok.vocab_size <= 400
    assert tok.vocab[:len(SPECIALS)] == list(SPECIALS)
    assert len(set(tok.vocab)) == tok.vocab_size
    ids = {tok.pad_id, tok.bos_id, tok.stop_id, tok.unk_id, tok.tool_id, tok.end_tool_id}
    assert len(ids) == len(SPECIALS) and all(0 <= i < tok.vocab_size for i in ids)


def test_pad_is_id_0(tok):
    """The invariant the model's padding-free forward reads padding by: <pad> is id 0 in every vocabulary."""
    from agentrl.rendering.tokenizer import PAD, PAD_ID
    assert PAD_ID == 0 and SPECIALS[0] == PAD and tok.pad_id == PAD_ID
    assert Tokenizer(list(SPECIALS) + ['a', 'b']).pad_id == 0
    with pytest.raises(ValueError):
        Tokenizer([SPECIALS[1], SPECIALS[0], *SPECIALS[2:], 'a'])


@pytest.mark.parametrize('task', ALL, ids=[t.name for t in ALL])
def test_round_trip_source_and_prompt(tok, task):
    for text in (' '.join(task.source), task.prompt, ' '.join(task.correct)):
        ids = tok.encode(text)
        assert tok.unk_id not in ids
        assert tok.decode(ids) == text


def test_special_tokens_skipped_by_default(tok):
    ids = [tok.bos_id] + tok.encode('read def clamp') + [tok.stop_id, tok.tool_id, tok.end_tool_id, tok.pad_id]
    assert tok.decode(ids) == 'read def clamp'
    assert tok.decode(ids, skip_special=False) == '<bos> read def clamp <stop> <tool> </tool> <pad>'
    # the chapter's example: 9 ids decode into 7 words
    demo = tok.encode('read') + [tok.stop_id, tok.tool_id] + tok.encode('def clamp ( n , a')
    assert len(demo) == 9 and len(tok.decode(demo).split()) == 7


def test_unknown_words_and_bad_ids(tok):
    assert tok.encode('read zzzz_not_a_word') == [tok.encode('read')[0], tok.unk_id]
    with pytest.raises(ValueError, match='vocabulary'):
        tok.decode([tok.vocab_size])
    with pytest.raises(ValueError, match='vocabulary'):
        tok.decode([-1])


def test_every_reachable_source_encodes_without_unk(tok):
    """Every source the gym can show after up to 3 edits is in the vocabulary."""
    n = 0
    for task in ALL:
        for words in reachable_sources(task, depth=3):
            n += 1
            assert tok.unk_id not in tok.encode(' '.join(words)), (task.name, words)
    assert n > len(ALL)  # edits really produced new sources


def test_every_reply_and_call_encodes_without_unk(tok, oracle_demos, random_trajs):
    for traj in oracle_demos + random_trajs:
        assert tok.unk_id not in traj.ids.tolist()
    for reply in ('error : empty call', 'error : call too long', 'error : edit needs an op', 'error : unknown op',
                  'error : unknown call', 'no change : public tests fail', 'edited : public tests pass', 'submitted'):
        assert tok.unk_id not in tok.encode(reply)


def test_tokenizer_validation():
    with pytest.raises(ValueError):
        arl.build_tokenizer([])
    with pytest.raises(ValueError):
        Tokenizer(['a', 'b'])
