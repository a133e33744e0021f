"""A chapter run killed (SIGKILL) in the middle of a recipe, then ``agentrl reproduce --resume``: the results.json
sections of a run never killed, and the transcript says where it resumed."""
from __future__ import annotations

import json
import os
import shutil
import signal
import traceback

import pytest

import agentrl as arl
from conftest import exit_code

SETTINGS = ['--smoke', '--jobs', '1', '--threads', '1', '--set', 'rl_cold_steps=4', '--set', 'rl_only_steps=2', '--set', 'rl_every=2',
            '--set', 'checkpoint_every=2', '--set', 'model.qk_temperature=4']
"""Seconds of work, with a REINFORCE run long enough to be killed between two of its saves (and a setting of the model,
which the uninterrupted run's end-to-end test reads back)."""
OVERRIDES = {'rl_cold_steps': 4, 'rl_only_steps': 2, 'rl_every': 2, 'checkpoint_every': 2, 'model.qk_temperature': 4.0}

def killed_in(section: str, key: str, at: int, argv: list) -> int:
    """``agentrl reproduce ARGV`` in a fork of this process (torch already imported: no second start-up), SIGKILLed at
    step ``at`` of the recipe run ``key`` of ``section``, as the kernel's OOM killer ends a run: no clean-up -> what
    ended the fork (minus the signal's number if a signal did, as ``subprocess`` reports it)."""
    pid = os.fork()
    if pid == 0:  # the fork: it never returns into pytest
        code = 1
        try:
            from agentrl.cli import main
            from agentrl.experiments.chapter15 import reproduction
            real = reproduction.Reproduction.recipe_run

            def recipe_run(self, name, label=None, **extra):
                kw = real(self, name, label, **extra)
                if self.running == section and name == key:
                    inner = kw['progress']

                    def progress(recipe, step, total, seconds, first):
                        inner(recipe, step, total, seconds, first)
                        if step == at:
                            os.kill(os.getpid(), signal.SIGKILL)
                    kw['progress'] = progress
                return kw

            reproduction.Reproduction.recipe_run = recipe_run
            code = main(['reproduce', *argv]) or 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def sections(folder):
    return json.loads((folder / 'results.json').read_text())['sections']


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
    """``agentrl reproduce --extended`` with ``SETTINGS``, never killed -> (its folder, what it printed). Its sections
    but ``beyond`` are a run without ``--extended`` (the extension only adds a section after the chapter's)."""
    import contextlib
    import io

    from agentrl.cli import main
    out, printed = tmp_path_factory.mktemp('whole') / 'run', io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert exit_code(main, ['reproduce', *SETTINGS, '--extended', '--quiet', '--out', str(out)]) == 0
    return out, printed.getvalue()


def test_cli_reproduce_extended_end_to_end_with_settings(uninterrupted):
    """The uninterrupted run: its settings recorded, the chapter's files and the extension's, its bands checked."""
    out, stdout = uninterrupted
    saved = json.loads((out / 'results.json').read_text())
    assert saved['config']['rl_cold_steps'] == 4 and saved['config']['model']['qk_temperature'] == 4.0
    assert saved['provenance']['overrides'] == OVERRIDES
    cold = saved['config']['cold_start_step']  # RL evaluated at its cold start, then every 2 of its 4 steps
    assert [k for k, _, _ in saved['sections']['15.5']['curves']['SFT -> RL'] if k >= cold] == [cold, cold + 2, cold + 4]
    assert 'bands hold' in stdout
    for name in ['results.json', 'report.md', 'fig15_2_dpo.png', 'fig15_3_recipes.png', 'fig15_4_hacking.png',
                 'fig_beyond_star.png', 'fig_beyond_rft_baseline.png', 'fig_beyond_dpo.png', 'fig_beyond_select.png',
                 'fig_beyond_grpo.png']:
        assert (out / name).is_file(), name
    beyond = saved['sections']['beyond']
    assert set(beyond) == {'star', 'rft_baseline', 'dpo', 'select', 'grpo', 'uncovered'}
    assert beyond['uncovered'] in ([], ['init']) or set(beyond['uncovered']) <= set(arl.FAMILIES)
    assert '## Beyond the chapter' in (out / 'report.md').read_text()


@pytest.mark.parametrize('section, key, at, resumed', [
    ('15.2', 'oracle_sft', 3, 'resuming sft_train at step 2 of 4'),
    ('15.5', 'sft_rl', 3, 'resuming train_rl at step 2 of 4'),
    ('beyond', 'sft_grpo', 3, 'resuming train_grpo at step 2 of 4'),
])
def test_a_run_killed_inside_a_recipe_resumes_to_the_same_sections(uninterrupted, tmp_path, section, key, at, resumed):
    """Killed inside 15.2's SFT, a fresh run (nothing done before it but 15.1); inside 15.5's REINFORCE or
    ``beyond``'s clipped trainer, a run whose other sections are the uninterrupted run's (its folder with that section
    taken out: it alone runs, on the checkpoints 15.2 saved)."""
    fresh = section == '15.2'
    whole = {k: v for k, v in sections(uninterrupted[0]).items() if not fresh or k != 'beyond'}
    settings = SETTINGS if fresh else SETTINGS + ['--extended']
    out = tmp_path / 'run'
    if not fresh:
        shutil.copytree(uninterrupted[0], out)
        saved = json.loads((out / 'results.json').read_text())
        for part in ('sections', 'transcript'):
            del saved[part][section]
        (out / 'results.json').write_text(json.dumps(saved))
        settings += ['--resume']
    assert killed_in(section, key, at, [*settings, '--quiet', '--out', str(out)]) == -signal.SIGKILL
    assert section not in sections(out) if (out / 'results.json').exists() else True
    assert list((out / 'partial').rglob('*.safetensors')), 'the killed recipe left no saved state'
    if section == 'beyond':  # the parts before its clipped trainer, kept as they finished: the resumed run reads them
        assert sorted(p.stem for p in (out / 'partial' / 'beyond').glob('*.json')) == ['dpo', 'rft_baseline', 'select', 'star']
    from agentrl.cli import main
    from agentrl.recipes.statefile import load_state, save_state
    state_file = out / 'partial' / section.replace('.', '_') / f'{key}.safetensors'
    state = load_state(state_file)  # the killed attempt's saved steps, said to have taken a day: the section counts them
    save_state({**state, 'seconds': 86400.0}, state_file)
    assert exit_code(main, ['reproduce', *settings, '--quiet', '--resume', '--out', str(out)]) == 0
    assert sections(out) == whole
    assert json.loads((out / 'timing.json').read_text())[section] > 86400.0
    transcript = (out / 'transcript.txt').read_text().splitlines()
    assert resumed in transcript
    assert not (out / 'partial').exists() and not (out / 'progress').exists()  # tidied once every section finished
