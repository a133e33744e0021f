"""Subcommands backed by the experiments package: ``reproduce``, ``bench``, ``sweep``, ``compare``, ``report``, ``show``."""
from __future__ import annotations

import time
from pathlib import Path


def _threads(n):
    import torch
    if n:
        torch.set_num_threads(n)


def _error(command, e) -> int:
    import sys
    print(f'agentrl {command}: error: {e}', file=sys.stderr)
    return 2


def _reproduce(args):
    """Run chapter 15 end to end, write results, report, figures, checkpoints; print the findings."""
    from .config import resolve
    try:  # every setting is checked before anything runs (and before torch is imported)
        config, overrides = resolve(args.smoke, args.config, args.sets)
    except ValueError as e:
        return _error('reproduce', e)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from . import figures, report
    from .bands import check_transcript
    from .ch15 import SECTIONS, TITLES, Chapter15

    _threads(args.threads)
    console = Console()
    out = Path(args.out)
    t0 = time.perf_counter()
    log = (lambda line: None) if args.quiet else (lambda line: console.print(line, markup=False, highlight=False))
    try:  # model settings and --resume into another config are refused here, before any section runs
        run = Chapter15(out, seed=args.seed, resume=args.resume, log=log, config=config, extended=args.extended,
                        overrides=overrides, policy=args.policy)
    except ValueError as e:
        return _error('reproduce', e)
    if overrides:
        console.print('settings changed from the ' + ('smoke preset' if args.smoke else "chapter's") + ': ' +
                      ', '.join(f'{k}={v}' for k, v in overrides.items()), markup=False, highlight=False)
    with Progress(TextColumn('[bold]{task.description}'), BarColumn(), TextColumn('{task.completed}/{task.total} sections'),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        job = bar.add_task('chapter 15', total=len(SECTIONS) + (1 if args.extended else 0))

        def progress(section, done, resumed=False):
            if done:
                bar.advance(job)
                if resumed:
                    console.print(f'[dim]section {section} loaded from {out}/results.json[/dim]')
            else:
                bar.update(job, description=f'{section} {TITLES[section]}')

        run.progress = progress
        results = run.run()
        bar.update(job, description='figures and report')
    findings = check_transcript(run.transcript())
    paths = figures.draw_all(results, out)
    report.write(out, results, findings, args.seed, run.timing)
    arch = '' if args.policy == 'tiny' else f', policy {args.policy}'  # which architecture the findings are for
    table = Table(title=f'Chapter 15 findings (seed shift {args.seed}{arch})')
    for col in ('finding (BANDS.md)', 'measured', 'holds'):
        table.add_column(col)
    for name, ok, fig in findings:
        table.add_row(name, fig, '[green]held[/green]' if ok else '[red]not held[/red]')
    console.print(table)
    held = sum(ok for _, ok, _ in findings)
    console.print(f'{held} of {len(findings)} bands hold | {time.perf_counter() - t0:.0f} s | '
                  f'{out}/results.json, report.md, ' + ', '.join(p.name for p in paths))
    return 1 if args.strict and held < len(findings) else 0


def _bench(args):
    """Rollout, KV-cache and SFT-step throughput against a same-size Hugging Face GPT2."""
    from . import bench
    return bench.main(args)


def _report(args):
    """Write a run folder's self-contained report.html (findings, tables, figures, trajectory browser)."""
    from .html_report import main_report
    return main_report(args)


def _show(args):
    """Print a run's sampled episodes (or an oracle demo) in the terminal, tokens coloured by owner."""
    from .html_report import main_show
    return main_show(args)


def add_commands(sub):
    """Register the experiment subcommands on an argparse subparsers object."""
    from .sweep import add_setting_args
    rep = sub.add_parser('reproduce', help="run chapter 15's sections 15.1-15.6 and check its findings")
    rep.add_argument('--seed', type=int, default=0, help='shift every seed of the chapter by this much (0 = the chapter)')
    rep.add_argument('--out', default='runs/reproduce', help='output folder (default runs/reproduce)')
    rep.add_argument('--resume', action='store_true', help='continue a killed run from its finished sections')
    rep.add_argument('--threads', type=int, default=0, help='torch threads (default: torch decides)')
    rep.add_argument('--quiet', action='store_true', help="don't echo the chapter's printed lines")
    rep.add_argument('--strict', action='store_true', help='exit 1 if any finding does not hold')
    rep.add_argument('--extended', action='store_true', help='after the chapter, run its exercises and a clipped '
                     'group-policy-gradient trainer, and add "Beyond the chapter" to the report')
    rep.add_argument('--smoke', action='store_true', help='a tiny budget that exercises every section in seconds '
                     '(for testing the pipeline; its findings are meaningless)')
    add_setting_args(rep)
    rep.add_argument('--policy', default='tiny', choices=('tiny', 'gpt2', 'llama'),
                     help="the policy's architecture: the TinyAgent (default), or a randomly initialised transformers "
                     "GPT-2 or Llama of its width, depth and heads on the same vocabulary (needs the hf extra)")
    rep.set_defaults(func=_reproduce)

    bench = sub.add_parser('bench', help='rollout / KV-cache / SFT-step throughput, side by side with a same-size HF GPT2')
    bench.add_argument('--json', action='store_true', help='print one JSON object on stdout (progress goes to stderr)')
    bench.add_argument('--repeats', type=int, default=5, help='timed repeats per item; the median is reported (default 5)')
    bench.add_argument('--threads', type=int, default=2, help='torch threads (default 2)')
    bench.set_defaults(func=_bench)

    # agentrl sweep: multi-seed runs of the reproduction (arguments and code in sweep.py)
    from .sweep import add_parser as add_sweep
    add_sweep(sub)

    # agentrl compare: runs, sweeps or a grid's variants side by side (arguments and code in compare.py)
    from .compare import add_parser as add_compare
    add_compare(sub)

    page = sub.add_parser('report', help="write DIR/report.html: findings, tables, figures, trajectory browser, DPO pairs")
    page.add_argument('dir', help='a reproduction folder (what `agentrl reproduce --out` wrote)')
    page.add_argument('--out', default=None, help='output file (default DIR/report.html)')
    page.add_argument('--checkpoint', default=None, metavar='NAME',
                      help='shade policy tokens by their log-prob under DIR/checkpoints/NAME.safetensors (e.g. sft_step60)')
    page.set_defaults(func=_report)

    show = sub.add_parser('show', help="print a run's sampled episodes in the terminal (no DIR: an oracle demo)")
    show.add_argument('dir', nargs='?', default=None, help='a reproduction folder with episodes/ (default: show an oracle demo)')
    show.add_argument('--policy', default=None, help='which episodes/NAME.json (default: the first of the chapter\'s policies)')
    show.add_argument('--task', default=None, help='only episodes of this task (exact name, else a substring)')
    show.add_argument('--n', type=int, default=None, help='how many episodes (default 2; 1 for the demo)')
    show.set_defaults(func=_show)
