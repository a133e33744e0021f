"""The chapter on a pretrained model (``agentrl reproduce --policy PATH``) and ``agentrl bench --policy``, on a tiny
random Llama saved as a model folder with its ChatML tokenizer (nothing downloaded; SmolLM2's own runs are recorded
runs and benchmarks, not tests)."""
from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip('transformers', reason='the pretrained path needs the pretrained extra')
pytest.importorskip('peft', reason="LoRA needs peft (pip install -e '.[pretrained]')")

import agentrl as arl  # noqa: E402
from agentrl.policies.pretrained import load_pretrained  # noqa: E402

from hfkit import SMOKE_SETS, tiny_llama_folder, tiny_pretrained_run  # noqa: E402


@pytest.fixture(scope='module')
def tiny_folder(tmp_path_factory):
    """A random Llama saved as a model folder with its ChatML tokenizer."""
    return tiny_llama_folder(tmp_path_factory.mktemp('tiny-llama'), max_positions=1024)


def test_policies_of_one_model_share_its_frozen_weights_and_a_full_fine_tune_owns_its_own(tiny_folder):
    a = load_pretrained(tiny_folder, lora_rank=4, seed=0, dtype='fp32', device='cpu')
    b = load_pretrained(tiny_folder, lora_rank=4, seed=1, dtype='fp32', device='cpu')
    emb = lambda p: p.model.get_input_embeddings().weight  # noqa: E731
    assert emb(a) is emb(b) and not emb(a).requires_grad  # one copy of the model, however many LoRA policies
    full = load_pretrained(tiny_folder, lora_rank=0, dtype='fp32', device='cpu')
    assert emb(full) is not emb(a) and all(p.requires_grad for p in full.parameters())
    assert torch.equal(emb(full), emb(a))
    renderer = full.renderer()
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, renderer)
             for t in arl.make_tasks('train')[:4]]
    before = emb(a).clone()
    arl.sft_train(full, demos, renderer, steps=2, lr=1e-2, batch_size=4)
    arl.sft_train(a, demos, renderer, steps=2, lr=1e-2, batch_size=4)
    assert torch.equal(emb(a), before) and not torch.equal(emb(full), before)  # training one never moves another


def test_the_chapter_runs_on_a_pretrained_model_folder_and_prints_its_claims(tmp_path_factory, tmp_path, capsys):
    from agentrl.cli import main
    out, tiny_folder, rc, printed = tiny_pretrained_run(tmp_path_factory)
    printed = ' '.join(printed.split())  # a narrow console wraps lines
    assert rc == 0
    assert 'LoRA rank 4' in (out / 'transcript.txt').read_text().splitlines()[1]
    assert 'LoRA rank 4' in printed and 'Chapter 15 claims on' in printed and 'claims hold' in printed
    assert 'bands hold |' not in printed  # the bands are the TinyAgent's figures: not this policy's verdict
    saved = json.loads((out / 'results.json').read_text())
    setup = saved['sections']['setup']
    assert setup['policy'] == str(tiny_folder) and setup['vocab'] == 512
    assert setup['precision'] == 'fp32 on cpu (as set)'  # --set dtype=fp32 device=cpu, whatever the machine has
    assert saved['config']['dtype'] == 'fp32' and saved['config']['device'] == 'cpu'
    assert saved['config']['model'] == {'pretrained': str(tiny_folder)} and saved['config']['lora_rank'] == 4
    from agentrl.experiments.chapter15.claims import check_claims
    rows = {f.key: (f.verdict, f.measured) for f in check_claims(saved['sections'], 'bugfix')}
    assert rows['uniform-init'][0] is None and 'does not start from random weights' in rows['uniform-init'][1]
    sizes = [p.stat().st_size for p in (out / 'checkpoints').glob('*.safetensors')]
    assert len(sizes) >= 8 and max(sizes) < 200_000  # the adapters only, not the model
    model = arl.load_model(out / 'checkpoints' / 'sft_step60.safetensors')
    assert model.lora is not None and model.lora.rank == 4
    assert (out / 'report.md').exists() and list(out.glob('fig15_*.png'))
    report = (out / 'report.md').read_text()
    assert report.startswith(f'# Chapter 15, reproduced, policy {tiny_folder} (seed shift 0)')
    assert 'findings hold' not in report and "are not the verdict for a pretrained model" in report
    # an exercise from that run takes its policy (and refuses another)
    sets = ['--smoke', *[a for k in SMOKE_SETS for a in ('--set', k)]]
    rc = main(['exercise', '1', '--from', str(out), *sets, '--quiet', '--out', str(tmp_path / 'ex1')])
    assert rc == 0 and 'answers' in json.loads((tmp_path / 'ex1' / 'results.json').read_text())
    capsys.readouterr()
    rc = main(['exercise', '1', '--from', str(out), '--policy', 'tiny', *sets, '--out', str(tmp_path / 'ex1b')])
    assert rc == 2 and f'ran with --policy {tiny_folder}, not tiny' in capsys.readouterr().err


def test_a_policy_that_cannot_be_loaded_is_refused_in_one_line_before_any_work(tmp_path, capsys):
    from agentrl.cli import main
    rc = main(['reproduce', '--policy', str(tmp_path / 'nowhere'), '--jobs', '1', '--out', str(tmp_path / 'run')])
    err = capsys.readouterr().err
    assert rc == 2 and err.count('\n') == 1 and 'no model at' in err and not (tmp_path / 'run').exists()


def test_the_pretrained_budgets_are_the_presets_and_any_setting_wins_over_them():
    from agentrl.experiments.chapter15.settings import budget_name, resolve
    from agentrl.experiments.chapter15.env_registry import get_env
    from agentrl.experiments.chapter15.real_model import BUDGETS
    env = get_env('bugfix')
    config, _ = resolve(env=env, policy='smollm2')
    assert all(getattr(config, k) == v for k, v in BUDGETS.items())
    assert budget_name(vars(config), env, 'smollm2') == 'chapter' and budget_name(vars(config), env) == 'custom'
    config, overrides = resolve(sets=['sft_steps=30', 'lora_rank=0'], env=env, policy='smollm2')
    assert config.sft_steps == 30 and config.lora_rank == 0 and config.weak_steps == BUDGETS['weak_steps']
    tiny, _ = resolve(env=env)
    assert tiny.sft_steps == 60 and tiny.sft_lr == 3e-3  # the TinyAgent's chapter is untouched


def test_the_generate_loop_scores_an_episode_by_its_return_and_runs_in_the_policys_precision(tiny_folder):
    from agentrl.experiments.bench.hf_loop import CHAPTER, generate_loop_rollout
    policy = load_pretrained(tiny_folder, dtype='bf16', device='cpu')
    renderer = policy.renderer()
    tasks = arl.make_tasks('train')[:3]
    seen = []
    real = policy.model.generate

    def spy(*a, **kw):
        seen.append(torch.is_autocast_enabled('cpu'))
        return real(*a, **kw)
    policy.model.generate = spy
    trajs = generate_loop_rollout(policy, [CHAPTER.make() for _ in tasks], tasks, renderer, seed=0)
    assert seen and all(seen)
    for t in trajs:
        assert t.reward == pytest.approx(sum(t.turn_rewards))


def test_bench_on_a_pretrained_model_prints_the_four_comparisons(tiny_folder):
    from agentrl.experiments.bench import pretrained_bench
    res = pretrained_bench.run(str(tiny_folder), repeats=1, episodes_per_task=1, sft_steps=1, sft_batch=4,
                               lora_rank=4, limit_rows=4, limit_cached=20, limit_chunk=4, log=lambda line: None)
    for key in ('engine_vs_generate_loop', 'sft_step_vs_bare', 'bf16_vs_fp32_sft_step', 'bf16_vs_fp32_decode_step',
                'decode_vs_matmuls', 'prefill_vs_matmuls'):
        assert res[key] > 0, key
    assert set(res['limits']) == {'bf16', 'fp32'} and res['decode_vs_matmuls'] == res['limits'][
        res['precision'].split()[0]]['decode']['ratio']
    assert res['engine']['episodes'] == res['generate_loop']['episodes'] == 20
    lines = []
    pretrained_bench.render(res, lines.append)
    assert any(line.startswith('engine vs generate loop:') for line in lines)
    assert any(line.startswith('bf16 vs fp32:') for line in lines)
    assert any(line.startswith('bf16: decode_vs_matmuls') for line in lines)


def test_sweep_takes_the_same_policy_and_refuses_one_that_cannot_load(tmp_path, capsys):
    from agentrl.cli import main
    from agentrl.experiments.sweeps.sweep import plan
    rc = main(['sweep', '--policy', str(tmp_path / 'nowhere'), '--seeds', '0', '--out', str(tmp_path / 'sweep')])
    err = capsys.readouterr().err
    assert rc == 2 and err.count('\n') == 1 and 'no model at' in err and not (tmp_path / 'sweep').exists()
    from agentrl.experiments.chapter15.real_model import BUDGETS
    [variant] = plan(tmp_path / 'sweep', policy='smollm2')
    assert variant['record']['model'] == {'pretrained': 'smollm2'}
    assert all(variant['record'][k] == v for k, v in BUDGETS.items())


def test_the_real_models_page_states_the_budgets_the_code_uses():
    """docs/real-models.md's budget table: every key of real_model.BUDGETS, at the value the code sets."""
    import re
    from pathlib import Path
    from agentrl.experiments.chapter15.real_model import BUDGETS
    page = (Path(__file__).resolve().parents[1] / 'docs' / 'real-models.md').read_text()
    stated = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip('|').split('|')]
        if len(cells) == 4 and cells[0].startswith('`'):
            keys = re.findall(r'`(\w+)`', cells[0])
            values = [v.strip() for v in re.split(r',| x ', cells[2])]
            assert len(keys) == len(values), line
            stated.update(zip(keys, values))
    assert set(stated) == set(BUDGETS)
    for key, value in BUDGETS.items():
        assert float(stated[key]) == float(value), (key, stated[key], value)


def test_the_real_models_page_shows_every_claims_recorded_verdict_on_smollm2():
    """docs/real-models.md's claims of SmolLM2 at seed 0: every claim, with the verdict of the recorded run of each gym
    (the measured figures beside them are checked by tests/test_figures.py)."""
    import re
    from pathlib import Path
    from agentrl.experiments.chapter15.claims import CLAIMS
    root = Path(__file__).resolve().parents[1]
    runs = json.loads((root / 'docs' / 'figures.json').read_text())['runs']
    verdicts = {env: runs[f'smollm2-{env}-seed0']['derived']['verdict'] for env in ('bugfix', 'wiring')}
    page = (root / 'docs' / 'real-models.md').read_text()
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 5 and re.fullmatch(r'`[\w-]+`', cells[0]):
            rows[cells[0].strip('`')] = (cells[2], cells[3])
    assert list(rows) == [c.key for c in CLAIMS]
    for key, (bugfix, wiring) in rows.items():
        assert (bugfix.strip('*'), wiring.strip('*')) == (verdicts['bugfix'][key], verdicts['wiring'][key]), key
