"""Resuming inside a recipe (``recipes/loop.py``): a run stopped between saves continues from its last save to the
weights, outputs and caller's lists of a run never stopped, for SFT, expert iteration, DPO and REINFORCE."""
from __future__ import annotations

import copy

import pytest
import torch

import agentrl as arl
from agentrl.recipes.loop import Checkpoint, RecipeLoop

from conftest import SMALL


class Stop(Exception):
    """Stands for the process being killed: raised after a step, past the last save."""


def stop_at(n):
    def progress(recipe, step, total, seconds, first):
        if step == n:
            raise Stop
    return progress


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def twice(run, model, tmp_path, stop, every):
    """``run(model, checkpoint, progress)`` stopped after step ``stop`` and started again (on a fresh copy of the
    starting model, as a new process would load it) -> (the resumed run's output, its model, the lines it said)."""
    start = copy.deepcopy(model)
    said = []
    ck = lambda: Checkpoint(tmp_path / 'run.safetensors', every=every, say=said.append)  # noqa: E731
    with pytest.raises(Stop):
        run(copy.deepcopy(start), ck(), stop_at(stop))
    resumed = copy.deepcopy(start)
    return run(resumed, ck(), None), resumed, said


@pytest.fixture
def weak(tok, blind_trajs, random_trajs):
    torch.manual_seed(0)
    m = arl.TinyAgent(tok.vocab_size, **SMALL)
    arl.sft_train(m, blind_trajs + random_trajs, tok, steps=20, batch_size=16, seed=0)
    return m


def test_sft_resumes_to_the_same_weights_losses_and_hook_lists(weak, train_oracle_demos, tok, tmp_path):
    def run(model, checkpoint, progress):
        seen = []
        if checkpoint is not None:
            checkpoint.extra = {'seen': seen}
        losses = arl.sft_train(model, train_oracle_demos, tok, steps=12, batch_size=8, seed=3, every=2,
                               hook=lambda step: seen.append((step, round(float(model.head.weight.detach().sum()), 6))),
                               checkpoint=checkpoint, progress=progress)
        return losses, seen

    plain = copy.deepcopy(weak)
    expected = run(plain, None, None)
    got, model, said = twice(run, weak, tmp_path, stop=7, every=5)
    assert got == expected and same_weights(model, plain)
    assert said == ['resuming sft_train at step 5 of 12']


def test_reinforce_resumes_to_the_same_weights_and_history(weak, train_tasks, tok, tmp_path):
    evaluate = lambda m: (arl.pass_rate(m, train_tasks[:3], tok, 1, seed=1)[0],)  # noqa: E731

    def run(model, checkpoint, progress):
        return arl.train_rl(model, train_tasks, tok, 6, n_tasks=3, group=4, every=2, evaluate=evaluate, seed=2,
                            checkpoint=checkpoint, progress=progress)

    plain = copy.deepcopy(weak)
    expected = run(plain, None, None)
    got, model, said = twice(run, weak, tmp_path, stop=5, every=2)
    assert got == expected and same_weights(model, plain) and said == ['resuming train_rl at step 4 of 6']


def test_expert_iteration_resumes_at_a_round(weak, train_tasks, tok, tmp_path):
    def run(model, checkpoint, progress):
        rows = arl.expert_iteration(model, train_tasks, tok, rounds=3, n_samples=2, steps=2, batch_size=8,
                                    checkpoint=checkpoint, progress=progress)
        return [(r['round'], r['rate'], r['solved'], len(r['kept'])) for r in rows]

    plain = copy.deepcopy(weak)
    expected = run(plain, None, None)
    got, model, said = twice(run, weak, tmp_path, stop=2, every=1)
    assert got == expected and same_weights(model, plain) and said == ['resuming expert_iteration at step 2 of 3']


def test_dpo_resumes_with_its_batches_and_monitor(weak, train_oracle_demos, blind_trajs, tok, tmp_path):
    pairs = list(zip(train_oracle_demos[:6], blind_trajs[:6]))

    def run(model, checkpoint, progress):
        monitor = []
        log = arl.train_dpo(model, pairs, tok, steps=6, every=3, batch_size=4, seed=1, monitor=monitor,
                            checkpoint=checkpoint, progress=progress)
        return log, monitor

    plain = copy.deepcopy(weak)
    expected = run(plain, None, None)
    got, model, said = twice(run, weak, tmp_path, stop=4, every=3)
    assert got == expected and same_weights(model, plain)


def test_a_finished_run_restores_without_a_step(weak, train_oracle_demos, tok, tmp_path):
    ck = Checkpoint(tmp_path / 'done.safetensors', every=100)
    first = copy.deepcopy(weak)
    losses = arl.sft_train(first, train_oracle_demos, tok, steps=4, batch_size=4, checkpoint=ck)
    again, steps = copy.deepcopy(weak), []
    assert arl.sft_train(again, train_oracle_demos, tok, steps=4, batch_size=4, checkpoint=ck,
                         progress=lambda *a: steps.append(a)) == losses
    assert steps == [] and same_weights(again, first)  # the last step is always saved, whatever `every` says


def test_a_checkpoint_of_another_run_is_refused(weak, tmp_path):
    ck = Checkpoint(tmp_path / 'x.safetensors', every=1)
    opt = torch.optim.AdamW(weak.parameters())
    for _ in RecipeLoop('sft_train', 2, weak, opt, checkpoint=ck).steps():
        pass
    with pytest.raises(ValueError, match='holds sft_train of 2 steps, not train_rl of 2'):
        RecipeLoop('train_rl', 2, weak, opt, checkpoint=ck)
    with pytest.raises(ValueError, match='every must be a positive int'):
        Checkpoint(tmp_path / 'y.safetensors', every=0)


def test_a_state_file_round_trips_exactly_and_holds_no_pickle(tmp_path, oracle_demos):
    """statefile: tensors bit for bit, floats exactly, tuples, int keys and episodes come back as they were."""
    import random as _random

    from safetensors import safe_open

    from agentrl.recipes.statefile import load_state, save_state
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    r = _random.Random(7)
    state = {'opt': opt.state_dict(), 'rng': r.getstate(), 'gen': torch.Generator().manual_seed(3).get_state(),
             'floats': [0.1 + 0.2, float('nan'), 1e-300], 'bf16': torch.randn(5).bfloat16(), 'episodes': oracle_demos[:2]}
    path = save_state(state, tmp_path / 's.safetensors')
    back = load_state(path)
    assert back['rng'] == r.getstate() and back['floats'][0] == 0.1 + 0.2 and back['floats'][2] == 1e-300
    assert torch.equal(back['gen'], state['gen']) and torch.equal(back['bf16'], state['bf16'])
    assert back['opt']['param_groups'][0]['betas'] == (0.9, 0.999)
    assert torch.equal(back['opt']['state'][0]['exp_avg'], opt.state_dict()['state'][0]['exp_avg'])
    for a, b in zip(back['episodes'], oracle_demos[:2]):
        assert torch.equal(a.ids, b.ids) and torch.equal(a.logprobs, b.logprobs) and a.info == b.info
    with safe_open(str(path), framework='pt') as f:  # a plain safetensors file
        assert len(list(f.keys())) >= 5
    with pytest.raises(TypeError, match='got a set'):
        save_state({'x': {1, 2}}, tmp_path / 'bad.safetensors')
    (tmp_path / 'junk.safetensors').write_bytes(b'not a state')
    with pytest.raises(ValueError, match='not a recipe state file'):
        load_state(tmp_path / 'junk.safetensors')


def test_a_resumed_loop_counts_the_kept_steps_of_every_process_once(weak, tmp_path, monkeypatch):
    """Each step takes 10 s of a counter clock. A run saved at step 4, killed after step 5 and resumed: the file
    holds the 40 s of steps 1-4, the new process adds steps 5-8 (40 s), so the recipe took 80 s of kept steps, as an
    unkilled run does; step 5 of the killed attempt was lost and is not counted."""
    from agentrl.recipes import loop as loop_module
    now = [0.0]
    monkeypatch.setattr(loop_module, 'clock', lambda: now[0])
    opt = torch.optim.AdamW(weak.parameters())

    def run(checkpoint, stop=None):
        loop = RecipeLoop('sft_train', 8, weak, opt, checkpoint=checkpoint)
        start = loop_module.clock()
        for step in loop.steps():
            now[0] += 10.0
            if step == stop:
                raise Stop
        return loop_module.clock() - start + checkpoint.resumed_seconds

    assert run(Checkpoint(tmp_path / 'plain.safetensors', every=4)) == 80.0
    path = tmp_path / 'cut.safetensors'
    with pytest.raises(Stop):
        run(Checkpoint(path, every=4), stop=5)
    again = Checkpoint(path, every=4)
    assert run(again) == 80.0 and again.resumed_seconds == 40.0
    finished = Checkpoint(path, every=4)  # a finished recipe run again: no step, all 80 s restored
    assert run(finished) == 80.0 and finished.resumed_seconds == 80.0
