"""report.html and the documentation site in a real headless Chromium.

report.html: findings, figures, the trajectory browser and the DPO pair view. The site (built with
``mkdocs build --strict``): no code block is cut off at 1280 px, and search works once the site is
served over HTTP (opened as files, Material hides the search box: hence ``make serve``).

Needs Debian's ``chromium`` (``apt-get install chromium``) and Python Playwright (``pip install -e '.[browser]'``);
never ``playwright install`` (it downloads a browser); the site tests also need the ``docs`` extra. Without
any of them, the tests skip and say why. The screenshot goes to ``runs/report_screenshot.png``.
"""
from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from agentrl.rendering.viewer import COLORS
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


def test_report_monitors_in_chromium(browser, tmp_path_factory):
    """The "Training monitors" section of a run that logged its monitors: linked from the nav, its two figures
    decode, its table lists every run."""
    from test_reproduce_logdir import RUNS, logged_run_dir
    run_dir = logged_run_dir(tmp_path_factory)
    page = browser.new_page(viewport={'width': 1280, 'height': 1500})
    errors = []
    page.on('pageerror', lambda e: errors.append(str(e)))
    page.on('console', lambda m: errors.append(m.text) if m.type == 'error' else None)
    page.goto((run_dir / 'report.html').as_uri())
    page.wait_for_selector('body[data-ready="1"]', timeout=20_000)
    page.click('nav a[href="#monitors"]')
    assert page.locator('#monitors').is_visible()
    widths = page.evaluate("[...document.querySelectorAll('#monitors-15-6 img, #monitors-recipes img')].map(i => i.naturalWidth)")
    assert len(widths) == 2 and min(widths) > 0
    assert page.locator('#monitor-runs tbody tr').count() == len(RUNS)
    assert not errors, errors
    page.close()


# --- the documentation site ---------------------------------------------------------------------------

SITE_PAGES = ('index', 'getting-started', 'chapter', 'bands', 'claims', 'lessons', 'bugfix', 'wiring', 'tinyagent',
              'own-environment', 'your-own-question', 'real-models', 'speed', 'api')


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    """The site as ``make docs`` builds it (strictly), shared with test_docs."""
    from test_docs import HAVE_DOCS, built_site
    if not HAVE_DOCS:
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")
    return built_site(tmp_path_factory)


@pytest.fixture(scope='module')
def served(site):
    """The built site over HTTP on a free local port (what ``make serve`` or ``python3 -m http.server`` give)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{server.server_port}'
    server.shutdown()


def test_no_code_block_is_cut_off_at_1280_px(browser, site):
    """Every code block of every page shows its whole width at 1280 px (long lines wrap; nothing hides past the edge)."""
    page = browser.new_page(viewport={'width': 1280, 'height': 900})
    cut, seen = [], {}
    for name in SITE_PAGES:
        page.goto((site / f'{name}.html').as_uri())
        blocks = page.evaluate("[...document.querySelectorAll('pre > code')].map(c => "
                               "[c.scrollWidth, c.clientWidth, c.innerText.split('\\n')[0].slice(0, 60)])")
        seen[name] = len(blocks)
        cut += [f'{name}.html: {first!r} is {sw} px wide in a {cw} px box' for sw, cw, first in blocks if sw > cw + 1]
    page.close()
    assert seen['api'] > 50 and seen['getting-started'] >= 5, seen  # the signatures and the commands are there
    assert not cut, '\n'.join(cut)


def test_search_works_over_http_and_is_hidden_when_opened_as_files(browser, site, served):
    page = browser.new_page(viewport={'width': 1280, 'height': 900})
    page.goto((site / 'index.html').as_uri())
    assert not page.locator('.md-search').is_visible()  # what a reader opening site/index.html sees
    page.goto(f'{served}/index.html')
    page.click('.md-search__input')
    # The search worker builds its index first (slow on a loaded machine); the theme searches on key presses, as a
    # reader types (filling the field's value at once triggers none)
    page.wait_for_function("() => !/initializ/i.test(document.querySelector('.md-search-result__meta')?.textContent ?? 'initializ')",
                           timeout=120_000)
    page.locator('.md-search__input').press_sequentially('check_text_env')
    page.wait_for_selector('.md-search-result__item', timeout=60_000)
    hits = page.locator('.md-search-result__item').all_inner_texts()
    page.close()
    assert any('check_text_env' in h for h in hits), hits
