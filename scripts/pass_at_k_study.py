"""Does RL teach or sharpen? pass@k of the chapter's policies over the seeds of a sweep (the variants page).

For every seed of an ``agentrl sweep`` folder (or one ``agentrl reproduce`` folder), loads the checkpoints of the
weak base, oracle SFT (its step 20, where SFT -> RL starts, and its last step), expert iteration, SFT -> RL and RL only, samples ``--samples`` episodes per
train and held-out task from each (``arl.pass_at_k_curve``: Chen et al. 2021's unbiased estimator), and writes

- ``OUT/pass_at_k.json``: per checkpoint and split, pass@k for k = 1, 2, 4, ..., n as mean and 95% CI over seeds, and
  every seed's value;
- ``OUT/pass_at_k.png``: the curves, train and held-out, one line per checkpoint with its CI band.

If RL only sharpens what the policy it starts from could already do (Yue et al. 2025, "Does reinforcement learning
really incentivize reasoning capacity in LLMs beyond the base model?"), SFT -> RL's pass@1 rises above oracle SFT's
while its pass@k at large k does not; if it teaches, pass@k at large k rises too.

    python scripts/pass_at_k_study.py runs/tsweep/bugfix09 --samples 16
    python scripts/pass_at_k_study.py runs/smollm2/bugfix-s0 --samples 8   # a pretrained policy's run too
    python scripts/pass_at_k_study.py runs/variants/smollm2/rl_variant=reinforce --samples 8   # a sweep --rl variant
    python scripts/pass_at_k_study.py runs/v/rl_variant=reinforce/seed0 runs/v/rl_variant=reinforce/seed1 --out runs/pk
        # finished seed folders of a sweep still running (each seed once)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import agentrl as arl
from agentrl.experiments.chapter15.env_registry import get_env
from agentrl.experiments.chapter15.figures import pyplot, save_figure
from agentrl.experiments.chapter15.real_model import is_pretrained, load_policy
from agentrl.experiments.sweeps.figures import VARIANT_COLORS
from agentrl.experiments.sweeps.stats import summarize
from agentrl.policies.checkpoint import load_model

CHECKPOINTS = {'weak': 'weak base', 'sft_step20': 'SFT step 20 (RL cold start)', 'sft_step60': 'oracle SFT',
               'rft': 'expert iteration', 'sft_rl': 'SFT -> RL', 'rl_only': 'RL only', 'rl_variant': 'sweep --rl recipe'}
"""The checkpoints compared, with their labels (``rl_variant``: the recipe an ``agentrl sweep --rl`` seed ran from
its ``rl_start``, in a variant's folder)."""
SEED_OFFSET = 30_000
"""Offset of the sampling seed, apart from every stream the run drew."""


def seed_folders(path: Path) -> list:
    """A sweep folder's finished seed folders, or a run folder itself."""
    if (path / 'sweep.json').is_file():
        sweep = json.loads((path / 'sweep.json').read_text())
        return [path / f'seed{s}' for s in sweep['aggregated_seeds']]
    return [path]


def study(paths: list, n: int) -> dict:
    """pass@k per checkpoint, split and seed of the run folders in ``paths`` (sweep folders or run folders) ->
    {checkpoint: {split: {k: {'values': {seed: v}, **summary}}}}."""
    per, seen = {}, set()
    for folder in [f for path in paths for f in seed_folders(path)]:
        saved = json.loads((folder / 'results.json').read_text())
        env, seed = get_env(saved['env']), saved['seed']
        if seed in seen:
            raise SystemExit(f'{folder}: seed {seed} twice; give each seed one run folder')
        seen.add(seed)
        policy = saved['sections']['setup'].get('policy', 'tiny')
        if is_pretrained(policy):  # its own tokenizer and chat template, as the run rendered its episodes
            cfg = saved['config']
            tok = load_policy(policy, 0, seed, cfg.get('dtype', 'auto'), cfg.get('device', 'auto')).renderer()
        else:
            tok = env.tokenizer()
        splits = {'train': env.tasks('train'), 'held': env.tasks('heldout')}
        for name in CHECKPOINTS:
            ckpt = folder / 'checkpoints' / f'{name}.safetensors'
            if not ckpt.is_file():
                continue
            model = load_model(ckpt, tok)
            for split, tasks in splits.items():
                pk = arl.pass_at_k_curve(model, tasks, tok, n, env=env.env_id, seed=SEED_OFFSET + seed)
                for k, v in pk.mean.items():
                    per.setdefault(name, {}).setdefault(split, {}).setdefault(str(k), {})[seed] = v
        print(f'{folder}: done', flush=True)
    return {name: {split: {k: {**summarize(list(vals.values())), 'values': vals} for k, vals in ks.items()}
                   for split, ks in splits_.items()} for name, splits_ in per.items()}


def figure(result: dict, path: Path, title: str) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for c, (name, splits) in enumerate(result.items()):
        color = VARIANT_COLORS[c % len(VARIANT_COLORS)]
        for ax, split in zip(axes, ('train', 'held')):
            ks = sorted(splits[split], key=int)
            stats = [splits[split][k] for k in ks]
            xs = [int(k) for k in ks]
            ax.plot(xs, [s['mean'] for s in stats], 'o-', ms=3, color=color,
                    label=f"{CHECKPOINTS[name]} (n={stats[0]['n']})" if split == 'train' else None)
            if stats[0]['n'] > 1:
                ax.fill_between(xs, [max(0.0, s['ci95'][0]) for s in stats], [min(1.0, s['ci95'][1]) for s in stats],
                                color=color, alpha=0.15, lw=0)
            ax.set_xscale('log', base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
    axes[0].set(title='train tasks', xlabel='k (attempts per task)', ylabel='pass@k', ylim=(0, 1.02))
    axes[1].set(title='held-out tasks', xlabel='k (attempts per task)')
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc='lower center', ncol=min(len(labels), 5), fontsize=9, frameon=False)
    return save_figure(fig, path, title, rect=(0, 0.08, 1, 1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('paths', nargs='+', metavar='path',
                   help='a sweep folder (sweep.json) or a reproduction folder (results.json); several: their seeds together')
    p.add_argument('--samples', type=int, default=16, help='episodes per task, the n of pass@k (default 16)')
    p.add_argument('--out', default=None, help='where pass_at_k.json and .png go (default: the one folder given)')
    args = p.parse_args(argv)
    paths = [Path(x) for x in args.paths]
    if len(paths) > 1 and not args.out:
        p.error('several folders need --out')
    out = Path(args.out) if args.out else paths[0]
    out.mkdir(parents=True, exist_ok=True)
    result = study(paths, args.samples)
    (out / 'pass_at_k.json').write_text(json.dumps({'path': ' '.join(map(str, paths)), 'samples': args.samples,
                                                    'checkpoints': result}, indent=1) + '\n')
    name = paths[0].name if len(paths) == 1 else out.name
    fig = figure(result, out / 'pass_at_k.png', f'pass@k over seeds ({name}, n = {args.samples} per task)')
    for name, splits in result.items():
        print(f'{CHECKPOINTS[name]:<28}' + ' | '.join(
            f"{split} " + ' '.join(f"{k}:{s['mean']:.2f}" for k, s in sorted(ks.items(), key=lambda kv: int(kv[0])))
            for split, ks in splits.items()))
    print(f"{out / 'pass_at_k.json'}, {fig}")


if __name__ == '__main__':
    main()
