"""Bad input to the public functions: the right exception type, and a message naming the argument."""
from __future__ import annotations

import pytest
import torch

import agentrl as arl


def test_collate_errors(oracle_demos, tok):
    with pytest.raises(ValueError, match='trajector'):
        arl.collate([], tok.pad_id)
    with pytest.raises(TypeError, match='Trajectory'):
        arl.collate(['not a trajectory'], tok.pad_id)
    with pytest.raises(TypeError, match='Trajectory'):
        arl.collate([oracle_demos[0], {'ids': oracle_demos[0].ids}], tok.pad_id)
    with pytest.raises(TypeError, match='pad_id'):
        arl.collate(oracle_demos[:2], 'pad')


def test_model_input_errors(fresh_model, tok):
    with pytest.raises(ValueError, match='vocabulary'):
        fresh_model(torch.tensor([[1, 2, tok.vocab_size]]))
    with pytest.raises(ValueError, match='vocabulary'):
        fresh_model(torch.tensor([[1, -1]]))
    with pytest.raises(TypeError, match='ids'):
        fresh_model(torch.zeros(1, 4))
    with pytest.raises(TypeError, match='ids'):
        fresh_model([[1, 2, 3]])
    with pytest.raises(TypeError, match='ids'):
        fresh_model(torch.zeros(4, dtype=torch.long))


@pytest.fixture(scope='module')
def pair(tasks):
    return [arl.BugFixEnv()], [tasks[0]]


def test_rollout_batch_errors(fresh_model, tasks, tok, pair):
    envs, one = pair
    with pytest.raises(ValueError, match=r'envs.*tasks'):
        arl.rollout_batch(fresh_model, envs, tasks[:2], tok)
    with pytest.raises(ValueError, match=r'envs.*tasks'):
        arl.rollout_batch(fresh_model, envs * 3, tasks[:2], tok)
    with pytest.raises(ValueError, match='at least one'):
        arl.rollout_batch(fresh_model, [], [], tok)
    for temperature in (0, -1, 0.0, float('nan'), 'hot'):
        with pytest.raises(ValueError, match='temperature'):
            arl.rollout_batch(fresh_model, envs, one, tok, temperature=temperature)
    with pytest.raises(TypeError, match='generator'):
        arl.rollout_batch(fresh_model, envs, one, tok, generator='x')
    with pytest.raises(TypeError, match='generator'):
        arl.rollout_batch(fresh_model, envs, one, tok, generator=0)
    small = arl.TinyAgent(tok.vocab_size + 1, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match='vocab_size'):
        arl.rollout_batch(small, envs, one, tok)


def test_sft_train_errors(tok, oracle_demos):
    model = arl.TinyAgent(tok.vocab_size, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match='trajector'):
        arl.sft_train(model, [], tok)
    with pytest.raises(ValueError, match='steps'):
        arl.sft_train(model, oracle_demos[:2], tok, steps=-1)
    with pytest.raises(ValueError, match='batch_size'):
        arl.sft_train(model, oracle_demos[:2], tok, batch_size=0)
    with pytest.raises(ValueError, match='lr'):
        arl.sft_train(model, oracle_demos[:2], tok, lr=0)


def test_env_errors(tasks):
    env = arl.BugFixEnv()
    with pytest.raises(RuntimeError, match='reset'):
        env.step('read')
    env.reset(options={'task': tasks[0]})
    with pytest.raises(TypeError, match='action'):
        env.step(123)
    with pytest.raises(TypeError, match='action'):
        env.step(None)
    with pytest.raises(ValueError, match='task'):
        env.reset(options={'task': 'nope/x'})
    with pytest.raises(TypeError, match='task'):
        env.reset(options={'task': 3})
    env.reset(options={'task': tasks[0]})
    env.step('submit')
    with pytest.raises(RuntimeError, match='reset'):
        env.step('read')


def test_tiny_agent_errors():
    with pytest.raises(ValueError, match='vocab_size'):
        arl.TinyAgent(vocab_size=0)
    with pytest.raises(ValueError, match='vocab_size'):
        arl.TinyAgent(vocab_size=-3)
    with pytest.raises(ValueError, match=r'd_model.*n_heads'):
        arl.TinyAgent(vocab_size=100, d_model=10, n_heads=4)
    with pytest.raises(ValueError, match='n_layers'):
        arl.TinyAgent(vocab_size=100, n_layers=0)


def test_choice_errors_name_valid_choices():
    with pytest.raises(ValueError, match='train'):
        arl.make_tasks('nope')
    with pytest.raises(ValueError, match='oracle'):
        arl.scripted_policy('nope')
    with pytest.raises(ValueError, match='hidden'):
        arl.BugFixEnv(reward='nope')
    from agentrl.ops import apply_op
    with pytest.raises(ValueError, match='swap_minmax'):
        apply_op('nope', ['def', 'f'])


def test_trajectories_with_ids_outside_the_vocabulary(tok, oracle_demos):
    demo = oracle_demos[0]
    bad = arl.Trajectory(demo.ids.clone(), demo.action_mask, demo.logprobs, demo.reward, demo.info, demo.owner, demo.turn)
    bad.ids[3] = tok.vocab_size + 5  # a word no tokenizer of this vocabulary produced
    model = arl.TinyAgent(tok.vocab_size, d_model=16, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match='vocabulary'):
        arl.sft_train(model, [bad], tok, steps=1)
    with pytest.raises(ValueError, match='vocabulary'):
        arl.sft_loss(model, arl.collate([bad, demo], tok.pad_id))
