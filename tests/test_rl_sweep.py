"""``agentrl sweep --rl``: one RL recipe per seed and variant from one of 15.2's checkpoints, and ``agentrl compare``
on its variants.

One smoke grid (REINFORCE and DAPO, seeds 0-1) checks that every variant starts from the same
checkpoint, that pass@k and the episode counts are what they say, and that ``compare`` pairs the variants.
"""
import json
from dataclasses import replace

import pytest

from agentrl.cli import main
from agentrl.experiments.chapter15.config import Ch15Config
from agentrl.experiments.chapter15.rl_section import episodes_to_target
from agentrl.recipes.evaluation import pass_at_k
from agentrl.recipes.grpo import GRPOConfig
from agentrl.recipes.pg_variants import VARIANTS, variant_settings

GRID = ('reinforce', 'dapo')  # the chapter's REINFORCE, and DAPO: the clipped trainer with dynamic sampling


def sections(folder):
    return json.loads((folder / 'results.json').read_text())['sections']


def test_episodes_to_target_counts_the_episodes_before_the_first_point_at_the_target():
    hist = [(20, 0.5, 0.4), (22, 0.85, 0.5), (24, 0.95, 0.6), (26, 0.90, 0.7)]  # evaluated every 2 steps from step 20
    per_step = [64, 64, 100, 120, 64, 64]  # steps 21..26; dynamic sampling drew more at steps 23 and 24
    assert episodes_to_target(hist, per_step, 0.9, start=20) == 64 + 64 + 100 + 120
    assert episodes_to_target(hist, per_step, 0.5, start=20) == 0  # the start was already there
    assert episodes_to_target(hist, per_step, 0.99, start=20) is None


def test_every_named_variant_is_a_valid_clipped_trainer_and_a_wrong_name_lists_them():
    for name, settings in VARIANTS.items():
        if settings is not None:
            GRPOConfig(**settings)  # raises on a setting the trainer does not have
    assert variant_settings('reinforce') is None and variant_settings('dapo')['dynamic_sampling'] is True
    with pytest.raises(ValueError, match="valid variants are .*'cispo'.*'gspo'"):
        variant_settings('ppo2')
    with pytest.raises(ValueError, match="rl_variant must be one of .*'dapo'"):
        Ch15Config(rl_variant='ppo2')


@pytest.fixture(scope='module')
def rl_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp('rlgrid')
    rc = main(['sweep', '--rl', '--smoke', '--seeds', '0-1', '--workers', '2', '--out', str(out), '--set', 'pass_k_samples=4',
               '--logdir', str(out / 'logs'), '--grid', 'rl_variant=' + ','.join(GRID)])
    return rc, out


def test_rl_grid_writes_each_variant_from_the_same_checkpoint(rl_grid):
    rc, out = rl_grid
    assert rc == 0 and (out / 'grid.json').is_file()
    for variant, run in (('reinforce', 'train_rl/rl_variant'), ('dapo', 'train_grpo/dapo')):
        for seed in (0, 1):  # --logdir: every variant's recipe monitors, for TensorBoard or the report
            assert (out / 'logs' / f'rl_variant={variant}' / run / f'seed{seed}' / 'metrics.jsonl').is_file(), (variant, seed)
    for seed in (0, 1):
        runs = {v: sections(out / f'rl_variant={v}' / f'seed{seed}') for v in GRID}
        assert all(set(r) == {'setup', '15.2', 'rl'} for r in runs.values())
        assert len({json.dumps(r['15.2'], sort_keys=True) for r in runs.values()}) == 1  # one checkpoint for all
        ckpts = {(out / f'rl_variant={v}' / f'seed{seed}' / 'checkpoints' / 'sft_step20.safetensors').read_bytes() for v in GRID}
        assert len(ckpts) == 1
        smoke = Ch15Config.smoke()
        batch = smoke.rl_tasks * smoke.rl_group
        for v, r in runs.items():
            rl = r['rl']
            assert rl['variant'] == v and rl['start'] == 'sft_step20' and rl['hist'][0][0] == smoke.cold_start_step
            assert len(rl['episodes_per_step']) == smoke.rl_cold_steps and rl['episodes'] == sum(rl['episodes_per_step'])
            if v == 'dapo':  # dynamic sampling draws whole batches, every one of them counted
                assert all(e % batch == 0 and e >= batch for e in rl['episodes_per_step'])
                assert 'dynamic_sampling/batches' in rl['monitors']
            else:
                assert rl['episodes_per_step'] == [batch] * smoke.rl_cold_steps
            for split in ('train', 'held'):  # pass@k from the recorded successes, by Chen et al.'s estimator
                pk = rl['pass_at_k'][split]
                assert pk['n'] == 4 and list(pk['mean']) == ['1', '2', '4']
                for k in (1, 2, 4):
                    want = sum(pass_at_k(4, c, k) for c in pk['successes']) / len(pk['successes'])
                    assert pk['mean'][str(k)] == pytest.approx(want)
                assert pk['mean']['1'] <= pk['mean']['2'] <= pk['mean']['4']
                assert 0.0 <= rl['greedy'][split] <= 1.0
        for v, r in runs.items():  # every recipe's logged monitors, averaged over its steps
            assert {'informative', 'entropy', 'reward'} <= set(r['rl']['monitors']), v
            assert 0.0 <= r['rl']['monitors']['informative'] <= 1.0
        assert 'clip_frac' in runs['dapo']['rl']['monitors'] and 'clip_frac' not in runs['reinforce']['rl']['monitors']
        assert runs['reinforce']['rl']['settings']['recipe'] == 'train_rl'
        assert runs['dapo']['rl']['settings']['loss_type'] == 'dapo'


def test_a_later_variant_takes_its_seeds_15_2_from_the_first(rl_grid):
    """(That RL from an adopted 15.2 ends where it would from its own: tests/test_sweep.py, the rl section's REINFORCE.)"""
    _, out = rl_grid
    for seed in (0, 1):
        first, later = out / 'rl_variant=reinforce' / f'seed{seed}', out / 'rl_variant=dapo' / f'seed{seed}'
        assert 'adopted' not in json.loads((first / 'results.json').read_text())['provenance']
        assert json.loads((later / 'results.json').read_text())['provenance']['adopted'] == {'15.2': str(first.resolve())}
        assert json.loads((later / 'timing.json').read_text())['15.2'] == json.loads((first / 'timing.json').read_text())['15.2']
    assert json.loads((out / 'rl_variant=dapo' / 'sweep.json').read_text())['runs']['0']['adopted_15_2'] is True


def test_a_run_with_other_settings_than_the_rl_sections_does_not_take_anothers_15_2(rl_grid, tmp_path):
    from agentrl.experiments.chapter15.reproduction import Reproduction
    _, out = rl_grid
    source = out / 'rl_variant=reinforce' / 'seed0'
    smoke = Ch15Config.smoke()
    other = Reproduction(tmp_path / 'other', seed=0, config=replace(smoke, sft_steps=smoke.sft_steps + 1), rl=True)
    assert not other.adopt_15_2(source) and '15.2' not in other.results  # 15.2 reads sft_steps: trains its own
    assert not Reproduction(tmp_path / 'seed1', seed=1, config=smoke, rl=True).adopt_15_2(source)  # another seed
    same = Reproduction(tmp_path / 'same', seed=0, config=replace(smoke, rl_variant="gspo", rl_target=0.5), rl=True)
    assert same.adopt_15_2(source) and (tmp_path / 'same' / 'checkpoints' / 'sft_step20.safetensors').is_file()


def test_compare_tables_the_variants_against_reinforce(rl_grid, capsys):
    _, out = rl_grid
    assert main(['compare', str(out)]) == 0
    result = json.loads((out / 'compare.json').read_text())
    assert [v['name'] for v in result['variants']] == [f'rl_variant={v}' for v in GRID]
    rows = {r['figure']: r for r in result['figures'] if r['section'] == 'rl'}
    for label in ('final train pass', 'held-out pass@4', 'greedy train pass', 'episodes sampled', 'recipe seconds'):
        row = rows[label]
        assert [len(v) for v in row['values']] == [2, 2]
        assert all(t['test'] == 'paired t-test' and t['n'] == 2 for t in row['vs_first'] if t and t['p'] is not None)
    assert (out / 'compare.png').stat().st_size > 10_000
    assert 'final train pass' in (out / 'compare.md').read_text()


def test_rl_cannot_be_extended(tmp_path, capsys):
    assert main(['sweep', '--rl', '--extended', '--smoke', '--seeds', '0', '--out', str(tmp_path)]) == 2
    assert 'cannot be --extended' in capsys.readouterr().err


def test_rl_starts_from_any_saved_policys_file(rl_grid, tmp_path, capsys):
    """``rl_start`` as a file: the same checkpoint as the run's own step-20 one trains the same RL (its curve counted
    from step 0 rather than 20); a path that is not a saved policy's file is refused before any work."""
    _, out = rl_grid
    saved = tmp_path / 'cold.safetensors'
    saved.write_bytes((out / 'rl_variant=reinforce' / 'seed0' / 'checkpoints' / 'sft_step20.safetensors').read_bytes())
    run = tmp_path / 'from-file'
    assert main(['sweep', '--rl', '--smoke', '--seeds', '0', '--workers', '1', '--out', str(run), '--set', 'pass_k_samples=4',
                 '--set', 'rl_variant=reinforce', '--set', f'rl_start={saved}']) == 0
    mine, chapter = sections(run / 'seed0')['rl'], sections(out / 'rl_variant=reinforce' / 'seed0')['rl']
    assert mine['start'] == str(saved) and mine['hist'][0][0] == 0
    step = Ch15Config.smoke().cold_start_step
    assert [(s + step, *rest) for s, *rest in mine['hist']] == [tuple(h) for h in chapter['hist']]
    assert mine['pass_at_k'] == chapter['pass_at_k'] and mine['final'] == chapter['final']
    for bad in (tmp_path / 'missing.safetensors', tmp_path / 'from-file'):
        assert main(['sweep', '--rl', '--smoke', '--seeds', '0', '--out', str(tmp_path / 'no'),
                     '--set', f'rl_start={bad}']) == 2
        err = capsys.readouterr().err
        assert "rl_start must be one of 'sft_step20', 'weak' or 'sft_step60', or the path of an existing .safetensors" in err
