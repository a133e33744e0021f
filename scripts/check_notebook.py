#!/usr/bin/env python3
"""Run the chapter's notebook with its seeds shifted, and check each run against the bands (docs/bands.md).

usage: python scripts/check_notebook.py [--shifts 0,1,2] [--jobs 2] [--out runs/notebook]

Each shift runs ``scripts/shift_seeds.py``'s copy of ``chapter15_notebook.py`` in its own process
(``--jobs`` at a time, torch threads split between them), saves what it printed, and prints the
checker's last line (``N of 30 bands hold``), the failing bands and the wall time.
"""
import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'
sys.path.insert(0, str(ROOT / 'scripts'))
from shift_seeds import shift  # noqa: E402


def run(n, out: Path, threads: int):
    code = shift((SHARED / 'spec/chapter15_notebook.py').read_text(), n)
    src = out / f'notebook_shift{n}.py'
    src.write_text(code)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.setdefault('AGENTRL_THREADS', 'torch')  # the library keeps OMP_NUM_THREADS (agentrl.runtime.threads)
    t0 = time.time()
    res = subprocess.run([sys.executable, str(src)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    txt = out / f'shift{n}.txt'
    txt.write_text(res.stdout + res.stderr)
    check = subprocess.run([sys.executable, str(SHARED / 'tools/check_bands.py'), str(txt)], capture_output=True, text=True)
    lines = check.stdout.strip().splitlines()
    fails = [l for l in lines if l.startswith('FAIL')]
    return n, wall, lines[-1] if lines else 'no output', fails, res.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--shifts', default='0,1,2')
    ap.add_argument('--jobs', type=int, default=1)
    ap.add_argument('--out', default='runs/notebook')
    a = ap.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    shifts = [int(s) for s in a.shifts.split(',')]
    threads = max(1, (os.cpu_count() or 2) // a.jobs)
    with ThreadPoolExecutor(a.jobs) as pool:
        for n, wall, summary, fails, rc in pool.map(lambda n: run(n, out, threads), shifts):
            print(f'shift {n:+d}: {summary}  ({wall:.0f} s, exit {rc})', flush=True)
            for f in fails:
                print('   ', f)


if __name__ == '__main__':
    main()
