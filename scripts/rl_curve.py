#!/usr/bin/env python3
"""RL's learning curve on a policy, from the chapter's starts: what chose the pretrained model's RL budgets.

    python scripts/rl_curve.py starts --env bugfix --seed 0 --out runs/rlcurves
    python scripts/rl_curve.py rl --env bugfix --seed 0 --start sft20 --recipe reinforce --lr 1e-3 --tasks 8 \\
        --group 8 --steps 32 --every 4 --out runs/rlcurves

``starts`` builds the chapter's weak base and its oracle SFT (15.2's recipes, seeds and budgets for the policy,
``Ch15Config.for_env``), saving the policy every 10 SFT steps (``sft10`` ... ``sft60``, and ``weak``) and measuring
at each: train and held-out pass and the share of train and held-out groups with both a pass and a fail (the signal
RL learns from: section 15.6's probe). ``rl`` trains one RL run from one of them (REINFORCE with the group baseline,
``train_rl``, or the clipped trainer, ``train_grpo``) and evaluates it every ``--every`` steps: train and held-out pass
against the episodes sampled so far. Both write JSON into ``OUT/ENV-sSEED/`` as they go, and ``rl`` saves its state
every step (``recipes.loop``): run it again to continue a killed run. One torch thread (``--threads``).

    python scripts/rl_curve.py table --tinyagent RUN_DIR [--plot docs/assets/rl_curves.png]

``table`` prints each start's train / held-out pass and share of train groups with a signal, then every recorded run's curve (train / held-out pass against episodes sampled) beside the TinyAgent's
SFT -> RL curve from a finished ``agentrl reproduce`` (RUN_DIR/results.json, section 15.5), and for each the
episodes it took to reach train 0.9 (the sample efficiency of a pretrained model against a random one); ``--plot``
draws them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
STARTS_EVERY = 10


def setup(args):
    """The chapter's environment, config and renderer for the policy, and a fresh policy maker."""
    from agentrl.experiments.chapter15.config import Ch15Config
    from agentrl.experiments.chapter15.env_registry import get_env
    from agentrl.experiments.chapter15.real_model import is_pretrained, load_policy
    env = get_env(args.env)
    cfg = Ch15Config.for_env(env, args.policy)
    if not is_pretrained(args.policy):
        raise SystemExit('rl_curve.py runs a pretrained policy (the TinyAgent has agentrl reproduce and sweep)')
    base = load_policy(args.policy, 0, args.seed, cfg.dtype, cfg.device)
    tok = base.renderer()
    new = lambda: load_policy(args.policy, cfg.lora_rank, args.seed, cfg.dtype, cfg.device)  # noqa: E731
    return env, cfg, tok, new


def folder(args) -> Path:
    out = Path(args.out) / f'{args.env}-s{args.seed}'
    out.mkdir(parents=True, exist_ok=True)
    return out


def write(path: Path, data: dict) -> None:
    tmp = path.with_suffix('.tmp')
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def measure(model, env, cfg, tok, seed, n):
    """Train and held-out pass (``n`` episodes a task, the chapter's success) and the share of groups of ``n`` with a
    pass and a fail on each split."""
    from agentrl.recipes.diagnostics import informative_fraction
    from agentrl.recipes.evaluation import pass_rate
    from agentrl.recipes.outcomes import is_success
    out = {}
    for split in ('train', 'heldout'):
        tasks = env.tasks(split)
        _, trajs = pass_rate(model, tasks, tok, n, seed=seed, env=env.env_id)
        wins = torch.tensor([float(is_success(t)) for t in trajs]).view(len(tasks), n)  # task-major
        out[split] = wins.mean().item()
        out[f'{split}_signal'] = informative_fraction(wins)
    return out


def starts(args):
    from agentrl.policies.checkpoint import save_checkpoint
    from agentrl.recipes.sft import sft_train
    from agentrl.rollouts.engine import scripted_rollout
    env, cfg, tok, new = setup(args)
    out, s, t0 = folder(args), args.seed, time.time()
    train = env.tasks('train')
    weak_play = [scripted_rollout(env.player(kind, seed=k + s), env.make(), t, tok)
                 for kind in ['blind', 'random'] for k in range(4) for t in train]  # 15.2's weak play
    demos = [scripted_rollout(env.player('oracle'), env.make(), t, tok) for t in train]
    torch.manual_seed(0 + s)
    weak = new()
    sft_train(weak, weak_play, tok, steps=cfg.weak_steps, lr=cfg.sft_lr, batch_size=cfg.sft_batch_size, seed=0 + s)
    record = {'env': args.env, 'seed': s, 'policy': args.policy, 'points': []}

    def keep(name, step, model):
        save_checkpoint(model, out / f'{name}.safetensors', tok)
        point = {'name': name, 'sft_step': step, **measure(model, env, cfg, tok, s, args.eval_samples),
                 'seconds': round(time.time() - t0)}
        record['points'].append(point)
        write(out / 'starts.json', record)
        print(json.dumps(point), flush=True)

    keep('weak', 0, weak)
    import copy
    sft = copy.deepcopy(weak)
    sft_train(sft, demos, tok, steps=cfg.sft_steps, lr=cfg.sft_lr, batch_size=cfg.sft_batch_size, seed=0 + s,
              every=STARTS_EVERY, hook=lambda step: keep(f'sft{step}', step, sft))  # 15.2's oracle SFT, its seed


def rl(args):
    from agentrl.loggers import MemoryLogger
    from agentrl.policies.checkpoint import load_model
    from agentrl.recipes.grpo import GRPOConfig, train_grpo
    from agentrl.recipes.loop import Checkpoint
    from agentrl.recipes.reinforce import train_rl
    env, cfg, tok, _ = setup(args)
    out, s = folder(args), args.seed
    name = args.name or (f'{args.recipe}-{args.start}-lr{args.lr:g}-{args.tasks}x{args.group}'
                         + (f'-e{args.epochs}' if args.recipe == 'grpo' else '')
                         + (f'-clip{args.max_grad_norm:g}' if args.max_grad_norm else ''))
    model = load_model(out / f'{args.start}.safetensors', tok)
    train = env.tasks('train')
    batch = args.tasks * args.group
    record = {'env': args.env, 'seed': s, 'policy': args.policy, 'start': args.start, 'recipe': args.recipe,
              'lr': args.lr, 'tasks': args.tasks, 'group': args.group, 'steps': args.steps, 'every': args.every,
              'eval_samples': args.eval_samples, 'epochs': args.epochs, 'micro_batch': args.micro_batch,
              'max_grad_norm': args.max_grad_norm,
              'threads': torch.get_num_threads(), 'points': []}
    t0 = time.time()

    def evaluate(m):
        return measure(m, env, cfg, tok, s, args.eval_samples)

    log = MemoryLogger()

    def keep_point(step, values):
        point = {'step': step, 'episodes': step * batch, **values, 'seconds': round(time.time() - t0)}
        record['points'].append(point)
        record['rewards'] = [v for _, v in log.series('reward')]
        record['informative'] = [v for _, v in log.series('informative')]
        write(out / f'{name}.json', record)
        print(json.dumps(point), flush=True)

    def evaluate_and_keep(m):
        values = evaluate(m)
        step = len(record['points']) * args.every
        keep_point(step, values)
        return (values['train'], values['heldout'])

    ck = Checkpoint(out / f'{name}.state.safetensors', every=1, extra={'points': record['points']})
    if args.recipe == 'reinforce':
        from agentrl.recipes.optim import OptimConfig
        train_rl(model, train, tok, args.steps, lr=args.lr, seed=0 + s, n_tasks=args.tasks, group=args.group,
                 every=args.every, evaluate=evaluate_and_keep, env=env.env_id, loggers=log, checkpoint=ck,
                 micro_batch=args.micro_batch, optim=OptimConfig(max_grad_norm=args.max_grad_norm))
    else:
        knobs = GRPOConfig(n_tasks=args.tasks, num_generations=args.group, learning_rate=args.lr,
                           num_iterations=args.epochs, minibatches=args.minibatches, micro_batch=args.micro_batch,
                           max_grad_norm=args.max_grad_norm, seed=0 + s)
        train_grpo(model, train, tok, args.steps, knobs, evaluate=evaluate_and_keep, every=args.every, env=env.env_id,
                   loggers=log, checkpoint=ck)
    record['done'] = True
    record['seconds'] = round(time.time() - t0)
    write(out / f'{name}.json', record)


def reach(points, level=0.9):
    """The episodes sampled when train pass first reached ``level``, or None."""
    return next((p['episodes'] for p in points if p['train'] >= level), None)


def tinyagent_curve(run_dir: Path) -> dict:
    """The TinyAgent's SFT -> RL curve from a reproduction: 15.5's ``curves`` from the cold-start step on (the steps
    before it are SFT), each RL step ``rl_tasks`` x ``rl_group`` episodes."""
    r = json.loads((Path(run_dir) / 'results.json').read_text())
    c = r['config']
    cold, batch = c['cold_start_step'], c['rl_tasks'] * c['rl_group']
    curve = r['sections']['15.5']['curves']['SFT -> RL']
    return {'name': f"TinyAgent {r.get('env', 'bugfix')}-s{r.get('seed', 0)} SFT -> RL (agentrl reproduce)",
            'points': [{'step': s - cold, 'episodes': (s - cold) * batch, 'train': t, 'heldout': h}
                       for s, t, h in curve if s >= cold]}


def label(name: str) -> str:
    """'SmolLM2 bugfix-s0 reinforce-sft20-lr0.00025-8x8' -> 'SmolLM2 s0 from sft20, lr 0.00025'."""
    if not name.startswith('SmolLM2'):
        return name.replace(' (agentrl reproduce)', '')
    _, where, rest = name.split(' ', 2)
    parts = rest.split(' ')[0].split('-')
    lr = next((q[2:] for q in parts if q.startswith('lr')), '?')
    return f"SmolLM2 {where.split('-')[1]} from {parts[1]}, lr {lr}" + (' (stopped)' if 'stopped' in rest else '')


def style(name: str) -> dict:
    """A colour per learning rate, dashed for seed 1, the TinyAgent in black."""
    if not name.startswith('SmolLM2'):
        return {'color': 'black', 'lw': 2.2}
    colours = {'0.00025': '#1f77b4', '0.0005': '#ff7f0e', '0.001': '#d62728'}
    lr = label(name).split('lr ')[1].split(' ')[0]
    return {'color': colours.get(lr, 'grey'), 'lw': 1.3, 'ls': '--' if '-s1 ' in name else '-',
            'alpha': 0.5 if 'from weak' in label(name) else 1.0}


def table(args):
    for f in sorted(Path(args.out).glob('*-s*/starts.json')):
        pts = json.loads(f.read_text())['points']
        print(f'starts {f.parent.name}: ' + ' '.join(f"{p['name']} {p['train']:.2f}/{p['heldout']:.2f} signal "
                                                   f"{p['train_signal']:.2f}" for p in pts))
    runs = []
    for f in sorted(Path(args.out).glob('*-s*/*.json')):
        if f.name == 'starts.json':
            continue
        d = json.loads(f.read_text())
        if d.get('points'):
            runs.append({'name': f'SmolLM2 {f.parent.name} {f.stem}' + ('' if d.get('done') else ' (stopped)'),
                         'points': d['points']})
    runs += [tinyagent_curve(d) for d in args.tinyagent]
    for r in runs:
        pts = r['points']
        hit = reach(pts)
        print(f"{r['name']}: " + ' '.join(f"{p['episodes']}:{p['train']:.2f}/{p['heldout']:.2f}" for p in pts)
              + f" | train 0.9 at {hit if hit is not None else 'never'} episodes")
    if args.plot:
        from agentrl.experiments.chapter15.figures import pyplot, save_figure
        plt = pyplot()
        envs = sorted({r['name'].split()[1].split('-')[0] for r in runs if r['name'].startswith('SmolLM2')})
        fig, axes = plt.subplots(1, len(envs) or 1, figsize=(6 * max(len(envs), 1), 4.2), squeeze=False)
        for ax, env in zip(axes[0], envs):
            for r in runs:
                if r['name'].startswith('SmolLM2') and f' {env}-' not in r['name']:
                    continue
                if not r['name'].startswith('SmolLM2') and f' {env}-' not in r['name']:
                    continue
                x = [p['episodes'] for p in r['points']]
                ax.plot(x, [p['train'] for p in r['points']], marker='.', label=label(r['name']), **style(r['name']))
            ax.axhline(0.9, color='grey', lw=0.6, ls='--')
            ax.set_title(f'{env}: train pass against episodes sampled')
            ax.set_xlabel('episodes sampled by RL')
            ax.set_ylabel('train pass')
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=6.5)
        save_figure(fig, Path(args.plot), 'REINFORCE on SmolLM2-135M-Instruct (LoRA) and on the TinyAgent')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = ap.add_subparsers(dest='what', required=True)
    for name in ('starts', 'rl'):
        p = sub.add_parser(name)
        p.add_argument('--env', default='bugfix')
        p.add_argument('--seed', type=int, default=0)
        p.add_argument('--policy', default='smollm2')
        p.add_argument('--out', default=str(ROOT / 'runs' / 'rlcurves'))
        p.add_argument('--eval-samples', type=int, default=4)
        p.add_argument('--threads', type=int, default=1)
        if name == 'rl':
            p.add_argument('--start', default='sft20', help='weak, sft10, sft20, ... (written by starts)')
            p.add_argument('--recipe', choices=('reinforce', 'grpo'), default='reinforce')
            p.add_argument('--lr', type=float, default=1e-3)
            p.add_argument('--tasks', type=int, default=8)
            p.add_argument('--group', type=int, default=8)
            p.add_argument('--steps', type=int, default=32)
            p.add_argument('--every', type=int, default=4)
            p.add_argument('--epochs', type=int, default=2, help='the clipped trainer\'s passes over each batch')
            p.add_argument('--micro-batch', type=int, default=8, help='episodes REINFORCE forwards at a time')
            p.add_argument('--minibatches', type=int, default=2, help="the clipped trainer's updates per pass")
            p.add_argument('--max-grad-norm', type=float, default=None)
            p.add_argument('--name', default=None)
    p = sub.add_parser('table')
    p.add_argument('--out', default=str(ROOT / 'runs' / 'rlcurves'))
    p.add_argument('--tinyagent', nargs='*', default=[], help='finished agentrl reproduce folders (their 15.5 curves)')
    p.add_argument('--plot', default=None, help='write the figure here (png)')
    args = ap.parse_args(argv)
    if args.what == 'table':
        return table(args)
    torch.set_num_threads(args.threads)
    from agentrl.runtime.memory import keep_freed_memory
    keep_freed_memory()
    (starts if args.what == 'starts' else rl)(args)


if __name__ == '__main__':
    sys.exit(main())
