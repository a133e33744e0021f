"""An environment that pays at every step: the Keypad, and REINFORCE with episode or turn credit.

    python examples/keypad.py                  # about 15 s on 2 cores; episode credit, then turn credit
    python examples/keypad.py --help           # budgets and seed

The prompt shows a three-digit code (``enter the code 4 7 1``); the agent presses one digit per call
(``press 4``). Each press of the right digit for its position pays 1/3 at that step; after three presses the
episode ends. A return is 0, 1/3, 2/3 or 1: partial credit, paid per turn, as games from other libraries pay
it. Held-out codes are codes the policy never saw: only a policy that copies the k-th digit at turn k opens
them.

The weak base is SFT on a player that presses the code's digits in a random order (it gets a third of the
presses right). REINFORCE then has to learn the order. With ``credit='episode'`` every press of an episode is
pushed by the episode's return; with ``credit='turn'`` a press is pushed by the rewards from its own turn on,
so a third press is no longer credited with the first press's reward (``agentrl.recipes.credit``).
``scripts/credit_study.py`` measures the two over seeds.
"""
from __future__ import annotations

import argparse
import itertools
import random
import time
from dataclasses import dataclass

import torch

import agentrl as arl
from agentrl.envs import InvalidCall
from agentrl.envs.play import ScriptedPlayer

DIGITS = tuple(str(d) for d in range(10))


@dataclass(frozen=True)
class Code:
    """A task: the code to enter. ``name`` is what the protocol needs; ``words`` feeds the tokenizer."""
    name: str
    digits: tuple

    @property
    def words(self) -> list:
        return ['enter', 'the', 'code', 'press', 'ok', 'wrong', *DIGITS]


def make_codes(n_train: int = 60, n_heldout: int = 40, seed: int = 0) -> tuple:
    """Codes of three distinct digits, shuffled with ``seed``: (train, held-out), disjoint."""
    codes = [Code('code/' + ''.join(p), p) for p in itertools.permutations(DIGITS, 3)]
    random.Random(seed).shuffle(codes)
    return codes[:n_train], codes[n_train:n_train + n_heldout]


class Keypad(arl.TextEnv):
    """``press D`` presses a digit: 1/3 at that step if it is the code's digit for this position. Three presses
    end the episode (its return: the share of positions pressed right). The hidden and public checks are the
    same: every position right."""
    max_turns, max_tokens, max_call_words = 3, 40, 2
    example_calls = tuple(f'press {d}' for d in DIGITS)
    scripted_kinds = ('oracle', 'shuffled', 'random')

    def start(self, code) -> str:
        self.right = 0
        return 'enter the code ' + ' '.join(code.digits)

    def act(self, verb, args):
        if verb != 'press' or len(args) != 1 or args[0] not in DIGITS:
            raise InvalidCall('press one digit')
        position = self.turn - 1  # this call's position in the code (0, 1, 2)
        hit = args[0] == self.task.digits[position]
        self.right += hit
        return ('ok' if hit else 'wrong'), self.turn == 3, 1 / 3 if hit else 0.0

    def checks(self):
        return self.right == 3, self.right == 3

    def end_reward(self, hidden_pass, public_pass):
        return 0.0  # everything was paid step by step

    @staticmethod
    def scripted_policy(kind: str, seed: int = 0):
        return KeypadPlayer(kind, seed)


class KeypadPlayer(ScriptedPlayer):
    """``oracle`` presses the code in order; ``shuffled`` presses its digits in a random order (the weak base's
    demonstrator); ``random`` presses any digit."""
    KINDS = Keypad.scripted_kinds

    def reset(self, task_name: str):
        self.digits = list(task_name.split('/')[1])
        self.rng = self.episode_rng(task_name)
        if self.kind == 'shuffled':
            self.rng.shuffle(self.digits)
        self.turn = 0

    def __call__(self, observation: str) -> str:
        self.turn += 1
        digit = self.rng.choice(DIGITS) if self.kind == 'random' else self.digits[self.turn - 1]
        return f'press {digit}'


def weak_base(train, tok, seed: int = 0, steps: int = 60):
    """A TinyAgent fine-tuned on the ``shuffled`` player's episodes: the format, and a third of the presses."""
    torch.manual_seed(seed)
    model = arl.TinyAgent(tok.vocab_size)
    player = Keypad.scripted_policy('shuffled', seed)
    demos = [arl.scripted_rollout(player, Keypad(), code, tok) for code in train for _ in range(2)]
    arl.sft_train(model, demos, tok, steps=steps, seed=seed)
    return model


def measure(model, codes, tok, seed: int = 0) -> dict:
    """Mean return and success rate (all three right) over 4 episodes per code."""
    mean, trajs = arl.pass_rate(model, codes, tok, 4, seed=seed, env=Keypad)
    return {'return': mean, 'success': sum(t.reward >= 1 - 1e-9 for t in trajs) / len(trajs)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--seed', type=int, default=0, help='seeds the codes, the model, SFT and RL (default 0)')
    ap.add_argument('--rl-steps', type=int, default=40, help='REINFORCE steps per credit (default 40)')
    args = ap.parse_args(argv)
    start = time.time()
    train, heldout = make_codes(seed=args.seed)
    tok = arl.build_tokenizer(train + heldout)
    base = weak_base(train, tok, args.seed)
    print(f'weak base: held-out return {measure(base, heldout, tok)["return"]:.2f}')
    for credit in ('episode', 'turn'):
        model = weak_base(train, tok, args.seed)
        arl.train_rl(model, train, tok, steps=args.rl_steps, seed=args.seed, lr=2e-3, credit=credit, env=Keypad)
        m = measure(model, heldout, tok)
        print(f'{credit:>7} credit, {args.rl_steps} steps: held-out return {m["return"]:.2f}, success {m["success"]:.2f}')
    print(f'{time.time() - start:.0f} s')


if __name__ == '__main__':
    main()
