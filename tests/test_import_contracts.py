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


LAYERS = "The library's layers import only downwards"
BOUNDARIES = [  # every layer boundary, crossed upwards from a module just below it (and siblings that must not meet)
    ('experiments/cli.py', 'from .. import cli'),
    ('integrations/export.py', 'from ..experiments import workers'),
    ('recipes/sft.py', 'from ..integrations import export'),
    ('rollouts/engine.py', 'from ..recipes import sft'),
    ('policies/hf.py', 'from ..rollouts import engine'),
    ('rendering/trajectory.py', 'from ..policies import tinyagent'),
    ('envs/play.py', 'from ..rendering import owners'),
    ('loggers/runs.py', 'from ..rendering import owners'),
    ('runtime/threads.py', 'from ..rendering import owners'),
    ('loggers/runs.py', 'from ..runtime import terminal'),
    ('envs/play.py', 'from ..loggers import runs'),
]


@pytest.mark.parametrize('module, line, broken', [
    ('recipes/sft.py', 'from ..envs.bugfix import make_tasks', 'The core never reaches the BugFix package'),
    ('experiments/sweeps/stats.py', 'from ...envs.bugfix import FAMILIES', 'Only the BugFix package'),
    ('policies/tinyagent.py', 'def _late():\n    from .checkpoint import save_checkpoint', 'No import circle anywhere'),
])
def test_a_deliberate_violation_breaks_its_contract(tmp_path, module, line, broken):
    out = lint(violated(tmp_path, [(module, line)]))
    assert out.returncode != 0
    assert broken in out.stdout.split('Broken contracts')[1], out.stdout[-3000:]


def test_every_layer_boundary_crossed_upwards_is_caught(tmp_path):
    """One import upwards across each boundary (and between the bottom layers, which must not meet), all at once:
    the layers contract names every one of them."""
    out = lint(violated(tmp_path, BOUNDARIES))
    assert out.returncode != 0
    report = out.stdout.split('Broken contracts')[1].split(LAYERS)[1]
    for module, line in BOUNDARIES:
        importer = 'agentrl.' + module.removesuffix('.py').replace('/', '.')
        package, name = line.split()[1].strip('.'), line.split()[3]
        imported = f"agentrl.{package + '.' if package else ''}{name}"
        assert f'{importer} -> {imported}' in report, (importer, imported, report[-3000:])


def violated(tmp_path, lines) -> Path:
    """A copy of the package with ``lines`` [(module, import line)] appended to their modules -> its src folder."""
    src = tmp_path / 'src'
    shutil.copytree(ROOT / 'src' / 'agentrl', src / 'agentrl', ignore=shutil.ignore_patterns('__pycache__'))
    for module, line in lines:
        path = src / 'agentrl' / module
        path.write_text(path.read_text() + '\n\n' + line + '\n')
    return src



def test_the_tree_is_the_layers_and_the_readme_shows_it():
    """``src/agentrl`` holds ``__init__.py``, ``cli.py`` and one package per layer, each with a docstring; the
    README's tree and the layers contract name the same packages, top to bottom."""
    import configparser
    import re
    pkg = ROOT / 'src' / 'agentrl'
    entries = {p.name for p in pkg.iterdir() if p.name != '__pycache__'}
    packages = {p.name for p in pkg.iterdir() if (p / '__init__.py').exists()}
    assert entries - packages == {'__init__.py', 'cli.py'}
    for name in packages:
        assert ((pkg / name / '__init__.py').read_text().lstrip().startswith('"""')), name
    contract = configparser.ConfigParser()
    contract.read(ROOT / '.importlinter')
    layers = [m for line in contract['importlinter:contract:layers']['layers'].split('\n') if line.strip()
              for m in re.split(r'[|:]', line) if m.strip()]
    layers = [m.strip() for m in layers]
    assert set(layers) == packages | {'cli'}
    readme = (ROOT / 'README.md').read_text()
    tree = readme[readme.index('src/agentrl/ '):]
    shown = re.findall(r'^[├└]── (\w+)(?:/|\.py)', tree, flags=re.M)
    assert shown == layers, shown
