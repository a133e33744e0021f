"""Board games show their board through the adapters: GEM's Minesweeper, Sudoku and Tower of Hanoi (their state is
in ``info['suffix']``), and TextArena's Minesweeper (its state is in its messages). Needs the extras; skips without.

Each GEM game is played through ``arl.from_gem`` and, with the same seed and calls, as a bare GEM game: the
prompt ends with the board GEM's ``reset`` gives, every reply with the board after its call (as GEM's own
``ObservationWrapper`` shows them), and the calls include moves that change the board and moves it refuses, so
each reply that changes the board is seen to show the new one.
"""
from __future__ import annotations

import re

import pytest

gem = pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]' (gem-llm)")

import agentrl as arl  # noqa: E402
from agentrl.envs.adapters.isolation import GameRandomness  # noqa: E402

MINE_ROW = re.compile(r'^ {0,2}\d+((?: +[.\dF])+) *$', re.M)
"""A row of a Minesweeper board (GEM's and TextArena's): its number, then a cell per column (the header of column
numbers starts further in)."""
SEED = 3


def bare_suffixes(env_id, seed, calls):
    """``info['suffix']`` of a bare GEM game of ``seed`` at ``reset`` and after each call (its own globals, isolated)."""
    with GameRandomness(seed).swapped():
        game = gem.make(env_id)
        _, info = game.reset(seed=seed)
        suffixes = [info['suffix']]
        for call in calls:
            _, _, terminated, truncated, info = game.step(call)
            suffixes.append(info['suffix'])
            if terminated or truncated:
                break
    return suffixes


def play_adapted(env_id, next_call, turns):
    """The prompt and replies of the adapted game of ``SEED``, each call ``next_call(turn, last observation)``."""
    env = arl.from_gem(env_id, max_tokens=2000)()
    prompt, _ = env.reset(seed=SEED)
    calls, replies, obs = [], [], prompt
    for turn in range(turns):
        calls.append(next_call(turn, obs))
        obs, _, terminated, truncated, _ = env.step(calls[-1])
        replies.append(obs)
        assert not (terminated or truncated), (env_id, calls)
    return prompt, calls, replies


def assert_boards_shown(env_id, prompt, calls, replies, changes):
    """Prompt and replies end with the bare game's boards; the board changes exactly at the calls ``changes``."""
    boards = bare_suffixes(env_id, SEED, calls)
    assert 'board' in boards[0] or 'state' in boards[0]
    assert prompt.endswith(boards[0]) and len(prompt) > len(boards[0])  # the instructions, then the board
    for i, reply in enumerate(replies):
        assert reply.endswith(boards[i + 1]), (env_id, calls[i], reply)
        assert len(reply) > len(boards[i + 1])  # what the game said about the call comes first
    changed = [i for i in range(len(calls)) if boards[i + 1] != boards[i]]
    assert changed == changes, (env_id, calls)
    for i in changed:
        assert boards[i] not in replies[i]  # the new board, not the old one


def first_hidden_cell(board_text):
    for row, cells in enumerate(MINE_ROW.findall(board_text)):
        if '.' in cells.split():
            return row, cells.split().index('.')
    raise AssertionError('no hidden cell')


def test_gem_minesweeper_shows_the_board_in_the_prompt_and_after_each_reveal():
    def next_call(turn, obs):
        if turn < 2:
            return r'\boxed{reveal 2 2}'  # the first reveal opens an area; the second is refused (already revealed)
        return r'\boxed{flag %d %d}' % first_hidden_cell(obs.rsplit('board layout:', 1)[-1])
    prompt, calls, replies = play_adapted('game:Minesweeper-v0-easy', next_call, 3)
    board = prompt.rsplit('board layout:', 1)[-1]
    assert [cells.split() for cells in MINE_ROW.findall(board)] == [['.'] * 5] * 5  # five rows, all hidden
    assert 'At turn 1, you successfully revealed cell (2, 2).\nHere is the current board layout:' in replies[0]
    assert any(c.isdigit() for cells in MINE_ROW.findall(replies[0]) for c in cells.split())  # numbers revealed
    assert 'F' in replies[2]
    assert_boards_shown('game:Minesweeper-v0-easy', prompt, calls, replies, changes=[0, 2])


def test_gem_sudoku_shows_the_grid_and_each_digit_placed():
    with GameRandomness(SEED).swapped():
        game = gem.make('game:Sudoku-v0-easy')
        game.reset(seed=SEED)
        row, col = next((r, c) for r in range(4) for c in range(4) if game.board[r][c] == 0)
        digit = game.full_grid[row][col]
    place = r'\boxed{%d %d %d}' % (row + 1, col + 1, digit)
    prompt, calls, replies = play_adapted('game:Sudoku-v0-easy', lambda t, obs: [place, place, r'\boxed{9 9 9}'][t], 3)
    assert 'R1' in prompt and 'C4' in prompt and 'which is correct' in replies[0]
    assert_boards_shown('game:Sudoku-v0-easy', prompt, calls, replies, changes=[0])


def test_gem_tower_of_hanoi_shows_the_towers_after_each_move():
    moves = [r'\boxed{A C}', r'\boxed{A B}', r'\boxed{A B}', r'\boxed{C B}']  # the third is refused: 3 onto 2
    prompt, calls, replies = play_adapted('game:TowerofHanoi-v0-easy', lambda t, obs: moves[t], 4)
    assert prompt.endswith('A: [3, 2, 1]\nB: []\nC: []\n\nEnter your move.')
    assert 'A: [3]\nB: [2, 1]\nC: []' in replies[3]
    assert_boards_shown('game:TowerofHanoi-v0-easy', prompt, calls, replies, changes=[0, 1, 3])


def test_gem_guess_the_number_keeps_its_text():
    """Its suffix is a fixed line, no state: left out, so the chapter's runs on it keep their text."""
    env = arl.from_gem('game:GuessTheNumber-v0-easy')()
    prompt, _ = env.reset(seed=SEED)
    assert bare_suffixes('game:GuessTheNumber-v0-easy', SEED, []) == ['Enter your next guess.']
    assert prompt.endswith('Enter your first guess to start the game.\n')


def test_textarena_minesweeper_shows_the_board_in_its_messages():
    pytest.importorskip('textarena', reason="TextArena is not installed: pip install 'agentrl[textarena]'")
    env = arl.from_textarena('Minesweeper-v0-small', max_tokens=2000)()
    prompt, _ = env.reset(seed=SEED)
    rows = [cells.split() for cells in MINE_ROW.findall(prompt)]
    assert rows == [['.'] * 5] * 5
    reply, _, terminated, _, _ = env.step('[2 2]')
    revealed = [cells.split() for cells in MINE_ROW.findall(reply)]
    assert not terminated and 'Current Board' in reply and len(revealed) == 5 and revealed != rows
    reply, _, _, _, info = env.step('[2 2]')  # already revealed: refused, the board shown again
    assert info['n_invalid'] == 1 and [cells.split() for cells in MINE_ROW.findall(reply)] == revealed
