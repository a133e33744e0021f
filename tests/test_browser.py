"""report.html in a real headless Chromium: findings, figures, the trajectory browser and the DPO pair view.

Needs Debian's ``chromium`` (``apt-get install chromium``) and Python Playwright (``pip install -e '.[browser]'``);
never ``playwright install`` (it downloads a browser). Without either, the test is skipped and says why.
The screenshot goes to ``runs/report_screenshot.png``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentrl.viewer import COLORS
from test_html_report import smoke_report_dir

pytestmark = pytest.mark.browser

ARGS = ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--disable-sync', '--no-first-run']
SCREENSHOT = Path(__file__).resolve().parents[1] / 'runs' / 'report_screenshot.png'


def chromium_path():
    return shutil.which('chromium') or ('/usr/bin/chromium' if Path('/usr/bin/chromium').exists() else None)


@pytest.fixture(scope='module')
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Python Playwright is not installed: pip install -e '.[browser]'")
    exe = chromium_path()
    if exe is None:
        pytest.skip('no Chromium at /usr/bin/chromium or on PATH: apt-get install chromium')
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=ARGS)
        yield b
        b.close()


def rgb(hex_colour):
    h = hex_colour.lstrip('#')
    return 'rgb({}, {}, {})'.format(*(int(h[k:k + 2], 16) for k in (0, 2, 4)))


def test_report_in_chromium(browser, tmp_path_factory):
    run_dir = smoke_report_dir(tmp_path_factory)
    page = browser.new_page(viewport={'width': 1280, 'height': 1500})
    errors, requests = [], []
    page.on('pageerror', lambda e: errors.append(str(e)))
    page.on('console', lambda m: errors.append(m.text) if m.type == 'error' else None)
    page.on('request', lambda r: requests.append(r.url))
    page.goto((run_dir / 'report.html').as_uri())
    page.wait_for_selector('body[data-ready="1"]', timeout=20_000)

    # (a) the findings table, one row per band
    assert page.locator('#findings tbody tr').count() == 30
    # (b) the figures decode
    widths = page.evaluate('[...document.images].map(i => i.naturalWidth)')
    assert len(widths) == 3 and min(widths) > 0
    # (c) pick a policy and a task: a trajectory appears, its tokens in the four owner colours
    page.select_option('#pol', 'sft_step60')
    page.select_option('#task', 'minmax/clamp')
    assert page.locator('#episodes .ep').count() == 2
    colours = page.evaluate("[...new Set([...document.querySelectorAll('#episodes .arl-tok')]"
                            ".map(s => getComputedStyle(s).backgroundColor))]")
    assert sorted(colours) == sorted(rgb(c) for c in COLORS.values())
    owners = page.evaluate("[...new Set([...document.querySelectorAll('#episodes .arl-tok')].map(s => s.dataset.owner))]")
    assert sorted(owners) == sorted(COLORS)
    page.select_option('#outcome', 'pass')
    shown = page.locator('#episodes .ep').count()
    assert shown < 2 or page.locator('#episodes .arl-head b').first.inner_text().find('reward 1') >= 0
    page.select_option('#outcome', 'all')
    # the DPO pair view: shared prefix dimmed, one divergent policy token outlined per side
    assert page.locator('#chosen .arl-shared').count() > 0
    for side in ('#chosen', '#rejected'):
        div = page.locator(f'{side} .arl-div')
        assert div.count() == 1 and div.get_attribute('data-owner') == 'policy'

    assert not errors, errors
    assert all(u.startswith(('file:', 'data:')) for u in requests), [u for u in requests if not u.startswith(('file:', 'data:'))]
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.evaluate("document.getElementById('browser').scrollIntoView()")
    page.screenshot(path=str(SCREENSHOT))
    page.close()
