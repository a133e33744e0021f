"""A chapter run killed (SIGKILL) in the middle of a recipe, then ``agentrl reproduce --resume``: the results.json
sections of a run never killed, and the transcript says where it resumed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import exit_code

SETTINGS = ['--smoke', '--jobs', '1', '--threads', '1', '--set', 'rl_cold_steps=9', '--set', 'rl_only_steps=3', '--set', 'rl_every=3',
            '--set', 'checkpoint_every=2']
"""Seconds of work, with a REINFORCE run long enough to be killed between two of its saves."""

KILLER = textwrap.dedent('''
    import os, signal, sys
    from agentrl.cli import main
    from agentrl.experiments.chapter15 import reproduction

    section, key, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    real = reproduction.Reproduction.recipe_run

    def recipe_run(self, name, label=None, **extra):
        kw = real(self, name, label, **extra)
        if self.running == section and name == key:
            inner = kw['progress']

            def progress(recipe, step, total, seconds, first):
                inner(recipe, step, total, seconds, first)
                if step == at:
                    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer ends a run: no clean-up
            kw['progress'] = progress
        return kw

    reproduction.Reproduction.recipe_run = recipe_run
    sys.exit(main(['reproduce', *sys.argv[4:]]))
''')


def sections(folder):
    return json.loads((folder / 'results.json').read_text())['sections']


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
    from agentrl.cli import main
    out = tmp_path_factory.mktemp('whole') / 'run'
    assert exit_code(main, ['reproduce', *SETTINGS, '--quiet', '--out', str(out)]) == 0
    return sections(out)


@pytest.fixture(scope='module')
def uninterrupted_extended(tmp_path_factory):
    from agentrl.cli import main
    out = tmp_path_factory.mktemp('whole') / 'run'
    assert exit_code(main, ['reproduce', *SETTINGS, '--extended', '--quiet', '--out', str(out)]) == 0
    return sections(out)


@pytest.mark.parametrize('section, key, at, resumed', [
    ('15.5', 'sft_rl', 5, 'resuming train_rl at step 4 of 9'),
    ('15.2', 'oracle_sft', 3, 'resuming sft_train at step 2 of 4'),
    ('beyond', 'sft_grpo', 3, 'resuming train_grpo at step 2 of 9'),
])
def test_a_run_killed_inside_a_recipe_resumes_to_the_same_sections(tmp_path, request, section, key, at, resumed):
    extended = section == 'beyond'
    uninterrupted = request.getfixturevalue('uninterrupted_extended' if extended else 'uninterrupted')
    settings = SETTINGS + (['--extended'] if extended else [])
    out = tmp_path / 'run'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(Path_src()), os.environ.get('PYTHONPATH')]))}
    killed = subprocess.run([sys.executable, '-c', KILLER, section, key, str(at), *settings, '--quiet', '--out', str(out)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert section not in sections(out) if (out / 'results.json').exists() else True
    assert list((out / 'partial').rglob('*.safetensors')), 'the killed recipe left no saved state'
    from agentrl.cli import main
    assert exit_code(main, ['reproduce', *settings, '--quiet', '--resume', '--out', str(out)]) == 0
    assert sections(out) == uninterrupted
    transcript = (out / 'transcript.txt').read_text().splitlines()
    assert resumed in transcript
    assert not (out / 'partial').exists() and not (out / 'progress').exists()  # tidied once every section finished


def Path_src():
    from pathlib import Path
    return Path(__file__).resolve().parent.parent / 'src'
