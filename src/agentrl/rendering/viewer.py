"""See inside a trajectory: who wrote each token, what the mask trains, where turns begin (section 15.1).

``trajectory_html`` renders one episode as self-contained HTML (Jupyter shows it through
``Trajectory._repr_html_``); ``trajectory_text`` renders it for a terminal with rich. Policy
tokens (the only ones the loss trains) are underlined; hovering a token shows its id, owner,
turn, mask bit and behaviour log-prob.
"""
from __future__ import annotations

import html

from .owners import OWNER

COLORS = {'template': '#d9d9d9', 'prompt': '#aec7e8', 'policy': '#98df8a', 'tool': '#ffbb78'}
RICH_STYLES = {'template': 'dim', 'prompt': 'bold blue', 'policy': 'bold green underline', 'tool': 'dark_orange'}
_NAMES = {v: k for k, v in OWNER.items()}


def _words(traj, tok):
    """The token strings of ``traj``: from ``tok``'s vocabulary, else the one the renderer recorded in the
    trajectory (``traj.vocab``), else the ids themselves."""
    vocab = tok.vocab if tok is not None else traj.vocab
    ids = traj.ids.tolist()
    if vocab is None or (ids and max(ids) >= len(vocab)):
        return [str(i) for i in ids]
    return [vocab[i] for i in ids]


CSS = """
.arl-traj{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;line-height:2.0;max-width:100%}
.arl-traj .arl-head{font-family:system-ui,sans-serif;margin-bottom:4px}
.arl-traj .arl-tok{padding:1px 3px;margin:0 1px;border-radius:3px;white-space:pre}
.arl-traj .arl-policy{border-bottom:2px solid #2ca02c;font-weight:600}
.arl-traj .arl-turn{display:inline-block;font-size:10px;color:#888;margin:0 2px 0 6px;border-left:2px solid #bbb;padding-left:4px}
.arl-traj .arl-legend span{padding:1px 6px;margin-right:6px;border-radius:3px;font-size:12px}
"""


def trajectory_html(traj, tok=None, title: str | None = None, standalone_css: bool = True) -> str:
    """One trajectory as HTML: tokens coloured by owner, turn markers, mask and info in tooltips."""
    words = _words(traj, tok)
    owner, turn = traj.owner.tolist(), traj.turn.tolist()
    mask = [0] + [int(x) for x in traj.action_mask.tolist()]  # mask[i]: token i is trained
    logp = [0.0] + traj.logprobs.tolist()
    counts = {name: owner.count(code) for name, code in OWNER.items()}
    info = traj.info or {}
    head = title or f"{info.get('task', '?')} | reward {traj.reward:g} | invalid calls {info.get('n_invalid', 0)}"
    parts = [f'<style>{CSS}</style>' if standalone_css else '',
             '<div class="arl-traj">',
             f'<div class="arl-head"><b>{html.escape(head)}</b> | calls: '
             f"{html.escape(' | '.join(a.strip() for a in info.get('actions', [])))} | "
             f"hidden tests {'pass' if info.get('hidden_pass') else 'fail'}, public tests {'pass' if info.get('public_pass') else 'fail'}</div>",
             '<div class="arl-legend">' + ''.join(
                 f'<span style="background:{COLORS[n]}">{n} {counts[n]}</span>' for n in OWNER) +
             f'<span>trained (policy, underlined): {sum(mask)} of {len(words) - 1} predicted</span></div><div>']
    prev_turn = None
    for i, (w, o, t) in enumerate(zip(words, owner, turn)):
        name = _NAMES.get(o, 'template')
        if t != prev_turn:
            parts.append(f'<span class="arl-turn">turn {t}</span>')
            prev_turn = t
        tip = f'id {int(traj.ids[i])} | {name} | turn {t} | mask {mask[i]}' + (f' | logp {logp[i]:.3f}' if mask[i] else '')
        cls = 'arl-tok arl-policy' if name == 'policy' else 'arl-tok'
        parts.append(f'<span class="{cls}" data-owner="{name}" data-mask="{mask[i]}" title="{html.escape(tip)}" '
                     f'style="background:{COLORS[name]}">{html.escape(w)}</span><wbr>')  # <wbr>: lines may wrap between tokens
    parts.append('</div></div>')
    return ''.join(parts)


def trajectory_text(traj, tok=None):
    """One trajectory as a rich ``Text`` for the terminal (``agentrl show``)."""
    from rich.text import Text
    words = _words(traj, tok)
    text = Text()
    info = traj.info or {}
    text.append(f"{info.get('task', '?')}  reward {traj.reward:g}  invalid {info.get('n_invalid', 0)}\n", style='bold')
    prev = None
    for w, o, t in zip(words, traj.owner.tolist(), traj.turn.tolist()):
        if t != prev:
            text.append(f'\n[turn {t}] ', style='italic grey50')
            prev = t
        text.append(w, style=RICH_STYLES[_NAMES.get(o, 'template')])
        text.append(' ')
    text.append('\n\nlegend: ')
    for name, style in RICH_STYLES.items():
        text.append(f' {name} ', style=style)
    return text
