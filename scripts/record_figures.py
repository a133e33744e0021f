#!/usr/bin/env python3
"""Record the runs whose figures the README and the docs quote, into docs/figures.json.

usage:
    python scripts/record_figures.py reproduce ID RUN_DIR LOG [--command CMD]   # a finished `agentrl reproduce`
    python scripts/record_figures.py printed ID [--per-cpu] [--lines N] -- ARGV...  # any command's printed lines
    python scripts/record_figures.py printed ID --log LOG [--per-cpu] -- ARGV...    # a finished command's, from LOG
    python scripts/record_figures.py sweep ID SWEEP_DIR [--command CMD]          # a finished `agentrl sweep`'s claims
    python scripts/record_figures.py exercises ID DIR [--command CMD]           # `agentrl exercise N --seeds`, N = 1..7
    python scripts/record_figures.py snippets [ID ...]                          # the docs' Python snippets

``reproduce`` reads RUN_DIR/results.json (its sections, less the long per-step lists, and its
provenance) and LOG, what the command printed: the lines from the findings (or claims) table's first
row to the end are kept as ``printed``. ``printed`` runs ARGV and keeps every line it prints; with
``--log``, ARGV has already run at this commit (a run of many minutes) and LOG holds what it printed.
``snippets`` runs the Python snippets of the pages in ``SNIPPETS`` (each set in one namespace, in page
order, torch on one thread, as ``tests/test_docs.py`` runs them) and keeps what they print.

Each entry records where it came from: the command, the agentrl version and git commit (and whether
the code under src/ and examples/ had local changes), torch and its thread count, the CPU. Only the
named run's entry is replaced; the file's ``quotes`` (where the pages quote each run) are kept, and
``tests/test_figures.py`` checks every one of them against the page. Re-record a run after a change
that moves its figures, then fix the pages the test names.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / 'docs' / 'figures.json'
FENCE = re.compile(r'^```(\w*)[^\n]*\n(.*?)^```\s*$', re.M | re.S)

SNIPPETS = {
    'ten-lines': ('README.md', 'Ten lines'),
    'first-look': ('docs/index.md', 'A first look from Python'),
    'own-environment': ('docs/own-environment.md', None),
}
"""Snippet sets the docs test executes: id -> (page, the section holding its ``python`` blocks; None: the whole page)."""

PER_CPU = ('Figures of one seed: the same CPU model, torch version and thread count give them to the digit; '
           'another CPU rounds floats differently and may move them (the verdicts, bands and claims held, are '
           'what another CPU shares).')


def section(text: str, heading: str | None) -> str:
    """The part of a Markdown page under ``## heading`` (to the next heading of that level or above); None: all.

    A ``#`` line inside a fenced block (a comment in a snippet) is not a heading."""
    if heading is None:
        return text
    lines, out, level, fenced = text.splitlines(keepends=True), None, None, False
    for line in lines:
        if line.startswith('```'):
            fenced = not fenced
        m = None if fenced else re.match(r'(#+) (.*?)\s*$', line)
        if out is None:
            if m and m.group(2) == heading:
                out, level = [], len(m.group(1))
            continue
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    if out is None:
        raise ValueError(f'no heading {heading!r}')
    return ''.join(out)


def fenced_blocks(text: str, lang: str | None = None) -> list:
    """The fenced code blocks of a Markdown text, in order -> list of (language, body)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text) if lang is None or m.group(1) == lang]


def snippet_code(snippet_id: str) -> str:
    """The Python of one snippet set: its page's ``python`` blocks, joined in page order."""
    page, heading = SNIPPETS[snippet_id]
    blocks = [body for _, body in fenced_blocks(section((ROOT / page).read_text(), heading), 'python')]
    if not blocks:
        raise ValueError(f'{page}: no python block under {heading!r}')
    return '\n'.join(blocks)


def run_snippets(snippet_id: str) -> tuple:
    """Execute one snippet set as a reader would paste it -> (its namespace, the lines it printed)."""
    code = snippet_code(snippet_id)
    out = io.StringIO()
    module = types.ModuleType(f'snippet_{snippet_id.replace("-", "_")}')  # a module of its own, as a script is
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, f'<{SNIPPETS[snippet_id][0]} snippets>', 'exec'), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__, out.getvalue().splitlines()


def code_dirty() -> bool | None:
    """Whether src/ or examples/ differ from the commit (docs changes do not move a figure)."""
    res = subprocess.run(['git', '-C', str(ROOT), 'status', '--porcelain', '--', 'src', 'examples'],
                         capture_output=True, text=True)
    return bool(res.stdout.strip()) if res.returncode == 0 else None


def machine(prov: dict) -> dict:
    """What a run's figures depend on, from a provenance record (``results.json`` keeps the same keys)."""
    keys = ('agentrl', 'git_commit', 'torch', 'torch_threads', 'worker_torch_threads', 'jobs', 'cpu', 'cpu_count',
            'python', 'platform')
    return {k: prov[k] for k in keys if k in prov}


def trimmed(sections: dict) -> dict:
    """results.json's sections without the per-step lists (monitors, losses) no page quotes."""
    def keep(v):
        return not (isinstance(v, list) and len(v) > 20)
    return {name: {k: v for k, v in fig.items() if keep(v)} for name, fig in sections.items()}


VERDICT = {True: 'held', False: 'not held', None: 'n/a'}
"""A claim's verdict as ``agentrl claims`` prints it."""


def derived(sections: dict, findings: list, claims: list) -> dict:
    """Figures the pages quote that are a ratio or a count of results.json's figures (named here once)."""
    out = {'findings_held': sum(ok for _, ok, _ in findings), 'findings': len(findings),
           'claims_held': sum(ok is True for _, ok, _ in claims), 'claims': sum(ok is not None for _, ok, _ in claims),
           'verdict': {key: VERDICT[ok] for key, ok, _ in claims}, 'measured': {key: msg for key, _, msg in claims}}
    owners = sections.get('15.1', {}).get('owner_counts')
    if owners:
        total = sum(owners.values())
        out['predicted_tokens'] = total
        out.update({f'{k}_share': v / total for k, v in owners.items()})
    for k, r in enumerate(sections.get('15.6', {}).get('hacking', []), 1):
        out[f'hack_share_{k}'] = r['hacks'] / r['kept'] if r['kept'] else None
    s3 = sections.get('15.3', {})
    out['rounds_solved'] = [len(r['solved']) for r in s3.get('rounds', [])]
    out['never_solved'] = len(s3.get('never_solved', []))
    out['first_kept'] = sum(n for _, n in s3.get('first_kept', []))
    out['first_kept_edits'] = sum(n for a, n in s3.get('first_kept', []) if a.strip().startswith(('edit', 'set')))
    return out


def record_reproduce(args) -> dict:
    from agentrl.experiments.chapter15.bands import check_transcript
    from agentrl.experiments.chapter15.claims import check_claims
    run_dir = Path(args.run_dir)
    results = json.loads((run_dir / 'results.json').read_text())
    findings = [(f.key, f.verdict, f.measured) for f in check_transcript((run_dir / 'transcript.txt').read_text())] \
        if results.get('env', 'bugfix') == 'bugfix' else []
    claims = [(f.key, f.verdict, f.measured) for f in check_claims(results['sections'], results.get('env', 'bugfix'))]
    lines = [line.rstrip() for line in Path(args.log).read_text().splitlines()]
    title = next((k for k, line in enumerate(lines) if re.search(r'Chapter 15 (findings|claims)', line)), None)
    if title is None:
        sys.exit(f'{args.log}: no findings or claims table in it')
    body = next(k for k in range(title, len(lines)) if lines[k].startswith('┡')) + 1  # the rows, not the header
    timed = [re.fullmatch(r'real\s+(\d+)m([\d.]+)s', line) for line in lines]  # `time agentrl reproduce ...`
    wall = next((int(m.group(1)) * 60 + float(m.group(2)) for m in timed if m), None)
    printed = [line for line, m in zip(lines[body:], timed[body:])
               if not m and not re.fullmatch(r'(user|sys)\s+\S+', line)]
    while printed and not printed[-1]:
        printed.pop()
    seconds = [int(m.group(1)) for m in map(re.compile(r' hold(?: \([^)]*\))? \| (\d+) s \|').search, printed) if m]
    return {'command': args.command or f'agentrl reproduce --out {run_dir}', 'kind': 'agentrl reproduce',
            'per_cpu': PER_CPU, 'env': results.get('env', 'bugfix'), 'seed': results.get('seed'),
            **machine(results['provenance']), 'code_dirty': results['provenance'].get('git_dirty'),
            'sections': trimmed(results['sections']),
            'derived': {**derived(results['sections'], findings, claims), 'seconds': seconds[-1] if seconds else None,
                        **({'wall_seconds': round(wall, 1), 'wall_min_s': list(divmod(round(wall), 60))}
                           if wall is not None else {})},
            'findings': [[name, ok, fig] for name, ok, fig in findings],
            'claims': [[key, ok, msg] for key, ok, msg in claims],
            'printed': printed}


def record_sweep(args) -> dict:
    """A finished ``agentrl sweep``: each claim's hold rate over its seeds (``'9/10'``; ``'n/a'`` where it applies to
    no seed) and its failing seeds where there are one to three; how many claims apply and how many hold at every seed
    they apply to; the seeds' claim figures, the sweep's wall time, each seed's section time and the provenance."""
    from agentrl.experiments.sweeps.seeds import seed_dir
    sweep = json.loads((Path(args.sweep_dir) / 'sweep.json').read_text())
    rates, fails, figures = {}, {}, {}
    for key, claim in sweep['claims'].items():
        verdicts = [v['holds'] for v in claim['per_seed'].values()]
        applicable = [v for v in verdicts if v is not None]
        rates[key] = f'{sum(applicable)}/{len(applicable)}' if applicable else 'n/a'
        failing = [seed for seed, v in claim['per_seed'].items() if v['holds'] is False]
        if 1 <= len(failing) <= 3:  # the pages name the failing seeds where there are at most three
            fails[key] = ','.join(failing)
        figures[key] = {seed: v['figure'] for seed, v in claim['per_seed'].items()}
    means = {}  # nested by the path's parts, as the pages' quotes address figures ({means/15.2/weak/train})
    for k, v in sweep['figures'].items():
        if isinstance(v, dict) and v.get('mean') is not None and any(k.startswith(p) for p in args.means or ()):
            *parents, leaf = k.split('/')
            node = means
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = round(v['mean'], 4)
    seed_seconds = {}  # what each seed cost: the sum of its sections' times, also where a resumed run finished it
    for seed in sweep['seeds']:
        timing = seed_dir(args.sweep_dir, seed) / 'timing.json'
        if timing.is_file():
            seed_seconds[str(seed)] = round(sum(json.loads(timing.read_text()).values()))
    config = json.loads((seed_dir(args.sweep_dir, sweep['seeds'][0]) / 'results.json').read_text())['config']
    rl = sft_rl(sweep['figures'], config['cold_start_step'])
    return {'command': args.command or f'agentrl sweep --out {args.sweep_dir}', 'kind': 'agentrl sweep',
            'per_cpu': 'Hold rates over the seeds; each seed\'s figures are the CPU\'s, and on another CPU a rate may move '
                       'by a seed or two where a claim is near its threshold.',
            'env': sweep['env'], 'seeds': sweep['seeds'], **machine(sweep['provenance']),
            'figures': {'claims': rates, 'fails': fails, 'applicable': sum(r != 'n/a' for r in rates.values()),
                        'every_seed': sum(r != 'n/a' and r.split('/')[0] == r.split('/')[1] for r in rates.values()),
                        'wall_seconds': round(sweep['wall_seconds']), 'seed_seconds': seed_seconds, 'means': means,
                        **({'sft_rl': rl} if rl else {})},
            'claim_figures': figures}


LEARNS = (0.3, 0.9)
"""RL learns at a seed when SFT -> RL's final train pass is at least 0.3 above its cold start's, or at least 0.9."""


def sft_rl(figures: dict, cold_start_step: int) -> dict | None:
    """Section 15.5's SFT -> RL per seed, from a sweep's figures: its train pass at the cold start (the curve's point at
    ``cold_start_step``: the curve is SFT's up to there, from the weak base at step 0) and at its end, and at how many
    seeds RL learned (``LEARNS``) -> dict, or None without the curve."""
    point = lambda i, j: f'15.5/curves/SFT -> RL/{i}/{j}'  # noqa: E731  (point i's step (j=0) or train pass (j=1))
    if point(0, 1) not in figures:
        return None
    last = 0
    while point(last + 1, 1) in figures:
        last += 1
    starts = [i for i in range(last + 1) if set(figures[point(i, 0)]['values']) == {cold_start_step}]
    if not starts:
        sys.exit(f"15.5's SFT -> RL curve has no point at the cold start (step {cold_start_step})")
    per_seed = lambda i: dict(zip(map(str, figures[point(i, 1)]['seeds']), figures[point(i, 1)]['values']))  # noqa: E731
    start, final = per_seed(starts[0]), per_seed(last)
    learned = [s for s in start if final[s] >= start[s] + LEARNS[0] - 1e-9 or final[s] >= LEARNS[1] - 1e-9]
    return {'cold_start_step': cold_start_step, 'start': start, 'final': final,
            'gain': {s: round(final[s] - start[s], 4) for s in start},
            'learns': f'{len(learned)}/{len(start)}', 'not_learned': ','.join(s for s in start if s not in learned)}


def record_exercises(args) -> dict:
    """Finished ``agentrl exercise N --seeds ...`` folders ``DIR/exN``: each answer's hold rate (``'9/10'``; held of the
    seeds that decide it, ``'undecided'`` where none does), what each exercise pools over seeds, and each seed's time."""
    from agentrl.experiments.exercises.seeds import SUMMARY
    from agentrl.experiments.exercises.catalog import get_spec
    figures, seconds, envs, seeds, prov = {'headline': {}}, {}, set(), set(), None
    for folder in sorted(Path(args.dir).glob('ex[1-7]')):
        summary = json.loads((folder / SUMMARY).read_text())
        name = folder.name
        figures[name] = {key: f"{a['held']}/{a['n']}" if a['n'] else 'undecided' for key, a in summary['answers'].items()}
        headline = get_spec(summary['exercise']).load().HEADLINE
        figures['headline'][f"agentrl exercise {summary['exercise']}"] = figures[name][headline]
        pooled = {k: v for k, v in summary['pooled'].items() if k not in ('lines', 'figures', 'points')}
        if pooled:
            figures[f'{name}_pooled'] = pooled
        seconds[name] = {s: r.get('exercise_seconds') for s, r in summary['runs'].items()}
        envs.add(summary['env'])
        seeds.update(summary['seeds'])
        prov = prov or summary['provenance']
    if not figures:
        sys.exit(f'{args.dir}: no exN/{SUMMARY} in it')
    return {'command': args.command or f'agentrl exercise N --seeds ... --out {args.dir}/exN', 'kind': 'agentrl exercise',
            'per_cpu': "Hold rates over the seeds; each seed's figures are the CPU's, and on another CPU a rate may move "
                       'by a seed or two where an answer is near its threshold.',
            'env': ', '.join(sorted(envs)), 'seeds': sorted(seeds), **machine(prov or {}), 'figures': figures,
            'exercise_seconds': seconds}


def record_printed(args) -> dict:
    from agentrl.experiments.chapter15.provenance import collect
    if args.log:
        stdout = Path(args.log).read_text()
    else:
        res = subprocess.run(args.argv, capture_output=True, text=True, cwd=ROOT)
        if res.returncode != 0:
            sys.exit(f'{" ".join(args.argv)} exited {res.returncode}:\n{res.stderr[-2000:]}')
        stdout = res.stdout
    prov = collect()
    prov['torch_threads'] = "torch's default (one per core)"  # the command's, not this process's
    lines = [line.rstrip() for line in stdout.splitlines()]
    return {'command': args.command or ' '.join(args.argv), 'kind': 'printed', 'per_cpu': args.per_cpu or False,
            **machine(prov), 'code_dirty': code_dirty(), 'printed': lines[:args.lines] if args.lines else lines}


def record_snippets(snippet_id: str) -> dict:
    import torch

    from agentrl.experiments.chapter15.provenance import collect
    torch.set_num_threads(1)  # as the docs test runs them; for these snippets 1 and 2 threads print the same
    _, lines = run_snippets(snippet_id)
    page, heading = SNIPPETS[snippet_id]
    where = f'{page}, section "{heading}"' if heading else page
    return {'command': f'the python blocks of {where}, in order, in one namespace', 'kind': 'snippets',
            'per_cpu': PER_CPU, **machine(collect()), 'code_dirty': code_dirty(), 'printed': lines}


def dumps(value, indent: int = 0, width: int = 120) -> str:
    """JSON with one key or line per row, and lists and objects that fit ``width`` kept on one line (a diff
    shows what moved)."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or len(flat) + indent <= width:
        return flat
    pad = ' ' * (indent + 1)
    if isinstance(value, dict):
        rows = [f'{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1, width)}' for k, v in value.items()]
        return '{\n' + ',\n'.join(rows) + '\n' + ' ' * indent + '}'
    return '[\n' + ',\n'.join(pad + dumps(v, indent + 1, width) for v in value) + '\n' + ' ' * indent + ']'


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = ap.add_subparsers(dest='what', required=True)
    r = sub.add_parser('reproduce', help='a finished agentrl reproduce: its results.json and what it printed')
    r.add_argument('id')
    r.add_argument('run_dir')
    r.add_argument('log', help='the file its output went to')
    r.add_argument('--command', help='the command as the pages give it')
    p = sub.add_parser('printed', help='run a command and keep what it prints')
    p.add_argument('id')
    p.add_argument('--command', help='the command as the pages give it')
    p.add_argument('--lines', type=int, help='keep only the first LINES lines')
    p.add_argument('--log', help='the file where ARGV, run at this commit, wrote what it printed (it is not run again)')
    p.add_argument('--per-cpu', action='store_const', const=PER_CPU,
                   help='its figures come from a model, so they depend on the CPU (scripted play does not)')
    p.add_argument('argv', nargs='+')
    w = sub.add_parser('sweep', help="a finished agentrl sweep: its claims' hold rates")
    w.add_argument('id')
    w.add_argument('sweep_dir')
    w.add_argument('--command', help='the command as the pages give it')
    w.add_argument('--means', nargs='*', metavar='PREFIX', help="also keep the means over the seeds of sweep.json's "
                   'figures whose path starts with a PREFIX (15.2/weak/ ...), for the pages to quote')
    e = sub.add_parser('exercises', help="finished exercise sweeps (DIR/exN): each answer's hold rate")
    e.add_argument('id')
    e.add_argument('dir')
    e.add_argument('--command', help='the command as the pages give it')
    s = sub.add_parser('snippets', help="run the docs' Python snippets and keep what they print")
    s.add_argument('ids', nargs='*', help=f'snippet sets (default: all of {list(SNIPPETS)})')
    args = ap.parse_args(argv)

    record = json.loads(RECORD.read_text())
    if args.what == 'reproduce':
        new = {args.id: record_reproduce(args)}
    elif args.what == 'sweep':
        new = {args.id: record_sweep(args)}
    elif args.what == 'exercises':
        new = {args.id: record_exercises(args)}
    elif args.what == 'printed':
        new = {args.id: record_printed(args)}
    else:
        unknown = [i for i in args.ids if i not in SNIPPETS]
        if unknown:
            raise ValueError(f'unknown snippet sets {unknown}; valid ones are {list(SNIPPETS)}')
        new = {i: record_snippets(i) for i in args.ids or SNIPPETS}
    record['runs'].update(new)
    RECORD.write_text(dumps(record) + '\n')
    print(f'{RECORD.relative_to(ROOT)}: recorded {", ".join(new)}')


if __name__ == '__main__':
    main()
