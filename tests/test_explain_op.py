"""scripts/explain_op.py: what a checkpoint's fix decision rests on (a per-seed diagnosis)."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import torch

import agentrl as arl

SCRIPT = Path(__file__).resolve().parents[1] / 'scripts' / 'explain_op.py'


def _script():
    spec = importlib.util.spec_from_file_location('explain_op', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _p_op(model, ids, at):
    """P(ids[at] | ids[:at]) from the library's own log-probs of the whole sequence."""
    with torch.no_grad():
        return arl.sequence_log_probs(model, torch.tensor([ids]))[0, at - 1].exp().item()


def test_explain_op_figures_are_the_models_probabilities(trained_model, tok, tmp_path):
    """P(fix) is the model's probability of the oracle's op token; a name swap and a word deletion are
    the same probability on the edited episode, each recomputed here independently of the script."""
    run = tmp_path / 'run'
    arl.save_checkpoint(trained_model, run / 'checkpoints' / 'sft_step60.safetensors', tok)
    out = tmp_path / 'explain.json'
    assert _script().main([str(run), '--split', 'all', '--top', '2', '--json', str(out)]) == 0
    rows = {r['task']: r for r in json.loads(out.read_text())}
    tasks = arl.make_tasks('all')
    assert set(rows) == {t.name for t in tasks}
    train = arl.make_tasks('train')
    for task in tasks[::7]:
        row = rows[task.name]
        demo = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), task, tok).ids.tolist()
        at = demo.index(tok.token_to_id[task.fix])
        assert abs(row['p_fix'] - _p_op(trained_model, demo, at)) < 1e-5
        # the read reply's words (between the first <tool> and </tool>) in the documented random orders
        lo, hi = demo.index(tok.tool_id) + 1, demo.index(tok.end_tool_id)
        rng, shuffled = random.Random(0), []
        for _ in range(20):
            words = demo[lo:hi]
            rng.shuffle(words)
            shuffled.append(_p_op(trained_model, demo[:lo] + words + demo[hi:], at))
        assert abs(row['p_fix_shuffled'] - sum(shuffled) / 20) < 1e-5
        # every other train function's name in place of this one, averaged per family of the name
        for family, p in row['p_fix_by_name_family'].items():
            swapped = [_p_op(trained_model, [tok.token_to_id[s.func] if i == tok.token_to_id[task.func] else i
                                             for i in demo], at)
                       for s in train if s.family == family and s.func != task.func]
            assert abs(p - sum(swapped) / len(swapped)) < 1e-5
        # each other held-out function's (never trained) name in place of this one: the lowest and highest P(fix)
        unseen = [_p_op(trained_model, [tok.token_to_id[h.func] if i == tok.token_to_id[task.func] else i for i in demo], at)
                  for h in arl.make_tasks('heldout') if h.func != task.func]
        low, high = row['p_fix_unseen_names']
        assert abs(low - min(unseen)) < 1e-5 and abs(high - max(unseen)) < 1e-5
        # the word whose deletion moves P(fix) most: deleting its first occurrence in the source does that
        moved = row['leans_on'] + row['pulled_by']
        if moved:
            word, delta = max(moved, key=lambda x: abs(x[1]))
            read_reply = demo.index(tok.token_to_id['def'])  # the source starts at `def`
            candidates = [j for j in range(read_reply, at) if demo[j] == tok.token_to_id[word]]
            assert any(abs(_p_op(trained_model, demo[:j] + demo[j + 1:], at - 1) - row['p_fix'] - delta) < 1e-5
                       for j in candidates)


def test_explain_op_refuses_bad_input(tmp_path, capsys):
    script = _script()
    assert script.main([str(tmp_path), '--split', 'test']) == 2
    assert "unknown split 'test'; valid splits are ['train', 'heldout', 'all']" in capsys.readouterr().err
    assert script.main([str(tmp_path)]) == 2
    assert 'sft_step60.safetensors (run `agentrl reproduce' in capsys.readouterr().err
