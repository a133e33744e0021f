"""``report.html``: one self-contained page of a reproduction (``agentrl report``), and ``agentrl show``.

The page holds, with no external resource (figures are base64 PNG data URIs, CSS and JS inline):

- the findings table (``check_transcript`` on ``transcript.txt``: band, the chapter's figure, ours, held or not);
- the chapter's tables (``report.render``'s Markdown, converted by the tiny converter below);
- the three figures;
- a trajectory browser over ``episodes/<policy>.json``: pick a policy, a task and an outcome, and the
  page's JS renders the matching episodes like ``viewer.trajectory_html`` (tokens coloured by owner,
  turn markers, trained policy tokens underlined, reward and info), from one embedded JSON blob;
- a DPO pair view over ``episodes/dpo_pairs.json``: chosen and rejected side by side, the shared
  prefix dimmed and the first divergent policy token outlined;
- optionally (``--checkpoint NAME``) each policy token shaded by its log-prob under that checkpoint.

Episodes are stored compactly: token ids plus one shared vocabulary, owners and mask as digit
strings, turns run-length encoded, log-probs only where the mask is 1.
"""
from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from ..render import OWNER
from ..viewer import COLORS, CSS as TRAJ_CSS

FIGURES = {'fig15_2_dpo.png': 'Figure 15.2', 'fig15_3_recipes.png': 'Figure 15.3', 'fig15_4_hacking.png': 'Figure 15.4'}
MAX_BYTES = 5 * 2 ** 20
"""The budget of a default run's report.html."""
PAIRS_FILE = 'dpo_pairs.json'
EXTRA_LABELS = {'rft_round1_kept': 'RFT round 1, kept episodes', 'dpo_pairs': 'DPO pairs (chosen, rejected, ...)'}


# --- data


def default_tokenizer():
    """The BugFix tokenizer of all 30 tasks (what the chapter builds)."""
    from ..envs.bugfix import make_tasks
    from ..tokenizer import build_tokenizer
    return build_tokenizer(make_tasks('all'))

def encode_episode(t, heat=None) -> dict:
    """A trajectory as the page's compact JSON (see the module docstring); ``heat``: log-probs at masked positions."""
    turns = t.turn.tolist()
    runs = []
    for x in turns:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    mask = [int(x) for x in t.action_mask.tolist()]
    lp = [round(v, 3) for v, m in zip(t.logprobs.tolist(), mask) if m]
    ep = {'t': t.ids.tolist(), 'o': ''.join(str(o) for o in t.owner.tolist()), 'm': ''.join(map(str, mask)),
          'u': runs, 'lp': lp, 'r': t.reward, 'i': t.info}
    if heat is not None:
        ep['h'] = heat
    return ep


def heat_logprobs(model, trajs, batch: int = 64) -> list:
    """Log-prob of every trained (policy) token under ``model`` -> one list per trajectory, in mask order."""
    import torch

    from ..model import sequence_log_probs
    from ..render import collate
    out, block = [], model.config.block_size
    model.eval()
    for k in range(0, len(trajs), batch):
        chunk = trajs[k:k + batch]
        padded = collate(chunk, 0)
        ids = padded['ids'][:, :block]  # [B, T]; padding after a sequence never changes its log-probs
        with torch.no_grad():
            logp = sequence_log_probs(model, ids, padded['lengths'].clamp(max=ids.shape[1]))  # [B, T-1]
        for b, t in enumerate(chunk):
            n = min(len(t.ids), block) - 1
            vals = logp[b, :n].tolist() + [None] * (len(t.ids) - 1 - n)
            out.append([None if v is None else round(v, 2) for v, m in zip(vals, t.action_mask.tolist()) if m])
    return out


def load_episode_files(folder: Path) -> dict:
    """``episodes/*.json`` -> {name: trajectories}, the chapter's policies first (in ``POLICIES`` order), no empty files."""
    from ..trajio import load_trajectories
    from .ch15 import POLICIES
    folder = Path(folder)
    files = sorted(folder.glob('*.json')) if folder.is_dir() else []
    names = [n for n in POLICIES if (folder / f'{n}.json') in files]
    names += [p.stem for p in files if p.stem not in POLICIES and p.name != PAIRS_FILE]
    out = {}
    for name in names:
        trajs = load_trajectories(folder / f'{name}.json')
        if trajs:
            out[name] = trajs
    return out


def label(name: str) -> str:
    from .ch15 import POLICIES
    return POLICIES.get(name) or EXTRA_LABELS.get(name) or name.replace('_', ' ')


def page_data(run_dir: Path, model=None, checkpoint: str | None = None) -> dict:
    """Everything the page's JS needs: vocabulary, owners, colours, episodes per policy, DPO pairs, task splits."""
    from ..envs.bugfix import make_tasks
    from ..trajio import load_trajectories
    folder = Path(run_dir) / 'episodes'
    episodes = load_episode_files(folder)
    pairs = load_trajectories(folder / PAIRS_FILE) if (folder / PAIRS_FILE).exists() else []
    pairs = pairs[:len(pairs) // 2 * 2]
    heat = {}
    if model is not None:
        for name, trajs in [*episodes.items(), (PAIRS_FILE, pairs)]:
            heat[name] = heat_logprobs(model, trajs) if trajs else []
    enc = lambda name, trajs: [encode_episode(t, heat[name][k] if name in heat else None) for k, t in enumerate(trajs)]
    return {'vocab': default_tokenizer().vocab,
            'owners': sorted(OWNER, key=OWNER.get), 'colors': COLORS,
            'policies': [{'key': name, 'label': label(name), 'episodes': enc(name, trajs)} for name, trajs in episodes.items()],
            'pairs': enc(PAIRS_FILE, pairs),
            'tasks': [{'name': t.name, 'split': t.split} for t in make_tasks('all')],
            'checkpoint': checkpoint}


# --- Markdown (report.render's subset: headings, tables, paragraphs, images) -> HTML

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
                rows.append([c.strip() for c in lines[i].strip().strip('|').split('|')])
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


def findings_html(findings: list) -> str:
    from .bands import CHAPTER
    held = sum(ok for _, ok, _ in findings)
    rows = ''.join(
        f'<tr class="{"held" if ok else "notheld"}"><td>{html.escape(name)}</td><td>{html.escape(CHAPTER.get(name, ""))}</td>'
        f'<td>{html.escape(str(fig))}</td><td class="verdict">{"held" if ok else "not held"}</td></tr>'
        for name, ok, fig in findings)
    return (f'<h2 id="findings-h">Findings</h2><p>{held} of {len(findings)} bands of BANDS.md hold on this run\'s '
            '<code>transcript.txt</code>; the chapter\'s own figure is beside this run\'s.</p>'
            '<table id="findings"><thead><tr><th>finding (band)</th><th>chapter</th><th>this run</th><th>holds</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>')


# --- the page

PAGE_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fff}
main{max-width:1280px;margin:0 auto;padding:0 20px 40px}
nav{position:sticky;top:0;background:#f7f7f7;border-bottom:1px solid #ddd;padding:8px 20px;z-index:2;font-size:14px}
nav a{margin-right:14px;color:#1f5fa8;text-decoration:none}
h1,h2,figure{scroll-margin-top:48px}  /* anchors land below the sticky nav */
h1{font-size:24px;margin:18px 0 6px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #eee;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0 14px;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
#findings td.verdict{white-space:nowrap}
#findings tr.held td.verdict{color:#1a7f37;font-weight:600}
#findings tr.notheld td.verdict{color:#c62828;font-weight:600}
#findings tr.notheld{background:#fff5f5}
#findings td:nth-child(3){max-width:420px;overflow-wrap:anywhere}
figure{margin:10px 0 18px}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:12px;color:#666}
.controls{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;background:#fafafa;border:1px solid #e3e3e3;
  padding:8px 10px;border-radius:6px;font-size:14px;margin:6px 0}
.controls select{font-size:14px;padding:2px 4px;max-width:560px}
.note{color:#555;font-size:13px}
.ep{border:1px solid #e5e5e5;border-radius:6px;padding:6px 10px;margin:8px 0}
.arl-traj .arl-tok.arl-shared{opacity:.35}
.arl-traj .arl-tok.arl-div{outline:2px solid #d62728;outline-offset:1px}
.pairgrid{display:grid;grid-template-columns:1fr 1fr;gap:14px}
.pairgrid h3{font-size:15px;margin:4px 0}
.heatbar{display:inline-block;width:120px;height:10px;vertical-align:middle;border-radius:2px;
  background:linear-gradient(90deg,hsl(270,60%,60%),hsl(270,60%,95%))}
"""

PAGE_JS = r"""
(function(){
const D = JSON.parse(document.getElementById('arl-data').textContent);
const NAMES = D.owners, COLORS = D.colors, V = D.vocab;
const $ = id => document.getElementById(id);
const esc = s => String(s).replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
const word = i => i < V.length ? V[i] : String(i);
function turnsOf(ep){ const out = []; for (const [t, n] of ep.u) for (let k = 0; k < n; k++) out.push(t); return out; }
function perToken(ep, arr){  // values stored at masked positions -> one per token (token i is trained when m[i-1] is 1)
  const out = new Array(ep.t.length).fill(null); if (!arr) return out;
  let k = 0; for (let i = 1; i < ep.t.length; i++) if (ep.m[i - 1] === '1') out[i] = arr[k++];
  return out;
}
const heatColor = lp => 'hsl(270,60%,' + Math.round(60 + 35 * Math.exp(lp)) + '%)';  // dark purple: unlikely, pale: likely
function renderTraj(ep, opt){
  opt = opt || {};
  const T = ep.t.length, turn = turnsOf(ep), lp = perToken(ep, ep.lp), heat = opt.heat && ep.h ? perToken(ep, ep.h) : null;
  const counts = {template: 0, prompt: 0, policy: 0, tool: 0}; let trained = 0;
  for (let i = 0; i < T; i++){ counts[NAMES[+ep.o[i]]]++; if (i > 0 && ep.m[i - 1] === '1') trained++; }
  const info = ep.i || {};
  const head = (opt.title ? opt.title + ' | ' : '') + (info.task || '?') + ' | reward ' + ep.r + ' | invalid calls ' + (info.n_invalid || 0);
  const parts = ['<div class="arl-traj"><div class="arl-head"><b>', esc(head), '</b> | calls: ',
    esc((info.actions || []).map(a => a.trim()).join(' | ')), ' | hidden tests ', info.hidden_pass ? 'pass' : 'fail',
    ', public tests ', info.public_pass ? 'pass' : 'fail', '</div><div class="arl-legend">'];
  for (const n of NAMES) parts.push('<span style="background:' + COLORS[n] + '">' + n + ' ' + counts[n] + '</span>');
  parts.push('<span>trained (policy, underlined): ' + trained + ' of ' + (T - 1) + ' predicted</span></div><div>');
  let prev = null;
  for (let i = 0; i < T; i++){
    const name = NAMES[+ep.o[i]], t = turn[i], mask = i > 0 && ep.m[i - 1] === '1' ? 1 : 0;
    if (t !== prev){ parts.push('<span class="arl-turn">turn ' + t + '</span>'); prev = t; }
    let tip = 'id ' + ep.t[i] + ' | ' + name + ' | turn ' + t + ' | mask ' + mask;
    if (mask) tip += ' | logp ' + (lp[i] === null ? '?' : lp[i].toFixed(3));
    let bg = COLORS[name];
    if (heat && mask && heat[i] !== null){ bg = heatColor(heat[i]); tip += ' | logp under ' + D.checkpoint + ' ' + heat[i].toFixed(2); }
    let cls = 'arl-tok' + (name === 'policy' ? ' arl-policy' : '');
    if (opt.shared !== undefined && i < opt.shared) cls += ' arl-shared';
    if (opt.diverge === i) cls += ' arl-div';
    parts.push('<span class="' + cls + '" data-owner="' + name + '" data-mask="' + mask + '" title="' + esc(tip) +
               '" style="background:' + bg + '">' + esc(word(ep.t[i])) + '</span><wbr>');
  }
  parts.push('</div></div>');
  return parts.join('');
}
const passed = ep => ep.r > 0;
const useHeat = () => $('heat') && $('heat').checked;

// --- trajectory browser
function fillBrowser(){
  const pol = $('pol'), task = $('task');
  if (!D.policies.length){
    $('episodes').innerHTML = '<p class="note">This run folder has no episodes/ (run <code>agentrl reproduce</code> with this version to sample them).</p>';
    for (const id of ['pol', 'task', 'outcome']) $(id).disabled = true;
    return;
  }
  pol.innerHTML = D.policies.map((p, k) => '<option value="' + esc(p.key) + '">' + esc(p.label) + ' (' + esc(p.key) + ')</option>').join('');
  const seen = new Set(); D.policies.forEach(p => p.episodes.forEach(e => seen.add((e.i || {}).task)));
  const split = {}; D.tasks.forEach(t => split[t.name] = t.split);
  const names = D.tasks.map(t => t.name).filter(n => seen.has(n)).concat([...seen].filter(n => !(n in split)).sort());
  task.innerHTML = '<option value="all">all tasks</option>' +
    names.map(n => '<option value="' + esc(n) + '">' + esc(n) + (split[n] === 'heldout' ? ' (held-out)' : '') + '</option>').join('');
  for (const id of ['pol', 'task', 'outcome', 'heat']) if ($(id)) $(id).addEventListener('change', () => { update(); updatePair(); });
  update();
}
function update(){
  const p = D.policies.find(x => x.key === $('pol').value); if (!p) return;
  const task = $('task').value, outcome = $('outcome').value;
  const eps = p.episodes.filter(e => (task === 'all' || (e.i || {}).task === task) &&
    (outcome === 'all' || (outcome === 'pass') === passed(e)));
  const n_pass = p.episodes.filter(passed).length;
  $('count').textContent = eps.length + ' of ' + p.episodes.length + ' episodes shown | ' + p.label + ': ' + n_pass + ' of ' +
    p.episodes.length + ' pass (reward 1)';
  const heat = useHeat();
  $('episodes').innerHTML = eps.length ? eps.map((e, k) => '<div class="ep">' + renderTraj(e, {heat: heat, title: 'episode ' + (k + 1)}) + '</div>').join('')
    : '<p class="note">No episode matches.</p>';
}

// --- DPO pairs
function sharedPrefix(a, b){
  let d = 0; const n = Math.min(a.t.length, b.t.length);
  while (d < n && a.t[d] === b.t[d] && a.o[d] === b.o[d]) d++;
  return d;
}
const firstPolicy = (ep, from) => { for (let i = from; i < ep.t.length; i++) if (ep.o[i] === '2') return i; return -1; };
const policyCount = (ep, lo, hi) => { let n = 0; for (let i = Math.max(lo, 1); i < hi; i++) if (ep.m[i - 1] === '1') n++; return n; };
function fillPairs(){
  const sel = $('pair'), n = D.pairs.length / 2;
  if (!n){ $('pairview').innerHTML = '<p class="note" style="grid-column:1/-1">No DPO pairs in this run (episodes/dpo_pairs.json is missing or empty: the sample had no task with both a success and a failure).</p>'; sel.disabled = true; return; }
  const opts = [];
  for (let k = 0; k < n; k++){ const c = D.pairs[2 * k], r = D.pairs[2 * k + 1];
    opts.push('<option value="' + k + '">pair ' + (k + 1) + ': ' + esc((c.i || {}).task || '?') + ' (chosen reward ' + c.r + ', rejected reward ' + r.r + ')</option>'); }
  sel.innerHTML = opts.join('');
  sel.addEventListener('change', updatePair);
  updatePair();
}
function updatePair(){
  const n = D.pairs.length / 2; if (!n) return;
  const k = +$('pair').value, c = D.pairs[2 * k], r = D.pairs[2 * k + 1];
  const d = sharedPrefix(c, r), dc = firstPolicy(c, d), dr = firstPolicy(r, d), heat = useHeat();
  $('pairstats').textContent = 'shared prefix: ' + d + ' tokens, ' + policyCount(c, 0, d) + ' of them trained policy tokens (they cancel) | ' +
    'policy tokens after the divergence: chosen ' + policyCount(c, d, c.t.length) + ', rejected ' + policyCount(r, d, r.t.length);
  $('chosen').innerHTML = '<h3>chosen</h3>' + renderTraj(c, {shared: d, diverge: dc, heat: heat});
  $('rejected').innerHTML = '<h3>rejected</h3>' + renderTraj(r, {shared: d, diverge: dr, heat: heat});
}
fillBrowser();
fillPairs();
document.body.dataset.ready = '1';
})();
"""


def _json_script(data) -> str:
    text = json.dumps(data, separators=(',', ':'))
    return '<script type="application/json" id="arl-data">' + text.replace('</', '<\\/') + '</script>'


def build(run_dir, out=None, checkpoint: str | None = None) -> Path:
    """Write the run folder's ``report.html`` (or ``out``) -> its path."""
    from .bands import check_transcript
    from . import report
    run_dir = Path(run_dir)
    results_path, transcript_path = run_dir / 'results.json', run_dir / 'transcript.txt'
    if not results_path.is_file():
        raise ValueError(f'{run_dir} is not a reproduction folder: it has no results.json (run `agentrl reproduce --out {run_dir}`)')
    saved = json.loads(results_path.read_text())
    if transcript_path.is_file():
        transcript = transcript_path.read_text()
    else:  # the same lines, kept in results.json
        from .ch15 import SECTIONS
        lines = saved.get('transcript', {})
        transcript = '\n'.join(x for sec in ['setup', *SECTIONS] for x in lines.get(sec, [])) + '\n'
    findings = check_transcript(transcript)
    seed = saved.get('seed', 0)
    timing = json.loads((run_dir / 'timing.json').read_text()) if (run_dir / 'timing.json').is_file() else None
    try:
        md = report.render(saved['sections'], findings, seed, timing)
    except (KeyError, IndexError, TypeError) as e:  # an unfinished run: fall back to its report.md, if any
        md = (run_dir / 'report.md').read_text() if (run_dir / 'report.md').is_file() else \
            f'# Chapter 15, reproduced (seed shift {seed})\n\nThe run is unfinished ({type(e).__name__}: {e}); no tables yet.\n\n## Findings\n'
    if '## Findings' not in md:
        md += '\n## Findings\n'
    for name in FIGURES:  # every figure appears, even if the Markdown does not reference it
        if f']({name})' not in md:
            md += f'\n![{FIGURES[name]}]({name})\n'

    model = None
    if checkpoint:
        from ..checkpoint import load_model
        path = run_dir / 'checkpoints' / f'{checkpoint}.safetensors'
        if not path.is_file():
            have = sorted(p.stem for p in (run_dir / 'checkpoints').glob('*.safetensors'))
            raise ValueError(f'no checkpoint {checkpoint!r} in {run_dir}/checkpoints (have: {", ".join(have) or "none"})')
        model = load_model(path, default_tokenizer())
    data = page_data(run_dir, model, checkpoint)
    body = markdown_to_html(md, run_dir, replace={'Findings': findings_html(findings)})
    heat_ctl = (f'<label><input type="checkbox" id="heat" checked> shade policy tokens by log-prob under '
                f'<code>{html.escape(checkpoint)}</code></label> <span class="note">p = 0 <span class="heatbar"></span> p = 1</span>'
                if checkpoint else '')
    browser = f"""
<h2 id="browser">Trajectory browser</h2>
<p class="note">Episodes sampled from each checkpointed policy after the run (2 per task, all 30 tasks; hidden-test reward),
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
    held = sum(ok for _, ok, _ in findings)
    nav = ''.join(f'<a href="#{a}">{t}</a>' for a, t in [('findings-h', f'findings ({held}/{len(findings)})'), ('15-1-trajectory-sft-and-the-action-mask', 'tables'),
                                                         ('fig15_2_dpo', 'figures'), ('browser', 'trajectory browser'), ('pairs', 'DPO pairs')])
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>agentrl: chapter 15 reproduction ({html.escape(run_dir.name)})</title>
<style>{PAGE_CSS}{TRAJ_CSS}</style></head>
<body><nav>{nav}<span class="note">run folder: {html.escape(str(run_dir))}</span></nav><main>
{body}
{browser}
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
        path = build(args.dir, args.out, args.checkpoint)
    except ValueError as e:
        print(f'agentrl report: {e}')
        return 1
    size = path.stat().st_size
    print(f'wrote {path} ({size / 2 ** 20:.2f} MB){"" if size <= MAX_BYTES else " -- larger than the 5 MB budget"}')
    return 0


def main_show(args) -> int:
    """Print episodes in the terminal with ``viewer.trajectory_text``."""
    from rich.console import Console

    from ..viewer import trajectory_text
    console = Console()
    tok = default_tokenizer()
    if args.dir is None:
        from ..envs.bugfix import BugFixEnv
        from ..envs.bugfix import scripted_policy
        from ..rollout import scripted_rollout
        from ..envs.bugfix import make_tasks
        source = 'oracle demo (no run folder given)'
        trajs = [scripted_rollout(scripted_policy('oracle'), BugFixEnv(), t, tok) for t in make_tasks('train')]
        n = args.n or 1
    else:
        from ..trajio import load_trajectories
        folder = Path(args.dir) / 'episodes'
        have = sorted(p.stem for p in folder.glob('*.json')) if folder.is_dir() else []
        from .ch15 import POLICIES
        name = args.policy or next((p for p in POLICIES if p in have), have[0] if have else None)
        if name is None or name not in have:
            console.print(f'no episodes for policy {name!r} in {folder} (have: {", ".join(have) or "none"})', markup=False)
            return 1
        try:
            trajs = load_trajectories(folder / f'{name}.json')
        except ValueError as e:
            console.print(str(e), markup=False)
            return 1
        source = f'{label(name)} [{name}]'
        console.print(f'episodes of {source} from {folder / (name + ".json")}', markup=False, highlight=False)
        n = args.n or 2
    if args.task:
        exact = [t for t in trajs if t.info.get('task') == args.task]
        trajs = exact or [t for t in trajs if args.task in t.info.get('task', '')]
    if not trajs:
        console.print(f'no episode of task {args.task!r} in {source}', markup=False)
        return 1
    for k, t in enumerate(trajs[:n]):
        console.rule(f'{source}: episode {k + 1} of {len(trajs)}')
        console.print(trajectory_text(t, tok))
    return 0
