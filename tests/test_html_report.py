"""``agentrl report`` (report.html) and ``agentrl show`` on a smoke run's folder, and the trajectory viewer's HTML."""
from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

import pytest
import torch

import agentrl as arl
from agentrl.cli import main as cli_main
from agentrl.experiments.chapter15 import figures, html_report, report
from agentrl.experiments.chapter15.bands import check_transcript
from agentrl.experiments.chapter15.chapter import Chapter15
from agentrl.experiments.chapter15.config import Ch15Config
from agentrl.experiments.chapter15.reproduction import POLICIES
from agentrl.rendering.trajio import load_trajectories, save_trajectories


def scripted_pairs(tok, n=6):
    """(oracle success, random-play failure) pairs of the same task, flat like dpo_pairs.json."""
    flat = []
    for task in arl.make_tasks('train'):
        chosen = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), task, tok)
        rejected = next((t for s in range(20) if (t := arl.scripted_rollout(arl.scripted_policy('random', seed=s),
                                                                             arl.BugFixEnv(), task, tok)).reward == 0), None)
        if chosen.reward == 1 and rejected is not None:
            flat += [chosen, rejected]
        if len(flat) == 2 * n:
            break
    return flat


def smoke_report_dir(tmp_path_factory):
    """A smoke run's folder (seed 0, one torch thread) with figures, report.md and report.html; made once per test
    session (``conftest.once_per_session``) and shared by every module that reads it (none writes into it)."""
    from conftest import once_per_session, one_thread

    def make(out):
        with one_thread():
            run = Chapter15(out, config=Ch15Config.smoke(), log=lambda line: None)
            results = run.run()
            figures.draw_all(results, out)
            report.write(out, results, check_transcript(run.transcript()), 0, run.timing)
            # Should the smoke run's weak base solve nothing (no preference pairs), scripted pairs stand in.
            if not load_trajectories(out / 'episodes' / 'dpo_pairs.json'):
                save_trajectories(out / 'episodes' / 'dpo_pairs.json', scripted_pairs(run.tok))
            html_report.build(out)

    return once_per_session(tmp_path_factory, 'html_report_smoke_run', make)


@pytest.fixture(scope='session')
def run_dir(tmp_path_factory):
    return smoke_report_dir(tmp_path_factory)


@pytest.fixture(scope='session')
def page(run_dir):
    return (run_dir / 'report.html').read_text(encoding='utf-8')


def embedded_data(page):
    m = re.search(r'<script type="application/json" id="arl-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


class Tables(HTMLParser):
    """Collects every <table> (by id) as rows of cell texts, and every <img> src."""

    def __init__(self):
        super().__init__()
        self.tables, self.imgs, self._cell, self._table = {}, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'table':
            self._table = self.tables.setdefault(a.get('id') or f'table{len(self.tables)}', [])
        elif tag == 'tr' and self._table is not None:
            self._table.append([])
        elif tag in ('td', 'th'):
            self._cell = []
        elif tag == 'img':
            self.imgs.append(a.get('src', ''))

    def handle_endtag(self, tag):
        if tag in ('td', 'th') and self._cell is not None:
            self._table[-1].append(''.join(self._cell).strip())
            self._cell = None
        elif tag == 'table':
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parsed(page):
    p = Tables()
    p.feed(page)
    return p


def test_report_is_one_small_self_contained_file(run_dir, page):
    path = run_dir / 'report.html'
    assert path.is_file() and path.stat().st_size < html_report.MAX_BYTES
    assert not re.search(r'''(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//''', page, re.I), 'a resource outside the file'
    assert not re.search(r'url\(\s*["\']?\s*(?:https?:)?//|@import', page, re.I)
    assert '<link' not in page and not re.search(r'<script[^>]*\bsrc=', page)


def test_findings_table_matches_the_transcript(run_dir, page):
    findings = check_transcript((run_dir / 'transcript.txt').read_text())
    rows = parsed(page).tables['findings']
    assert rows[0] == ['finding (band)', 'chapter', 'this run', 'holds']
    body = rows[1:]
    assert len(body) == len(findings) == 30
    for f, row in zip(findings, body):
        assert row[0] == f.key and row[2] == f.measured and row[3] == ('held' if f.verdict else 'not held')
    assert 'Findings' in page and '15.6 Design questions in practice' in page  # the chapter's tables follow


REPR = re.compile(r"""[\[(]\s*-?[\d.]+(e[-+]?\d+)?\s*,|[\[{(]\s*['"{\[(]|\b(None|True|False)\b|\w+\(""")
"""What a Python repr of a tuple, list, dict or object looks like: (60.0, 1.0, 1.0), [{'train': ...}], ['a', ...], Foo(...)."""


def test_findings_show_labelled_numbers_never_python_reprs(run_dir, page):
    assert REPR.search("(60.0, 1.0, 1.0)") and REPR.search("[{'train': 0.15}]") and REPR.search("[(' edit x ', 1)]")
    md = (run_dir / 'report.md').read_text()
    table = md.split('## Findings')[1].split('\n## ')[0]
    md_rows = [line.split(' | ') for line in table.splitlines()
               if line.startswith('| ') and 'finding (band)' not in line and not line.startswith('| ---')]
    html_rows = parsed(page).tables['findings'][1:]
    assert len(md_rows) == len(html_rows) == 30
    for cells in [r[2] for r in md_rows] + [r[2] for r in html_rows]:  # the 'this run' column
        assert not REPR.search(cells), cells
        assert re.search(r'\d', cells) or cells.startswith(('missing:', 'not measurable')), cells
    fig = dict((r[0], r[2]) for r in html_rows)
    assert re.fullmatch(r'train \d\.\d\d / held \d\.\d\d at step \d+', fig['15.5 SFT->RL train >= 0.88, held >= 0.80'])
    assert re.fullmatch(r'invalid \d\.\d\d vs \d\.\d\d \(DPO\); train \d\.\d\d vs \d\.\d\d',
                        fig['15.6 DPO+NLL invalid <= half, train above'])
    assert not REPR.search(md.split('## 15.6')[1].split('Group share')[1].split('\n')[0])  # the family shares too


def test_report_has_heldout_pass_per_family(run_dir, page):
    fam = json.loads((run_dir / 'results.json').read_text())['sections']['15.2']['heldout_by_family']
    md = (run_dir / 'report.md').read_text()
    assert '| held-out pass |' in md and 'Held-out pass per task group after oracle SFT' in md
    table = next(t for t in parsed(page).tables.values() if t and t[0][1:] == list(arl.FAMILIES))
    assert table[1] == ['held-out pass', *(f'{fam[f]:.2f}' for f in arl.FAMILIES)]  # bold is markup, not text
    row = next(line for line in md.splitlines() if line.startswith('| held-out pass |'))
    low = min(fam.values()) if len(set(fam.values())) > 1 else None  # the lowest in bold, unless all are equal
    assert row == '| held-out pass | ' + ' | '.join(f'**{fam[f]:.2f}**' if fam[f] == low else f'{fam[f]:.2f}'
                                                    for f in arl.FAMILIES) + ' |'


def test_the_three_figures_are_embedded(run_dir, page):
    imgs = [s for s in parsed(page).imgs if s.startswith('data:image/png;base64,')]
    assert len(imgs) == 3
    embedded = {base64.b64decode(s.split(',', 1)[1]) for s in imgs}
    assert embedded == {(run_dir / name).read_bytes() for name in html_report.FIGURES}


def test_embedded_episodes_decode_to_the_saved_trajectories(run_dir, page):
    data = embedded_data(page)
    assert data['vocab'] == arl.build_tokenizer(arl.make_tasks('all')).vocab and data['owners'] == ['template', 'prompt', 'policy', 'tool']
    keys = [p['key'] for p in data['policies']]
    config = json.loads((run_dir / 'results.json').read_text())['config']  # the SFT checkpoints by the run's steps
    assert keys[:len(POLICIES)] == list(POLICIES) and [p['label'] for p in data['policies'][:3]] == [
        'weak base', f"oracle SFT, step {config['cold_start_step']}", f"oracle SFT, step {config['sft_steps']}"]
    for pol in data['policies'][:2]:
        trajs = load_trajectories(run_dir / 'episodes' / f"{pol['key']}.json")
        assert len(pol['episodes']) == len(trajs) == 60
        for ep, t in zip(pol['episodes'], trajs):
            assert ep['t'] == t.ids.tolist() and [int(c) for c in ep['o']] == t.owner.tolist()
            assert [int(c) for c in ep['m']] == t.action_mask.int().tolist()
            assert [x for turn, n in ep['u'] for x in [turn] * n] == t.turn.tolist()
            assert ep['lp'] == pytest.approx(t.logprobs[t.action_mask.bool()].tolist(), abs=1e-3)
            assert ep['r'] == t.reward and ep['i'] == t.info and 'h' not in ep
    assert len(data['pairs']) == len(load_trajectories(run_dir / 'episodes' / 'dpo_pairs.json')) > 0


def test_checkpoint_heat_is_the_policy_token_log_prob(run_dir, tmp_path):
    out = html_report.build(run_dir, tmp_path / 'heat.html', checkpoint='sft_step60')
    data = embedded_data(out.read_text())
    assert data['checkpoint'] == 'sft_step60' and 'id="heat"' in out.read_text()
    model = arl.load_model(run_dir / 'checkpoints' / 'sft_step60.safetensors', arl.build_tokenizer(arl.make_tasks('all')))
    t = load_trajectories(run_dir / 'episodes' / 'weak.json')[3]
    ep = next(p for p in data['policies'] if p['key'] == 'weak')['episodes'][3]
    with torch.no_grad():
        logp = arl.sequence_log_probs(model, t.ids[None])[0]
    assert ep['h'] == pytest.approx(logp[t.action_mask.bool()].tolist(), abs=0.01)
    assert all(len(e['h']) == e['m'].count('1') for p in data['policies'] for e in p['episodes'])
    with pytest.raises(ValueError, match='sft_step60'):  # a wrong name lists the checkpoints there are
        html_report.build(run_dir, tmp_path / 'x.html', checkpoint='nope')


def test_markdown_converter():
    md = '# Title\n\nA **bold** line\ncontinued.\n\n## Part\n\n| a | b |\n| --- | --- |\n| 1 | <2> |\n\n## Skip\n\ngone\n\n## After\n\nkept'
    md += '\n\n## 15.3 Rejection sampling\n\n| x \\| y | `a < b` |\n| --- | --- |\n| <think> & | **c** |'
    out = html_report.markdown_to_html(md, run_dir=None, replace={'Skip': '<p>instead</p>'})
    flat = ''.join(line.strip() for line in out.splitlines())  # tags one per line or not
    assert '<h1 id="title">Title</h1>' in flat and '<p>A <strong>bold</strong> line\ncontinued.</p>' in out
    assert '<thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>&lt;2&gt;</td></tr></tbody>' in flat
    assert '<p>instead</p>' in out and 'gone' not in out and '<p>kept</p>' in out
    assert '<h2 id="15-3-rejection-sampling">' in out  # the report's anchors
    assert '<th>x | y</th><th><code>a &lt; b</code></th>' in flat  # an escaped | stays in its cell; text, not HTML
    assert '<td>&lt;think&gt; &amp;</td><td><strong>c</strong></td>' in flat


def test_cli_report_and_show(run_dir, tmp_path, capsys):
    assert cli_main(['report', str(run_dir), '--out', str(tmp_path / 'r.html')]) == 0
    assert (tmp_path / 'r.html').read_text().startswith('<!DOCTYPE html>')
    assert cli_main(['report', str(tmp_path)]) == 1  # not a run folder
    capsys.readouterr()
    assert cli_main(['show', str(run_dir), '--policy', 'sft_step60', '--task', 'minmax/clamp', '--n', '1']) == 0
    text = capsys.readouterr().out
    steps = json.loads((run_dir / 'results.json').read_text())['config']['sft_steps']  # the smoke run's last SFT step
    assert f'oracle SFT, step {steps} [sft_step60]' in text and 'minmax/clamp' in text and '[turn 1]' in text and 'episode 1 of 2' in text
    assert cli_main(['show']) == 0
    text = capsys.readouterr().out
    assert 'oracle demo' in text and 'read' in text and 'submitted' in text
    assert cli_main(['show', str(run_dir), '--policy', 'nope']) == 1


def test_repr_html_owner_spans_match_the_owner_tensor(oracle_demos):
    traj = oracle_demos[0]
    page = traj._repr_html_()
    for name, code in arl.OWNER.items():
        assert page.count(f'data-owner="{name}"') == int((traj.owner == code).sum()) > 0, name
    assert page.count('data-mask="1"') == int(traj.action_mask.sum())
