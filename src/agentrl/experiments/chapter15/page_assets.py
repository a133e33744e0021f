"""``report.html``'s own CSS and JS (inline in the page): the layout, and the trajectory browser and DPO pair view,
which render the episodes of ``page_data`` like ``viewer.trajectory_html`` does."""
from __future__ import annotations

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
