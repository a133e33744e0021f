"""Settings a user can change (``--set``, ``--config``, ``--grid``): the keys, parsing by type, and the errors.

Every check here runs before any work: a wrong key or value must fail fast and say what is valid.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest

import agentrl as arl
from agentrl.experiments.chapter15 import config as C
from agentrl.experiments.chapter15 import settings as S
from agentrl.experiments.chapter15.config import Ch15Config


def test_every_config_and_model_field_is_a_key():
    keys = C.knobs()
    own = [f.name for f in dataclasses.fields(Ch15Config) if f.name != 'model']
    model = {f'model.{f.name}': f for f in dataclasses.fields(arl.TinyAgentConfig) if f.name != 'vocab_size'}
    assert list(keys) == own + list(model)
    for key, f in model.items():  # read from policies/tinyagent.py's source without torch: must match the real dataclass
        assert keys[key].kind == f.type and keys[key].default == f.default, key
    for name in ('sft_lr', 'rl_lr', 'dpo_beta', 'sft_batch_size', 'rl_temperature', 'rl_entropy_bonus',
                 'cold_start_step', 'sample_temperature'):
        assert keys[name].group == 'recipe' and keys[name].doc, name
    assert all(keys[k].group == 'budget' for k in C.BUDGETS)
    assert S.budget_name(vars(Ch15Config.smoke())) == 'smoke' and S.budget_name(vars(Ch15Config())) == 'chapter'


def test_recipe_defaults_are_what_the_chapter_passes():
    import inspect
    c = Ch15Config()
    assert (c.sft_lr, c.sft_batch_size) == (inspect.signature(arl.sft_train).parameters['lr'].default,
                                            inspect.signature(arl.sft_train).parameters['batch_size'].default)
    rl = inspect.signature(arl.train_rl).parameters
    assert (c.rl_lr, c.rl_tasks, c.rl_group, c.rl_temperature, c.rl_entropy_bonus) == tuple(
        rl[k].default for k in ('lr', 'n_tasks', 'group', 'temperature', 'entropy_bonus'))
    assert (c.dpo_lr, c.dpo_beta, c.sample_temperature, c.model) == (1e-3, 0.1, 1.0, {})


@pytest.mark.parametrize('item, key, value', [('sft_steps=30', 'sft_steps', 30), ('model.qk_temperature=4', 'model.qk_temperature', 4.0),
                                              ('sft_lr=1e-3', 'sft_lr', 0.001), (' rl_group = 4 ', 'rl_group', 4),
                                              ('model.n_layers=3', 'model.n_layers', 3)])
def test_values_are_parsed_by_the_fields_type(item, key, value):
    k, v = S.parse_assignment(item)
    assert (k, v) == (key, value) and type(v) is type(value)


def test_unknown_keys_name_the_valid_ones_close_matches_first():
    with pytest.raises(ValueError, match=r"unknown key 'sft_step'.*did you mean sft_steps or") as e:
        S.parse_assignment('sft_step=3')
    assert 'Valid keys: sft_steps, ' in str(e.value) and 'model.init_std' in str(e.value)
    with pytest.raises(ValueError, match=r"did you mean model\.qk_temperature"):
        S.parse_assignment('qk_temperature=4')
    with pytest.raises(ValueError, match='KEY=VALUE'):
        S.parse_assignment('sft_steps')
    with pytest.raises(ValueError, match="unknown key 'model.vocab_size'"):  # fixed by the tokenizer
        S.parse_assignment('model.vocab_size=10')


@pytest.mark.parametrize('item, message', [
    ('sft_steps=abc', "bad value for sft_steps: 'abc' is not an int"),
    ('sft_steps=2.5', 'bad value for sft_steps'),
    ('sft_lr=fast', "bad value for sft_lr: 'fast' is not a number"),
    ('sft_lr=inf', 'bad value for sft_lr: inf is not a finite number'),
    ('model.qk_temperature=nan', 'bad value for model.qk_temperature'),
])
def test_badly_typed_values_name_the_key(item, message):
    with pytest.raises(ValueError, match=message):
        S.resolve(sets=[item])


def test_every_key_rejects_out_of_range_values_by_name():
    for key, knob in C.knobs().items():
        if knob.kind == 'str':  # a word outside its choices, or not a word
            for bad in ['fp16', 3]:
                with pytest.raises(ValueError, match=key):
                    C.apply(Ch15Config(), {key: bad})
            continue
        bads = ([-3] if key in ('lora_rank', 'dpo_batch_size', 'rl_micro_batch') else [0, -3]) if knob.kind == 'int' else [float('inf'), float('nan')]  # 0: every weight trains, the whole batch at once
        if key in ('rl_entropy_bonus',):
            bads.append(-0.5)
        elif knob.kind == 'float' and knob.group != 'model':
            bads.append(0.0)
        for bad in bads:
            with pytest.raises(ValueError, match=key.replace('.', r'\.')):
                cfg = C.apply(Ch15Config(), {key: bad})
                S.effective(cfg, vocab_size=100)  # model fields are checked by TinyAgentConfig itself


def test_cross_checks_name_both_keys():
    with pytest.raises(ValueError, match='cold_start_step.*sft_every'):
        Ch15Config(cold_start_step=25)
    with pytest.raises(ValueError, match='dpo_every.*dpo_steps'):
        Ch15Config(dpo_steps=10)
    with pytest.raises(ValueError, match=r'model\.d_model must be an int >= 1, a multiple of model\.n_heads \(4\).*got 50'):
        S.effective(C.apply(Ch15Config(), {'model.d_model': 50}), vocab_size=100)
    with pytest.raises(ValueError, match=r'rl_tasks must be an int from 1 to 20 \(the train tasks of the BugFix gym\), got 21'):
        S.effective(C.apply(Ch15Config(), {'rl_tasks': 21}), vocab_size=100)
    with pytest.raises(ValueError, match=r'model\.block_size must be an int >= 320 \(the longest an episode'):
        S.effective(C.apply(Ch15Config(), {'model.block_size': 100}), vocab_size=100)


def test_config_file_then_set(tmp_path):
    f = tmp_path / 'ablation.toml'
    f.write_text('sft_steps = 30\nrl_temperature = 2\n\n[model]\nqk_temperature = 4\n')
    cfg, overrides = S.resolve(smoke=True, config_file=f, sets=['sft_steps=2'])
    assert overrides == {'sft_steps': 2, 'rl_temperature': 2.0, 'model.qk_temperature': 4.0}
    assert (cfg.sft_steps, cfg.rl_temperature, cfg.model, cfg.weak_steps) == (2, 2.0, {'qk_temperature': 4.0}, C.Ch15Config.smoke().weak_steps)
    f.write_text('model.qk_temprature = 4\n')
    with pytest.raises(ValueError, match=rf"unknown key 'model.qk_temprature' in {f}.*did you mean model\.qk_temperature"):
        S.resolve(config_file=f)
    f.write_text('sft_steps = [\n')
    with pytest.raises(ValueError, match='not valid TOML'):
        S.resolve(config_file=f)


def test_grid_variants_are_every_combination():
    variants = S.parse_grid(['model.qk_temperature=4,8', 'sft_lr=1e-3,3e-3'])
    assert [name for name, _ in variants] == ['model.qk_temperature=4+sft_lr=1e-3', 'model.qk_temperature=4+sft_lr=3e-3',
                                              'model.qk_temperature=8+sft_lr=1e-3', 'model.qk_temperature=8+sft_lr=3e-3']
    assert variants[1][1] == {'model.qk_temperature': 4.0, 'sft_lr': 0.003}
    for bad, message in [(['sft_lr=1e-3,1e-3'], 'distinct'), (['sft_lr=1,2', 'sft_lr=3'], 'twice'),
                         (['sft_lrr=1,2'], 'did you mean sft_lr'), (['sft_steps=1,x'], "'x' is not an int")]:
        with pytest.raises(ValueError, match=message):
            S.parse_grid(bad)


@pytest.mark.parametrize('setting, named', [('sft_stepz=3', "unknown key 'sft_stepz'"),
                                            ('model.qk_temperature=warm', 'bad value for model.qk_temperature')])
def test_cli_rejects_a_bad_setting_fast(setting, named, tmp_path):
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, '-m', 'agentrl.cli', 'reproduce', '--smoke', '--out', str(tmp_path / 'x'),
                          '--set', setting], capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - t0
    assert res.returncode == 2 and named in res.stderr and 'Traceback' not in res.stderr
    assert not (tmp_path / 'x').exists()  # nothing ran
    assert elapsed < 2.0, f'took {elapsed:.2f} s'


# --- every key's valid range, walked

def outside(key: str, vals: dict, env) -> list:
    """Values of ``key`` just outside its range, given the other keys' values ``vals``: below its least, above its
    greatest (the environment's limits for rl_tasks and model.block_size), and off its multiple."""
    bound, kind = C.RANGES[key], C.knobs()[key].kind
    if bound.choices:  # a word outside them
        return ['fp16']
    low, high = C.limits(key, vals)
    if key == 'rl_tasks':
        high = len(env.tasks('train'))
    if key == 'model.block_size':
        low = env.make().max_tokens
    step = 1 if kind == 'int' else 0.5
    bad = [low if bound.above else low - step]
    if high is not None:
        bad.append(high + step)
    if bound.multiple_of and vals[bound.multiple_of] > 1:
        bad.append(vals[key] + 1)
    return bad


@pytest.mark.parametrize('env_name', ['bugfix', 'wiring'])
def test_every_setting_out_of_range_is_refused_before_the_run_naming_its_range(env_name, tmp_path, capsys, monkeypatch):
    """For every key: a value below its least, above its greatest, or off its multiple gives a one-line error naming
    the key and its valid range, from `agentrl reproduce`, before any section runs or the folder is made."""
    from agentrl.cli import main
    from agentrl.experiments.chapter15.env_registry import get_env
    from agentrl.experiments.chapter15.reproduction import Reproduction

    def no_training(self, section):
        raise AssertionError(f'section {section} ran')
    monkeypatch.setattr(Reproduction, 'run_section', no_training)
    env = get_env(env_name)
    base = C.Ch15Config.smoke()
    vals = C.values(base)
    assert set(C.RANGES) == set(C.knobs())
    walked = set()
    for key in C.knobs():
        for bad in outside(key, vals, env):
            out = tmp_path / 'run'
            rc = main(['reproduce', '--smoke', '--env', env_name, '--jobs', '1', '--threads', '1', '--quiet',
                       '--out', str(out), '--set', f'{key}={bad}'])
            err = capsys.readouterr().err
            assert rc == 2 and err.count('\n') == 1, (key, bad, err)
            assert err.startswith('agentrl reproduce: error: ') and 'Traceback' not in err, (key, bad, err)
            shown = bad if C.knobs()[key].kind in ('int', 'str') else float(bad)
            assert f'error: {key} must be {"one of" if C.RANGES[key].choices else "a"}' in err and err.rstrip().endswith(f'got {shown!r}'), (key, bad, err)
            if key not in ('rl_tasks', 'model.block_size') or bad < 1:  # else: the environment's limit
                assert C.range_text(key, vals) in err, (key, bad, err)
            assert not out.exists(), (key, bad)
            walked.add(key)
    assert walked == set(C.knobs())


def test_the_model_ranges_are_the_models_own():
    """RANGES holds TinyAgentConfig's limits (so a bad model key is refused without torch): each least value (or
    just above an open one) is accepted by the model itself, and just below it is refused by the model too."""
    defaults = {k[len('model.'):]: knob.default for k, knob in C.model_fields().items()}
    for key in C.model_fields():
        field, bound = key[len('model.'):], C.RANGES[key]
        kind = C.knobs()[key].kind
        low = bound.low + (1e-3 if bound.above else 0)
        ok = {**defaults, field: low if kind == 'float' else int(low), **({'n_heads': 1} if bound.multiple_of else {})}
        arl.TinyAgentConfig(100, **ok)
        below = bound.low if bound.above else bound.low - (1 if kind == 'int' else 0.5)
        with pytest.raises(ValueError, match=field):
            arl.TinyAgentConfig(100, **{**defaults, field: below})
        if bound.high is not None:
            with pytest.raises(ValueError, match=field):
                arl.TinyAgentConfig(100, **{**defaults, field: bound.high + 0.5})
    with pytest.raises(ValueError, match='divisible'):
        arl.TinyAgentConfig(100, **{**defaults, 'd_model': 10, 'n_heads': 4})


def test_a_run_at_every_settings_least_value_completes(tmp_path):
    """The chapter and its extension run end to end with every key at its least value at once (one step, two
    samples, a one-dimensional model, ...), so each limit the walk above tests is the real minimum. (A key with an
    open limit, > 0, keeps its default; model.block_size the environment's least.)"""
    from conftest import least_args, least_settings
    from agentrl.cli import main
    low = least_settings()
    assert C.values(C.apply(C.Ch15Config(), low))['model.n_heads'] == 1  # d_model 1 needs one head
    assert main(['reproduce', '--extended', '--jobs', '1', '--threads', '1', '--quiet', '--out', str(tmp_path),
                 *least_args()]) == 0
    import json
    saved = json.loads((tmp_path / 'results.json').read_text())
    assert {k: saved['config'][k] for k in low if not k.startswith('model.')} == {k: v for k, v in low.items()
                                                                                 if not k.startswith('model.')}
    assert saved['config']['model']['d_model'] == 1 and set(saved['sections']) >= {'15.6', 'beyond'}

