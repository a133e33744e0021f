"""``agentrl --help`` and every ``agentrl COMMAND --help`` work (a help string with a bare % once crashed argparse)."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from agentrl.cli import build_parser, main


def commands() -> list:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_every_command_is_listed():
    assert {'reproduce', 'sweep', 'compare', 'report', 'show', 'bench', 'demo'} <= set(commands())


@pytest.mark.parametrize('argv', [[]] + [[c] for c in commands()], ids=lambda a: ' '.join(a) or 'agentrl')
def test_help_exits_zero(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv + ['--help'])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith('usage: agentrl') and '%' not in out.replace('95%', '')


def test_help_through_the_installed_entry_point():
    res = subprocess.run([sys.executable, '-m', 'agentrl.cli', '--help'], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and 'compare' in res.stdout and 'Traceback' not in res.stderr


def test_package_version_matches_pyproject():
    """Provenance records ``agentrl.__version__``: it must be the version pyproject.toml releases."""
    import tomllib
    from pathlib import Path

    import agentrl
    meta = tomllib.loads((Path(__file__).parents[1] / 'pyproject.toml').read_text())
    assert meta['project']['version'] == agentrl.__version__
