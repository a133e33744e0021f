"""The import-linter contracts (``.importlinter``): the layers, the BugFix boundary, no circle; and a deliberate
violation fails them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name('lint-imports')
pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install -e '.[test]')")


def lint(src: Path):
    env = {**os.environ, 'PYTHONPATH': str(src)}
    return subprocess.run([str(LINT), '--config', str(ROOT / '.importlinter'), '--no-cache'], capture_output=True,
                          text=True, env=env, cwd=src, timeout=120)


def test_the_library_keeps_every_contract():
    out = lint(ROOT / 'src')
    assert out.returncode == 0, out.stdout[-3000:]
    assert 'Contracts: 4 kept, 0 broken.' in out.stdout


@pytest.mark.parametrize('module, line, broken', [
    ('recipes/sft.py', 'from ..envs.bugfix import make_tasks', 'The core never reaches the BugFix package'),
    ('experiments/sweeps/stats.py', 'from ...envs.bugfix import FAMILIES', 'Only the BugFix package'),
    ('render.py', 'from .rollout import rollout_batch', "The library's layers import only downwards"),
    ('model.py', 'def _late():\n    from .checkpoint import save_checkpoint', 'No import circle anywhere'),
])
def test_a_deliberate_violation_breaks_its_contract(tmp_path, module, line, broken):
    src = tmp_path / 'src'
    shutil.copytree(ROOT / 'src' / 'agentrl', src / 'agentrl', ignore=shutil.ignore_patterns('__pycache__'))
    path = src / 'agentrl' / module
    path.write_text(path.read_text() + '\n\n' + line + '\n')
    out = lint(src)
    assert out.returncode != 0
    assert broken in out.stdout.split('Broken contracts')[1], out.stdout[-3000:]
