"""Seed specs (``--seeds 0-9``) and the state of a sweep's seed folders (``DIR/seed{N}/results.json``).

``finished_sections`` says which sections a seed folder already holds (for ``--resume``), ``Poller``
watches them while the seeds run (for the progress bars), re-reading a ``results.json`` only when it
changes.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..run_folder import peek
from .backends import SECTIONS

SEED_FORM = "expected seeds like '0-9' (a range), '0,3,5' (a list) or a mix such as '0-3,7,10-12'"


def parse_seeds(spec: str) -> list:
    """'0-9', '0,3,5' or a mix ('0-3,7') -> sorted distinct seeds; argparse.ArgumentTypeError otherwise."""
    seeds = set()
    parts = str(spec).replace(' ', '').split(',')
    for part in parts:
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', part)
        if not m:
            raise argparse.ArgumentTypeError(f'bad seed spec {spec!r}: {SEED_FORM}')
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise argparse.ArgumentTypeError(f'bad seed range {part!r} (end before start): {SEED_FORM}')
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


# --- state of a seed folder

def seed_dir(out: Path, seed: int) -> Path:
    return Path(out) / f'seed{seed}'


def finished_sections(out: Path, seed: int, config: dict | None = None, sections=SECTIONS) -> list:
    """Sections already written in ``DIR/seed{N}/results.json`` (for this seed and effective config, if given)."""
    saved = peek(seed_dir(out, seed) / 'results.json')
    if not saved or saved.get('seed') != seed or (config is not None and saved.get('config') != config):
        return []
    return [s for s in sections if s in saved.get('sections', {})]


class Poller:
    """Finished sections per seed folder, from its results.json (re-read only when it changes)."""

    def __init__(self, sections=SECTIONS):
        self.cache, self.sections = {}, sections

    def done(self, folder: Path, seed: int) -> list:
        path = seed_dir(folder, seed) / 'results.json'
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return []
        if self.cache.get(path, (None,))[0] != stamp:
            saved = peek(path)
            secs = [s for s in self.sections if s in (saved or {}).get('sections', {})] if saved and saved.get('seed') == seed else []
            self.cache[path] = (stamp, secs)
        return self.cache[path][1]
