"""``report.html``: one self-contained page of a reproduction (``agentrl report``).

The page holds, with no external resource (figures are base64 PNG data URIs, CSS and JS inline):

- the findings table, on the environment that has the chapter's bands (``ChapterEnv.bands`` on ``transcript.txt``:
  band, the chapter's figure, ours, held or not);
- the chapter's tables (``report.render``'s Markdown, converted by Python-Markdown: ``markdown_to_html``);
- the three figures;
- a trajectory browser over ``episodes/<policy>.json``: pick a policy, a task and an outcome, and the
  page's JS renders the matching episodes like ``viewer.trajectory_html`` (tokens coloured by owner,
  turn markers, trained policy tokens underlined, reward and info), from one embedded JSON blob;
- a DPO pair view over ``episodes/dpo_pairs.json``: chosen and rejected side by side, the shared
  prefix dimmed and the first divergent policy token outlined;
- optionally (``--checkpoint NAME``) each policy token shaded by its log-prob under that checkpoint;
- when the run logged its monitors (``reproduce --logdir``), a "Training monitors" section (``monitors_page.py``).

The episodes' compact JSON is ``page_data.py``'s, the page's CSS and JS ``page_assets.py``'s; this
module assembles the page. ``agentrl show`` (the same episodes in the terminal) is ``show.py``.
"""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from ...rendering.trajectory import OWNER
from ...rendering.viewer import COLORS, CSS as TRAJ_CSS
from ..run_folder import peek, read_run, transcript
from .findings import rows, tally
from .monitors_page import monitors_html
from .page_assets import PAGE_CSS, PAGE_JS
from .page_data import page_data

FIGURES = {'fig15_2_dpo.png': 'Figure 15.2', 'fig15_3_recipes.png': 'Figure 15.3', 'fig15_4_hacking.png': 'Figure 15.4'}
MAX_BYTES = 5 * 2 ** 20
"""The budget of a default run's report.html."""


def _figure(alt: str, src: str, run_dir: Path) -> str:
    """One figure of the report as a ``<figure>`` with its PNG inlined (or a note that the file is missing)."""
    path = run_dir / src
    fid = html.escape(Path(src).stem)
    if not path.is_file():
        return f'<figure id="{fid}"><p class="missing">{html.escape(alt)}: {html.escape(src)} is missing</p></figure>'
    data = base64.b64encode(path.read_bytes()).decode('ascii')
    return (f'<figure id="{fid}"><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'
            f'<figcaption>{html.escape(alt)} ({html.escape(src)})</figcaption></figure>')


def _slug(title: str, separator: str = '-') -> str:
    """A heading's id: its words in lower case joined by ``-`` (``15.3 Rejection`` -> ``15-3-rejection``)."""
    return re.sub(r'[^a-z0-9]+', separator, title.lower()).strip(separator)


def markdown_to_html(md: str, run_dir: Path, replace: dict | None = None) -> str:
    """report.md's Markdown as HTML (Python-Markdown, with tables and heading ids); an image line becomes a figure
    with its PNG inlined, and ``replace`` maps a '## ' heading to HTML that stands for its whole section. The text
    is the report's own, not HTML: a ``<`` in it is shown, not parsed."""
    import markdown
    from markdown.extensions.toc import TocExtension
    replace, blocks, lines, skipping = replace or {}, {}, [], False

    def block(html_text: str) -> None:  # a placeholder paragraph, swapped for the HTML after the conversion
        blocks[f'ARLBLOCK{len(blocks)}X'] = html_text
        lines.extend(['', f'ARLBLOCK{len(blocks) - 1}X', ''])
    for line in md.splitlines():
        if line.startswith('#'):  # a heading ends a replaced section; a '## ' one in ``replace`` starts one
            skipping = line.startswith('## ') and line[3:].strip() in replace
            if skipping:
                block(replace[line[3:].strip()])
        if skipping:
            continue
        if m := re.fullmatch(r'!\[([^\]]*)\]\(([^)]+)\)', line.strip()):
            block(_figure(m.group(1), m.group(2), run_dir))
        else:
            lines.append(line)
    converter = markdown.Markdown(extensions=['tables', TocExtension(slugify=_slug)])
    converter.preprocessors.deregister('html_block')  # the report's text is text: '<think>' is shown, not a tag
    converter.inlinePatterns.deregister('html')
    out = converter.convert('\n'.join(lines))
    for key, html_text in blocks.items():
        out = out.replace(f'<p>{key}</p>', html_text)
    return out


def findings_html(findings: list) -> str:
    """The bands' table (``findings.rows``' cells), each row coloured by its verdict."""
    header, cells = rows(findings, 'html')
    body = ''.join(f'<tr class="{"held" if f.verdict else "notheld"}">'
                   + ''.join(f'<td>{html.escape(c)}</td>' for c in row[:-1]) + f'<td class="verdict">{row[-1]}</td></tr>'
                   for f, row in zip(findings, cells))
    return (f'<h2 id="findings-h">Findings</h2><p>{tally(findings)[0]} of {len(findings)} bands (docs/bands.md) hold on '
            'this run\'s <code>transcript.txt</code>; the chapter\'s own figure is beside this run\'s.</p>'
            '<table id="findings"><thead><tr>' + ''.join(f'<th>{html.escape(h)}</th>' for h in header) + '</tr></thead>'
            f'<tbody>{body}</tbody></table>')


def _json_script(data) -> str:
    text = json.dumps(data, separators=(',', ':'))
    return '<script type="application/json" id="arl-data">' + text.replace('</', '<\\/') + '</script>'


def build(run_dir, out=None, checkpoint: str | None = None, logdir=None) -> Path:
    """Write the run folder's ``report.html`` (or ``out``) -> its path. ``logdir``: the run's log folder, for the
    "Training monitors" section (``monitors_page``; default: the one the run recorded, else ``DIR/logs``)."""
    from . import report
    from .claims import check_claims
    from .env_registry import DEFAULT, get_env
    run_dir = Path(run_dir)
    saved = read_run(run_dir)
    env = get_env(saved.get('env', DEFAULT))
    findings = env.bands(transcript(run_dir, saved)) if env.bands else []
    seed = saved.get('seed', 0)
    timing = peek(run_dir / 'timing.json')
    claims = check_claims(saved['sections'], env)
    try:
        md = report.render(saved['sections'], findings, seed, timing, claims=claims, env=env)
    except (KeyError, IndexError, TypeError) as e:  # an unfinished run: fall back to its report.md, if any
        md = (run_dir / 'report.md').read_text() if (run_dir / 'report.md').is_file() else \
            f'# Chapter 15, reproduced (seed shift {seed})\n\nThe run is unfinished ({type(e).__name__}: {e}); no tables yet.\n\n## Findings\n'
    if '## Findings' not in md and env.bands:
        md += '\n## Findings\n'
    skip = set() if saved['sections'].get('15.6', {}).get('hacking', True) else {'fig15_4_hacking.png'}  # no rounds
    for name in FIGURES:  # every figure appears, even if the Markdown does not reference it
        if f']({name})' not in md and name not in skip:
            md += f'\n![{FIGURES[name]}]({name})\n'

    model = None
    if checkpoint:
        from ...policies.checkpoint import load_model
        from ...integrations.export import run_tokenizer
        path = run_dir / 'checkpoints' / f'{checkpoint}.safetensors'
        if not path.is_file():
            have = sorted(p.stem for p in (run_dir / 'checkpoints').glob('*.safetensors'))
            raise ValueError(f'no checkpoint {checkpoint!r} in {run_dir}/checkpoints (have: {", ".join(have) or "none"})')
        model = load_model(path, run_tokenizer(run_dir))
    data = page_data(run_dir, model, checkpoint, env)
    monitors = monitors_html(run_dir, saved, logdir)
    body = markdown_to_html(md, run_dir, replace={'Findings': findings_html(findings)} if findings else {})
    heat_ctl = (f'<label><input type="checkbox" id="heat" checked> shade policy tokens by log-prob under '
                f'<code>{html.escape(checkpoint)}</code></label> <span class="note">p = 0 <span class="heatbar"></span> p = 1</span>'
                if checkpoint else '')
    browser = f"""
<h2 id="browser">Trajectory browser</h2>
<p class="note">Episodes sampled from each checkpointed policy after the run (2 per task, every task; the hidden reward),
plus the run's other episode files (such as RFT round 1's kept episodes). Tokens are coloured by owner ({', '.join(f'<span style="background:{COLORS[n]};padding:0 4px">{n}</span>' for n in OWNER)});
trained (policy) tokens are underlined; a grey bar starts each turn. Hover a token for its id, owner, turn, mask bit and
behaviour log-prob (section 15.1).</p>
<div class="controls">
<label>policy <select id="pol"></select></label>
<label>task <select id="task"></select></label>
<label>outcome <select id="outcome"><option value="all">all</option><option value="pass">pass</option><option value="fail">fail</option></select></label>
{heat_ctl}
<span id="count" class="note"></span>
</div>
<div id="episodes"></div>
<h2 id="pairs">DPO pairs</h2>
<p>A DPO pair is a success (chosen) and a failure (rejected) of the same task, sampled from the weak base. The loss sees only the
difference of the two episodes' summed policy log-ratios, and a policy token of the shared prefix (dimmed) has the same context
and the same value in both episodes, so its terms cancel: <b>shared tokens contribute nothing to the DPO gradient</b>
(chapter 15.4). The whole signal starts at the first divergent policy token (outlined in red).</p>
<div class="controls"><label>pair <select id="pair"></select></label><span id="pairstats" class="note"></span></div>
<div id="pairview" class="pairgrid"><div id="chosen"></div><div id="rejected"></div></div>
"""
    held, applicable, _ = tally(claims)
    first = (('findings-h', f'findings ({tally(findings)[0]}/{len(findings)})') if findings else
             ('claims', f'claims ({held}/{applicable})'))
    nav = ''.join(f'<a href="#{a}">{t}</a>' for a, t in [first, ('15-1-trajectory-sft-and-the-action-mask', 'tables'),
                                                         ('fig15_2_dpo', 'figures'), ('browser', 'trajectory browser'), ('pairs', 'DPO pairs')]
                  + ([('monitors', 'training monitors')] if monitors else []))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>agentrl: chapter 15 reproduction ({html.escape(run_dir.name)})</title>
<style>{PAGE_CSS}{TRAJ_CSS}</style></head>
<body><nav>{nav}<span class="note">run folder: {html.escape(str(run_dir))}</span></nav><main>
{body}
{browser}
{monitors}
</main>
{_json_script(data)}
<script>{PAGE_JS}</script>
</body></html>
"""
    out = Path(out) if out else run_dir / 'report.html'
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding='utf-8')
    return out


# --- CLI entry points (registered in experiments/cli.py)

def main_report(args) -> int:
    import torch
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    try:
        path = build(args.dir, args.out, args.checkpoint, getattr(args, 'logdir', None))
    except ValueError as e:
        print(f'agentrl report: {e}')
        return 1
    size = path.stat().st_size
    print(f'wrote {path} ({size / 2 ** 20:.2f} MB){"" if size <= MAX_BYTES else " -- larger than the 5 MB budget"}')
    return 0
