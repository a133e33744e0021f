"""Episodes out as chat data other trainers read, and back in (``agentrl export``).

``agentrl export RUN --format chat-jsonl`` writes a run's sampled episodes (``RUN/episodes/*.json``)
as JSON Lines in the conversational format of Hugging Face trainers and ``datasets``:

- ``episodes.jsonl``: one record per episode, ``{"messages": [...], "reward": r, "turn_rewards": [...],
  "info": {...}, "source": NAME}`` (``reward`` the return, ``turn_rewards`` each call's reward, in order); messages are the task prompt (``user``), each call (``assistant``) and each
  env reply (``tool``). A call the policy did not close (cut at the length limit, no end-of-turn
  token) carries ``"end_of_turn": false``.
- ``pairs.jsonl``: the run's DPO pairs, ``{"chosen": [...], "rejected": [...], "reward_chosen",
  "reward_rejected", "task"}``: full conversations sharing their user message (the implicit-prompt
  preference format).

Reading a file back through a chat renderer (``read_episodes``) gives the run's ids exactly: the
word-level layout is itself a chat template (``hf.WORD_TEMPLATE``), so
``hf.word_renderer(tok)`` renders the messages token for token as the run did.
Writing needs nothing beyond agentrl; reading back needs the ``hf`` extra.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..rendering.owners import OWNER

FORMATS = ('chat-jsonl',)
_PROMPT, _POLICY, _TOOL = OWNER['prompt'], OWNER['policy'], OWNER['tool']


def _decode(renderer, ids) -> str:
    if hasattr(renderer, 'decode'):
        return renderer.decode(ids)
    return ' '.join(renderer.tok.vocab[i] for i in ids)


def trajectory_messages(traj, tok) -> list[dict]:
    """The conversation of a rendered episode, read off its owners and turns: user prompt, then each call
    (assistant; ``"end_of_turn": false`` when the call has no stop token) and its reply (tool)."""
    from ..rendering.protocols import as_renderer
    renderer = as_renderer(tok)
    ids, owner, turn = traj.ids.tolist(), traj.owner.tolist(), traj.turn.tolist()
    messages = [{'role': 'user', 'content': _decode(renderer, [i for i, o in zip(ids, owner) if o == _PROMPT])}]
    for k in range(1, max(turn) + 1):
        call = [i for i, o, t in zip(ids, owner, turn) if t == k and o == _POLICY]
        msg = {'role': 'assistant', 'content': renderer.call_text(call)}
        if not call or call[-1] != renderer.stop_id:
            msg['end_of_turn'] = False
        messages.append(msg)
        reply = [i for i, o, t in zip(ids, owner, turn) if t == k and o == _TOOL]
        if reply:
            messages.append({'role': 'tool', 'content': _decode(renderer, reply)})
    return messages


def episode_record(traj, tok, source: str | None = None) -> dict:
    rec = {'messages': trajectory_messages(traj, tok), 'reward': float(traj.reward),
           'turn_rewards': list(traj.turn_rewards), 'info': dict(traj.info)}
    if source is not None:
        rec['source'] = source
    return rec


def pair_record(chosen, rejected, tok) -> dict:
    return {'chosen': trajectory_messages(chosen, tok), 'rejected': trajectory_messages(rejected, tok),
            'reward_chosen': float(chosen.reward), 'reward_rejected': float(rejected.reward),
            'task': chosen.info.get('task')}


def _write_jsonl(path: Path, records) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    n = 0
    with open(tmp, 'w') as f:
        for rec in records:
            f.write(json.dumps(rec, separators=(',', ':')) + '\n')
            n += 1
    os.replace(tmp, path)
    return n


def read_jsonl(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_tokenizer(run):
    """The word-level tokenizer a reproduce folder's policies were trained with (the vocabulary its checkpoints
    hold), so that a run on any environment exports with its own words."""
    from ..policies.checkpoint import read_vocab
    from ..rendering.tokenizer import Tokenizer
    for path in sorted((Path(run) / 'checkpoints').glob('*.safetensors')):
        vocab = read_vocab(path)
        if vocab is not None:
            return Tokenizer(vocab)
    raise ValueError(f'{run} has no checkpoint with a vocabulary in checkpoints/: is it a folder written by '
                     '`agentrl reproduce`?')


def run_trajectories(run) -> tuple[dict, list]:
    """A reproduce folder's saved episodes -> ({source name: trajectories}, [(chosen, rejected)])."""
    from ..rendering.trajio import load_trajectories
    folder = Path(run) / 'episodes'
    if not folder.is_dir():
        raise ValueError(f'{run} has no episodes/ folder: is it a folder written by `agentrl reproduce`?')
    episodes, pairs = {}, []
    for path in sorted(folder.glob('*.json')):
        trajs = load_trajectories(path)
        if path.stem == 'dpo_pairs':
            pairs = list(zip(trajs[0::2], trajs[1::2]))
        else:
            episodes[path.stem] = trajs
    return episodes, pairs


def export_run(run, out=None, tok=None, fmt: str = 'chat-jsonl') -> dict:
    """Write ``run``'s episodes and DPO pairs as chat JSON Lines into ``out`` (default ``RUN/export``)
    -> {'episodes': path, 'pairs': path, 'n_episodes': n, 'n_pairs': m}."""
    if fmt not in FORMATS:
        raise ValueError(f'unknown format {fmt!r}; valid formats are {list(FORMATS)}')
    episodes, pairs = run_trajectories(run)
    tok = tok if tok is not None else run_tokenizer(run)
    out = Path(out) if out is not None else Path(run) / 'export'
    ep_path, pair_path = out / 'episodes.jsonl', out / 'pairs.jsonl'
    n_ep = _write_jsonl(ep_path, (episode_record(t, tok, name) for name, trajs in episodes.items() for t in trajs))
    n_pairs = _write_jsonl(pair_path, (pair_record(c, r, tok) for c, r in pairs))
    return {'episodes': ep_path, 'pairs': pair_path, 'n_episodes': n_ep, 'n_pairs': n_pairs}


def read_episodes(path, renderer) -> list:
    """Render every record of an ``episodes.jsonl`` through ``renderer`` (e.g. a ``ChatRenderer``)."""
    return [renderer.render_messages(rec['messages'], rec.get('reward', 0.0), rec.get('info'), rec.get('turn_rewards'))
            for rec in read_jsonl(path)]


def read_pairs(path, renderer) -> list[tuple]:
    """Render every record of a ``pairs.jsonl`` -> [(chosen, rejected)] trajectories."""
    return [(renderer.render_messages(rec['chosen'], rec.get('reward_chosen', 0.0)),
             renderer.render_messages(rec['rejected'], rec.get('reward_rejected', 0.0))) for rec in read_jsonl(path)]


def check_round_trip(run, written: dict, tok=None) -> dict:
    """Re-render the exported files through ``hf.word_renderer(tok)`` and compare ids, owners
    and turns with the run's own trajectories -> counts of identical episodes and pairs."""
    import torch

    from ..policies.hf import word_renderer
    renderer = word_renderer(tok if tok is not None else run_tokenizer(run))
    episodes, pairs = run_trajectories(run)
    originals = [t for trajs in episodes.values() for t in trajs]

    def same(a, b):
        return torch.equal(a.ids, b.ids) and torch.equal(a.owner, b.owner) and torch.equal(a.turn, b.turn)

    again = read_episodes(written['episodes'], renderer)
    again_pairs = read_pairs(written['pairs'], renderer)
    return {'episodes': len(originals), 'episodes_identical': sum(map(same, originals, again)) if
            len(again) == len(originals) else 0,
            'pairs': len(pairs), 'pairs_identical': sum(same(c, c2) and same(r, r2) for (c, r), (c2, r2) in
                                                        zip(pairs, again_pairs)) if len(again_pairs) == len(pairs) else 0}


def main(args) -> int:
    """``agentrl export RUN --format chat-jsonl [--out DIR] [--no-check]``."""
    try:
        written = export_run(args.run, args.out, fmt=args.format)
    except ValueError as e:  # not a run folder, or a damaged one: say so, like the other subcommands
        print(f'agentrl export: error: {e}', file=sys.stderr)
        return 2
    print(f"wrote {written['n_episodes']} episodes to {written['episodes']} and {written['n_pairs']} preference "
          f"pairs to {written['pairs']}")
    if not args.no_check:
        try:
            res = check_round_trip(args.run, written)
        except ImportError as e:
            print(f'round-trip check skipped: {e}')
            return 0
        print(f"re-rendered through the chat renderer: {res['episodes_identical']} of {res['episodes']} episodes and "
              f"{res['pairs_identical']} of {res['pairs']} pairs give identical ids")
        if res['episodes_identical'] != res['episodes'] or res['pairs_identical'] != res['pairs']:
            return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser('export', help="write a run's episodes and DPO pairs as chat JSON Lines for other trainers")
    p.add_argument('run', help='a reproduction folder (what `agentrl reproduce --out` wrote)')
    p.add_argument('--format', default='chat-jsonl', choices=FORMATS, help='output format (default chat-jsonl)')
    p.add_argument('--out', default=None, help='output folder (default RUN/export)')
    p.add_argument('--no-check', action='store_true',
                   help="don't re-render the written files through the chat renderer to check the ids")
    p.set_defaults(func=main)
