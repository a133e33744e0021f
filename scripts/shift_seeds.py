#!/usr/bin/env python3
"""Write a copy of the chapter's notebook with every seed shifted by N (for checking findings on other seeds).

usage: python scripts/shift_seeds.py N [NOTEBOOK] > shifted.py

Shifts every literal or loop-variable seed: ``seed=<expr>`` (except ``seed=seed``, which passes a
shifted default through), ``manual_seed(<int>)`` and ``random.Random(<int>)``. The scripted
policies' seeds ``seed=s`` shift too, so the weak base sees different play.
"""
import re
import sys
from pathlib import Path


def shift(text: str, n: int) -> str:
    def seed_kw(m):
        expr = m.group(1).strip()
        return m.group(0) if expr == 'seed' else f'seed={expr} + {n}'
    text = re.sub(r'seed=([^,)\n]+)', seed_kw, text)
    text = re.sub(r'manual_seed\((\d+)\)', lambda m: f'manual_seed({int(m.group(1)) + n})', text)
    text = re.sub(r'random\.Random\((\d+)\)', lambda m: f'random.Random({int(m.group(1)) + n})', text)
    return text


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    n = int(sys.argv[1])
    path = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(__file__).resolve().parents[2] / 'shared/spec/chapter15_notebook.py'
    sys.stdout.write(shift(path.read_text(), n))


if __name__ == '__main__':
    main()
