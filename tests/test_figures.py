"""Every figure the README and the docs quote is the figure of a recorded run (docs/figures.json).

The record holds the runs (what each printed or wrote, with the command, commit, torch, thread count
and CPU it ran on) and the quotes: where each page shows which of their figures. ``check_page`` checks
one page against the record; a number edited on a page, or a re-recorded run whose figures moved,
fails here with the page, the place and both figures. To extend: record a run with
``scripts/record_figures.py`` and add quotes (a new table column: one quote per row with ``column``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / 'docs' / 'figures.json'
NUMBER = re.compile(r'(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?:%|x)?(?![\w.]\w|\w)')
"""A number as the pages write one: 0.97, -88, 2.3e-09, 14%, 1,280, 2.12x (not a version, a name or a hash)."""
PLACEHOLDER = re.compile(r'\{(@[\w.-]+/)?([^{}:]+)(?::([^{}]*))?\}')
FENCE = re.compile(r'^```[^\n]*\n(.*?)^```[ \t]*$', re.M | re.S)
SAYS_CPU = re.compile(r'another CPU|depends? on the CPU')
"""How a page says, beside a figure, that the figure is one CPU's."""
WALL_TIME = re.compile(r'(?<![\w.])\d+(?:\.\d+)? s\b')
"""A wall time in printed output: a property of the machine and its load, so printed lines are compared without it."""


def load_record(path: Path = RECORD) -> dict:
    return json.loads(path.read_text())


def words_pattern(anchor: str) -> re.Pattern:
    """The anchor as it may wrap on the page (any run of whitespace for a space)."""
    return re.compile(r'\s+'.join(re.escape(w) for w in anchor.split()))


def figure(record: dict, run_id: str, path: str):
    """A run's figure by path: ``15.3/after_rft/train`` in its sections, else its derived figures, else its figures."""
    run = record['runs'][run_id]
    keys = path.split('/')
    for base in ('sections', 'derived', 'figures', None):
        node = run.get(base) if base else run
        try:
            for k in keys:
                node = node[int(k)] if isinstance(node, list) else node[k]
            return node
        except (KeyError, IndexError, ValueError, TypeError):
            continue
    raise KeyError(f'run {run_id!r} has no figure {path!r}')


def render(item, record: dict, run_id: str, key: str = '') -> str:
    """A quote's item as the page should show it: a literal, or ``{path:format}`` figures of the run filled in.

    ``{@run/path}`` is another run's figure; ``<key>`` in a path is the table row's key (``each_row``); a path
    ending in ``?`` is empty where the run has no such figure. A list figure shows as its items."""
    def fill(m):
        run, path, spec = (m.group(1) or '')[1:-1] or run_id, m.group(2).replace('<key>', key), m.group(3) or ''
        optional = path.endswith('?')
        try:
            value = figure(record, run, path.rstrip('?'))
        except KeyError:
            if optional:
                return ''
            raise
        return ' '.join(map(str, value)) if isinstance(value, list) else format(value, spec)
    return PLACEHOLDER.sub(fill, str(item))


def numbers(text: str) -> list:
    return NUMBER.findall(text)


def cells(row: str) -> list:
    """A Markdown table row's cells (an escaped ``\\|`` stays inside its cell)."""
    return [c.strip() for c in re.split(r'(?<!\\)\|', row.strip().strip('|'))]


def region(text: str, anchor: str, column: str | None = None) -> tuple:
    """Where an anchor sits -> (kind, the text of its table row, fenced line, fenced block or paragraph).

    With ``column``, the cell of that column in the anchor's table row."""
    hits = list(words_pattern(anchor).finditer(text))
    if len(hits) != 1:
        raise LookupError(f'the anchor {anchor!r} is on the page {len(hits)} times (it must be once)')
    at = hits[0].start()
    line_start = text.rfind('\n', 0, at) + 1
    line = text[line_start:text.find('\n', at) if '\n' in text[at:] else len(text)]
    for m in FENCE.finditer(text):
        if m.start(1) <= at < m.end(1):
            return 'block', m.group(1), line
    if line.lstrip().startswith('|'):
        if column is None:
            return 'row', line, line
        table = text[:line_start].split('\n\n')[-1].splitlines()
        header = cells(table[0] if table else line)
        if column not in header:
            raise LookupError(f'the table of {anchor!r} has no column {column!r} (its columns: {header})')
        return 'cell', cells(line)[header.index(column)], line
    start = text.rfind('\n\n', 0, at)
    end = text.find('\n\n', at)
    return 'paragraph', text[start + 2 if start >= 0 else 0:end if end >= 0 else len(text)], line


def table_column(text: str, anchor: str, column: str) -> list:
    """Every body row of the table whose header row holds ``anchor`` -> list of (row key, its ``column`` cell).

    A row's key is the first ``code`` word of its first cell (``mask-minority``), else that cell."""
    hits = list(words_pattern(anchor).finditer(text))
    if len(hits) != 1:
        raise LookupError(f'the anchor {anchor!r} is on the page {len(hits)} times (it must be once)')
    start = text.rfind('\n', 0, hits[0].start()) + 1
    rows = []
    for line in text[start:].splitlines():
        if not line.lstrip().startswith('|'):
            break
        rows.append(line)
    header = cells(rows[0])
    if column not in header:
        raise LookupError(f'the table of {anchor!r} has no column {column!r} (its columns: {header})')
    out = []
    for row in rows[2:]:
        first, cell = cells(row)[0], cells(row)[header.index(column)]
        code = re.search(r'`([^`]+)`', first)
        out.append((code.group(1) if code else first, cell))
    return out


def normal(line: str) -> str:
    return ' '.join(WALL_TIME.sub('<time> s', line).split())


def elided(line: str) -> bool:
    """A row the page leaves out (``...``), a blank line, or the command that printed the block."""
    bare = re.sub(r'[│┃|\s]', '', line)
    return bare in ('', '...') or line.startswith('$ ')


def check_printed(block: str, printed: list) -> list:
    """The block's lines that are not, in order, lines the run printed (wall times aside)."""
    want = [normal(p) for p in printed]
    bad, k = [], 0
    for line in block.splitlines():
        if elided(line):
            continue
        try:
            k = want.index(normal(line), k) + 1
        except ValueError:
            bad.append(line)
    return bad


def section_of(text: str, at: int) -> str:
    """The text between the headings around position ``at`` (the part of the page a reader sees beside it)."""
    starts = [m.start() for m in re.finditer(r'^#+ ', text, re.M)]
    start = max([s for s in starts if s <= at], default=0)
    end = min([s for s in starts if s > at], default=len(text))
    return text[start:end]


def check_page(page: str, record: dict, text: str | None = None) -> list:
    """Every quote of ``page`` in the record, checked against the page (``text``: its text, default the file's).

    -> list of problems, each naming the page, the anchor, what the page shows and what the run recorded."""
    text = (ROOT / page).read_text() if text is None else text
    problems = []
    for q in (q for q in record['quotes'] if q['page'] == page):
        where = f"{page}, at {q['at']!r}" + (f", column {q['column']!r}" if q.get('column') else '')
        try:
            kind, body, line = region(text, q['at'], q.get('column'))
            run = record['runs'][q['run']]
            if q.get('printed'):
                if kind != 'block':
                    raise LookupError('a printed quote must be in a fenced block')
                bad = check_printed(body, run['printed'])
                if bad:
                    problems.append(f"{where}: these lines are not what {q['run']} printed (docs/figures.json):\n  "
                                    + '\n  '.join(bad))
                shown = [n for t in WALL_TIME.findall(body) for n in numbers(t)]
                want = [n for item in q.get('times', []) for n in numbers(render(item, record, q['run']))]
                if shown != want:
                    problems.append(f"{where}: the block shows the wall times {shown}, the record has {want}")
                continue
            if q.get('each_row'):
                for key, cell in table_column(text, q['at'], q['column']):
                    want = [n for item in q['each_row'] for n in numbers(render(item, record, q['run'], key))]
                    if numbers(cell) != want:
                        problems.append(f"{where}, row {key!r}: the page shows {numbers(cell)}, "
                                        f"the record of {q['run']} has {want}")
                continue
            shown = numbers(line if kind == 'block' else body)
            want = [n for item in q['numbers'] for n in numbers(render(item, record, q['run']))]
            if shown != want:
                problems.append(f"{where}: the page shows {shown}, the record of {q['run']} has {want}")
        except (LookupError, ValueError) as e:
            problems.append(f'{where}: {e}')
    return problems


def pages(record: dict) -> list:
    return sorted({q['page'] for q in record['quotes']})


RECORDED = load_record()


@pytest.mark.parametrize('page', pages(RECORDED))
def test_every_quoted_figure_is_the_recorded_one(page):
    problems = check_page(page, RECORDED)
    assert not problems, '\n'.join(problems)


def test_every_quote_names_a_recorded_run_and_every_run_is_quoted():
    runs = set(RECORDED['runs'])
    assert {q['run'] for q in RECORDED['quotes']} <= runs
    assert runs <= {q['run'] for q in RECORDED['quotes']} | {m.group(1)[1:-1] for q in RECORDED['quotes']
                                                              for item in q.get('numbers', [])
                                                              for m in PLACEHOLDER.finditer(str(item)) if m.group(1)}


@pytest.mark.parametrize('run_id', sorted(RECORDED['runs']))
def test_every_run_says_where_it_came_from(run_id):
    run = RECORDED['runs'][run_id]
    for key in ('command', 'agentrl', 'git_commit', 'cpu', 'torch'):
        assert run.get(key), f'{run_id}: no {key}'
    assert 'per_cpu' in run, f'{run_id}: say whether its figures depend on the CPU (per_cpu)'


def test_a_per_cpu_figure_says_so_beside_it():
    """A figure of a run whose figures depend on the CPU: the section that quotes it (or the page's opening) says so."""
    missing = []
    for q in RECORDED['quotes']:
        if not RECORDED['runs'][q['run']].get('per_cpu'):
            continue
        text = (ROOT / q['page']).read_text()
        at = words_pattern(q['at']).search(text)
        intro = text.split('\n## ')[0]
        if at and not (SAYS_CPU.search(section_of(text, at.start())) or SAYS_CPU.search(intro)):
            missing.append(f"{q['page']}, at {q['at']!r}")
    assert not missing, 'neither the section nor the page introduction says what depends on the CPU:\n' + '\n'.join(missing)


@pytest.mark.parametrize('kind', ['numbers', 'printed', 'each_row'])
def test_an_edited_figure_fails_with_the_page_the_place_and_both_figures(kind):
    """The last figure of a quoted region edited on the page (as a reader's fix or a typo would): one problem."""
    q = next(q for q in RECORDED['quotes'] if q.get(kind) and not numbers(q['at']))
    text = (ROOT / q['page']).read_text()
    where, body, line = region(text, q['at'], q.get('column'))
    if kind == 'numbers' and where == 'block':  # a figure on one line of a code block
        body = line
    elif kind == 'each_row':  # the last row of the column
        body = text[text.index(q['at']):].split('\n\n')[0].splitlines()[-1]
    elif kind == 'printed':
        body = next(b for b in reversed(body.splitlines()) if numbers(b) and not elided(b))
    shown = NUMBER.findall(body)[-1]
    edited_body = body[::-1].replace(shown[::-1], ('9' + shown)[::-1], 1)[::-1]
    problems = check_page(q['page'], RECORDED, text.replace(body, edited_body, 1))
    assert len(problems) == 1 and q['page'] in problems[0] and '9' + shown in problems[0], problems


def test_numbers_are_read_as_the_pages_write_them():
    text = 'gap 2.3e-09, 14% / 24%, 1,280 episodes, -88, 2.12x, 0.02-0.28, agentrl 0.4.0, seed 6, d6f813f, fig15_2, 10/10'
    assert numbers(text) == ['2.3e-09', '14%', '24%', '1,280', '-88', '2.12x', '0.02', '0.28', '6', '10', '10']


def test_rl_learns_is_judged_from_the_cold_start_not_the_weak_base():
    """record_figures' ``sft_rl`` reads 15.5's SFT -> RL curve (weak base at step 0, cold start at cold_start_step,
    then RL) and counts a seed as learning when its final train pass is 0.3 above the cold start's, or >= 0.9."""
    from test_docs import record_figures
    rf = record_figures()
    seeds = [0, 1, 2]
    points = [(0, [0.1, 0.2, 0.1]), (20, [0.3, 0.6, 0.2]), (36, [0.5, 0.7, 0.3]), (52, [0.6, 0.91, 0.45])]
    figures = {}
    for i, (step, train) in enumerate(points):
        figures[f'15.5/curves/SFT -> RL/{i}/0'] = {'seeds': seeds, 'values': [step] * 3}
        figures[f'15.5/curves/SFT -> RL/{i}/1'] = {'seeds': seeds, 'values': train}
    got = rf.sft_rl(figures, cold_start_step=20)
    assert got['start'] == {'0': 0.3, '1': 0.6, '2': 0.2} and got['final'] == {'0': 0.6, '1': 0.91, '2': 0.45}
    # seed 0: +0.3 from the cold start (from the weak base it would be +0.5); seed 1: >= 0.9; seed 2: +0.25 only
    assert got['learns'] == '2/3' and got['not_learned'] == '2'
    assert rf.sft_rl({}, cold_start_step=20) is None


def test_a_long_run_is_recorded_from_its_log_without_running_it_again(tmp_path, monkeypatch):
    """``record_figures.py printed ID --log LOG -- ARGV``: the lines of LOG, under ARGV's command, and ARGV not run
    (``false`` would exit 1); the other runs and the quotes of the record kept."""
    from test_docs import record_figures
    rf = record_figures()
    record = tmp_path / 'figures.json'
    record.write_text(json.dumps({'runs': {'other': {'command': 'x'}}, 'quotes': [{'page': 'p', 'run': 'other'}]}))
    monkeypatch.setattr(rf, 'RECORD', record)
    monkeypatch.setattr(rf, 'ROOT', tmp_path)
    log = tmp_path / 'run.log'
    log.write_text('GRPO step  1  TRL reward 0.375  | 236.2 s  \nGRPO step  2  TRL reward 0.312\n')
    rf.main(['printed', 'long', '--log', str(log), '--per-cpu', '--', 'false'])
    saved = json.loads(record.read_text())
    assert saved['runs']['other'] == {'command': 'x'} and saved['quotes'] == [{'page': 'p', 'run': 'other'}]
    run = saved['runs']['long']
    assert run['printed'] == ['GRPO step  1  TRL reward 0.375  | 236.2 s', 'GRPO step  2  TRL reward 0.312']
    assert run['command'] == 'false' and run['per_cpu'] and run['git_commit']
