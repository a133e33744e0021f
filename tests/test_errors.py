"""Bad input to the public functions: the right exception type, and a message naming the argument."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
    for temperature in (-1, -1e-9, float('nan'), float('inf'), 'hot', True):
        with pytest.raises(ValueError, match=r'temperature must be a finite number >= 0 \(0: greedy'):
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
    from agentrl.envs.bugfix.ops import apply_op
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


def test_dpo_loss_needs_one_value_per_pair_everywhere():
    a, b = torch.zeros(3), torch.zeros(2)
    with pytest.raises(ValueError, match=r'policy_logp_rejected \[2\]'):
        arl.dpo_loss(a, b, a, a)
    with pytest.raises(ValueError, match=r'ref_chosen \[1\]'):  # no silent broadcasting either
        arl.dpo_loss(a, a, torch.zeros(1), a)
    with pytest.raises(ValueError, match=r'shape'):
        arl.preference_loss(a, a, a, b, loss='ipo')
    with pytest.raises(TypeError, match='ref_rejected'):
        arl.dpo_loss(a, a, a, [0.0, 0.0, 0.0])
    for beta in (0, -0.1, float('inf'), float('nan')):
        with pytest.raises(ValueError, match='beta'):
            arl.dpo_loss(a, a, a, a, beta=beta)


BAD_FLOATS = (0.0, -1.0, float('inf'), float('nan'))


def test_recipe_knobs_reject_non_finite_values(tok, train_oracle_demos, train_tasks):
    """Every recipe argument ``--set`` reaches (through Ch15Config) rejects inf, nan and out-of-range values by name."""
    model = arl.TinyAgent(tok.vocab_size, d_model=16, n_layers=1, n_heads=2)
    pairs = [(train_oracle_demos[0], train_oracle_demos[1])]
    for bad in BAD_FLOATS:
        with pytest.raises(ValueError, match='lr'):
            arl.sft_train(model, train_oracle_demos[:2], tok, steps=1, lr=bad)
        for name in ('lr', 'temperature'):
            with pytest.raises(ValueError, match=name):
                arl.train_rl(model, train_tasks, tok, 1, **{name: bad})
        for name in ('beta', 'lr'):
            with pytest.raises(ValueError, match=name):
                arl.train_dpo(model, pairs, tok, steps=1, **{name: bad})
    for bad in (-0.1, float('inf'), float('nan')):
        with pytest.raises(ValueError, match='entropy_bonus'):
            arl.train_rl(model, train_tasks, tok, 1, entropy_bonus=bad)
    for name, bad in (('n_tasks', 0), ('group', 0), ('n_tasks', 21)):
        with pytest.raises(ValueError, match=name):
            arl.train_rl(model, train_tasks, tok, 1, **{name: bad})


def test_probe_recipes_refuses_a_setting_it_does_not_use_fast():
    """scripts/probe_recipes.py takes model.* keys and the budgets it runs, and refuses the rest before any work."""
    import subprocess
    import sys
    import time
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / 'scripts' / 'probe_recipes.py'
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(script), '--seeds', '0', '--set', 'dpo_beta=0.2'],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and 'change nothing these steps run' in res.stderr and 'rl_lr' in res.stderr, res.stderr
    res = subprocess.run([sys.executable, str(script), '--seeds', '0', '--set', 'model.qk_temperature=warm'],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "'warm' is not a number" in res.stderr, res.stderr
    res = subprocess.run([sys.executable, str(script), '--seeds', '5-2'], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and '--seeds takes' in res.stderr, res.stderr
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize('command', ['show', 'claims'])
def test_reading_commands_name_what_the_folder_lacks_and_what_writes_it(command, tmp_path, capsys):
    """`agentrl show` and `agentrl claims` on a folder that does not exist, or is not a run, say so (not a missing
    vocabulary, not reproduce's --resume) and name the command that writes a run there."""
    from agentrl.cli import main
    status = {'show': 1, 'claims': 2}[command]
    missing = tmp_path / 'nope'
    assert main([command, str(missing)]) == status
    err = capsys.readouterr().err
    assert err == (f'agentrl {command}: error: {missing} does not exist: give a '
                   + ('folder that `agentrl reproduce --out DIR` wrote, or no folder for an oracle demo\n' if command == 'show'
                      else 'run folder (`agentrl reproduce --out DIR` writes one)\n'))
    assert main([command, str(tmp_path)]) == status
    err = capsys.readouterr().err
    lacks = 'checkpoints/' if command == 'show' else 'results.json'
    assert err.startswith(f'agentrl {command}: error: {tmp_path} has no {lacks}, so it is not a run folder')
    assert f'`agentrl reproduce --out {tmp_path}` writes one' in err and err.count('\n') == 1
    assert 'vocabulary' not in err and '--resume' not in err


def test_claims_on_a_damaged_results_json_says_to_rerun_not_resume(tmp_path, capsys):
    from agentrl.cli import main
    (tmp_path / 'results.json').write_text('{"sections": {')
    assert main(['claims', str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f'{tmp_path / "results.json"} is not a readable results.json' in err and '--resume' not in err
    assert f'run the reproduction again to rewrite it (`agentrl reproduce --out {tmp_path}` writes one)' in err


# --- other libraries' games: errors that name the real cause and the keyword that fixes it

def test_a_vocabulary_of_a_game_without_players_asks_for_players_not_env():
    pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]' (gem-llm)")
    with pytest.raises(ValueError) as err:
        arl.build_tokenizer(arl.seed_tasks('mines', range(3)), env=arl.from_gem('game:Minesweeper-v0-easy'))
    said = str(err.value)
    assert said.startswith('GemEnv(game:Minesweeper-v0-easy) has no scripted players') and 'pass players=' in said
    assert 'pass env=' not in said and '\n' not in said


def test_a_game_without_a_turn_limit_names_the_keyword_that_works():
    pytest.importorskip('textarena', reason="TextArena is not installed: pip install 'agentrl[textarena]'")
    from agentrl.envs import play
    with pytest.raises(ValueError, match='declares no turn limit of its own') as err:
        arl.from_textarena('FrozenLake-v0')
    keyword = re.search(r'pass (\w+)= to from_textarena', str(err.value)).group(1)
    game = arl.from_textarena('FrozenLake-v0', **{keyword: 2})  # the suggestion, followed
    calls = iter(['[right]', '[left]'])  # seed 0's lake: right of the start is ice
    episode = play(game(), arl.SeedTask('lake/0', 0), lambda obs: next(calls, None))
    assert game().max_turns == 2 and episode.calls == ['[right]', '[left]'] and episode.truncated
    assert episode.replies[0].startswith('You moved right to position (0, 1).') and episode.info['n_invalid'] == 0


DOWNLOADING = [('from_textarena', 'Wordle-v0'), ('from_textarena', 'Hangman-v0'), ('from_gem', 'game:Wordle-v0-easy'),
               ('from_gem', 'game:Hangman-v0-easy')]


def test_a_game_that_downloads_says_so_and_nothing_else_is_printed():
    """In a fresh process, as a user meets it: NLTK binds its output stream when first imported, which a test's
    own capture would not see."""
    pytest.importorskip('gem'), pytest.importorskip('textarena')
    from adapterkit import skip_if_nltk_has_its_words
    skip_if_nltk_has_its_words('the games build')
    script = ('import agentrl as arl\n'
              f'for factory, game in {DOWNLOADING!r}:\n'
              '    try:\n'
              '        getattr(arl, factory)(game)\n'
              '    except arl.envs.adapters.OfflineGameError as e:\n'
              "        print('OfflineGameError', len(str(e).splitlines()))\n")
    src = str(Path(__file__).resolve().parents[1] / 'src')
    run = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, 'PYTHONPATH': src})
    assert run.returncode == 0 and run.stderr == '', run.stderr  # no [nltk_data] lines, nothing else
    assert run.stdout.splitlines() == ['OfflineGameError 1'] * len(DOWNLOADING)  # each a one-line error
