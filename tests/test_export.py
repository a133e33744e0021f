"""agentrl export: a smoke run's episodes and DPO pairs as chat JSON Lines, and back.

Re-rendering the written messages through the chat renderer (our word-level vocabulary as a
PreTrainedTokenizerFast with its chat template) gives the run's ids for every episode.
"""
from __future__ import annotations

import json

import pytest
import torch

import agentrl as arl
from agentrl.integrations.export import export_run, read_jsonl, run_trajectories, trajectory_messages
from test_html_report import smoke_report_dir


@pytest.fixture(scope='module')
def smoke_run(tmp_path_factory):
    """The session's smoke run (shared with the report tests; read only here)."""
    return smoke_report_dir(tmp_path_factory)


def test_messages_are_the_conversation(smoke_run, tok):
    episodes, pairs = run_trajectories(smoke_run)
    assert episodes and pairs
    for trajs in episodes.values():
        for t in trajs:
            msgs = trajectory_messages(t, tok)
            assert msgs[0] == {'role': 'user', 'content': arl.make_tasks('all')[
                [x.name for x in arl.make_tasks('all')].index(t.info['task'])].prompt}
            calls = [m for m in msgs if m['role'] == 'assistant']
            assert [m['content'] for m in calls] == [a.strip() for a in t.info['actions']]
            assert [m['role'] for m in msgs[1:]][::2] == ['assistant'] * len(calls)


def test_export_writes_chat_jsonl(smoke_run, tmp_path):
    written = export_run(smoke_run, tmp_path)
    episodes, pairs = run_trajectories(smoke_run)
    recs = read_jsonl(written['episodes'])
    assert len(recs) == written['n_episodes'] == sum(len(v) for v in episodes.values())
    for rec in recs:
        assert set(rec) == {'messages', 'reward', 'turn_rewards', 'info', 'source'}
        assert sum(rec['turn_rewards']) == rec['reward']
        assert len(rec['turn_rewards']) == sum(m['role'] == 'assistant' for m in rec['messages'])
        assert {m['role'] for m in rec['messages']} <= {'user', 'assistant', 'tool'}
        assert rec['info']['task'] and isinstance(rec['info']['actions'], list)
    prefs = read_jsonl(written['pairs'])
    assert len(prefs) == len(pairs) > 0
    for rec in prefs:
        assert rec['chosen'][0] == rec['rejected'][0]  # the same user prompt
        assert rec['reward_chosen'] == 1.0 and rec['reward_rejected'] == 0.0


def test_reimport_gives_identical_ids(smoke_run, tmp_path):
    pytest.importorskip('tokenizers')
    pytest.importorskip('transformers')
    from agentrl.rendering.chat import ChatRenderer
    from agentrl.integrations.export import check_round_trip, read_episodes
    from agentrl.policies.hf import word_tokenizer
    written = export_run(smoke_run, tmp_path)
    res = check_round_trip(smoke_run, written)
    assert res['episodes'] > 0 and res['episodes_identical'] == res['episodes']
    assert res['pairs'] > 0 and res['pairs_identical'] == res['pairs']
    # the smoke run's policies are nearly untrained: some calls are cut with no stop token, and they round-trip too
    recs = read_jsonl(written['episodes'])
    assert any(m.get('end_of_turn') is False for r in recs for m in r['messages'])
    # and apply_chat_template itself agrees on every record
    tk = word_tokenizer(arl.build_tokenizer(arl.make_tasks('all')))
    renderer = ChatRenderer(tk)
    again = read_episodes(written['episodes'], renderer)
    for rec, t in zip(recs, again):
        assert t.ids.tolist() == renderer.apply_chat_template(rec['messages'])
        assert torch.equal(t.action_mask, torch.tensor(
            tk.apply_chat_template(rec['messages'], return_dict=True, return_assistant_tokens_mask=True)
            ['assistant_masks'][1:], dtype=torch.float))


def test_loads_with_datasets(smoke_run, tmp_path, monkeypatch):
    datasets = pytest.importorskip('datasets')
    monkeypatch.setenv('HF_DATASETS_OFFLINE', '1')
    written = export_run(smoke_run, tmp_path / 'out')
    ds = datasets.load_dataset('json', data_files=str(written['episodes']), split='train',
                               cache_dir=str(tmp_path / 'cache'))
    assert len(ds) == written['n_episodes']
    assert ds[0]['messages'][0]['role'] == 'user' and 'reward' in ds.column_names
    pairs = datasets.load_dataset('json', data_files=str(written['pairs']), split='train',
                                  cache_dir=str(tmp_path / 'cache'))
    assert len(pairs) == written['n_pairs'] and {'chosen', 'rejected'} <= set(pairs.column_names)


def test_cli_export(smoke_run, tmp_path, capsys):
    from agentrl.cli import main  # the command as it runs, in this process
    assert main(['export', str(smoke_run), '--format', 'chat-jsonl', '--out', str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    assert 'wrote' in stdout and (tmp_path / 'episodes.jsonl').is_file()
    try:
        import tokenizers, transformers  # noqa: F401
        assert 'give identical ids' in stdout
    except ImportError:
        pass
    n = sum(1 for _ in open(tmp_path / 'episodes.jsonl'))
    assert json.loads(open(tmp_path / 'episodes.jsonl').readline())['messages'] and n > 0
