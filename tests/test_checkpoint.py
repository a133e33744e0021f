"""Checkpoints: safetensors + JSON, never pickle; every bad file is a ValueError that says what is wrong."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import agentrl as arl
from agentrl.rendering.tokenizer import Tokenizer

from conftest import SMALL

SRC = Path(__file__).resolve().parent.parent / 'src' / 'agentrl'


@pytest.fixture(scope='module')
def model(tok):
    torch.manual_seed(3)
    m = arl.TinyAgent(tok.vocab_size, **SMALL)
    with torch.no_grad():  # move off the init so a load that silently re-initialises would show
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    return m.eval()


@pytest.fixture(scope='module')
def saved(model, tok, tmp_path_factory):
    path = tmp_path_factory.mktemp('ckpt') / 'model.safetensors'
    arl.save_checkpoint(model, path, tok)
    return path


def test_save_load_identical_logits(model, saved, tok, oracle_demos):
    loaded = arl.load_model(saved, tok)
    assert loaded.config == model.config
    ids = arl.collate(oracle_demos[:3], tok.pad_id)['ids']
    with torch.no_grad():
        assert torch.equal(loaded.eval()(ids), model(ids))
    for (k, a), (k2, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)


def test_load_without_tokenizer(model, saved):
    assert arl.load_model(saved).config == model.config


def test_save_is_atomic_and_leaves_no_temp_file(saved):
    assert not any(p.name.endswith('.tmp') for p in saved.parent.iterdir())


def test_truncated_file(saved, tmp_path):
    data = saved.read_bytes()
    for cut in (len(data) // 2, 100, 5):
        bad = tmp_path / f'cut{cut}.safetensors'
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match='truncated or corrupted'):
            arl.load_model(bad)


def test_random_bytes(tmp_path, tok):
    bad = tmp_path / 'noise.safetensors'
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(ValueError, match='not a readable safetensors'):
        arl.load_model(bad, tok)
    empty = tmp_path / 'empty.safetensors'
    empty.write_bytes(b'')
    with pytest.raises(ValueError, match=str(empty.name)):
        arl.load_model(empty, tok)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match='no checkpoint'):
        arl.load_model(tmp_path / 'absent.safetensors')


def test_foreign_safetensors(tmp_path, tok):
    from safetensors.torch import save_file
    foreign = tmp_path / 'foreign.safetensors'
    save_file({'weight': torch.zeros(3, 3)}, str(foreign), metadata={'format': 'pt'})
    with pytest.raises(ValueError, match='agentrl checkpoint'):
        arl.load_model(foreign, tok)


def test_weights_that_do_not_fit_the_config(model, tok, tmp_path):
    import json
    from safetensors.torch import save_file
    from agentrl.policies.checkpoint import CONFIG_KEY
    from dataclasses import asdict
    bad = tmp_path / 'mismatch.safetensors'
    cfg = dict(asdict(model.config), d_model=32)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(bad),
              metadata={CONFIG_KEY: json.dumps(cfg)})
    with pytest.raises(ValueError, match='shape'):
        arl.load_model(bad, tok)


def test_different_vocabulary(saved, tok):
    other = Tokenizer(tok.vocab + ['extra_word'])
    with pytest.raises(ValueError, match='different vocabulary'):
        arl.load_model(saved, other)
    reordered = Tokenizer(tok.vocab[:6] + tok.vocab[7:] + [tok.vocab[6]])
    with pytest.raises(ValueError, match='vocabulary'):
        arl.load_model(saved, reordered)


def test_save_refuses_mismatched_tokenizer(model, tok, tmp_path):
    with pytest.raises(ValueError, match='vocab_size'):
        arl.save_checkpoint(model, tmp_path / 'x.safetensors', Tokenizer(tok.vocab + ['extra_word']))


def test_no_pickle_in_library():
    files = sorted(SRC.rglob('*.py'))
    assert len(files) > 10
    for f in files:
        text = f.read_text()
        assert 'torch.load(' not in text, f
        assert 'pickle.load' not in text, f


def test_trajectory_files_round_trip(oracle_demos, trained_rollouts, tmp_path):
    from agentrl.rendering.trajio import load_trajectories, save_trajectories
    trajs = oracle_demos[:3] + trained_rollouts[:3]
    path = tmp_path / 'runs' / 'trajs.json'
    save_trajectories(path, trajs)
    back = load_trajectories(path)
    assert len(back) == len(trajs)
    for a, b in zip(trajs, back):
        for field in ('ids', 'owner', 'turn', 'action_mask'):
            assert torch.equal(getattr(a, field), getattr(b, field)), field
        assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
        assert a.reward == b.reward and a.info == b.info
    bad = tmp_path / 'bad.json'
    bad.write_text('{"not": "a list of trajectories"')
    with pytest.raises(ValueError, match='save_trajectories'):
        load_trajectories(bad)
