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

A run of a pretrained policy (``agentrl reproduce --policy smollm2``, a model folder, a ``.gguf`` file) rendered its
episodes through the model's own chat template (``chat.ChatRenderer``): its records hold the messages that
template rendered, the environment's calls described first (``ChatRenderer.description``: a ``system`` message, or
the record's ``tools`` where the template renders ``tools=``), its prompt and replies as ``readable`` text (BugFix's
``read`` reply as Python source). Every text is decoded from the run's own ids.

Reading a file back through a chat renderer (``read_episodes``) gives the run's ids: the word-level layout is
itself a chat template (``hf.WORD_TEMPLATE``), so ``hf.word_renderer(tok)`` renders the messages token for token as
the run did, and a pretrained policy's renderer renders them as its template does (``check_round_trip``). A text
cannot hold one thing: a call a model wrote in other tokens than its tokenizer's encoding of the same text
(a model is free to spell ``read`` as ``re`` + ``ad``) reads back as the tokenizer's encoding; the check counts
those episodes apart. Writing needs nothing beyond agentrl; reading back needs the ``hf`` extra.
The command itself, which finds a run's renderer, is ``experiments/export_command.py``.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..rendering.owners import OWNER
from ..runtime.files import atomic_path

FORMATS = ('chat-jsonl',)
_PROMPT, _POLICY, _TOOL = OWNER['prompt'], OWNER['policy'], OWNER['tool']


def _decode(renderer, ids) -> str:
    if hasattr(renderer, 'decode'):
        return renderer.decode(ids)
    return ' '.join(renderer.tok.vocab[i] for i in ids)


def _preamble(renderer, env) -> tuple[list, list | None]:
    """What comes before an episode's prompt as chat data -> (messages, tools): ``env``'s calls as the chat renderer
    described them (``ChatRenderer.description``); nothing without ``env`` (the word-level layout)."""
    return renderer.description(env) if env is not None else ([], None)


def trajectory_messages(traj, tok, env=None) -> list[dict]:
    """The conversation of a rendered episode, read off its owners and turns: the description of ``env``'s calls
    where the chat renderer ``tok`` put it in a system message (``env``: the environment the episode was played
    in; None for a word-level run, which describes nothing), the user prompt, then each call (assistant;
    ``"end_of_turn": false`` when the call has no stop token) and its reply (tool)."""
    from ..rendering.protocols import as_renderer
    renderer = as_renderer(tok)
    return _preamble(renderer, env)[0] + _conversation(traj, renderer)


def _conversation(traj, renderer) -> list[dict]:
    """The user prompt, each call and each reply of ``traj``, decoded from its ids."""
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


def episode_record(traj, tok, source: str | None = None, env=None) -> dict:
    """One line of ``episodes.jsonl``: ``messages`` (``trajectory_messages``), ``tools`` where the template rendered
    the calls as tools, the return, each call's reward, the environment's ``info`` and ``source``."""
    from ..rendering.protocols import as_renderer
    renderer = as_renderer(tok)
    first, tools = _preamble(renderer, env)
    rec = {'messages': first + _conversation(traj, renderer), **({'tools': tools} if tools else {}),
           'reward': float(traj.reward), 'turn_rewards': list(traj.turn_rewards), 'info': dict(traj.info)}
    if source is not None:
        rec['source'] = source
    return rec


def pair_record(chosen, rejected, tok, env=None) -> dict:
    """One line of ``pairs.jsonl``: both conversations (sharing their messages up to the first call), ``tools`` as
    ``episode_record``, both returns and the task."""
    from ..rendering.protocols import as_renderer
    renderer = as_renderer(tok)
    first, tools = _preamble(renderer, env)
    return {'chosen': first + _conversation(chosen, renderer), 'rejected': first + _conversation(rejected, renderer),
            **({'tools': tools} if tools else {}), 'reward_chosen': float(chosen.reward),
            'reward_rejected': float(rejected.reward), 'task': chosen.info.get('task')}


def _write_jsonl(path: Path, records) -> int:
    n = 0
    with atomic_path(path) as tmp, open(tmp, 'w') as f:
        for rec in records:
            f.write(json.dumps(rec, separators=(',', ':')) + '\n')
            n += 1
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


def episode_files(run) -> list[Path]:
    """A reproduce folder's episode files (``RUN/episodes/*.json``, the DPO pairs' included); ValueError naming what
    is missing when it has none."""
    folder = Path(run) / 'episodes'
    if not folder.is_dir():
        raise ValueError(f'{run} has no episodes/ folder: is it a folder written by `agentrl reproduce`?')
    files = sorted(folder.glob('*.json'))
    if not files:
        raise ValueError(f'{folder} holds no episode files (*.json): a run writes them when it ends')
    return files


def run_trajectories(run) -> tuple[dict, list]:
    """A reproduce folder's saved episodes -> ({source name: trajectories}, [(chosen, rejected)])."""
    from ..rendering.trajio import load_trajectories
    episodes, pairs = {}, []
    for path in episode_files(run):
        trajs = load_trajectories(path)
        if path.stem == 'dpo_pairs':
            pairs = list(zip(trajs[0::2], trajs[1::2]))
        else:
            episodes[path.stem] = trajs
    return episodes, pairs


def export_run(run, out=None, tok=None, fmt: str = 'chat-jsonl', env=None) -> dict:
    """Write ``run``'s episodes and DPO pairs as chat JSON Lines into ``out`` (default ``RUN/export``)
    -> {'episodes': path, 'pairs': path, 'n_episodes': n, 'n_pairs': m}.

    ``tok``: what the run rendered its episodes with: its word-level tokenizer (default: the one its checkpoints
    hold, ``run_tokenizer``) or a pretrained policy's ``ChatRenderer``, with ``env`` the environment whose calls it
    described (``export_command.run_renderer`` finds both from the run's ``results.json``)."""
    if fmt not in FORMATS:
        raise ValueError(f'unknown format {fmt!r}; valid formats are {list(FORMATS)}')
    episodes, pairs = run_trajectories(run)
    tok = tok if tok is not None else run_tokenizer(run)
    out = Path(out) if out is not None else Path(run) / 'export'
    ep_path, pair_path = out / 'episodes.jsonl', out / 'pairs.jsonl'
    n_ep = _write_jsonl(ep_path, (episode_record(t, tok, name, env) for name, trajs in episodes.items() for t in trajs))
    n_pairs = _write_jsonl(pair_path, (pair_record(c, r, tok, env) for c, r in pairs))
    return {'episodes': ep_path, 'pairs': pair_path, 'n_episodes': n_ep, 'n_pairs': n_pairs}


def read_episodes(path, renderer) -> list:
    """Render every record of an ``episodes.jsonl`` through ``renderer`` (a ``ChatRenderer``) -> trajectories."""
    return [renderer.render_messages(rec['messages'], rec.get('reward', 0.0), rec.get('info'), rec.get('turn_rewards'),
                                     tools=rec.get('tools')) for rec in read_jsonl(path)]


def read_pairs(path, renderer) -> list[tuple]:
    """Render every record of a ``pairs.jsonl`` -> [(chosen, rejected)] trajectories."""
    return [(renderer.render_messages(rec['chosen'], rec.get('reward_chosen', 0.0), tools=rec.get('tools')),
             renderer.render_messages(rec['rejected'], rec.get('reward_rejected', 0.0), tools=rec.get('tools')))
            for rec in read_jsonl(path)]


def _spans(traj) -> list[tuple]:
    """A trajectory as its runs of tokens of one owner and turn -> [(owner, turn, ids)]."""
    out = []
    for i, o, k in zip(traj.ids.tolist(), traj.owner.tolist(), traj.turn.tolist()):
        if out and out[-1][:2] == (o, k):
            out[-1][2].append(i)
        else:
            out.append((o, k, [i]))
    return out


def same_ids(a, b) -> bool:
    """Whether two trajectories hold the same ids, owners and turns."""
    return a.ids.tolist() == b.ids.tolist() and a.owner.tolist() == b.owner.tolist() and a.turn.tolist() == b.turn.tolist()


def same_text(a, b, renderer) -> bool:
    """Whether ``b`` differs from ``a`` at most inside calls that decode to the same text: a call the model wrote in
    other tokens than ``renderer``'s encoding of its text, which the text read back cannot tell apart."""
    sa, sb = _spans(a), _spans(b)
    return [s[:2] for s in sa] == [s[:2] for s in sb] and all(
        x == y or (o == _POLICY and renderer.decode(x) == renderer.decode(y)) for (o, _, x), (_, _, y) in zip(sa, sb))


def check_round_trip(run, written: dict, tok=None) -> dict:
    """Re-render the exported files through the chat renderer of ``tok`` (a word-level tokenizer, default the run's:
    ``hf.word_renderer(tok)``; or a pretrained policy's ``ChatRenderer``, itself) and compare ids, owners and turns
    with the run's own trajectories -> counts of identical episodes and pairs, and of the others, those that differ
    only inside calls of the same text (``same_text``: ``episodes_respelled``, ``pairs_respelled``)."""
    from ..policies.hf import word_renderer
    tok = tok if tok is not None else run_tokenizer(run)
    renderer = tok if hasattr(tok, 'render_messages') else word_renderer(tok)
    episodes, pairs = run_trajectories(run)
    originals = [t for trajs in episodes.values() for t in trajs]
    again = read_episodes(written['episodes'], renderer)
    again_pairs = read_pairs(written['pairs'], renderer)
    text = lambda a, b: same_text(a, b, renderer)  # noqa: E731
    ep = list(zip(originals, again)) if len(again) == len(originals) else []
    pr = list(zip(pairs, again_pairs)) if len(again_pairs) == len(pairs) else []
    ep_same = [same_ids(a, b) for a, b in ep]
    pr_same = [same_ids(c, c2) and same_ids(r, r2) for (c, r), (c2, r2) in pr]
    return {'episodes': len(originals), 'episodes_identical': sum(ep_same),
            'episodes_respelled': sum(not s and text(a, b) for s, (a, b) in zip(ep_same, ep)),
            'pairs': len(pairs), 'pairs_identical': sum(pr_same),
            'pairs_respelled': sum(not s and text(c, c2) and text(r, r2) for s, ((c, r), (c2, r2)) in zip(pr_same, pr))}
