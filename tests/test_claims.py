"""The chapter's claims: the list the docs show is the code's, and the checker agrees with the bands on BugFix."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentrl.experiments.chapter15.claims import CLAIMS, check_claims, markdown

DOC = Path(__file__).resolve().parent.parent / 'docs' / 'claims.md'


def test_the_docs_page_lists_exactly_the_claims_the_code_checks():
    text = DOC.read_text()
    table = re.search(r'<!-- claims:start -->\n(.*)<!-- claims:end -->', text, re.S).group(1)
    assert table == markdown()
    assert len({c.key for c in CLAIMS}) == len(CLAIMS)


def test_every_claim_names_bands_that_exist():
    from agentrl.experiments.chapter15.bands import CHAPTER
    for claim in CLAIMS:
        assert claim.bands and all(b in CHAPTER for b in claim.bands), claim.key


def test_a_figure_a_run_lacks_fails_its_claim_with_a_reason(run_dir):
    sections = json.loads((run_dir / 'results.json').read_text())['sections']
    sections['15.4']['log'] = []
    rows = {f.key: (f.verdict, f.measured) for f in check_claims(sections)}
    assert rows['dpo-no-skill'] == (False, 'missing: no DPO log (no preference pair)')
    assert rows['dpo-values'][0]


@pytest.fixture(scope='module')
def run_dir(tmp_path_factory):
    """The session's smoke run on BugFix (shared with the report tests; read only here)."""
    from test_html_report import smoke_report_dir
    return smoke_report_dir(tmp_path_factory)


def test_claims_and_bands_agree_where_they_share_a_threshold(run_dir):
    """On a BugFix run, a claim that keeps its band's threshold on the same figure gives the band's verdict."""
    from agentrl.experiments.chapter15.bands import check_transcript
    sections = json.loads((run_dir / 'results.json').read_text())['sections']
    bands = {f.key: f.verdict for f in check_transcript((run_dir / 'transcript.txt').read_text())}
    claims = {f.key: f.verdict for f in check_claims(sections)}
    same = {'uniform-init', 'weak-format', 'weak-no-skill', 'sft-decisive', 'grad-identity', 'rft-baseline-close',
            'dpo-values', 'dpo-no-skill', 'nll-holds-format', 'cold-start-learns', 'signal-gap', 'entropy-falls',
            'mismatch-breaks', 'dedup-collapses'}
    for claim in CLAIMS:
        if claim.key in same:
            assert claims[claim.key] == all(bands[b] for b in claim.bands), claim.key
