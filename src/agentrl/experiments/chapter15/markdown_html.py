"""report.md's Markdown, as HTML for ``report.html``: ``report.render``'s subset (headings, tables,
paragraphs, images), with each figure inlined as a base64 PNG data URI."""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path


def _inline(text: str) -> str:
    text = html.escape(text, quote=False)
    text = re.sub(r'\*\*(.+?)\*\*', r'<strong>\1</strong>', text)
    return re.sub(r'`([^`]+)`', r'<code>\1</code>', text)


def _figure(alt: str, src: str, run_dir: Path) -> str:
    path = run_dir / src
    fid = html.escape(Path(src).stem)
    if not path.is_file():
        return f'<figure id="{fid}"><p class="missing">{html.escape(alt)}: {html.escape(src)} is missing</p></figure>'
    data = base64.b64encode(path.read_bytes()).decode('ascii')
    return (f'<figure id="{fid}"><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'
            f'<figcaption>{html.escape(alt)} ({html.escape(src)})</figcaption></figure>')


def markdown_to_html(md: str, run_dir: Path, replace: dict | None = None) -> str:
    """Convert report.md's Markdown; ``replace`` maps a '## ' heading to HTML that stands for its whole section."""
    replace = replace or {}
    out, lines, i, skipping = [], md.splitlines(), 0, False
    while i < len(lines):
        line = lines[i].rstrip()
        if line.startswith('#'):
            level = len(line) - len(line.lstrip('#'))
            title = line[level:].strip()
            skipping = level == 2 and title in replace
            if skipping:
                out.append(replace[title])
            else:
                slug = re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')
                out.append(f'<h{level} id="{slug}">{_inline(title)}</h{level}>')
            i += 1
            continue
        if skipping or not line:
            i += 1
            continue
        if line.startswith('|'):
            rows = []
            while i < len(lines) and lines[i].startswith('|'):
                cells = re.split(r'(?<!\\)\|', lines[i].strip().strip('|'))  # an escaped \| stays in its cell
                rows.append([c.strip().replace('\\|', '|') for c in cells])
                i += 1
            body = [r for r in rows[1:] if not all(re.fullmatch(r'-+', c) for c in r)]
            out.append('<table><thead><tr>' + ''.join(f'<th>{_inline(c)}</th>' for c in rows[0]) + '</tr></thead><tbody>' +
                       ''.join('<tr>' + ''.join(f'<td>{_inline(c)}</td>' for c in r) + '</tr>' for r in body) + '</tbody></table>')
            continue
        if m := re.fullmatch(r'!\[([^\]]*)\]\(([^)]+)\)', line):
            out.append(_figure(m.group(1), m.group(2), run_dir))
            i += 1
            continue
        para = [line]
        i += 1
        while i < len(lines) and lines[i].strip() and not lines[i].startswith(('#', '|', '![')):
            para.append(lines[i].rstrip())
            i += 1
        out.append(f'<p>{_inline(" ".join(para))}</p>')
    return '\n'.join(out)
