"""Your own environment, end to end: the Mailroom, a TinyAgent, SFT then REINFORCE; and the whole chapter on it.

    python examples/mailroom.py            # about 20 s on 2 cores; prints pass rates as it trains
    python examples/mailroom.py --help     # budgets and seed
    agentrl reproduce --env examples.mailroom:CHAPTER   # chapter 15's sections on the Mailroom (from this folder's parent)

A parcel waits at the desk. The prompt names it (``deliver parcel amber``), never its room; the
label does. The agent calls ``label`` (the reply shows the room), ``go ROOM`` (an open argument,
copied from that reply), and ``drop``. Held-out parcels have names the policy never saw, so only a
policy that reads the label and copies the room delivers them. The environment is ~70 lines on top of
``arl.TextEnv``, which keeps the text-env protocol's bookkeeping (turns, invalid calls, truncation,
the end info); the same recipes that train on BugFix train on it, given ``env=Mailroom``. ``CHAPTER``
(section 4) is all ``agentrl reproduce`` and ``agentrl sweep`` need to run the chapter on it.
"""
from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

import torch

import agentrl as arl
from agentrl.envs import InvalidCall
from agentrl.experiments.chapter15.env_registry import ChapterEnv

ROOMS = tuple(f'r{i}' for i in range(1, 9))
NAMES = ('amber', 'birch', 'coral', 'dune', 'ember', 'fern', 'gale', 'heath', 'iris', 'jade', 'kelp', 'lark',
         'moss', 'north', 'opal', 'pine', 'quill', 'reed', 'sage', 'tide', 'umber', 'vale', 'wren', 'yew')


# --- 1. tasks: a name (required), a group (optional), and whatever the game needs
@dataclass(frozen=True)
class Parcel:
    name: str
    room: str
    split: str

    @property
    def group(self) -> str:
        """Per-group pass rates read it: the ground floor (r1-r4) or the upper floor (r5-r8)."""
        return 'ground' if self.room <= 'r4' else 'upper'


def make_parcels(split: str = 'all') -> list:
    """24 parcels, 3 per room; the first 18 train, the last 6 held out (rooms they share with train parcels)."""
    parcels = [Parcel(name, ROOMS[i % len(ROOMS)], 'train' if i < 18 else 'heldout') for i, name in enumerate(NAMES)]
    return [p for p in parcels if split in ('all', p.split)]


# --- 2. the environment: its grammar and its checks; TextEnv does the protocol's bookkeeping
class Mailroom(arl.TextEnv):
    """``label`` shows the parcel's room; ``go ROOM`` walks there; ``drop`` leaves the parcel and ends the episode.

    The hidden check: the parcel was dropped in its room. The public check, which a careless courier
    games, only asks that it left the desk (dropped in any room)."""
    max_turns, max_tokens, max_call_words = 5, 64, 2
    tasks = tuple(make_parcels())
    example_calls = ('label', 'drop', *(f'go {room}' for room in ROOMS))
    calls = (arl.Call('label', "read the parcel's label"), arl.Call('go', 'walk to a room', (arl.Arg('room', 'the room'),)),
             arl.Call('drop', 'leave the parcel where you are and end the episode'))  # what a language model is told
    scripted_kinds = ('oracle', 'blind', 'random')

    def start(self, parcel) -> str:
        self.at, self.dropped = 'desk', None
        return f'deliver parcel {parcel.name}'

    def act(self, verb, args):
        if verb == 'label' and not args:
            return f'parcel {self.task.name} : room {self.task.room}', False
        if verb == 'go' and len(args) == 1:
            if args[0] not in ROOMS:
                raise InvalidCall('no such room')
            self.at = args[0]
            return f'at room {self.at}', False
        if verb == 'drop' and not args:
            self.dropped = self.at
            return f'dropped at {self.at}', True
        raise InvalidCall('unknown call')

    def checks(self):
        return self.dropped == self.task.room, self.dropped not in (None, 'desk')

    @staticmethod
    def is_read_call(call: str) -> bool:
        return call.split() == ['label']

    @staticmethod
    def scripted_policy(kind: str, seed: int = 0):
        return Courier(kind, seed)


# --- 3. scripted players: an oracle that reads, and two unskilled ones for a weak base
class Courier:
    """``oracle``: label, go to the room the label shows, drop. ``blind``: go to a random room, drop.
    ``random``: sometimes reads, goes somewhere at random, usually drops."""

    def __init__(self, kind: str, seed: int = 0):
        if kind not in Mailroom.scripted_kinds:
            raise ValueError(f'unknown kind {kind!r}; valid kinds are {list(Mailroom.scripted_kinds)}')
        self.kind, self.seed, self.episodes, self.plan = kind, seed, 0, []

    def reset(self, task_name: str):
        rng = random.Random(f'{self.kind}:{self.seed}:{task_name}:{self.episodes}')
        self.episodes += 1
        if self.kind == 'oracle':
            self.plan = ['label', None, 'drop']  # None: the room the label shows
        elif self.kind == 'blind':
            self.plan = [f'go {rng.choice(ROOMS)}', 'drop']
        else:
            self.plan = (['label'] if rng.random() < 0.3 else []) + [f'go {rng.choice(ROOMS)}']
            self.plan += ['drop'] if rng.random() < 0.9 else ['label'] * 4

    def __call__(self, observation: str) -> str:
        call = self.plan.pop(0) if self.plan else 'drop'
        return call if call is not None else f'go {observation.split()[-1]}'


# --- 4. the chapter on it: agentrl reproduce --env examples.mailroom:CHAPTER (or sweep, show ... --env)
CHAPTER = ChapterEnv('mailroom', 'the Mailroom', Mailroom, make_parcels, task_label='parcels',
                     budgets={'sft_steps': 40, 'rl_cold_steps': 30})
"""The Mailroom as the chapter's harness runs it: its environment, its tasks by split, and the budgets that differ
from the chapter's (this script's own SFT and RL steps; ``--set`` changes them again). The harness asks it what the
Mailroom has: a public check (a drop anywhere but the desk), a call that only reads (``label``), task groups (the
floors); the chapter's bands are BugFix's figures and do not apply."""


# --- 5. training: the chapter's recipes, given env=Mailroom
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--sft-steps', type=int, default=40, help='oracle SFT steps (default 40)')
    p.add_argument('--rl-steps', type=int, default=30, help='REINFORCE steps after SFT (default 30)')
    p.add_argument('--seed', type=int, default=0, help='seeds the model, SFT, RL and evaluation (default 0)')
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    train, heldout = make_parcels('train'), make_parcels('heldout')
    arl.check_text_env(Mailroom, make_parcels())  # the protocol's rules, on every parcel
    tok = arl.build_tokenizer(make_parcels(), env=Mailroom)  # every word of scripted play
    print(f'Mailroom: {len(train)} train and {len(heldout)} held-out parcels, vocabulary {tok.vocab_size} words')

    def report(label, model):
        rate_train, _ = arl.pass_rate(model, train, tok, 8, seed=args.seed, env=Mailroom)
        rate_held, _ = arl.pass_rate(model, heldout, tok, 8, seed=args.seed, env=Mailroom)
        print(f'{label:<28} train {rate_train:.2f} | held-out {rate_held:.2f} | {time.perf_counter() - t0:5.1f} s')
        return rate_train, rate_held

    model = arl.TinyAgent(tok.vocab_size)
    report('untrained', model)
    demos = [arl.scripted_rollout(Courier('oracle'), Mailroom(), parcel, tok) for parcel in train]
    arl.sft_train(model, demos, tok, steps=args.sft_steps, seed=args.seed)
    report(f'oracle SFT ({args.sft_steps} steps)', model)
    arl.train_rl(model, train, tok, args.rl_steps, seed=args.seed, n_tasks=8, group=8, env=Mailroom)
    return report(f'then REINFORCE ({args.rl_steps} steps)', model)


if __name__ == '__main__':
    main()
