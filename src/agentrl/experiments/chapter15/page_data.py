"""The trajectory browser's data: a run's episode files as the compact JSON ``report.html`` embeds.

Episodes are stored compactly: token ids plus one shared vocabulary, owners and mask as digit
strings, turns run-length encoded, log-probs only where the mask is 1. ``page_data`` gathers
everything the page's JS needs (``page_assets.PAGE_JS``): vocabulary, owners, colours, episodes per
policy (``episodes/<policy>.json``, the chapter's policies first), the DPO pairs
(``episodes/dpo_pairs.json``) and the task splits; with a checkpoint, each policy token's log-prob
under it (``heat_logprobs``).
"""
from __future__ import annotations

from pathlib import Path

from ...rendering.trajectory import OWNER
from ...rendering.viewer import COLORS

PAIRS_FILE = 'dpo_pairs.json'
EXTRA_LABELS = {'rft_round1_kept': 'RFT round 1 (the second), kept episodes', 'dpo_pairs': 'DPO pairs (chosen, rejected, ...)',
                'rft_round2_kept': 'RFT round 1 (the second), kept episodes'}  # the same file, as earlier runs named it



def encode_episode(t, heat=None) -> dict:
    """A trajectory as the page's compact JSON (see the module docstring); ``heat``: log-probs at masked positions."""
    turns = t.turn.tolist()
    runs = []
    for x in turns:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    mask = [int(x) for x in t.action_mask.tolist()]
    lp = [round(v, 3) for v, m in zip(t.logprobs.tolist(), mask) if m]
    ep = {'t': t.ids.tolist(), 'o': ''.join(str(o) for o in t.owner.tolist()), 'm': ''.join(map(str, mask)),
          'u': runs, 'lp': lp, 'r': t.reward, 'i': t.info}
    if heat is not None:
        ep['h'] = heat
    return ep


def heat_logprobs(model, trajs, batch: int = 64) -> list:
    """Log-prob of every trained (policy) token under ``model`` -> one list per trajectory, in mask order."""
    import torch

    from ...policies.scoring import sequence_log_probs
    from ...rendering.trajectory import collate
    out, block = [], model.config.block_size
    model.eval()
    for k in range(0, len(trajs), batch):
        chunk = trajs[k:k + batch]
        padded = collate(chunk, 0)
        ids = padded['ids'][:, :block]  # [B, T]; padding after a sequence never changes its log-probs
        with torch.no_grad():
            logp = sequence_log_probs(model, ids, padded['lengths'].clamp(max=ids.shape[1]))  # [B, T-1]
        for b, t in enumerate(chunk):
            n = min(len(t.ids), block) - 1
            vals = logp[b, :n].tolist() + [None] * (len(t.ids) - 1 - n)
            out.append([None if v is None else round(v, 2) for v, m in zip(vals, t.action_mask.tolist()) if m])
    return out


def load_episode_files(folder: Path) -> dict:
    """``episodes/*.json`` -> {name: trajectories}, the chapter's policies first (in ``POLICIES`` order), no empty files."""
    from ...rendering.trajio import load_trajectories
    from .reproduction import POLICIES
    folder = Path(folder)
    files = sorted(folder.glob('*.json')) if folder.is_dir() else []
    names = [n for n in POLICIES if (folder / f'{n}.json') in files]
    names += [p.stem for p in files if p.stem not in POLICIES and p.name != PAIRS_FILE]
    out = {}
    for name in names:
        trajs = load_trajectories(folder / f'{name}.json')
        if trajs:
            out[name] = trajs
    return out


def label(name: str, config: dict | None = None) -> str:
    """How the page and ``agentrl show`` name a run's episode file ``name``; the two SFT checkpoints by the steps of
    the run's ``config`` (its ``results.json['config']``; default the chapter's 20 and 60)."""
    from .reproduction import POLICIES
    steps = {'sft_step20': 'cold_start_step', 'sft_step60': 'sft_steps'}
    if config and name in steps and steps[name] in config:
        return f'oracle SFT, step {config[steps[name]]}'
    return POLICIES.get(name) or EXTRA_LABELS.get(name) or name.replace('_', ' ')


def run_config(run_dir) -> dict | None:
    """A run folder's effective config (``results.json['config']``), or None when it has none to read."""
    from ..run_folder import peek
    return (peek(Path(run_dir) / 'results.json') or {}).get('config')


def page_data(run_dir: Path, model=None, checkpoint: str | None = None, env=None) -> dict:
    """Everything the page's JS needs: vocabulary, owners, colours, episodes per policy, DPO pairs, task splits.

    The vocabulary is the run's own (its checkpoints'); ``env`` (an ``envs.ChapterEnv``, default the run's) gives the tasks."""
    from ...integrations.export import run_tokenizer
    from ...rendering.trajio import load_trajectories
    from .env_registry import run_env
    env = env or run_env(run_dir)
    folder = Path(run_dir) / 'episodes'
    episodes = load_episode_files(folder)
    pairs = load_trajectories(folder / PAIRS_FILE) if (folder / PAIRS_FILE).exists() else []
    pairs = pairs[:len(pairs) // 2 * 2]
    heat = {}
    if model is not None:
        for name, trajs in [*episodes.items(), (PAIRS_FILE, pairs)]:
            heat[name] = heat_logprobs(model, trajs) if trajs else []
    enc = lambda name, trajs: [encode_episode(t, heat[name][k] if name in heat else None) for k, t in enumerate(trajs)]
    config = run_config(run_dir)
    return {'vocab': run_tokenizer(run_dir).vocab,
            'owners': sorted(OWNER, key=OWNER.get), 'colors': COLORS,
            'policies': [{'key': name, 'label': label(name, config), 'episodes': enc(name, trajs)}
                         for name, trajs in episodes.items()],
            'pairs': enc(PAIRS_FILE, pairs),
            'tasks': [{'name': t.name, 'split': t.split} for t in env.tasks('all')],
            'checkpoint': checkpoint}
