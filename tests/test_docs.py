"""The documentation site: the API reference covers every public name, ``mkdocs build --strict`` passes and
fails on a broken reference, the bands page states the code's bands, and the pages' Python snippets run as written.

The API and bands checks need nothing but the repository; the builds need the ``docs`` extra
(``pip install -e '.[docs]'``) and skip, saying so, without it (a strict build takes a few seconds).
The snippets (the README's "Ten lines", index.md's first look, the own-environment walk-through) run
in this process on one torch thread, once per module, about 30 s on a quiet 2-core machine.
"""
from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agentrl

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / 'docs' / 'api.md'
DIRECTIVE = re.compile(r'^::: (\S+)\s*$', re.M)
HAVE_DOCS = all(importlib.util.find_spec(m) for m in ('mkdocs', 'material', 'mkdocstrings', 'mkdocstrings_handlers'))
needs_docs = pytest.mark.skipif(not HAVE_DOCS, reason="the docs extra is not installed (pip install -e '.[docs]')")


def path_of(name: str) -> str:
    return f'agentrl.{agentrl._LAZY[name]}.{name}'


def test_every_public_name_has_a_directive_at_its_module():
    directives = DIRECTIVE.findall(API.read_text())
    missing = [path_of(n) for n in agentrl.__all__ if path_of(n) not in directives]
    assert not missing, f'docs/api.md lacks ::: directives for {missing} (run python scripts/api_pages.py)'
    names = [d for d in directives if d.rsplit('.', 1)[-1] in agentrl._LAZY]
    assert len(names) == len(set(names)), 'a public name is documented twice'


def test_api_page_is_what_the_script_writes():
    res = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'api_pages.py'), '--check'], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'mkdocs', 'build', '--strict', '--config-file', str(config_dir / 'mkdocs.yml'),
                           '--site-dir', str(site)], capture_output=True, text=True, cwd=config_dir, timeout=120,
                          env={**os.environ, 'NO_MKDOCS_2_WARNING': '1'})


def copy_site_sources(tmp: Path) -> Path:
    """mkdocs.yml and docs/ copied into ``tmp``, with src/ linked (mkdocstrings reads the code from it)."""
    shutil.copy(ROOT / 'mkdocs.yml', tmp / 'mkdocs.yml')
    shutil.copytree(ROOT / 'docs', tmp / 'docs')
    (tmp / 'src').symlink_to(ROOT / 'src')
    return tmp


def first_words(doc: str, n: int = 6) -> str:
    """The opening words of a docstring as the page shows them (Markdown code marks dropped)."""
    return ' '.join(doc.replace('``', '').replace('`', '').split()[:n])


def built_site(tmp_path_factory) -> Path:
    """The site as ``make docs`` builds it (strictly), built once per test session (``conftest.once_per_session``) and
    shared with test_browser; a failed build fails here with mkdocs' output."""
    from conftest import once_per_session

    def make(site):
        res = build(ROOT, site)
        assert res.returncode == 0, res.stdout + res.stderr

    return once_per_session(tmp_path_factory, 'site', make)


@needs_docs
def test_strict_build_passes_and_shows_every_docstring(tmp_path_factory):
    page = (built_site(tmp_path_factory) / 'api.html').read_text()
    text = re.sub(r'\s+', '', html.unescape(re.sub(r'<[^>]+>', '', page)))  # compared without whitespace
    import griffe
    package = griffe.load('agentrl', search_paths=[str(ROOT / 'src')])
    for name in agentrl.__all__:
        path = path_of(name)
        assert f'id="{path}"' in page, f'{path}: no heading in the built API reference'
        obj = package[path.removeprefix('agentrl.')]
        doc = obj.docstring.value if obj.docstring else ''
        assert doc.strip(), f'{path}: no docstring'
        words = first_words(doc)
        assert re.sub(r'\s+', '', words) in text, f'{path}: its docstring ({words!r}) is not on the built page'


@needs_docs
def test_strict_build_fails_on_a_broken_link_and_a_broken_directive(tmp_path):
    """One build with both breakages (a build takes seconds): it fails, and its output names each."""
    src = copy_site_sources(tmp_path)
    for page, bad in (('index.md', '\n[a page that does not exist](nope.md)\n'), ('api.md', '\n::: agentrl.no_such_name\n')):
        path = src / 'docs' / page
        path.write_text(path.read_text() + bad)
    res = build(src, tmp_path / 'site')
    out = res.stdout + res.stderr
    assert res.returncode != 0, f'the strict build passed with a broken link and directive:\n{out}'
    assert 'nope.md' in out and 'no_such_name' in out, out


# --- the bands page states the code's bands ---------------------------------------------------------

def test_the_bands_page_states_the_bands_the_code_applies():
    """docs/bands.md lists the code's bands in its order, with its chapter figures, and only thresholds it applies."""
    from agentrl.experiments.chapter15 import bands
    page = (ROOT / 'docs' / 'bands.md').read_text()
    table = re.search(r'<!-- bands:start -->\n(.*)<!-- bands:end -->', page, re.S).group(1).strip().splitlines()[2:]
    rows = [[c.strip() for c in row.strip().strip('|').split('|')] for row in table]
    assert [r[0] for r in rows] == list(bands.CHAPTER), 'docs/bands.md and bands.CHAPTER list other bands'
    assert {r[0]: r[2] for r in rows} == bands.CHAPTER, "docs/bands.md gives other chapter figures than bands.CHAPTER"
    source = Path(bands.__file__).read_text()
    numbers = re.compile(r'(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?%?x?').findall  # 0.30, 1e-6, 45%, 5x
    for name, _, _, holds in rows:
        start = source.index(f"band('{name}'")
        end = source.find("band('", start + 1)
        applied = numbers(name) + numbers(source[start:end if end > 0 else len(source)].replace('<=', ' ').replace('>=', ' '))
        stated = [n for n in numbers(holds) if n not in applied and n.rstrip('%') not in applied
                  and str(float(n.rstrip('%x')) / 100 if n.endswith('%') else n) not in applied]
        assert not stated, f'{name}: docs/bands.md states {stated}, which the band does not apply'


# --- the snippets run as written ---------------------------------------------------------------------

def record_figures():
    """scripts/record_figures.py, loaded in this process (it knows which snippets the pages hold)."""
    spec = importlib.util.spec_from_file_location('record_figures', ROOT / 'scripts' / 'record_figures.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def snippet_runs():
    """Every snippet set executed once, as a reader pastes it: id -> (namespace, printed lines)."""
    rf = record_figures()
    return {sid: rf.run_snippets(sid) for sid in rf.SNIPPETS}


def same_machine(run: dict) -> bool:
    """Whether this process runs where the record's run did (its figures are that CPU's and torch's)."""
    import torch
    from agentrl.experiments.chapter15.provenance import cpu_model
    return run.get('cpu') == cpu_model() and run.get('torch') == torch.__version__


@pytest.mark.slow
def test_every_snippet_set_runs_as_written_and_defines_what_it_uses(snippet_runs):
    """The README's "Ten lines", index.md's first look and the own-environment walk-through: seeded, self-contained."""
    rf = record_figures()
    for sid in rf.SNIPPETS:
        code = rf.snippet_code(sid)
        assert 'torch.manual_seed(' in code, f'{sid}: the snippets build a TinyAgent without seeding torch'
        for name in ('sft_train', 'train_rl', 'pass_rate'):
            for args in re.findall(rf'arl\.{name}\(((?:[^()]|\([^()]*\))*)\)', code):
                assert 'seed=' in args, f'{sid}: arl.{name}({args}) takes no seed='
    rate = snippet_runs['ten-lines'][0]['rate']
    assert 0.0 <= rate <= 1.0
    walk, lines = snippet_runs['own-environment']
    assert [line.split(' train ')[0].strip() for line in lines] == ['after SFT (40 steps)', 'after REINFORCE (30 steps)']
    assert walk['tok'].vocab_size == 47 and len(walk['train']) == 18 and len(walk['heldout']) == 6


@pytest.mark.slow
def test_the_snippets_print_the_recorded_figures_on_the_recorded_machine(snippet_runs):
    """On the CPU and torch the figures were recorded with, the snippets print them to the digit."""
    from test_figures import load_record
    runs = load_record()['runs']
    recorded = {sid: runs[sid] for sid in snippet_runs if sid in runs}
    assert recorded, 'docs/figures.json records none of the snippet sets'
    other = [sid for sid, run in recorded.items() if not same_machine(run)]
    if other:
        pytest.skip(f"figures recorded on {recorded[other[0]]['cpu']} with torch {recorded[other[0]]['torch']}: "
                    'another CPU may print other digits')
    for sid, run in recorded.items():
        assert snippet_runs[sid][1] == run['printed'], f'{sid} printed other lines than docs/figures.json records'


@pytest.mark.slow
def test_the_watching_page_s_first_snippet_runs_as_written_after_its_install_step(tmp_path, monkeypatch):
    """docs/watching.md: the install step comes before the first snippet that needs it, says what the library's
    message says, and the snippet (every name it uses defined) writes the run it describes."""
    from agentrl.loggers.tensorboard import INSTALL
    rf = record_figures()
    page = (ROOT / 'docs' / 'watching.md').read_text()
    blocks = rf.fenced_blocks(page)
    first = next(k for k, (lang, _) in enumerate(blocks) if lang == 'python')
    assert any(INSTALL in body for lang, body in blocks[:first] if lang == 'bash'), \
        f'docs/watching.md: no install step ({INSTALL}) before its first snippet'
    pytest.importorskip('tensorboard', reason="the snippet writes TensorBoard files: pip install -e '.[tensorboard]'")
    monkeypatch.chdir(tmp_path)
    namespace = {'__name__': 'watching_snippet'}
    exec(compile(blocks[first][1], '<docs/watching.md>', 'exec'), namespace)
    run = tmp_path / 'runs' / 'logs' / 'expert_iteration' / 'public' / 'seed0'
    records = agentrl.read_jsonl(run / 'metrics.jsonl')
    kept = [r['metrics']['filter/kept'] for r in records if 'filter/kept' in r['metrics']]
    assert kept == [len(row['kept']) for row in namespace['rows']] and len(kept) == 2
    assert any(p.name.startswith('events.out.tfevents') for p in run.iterdir())
