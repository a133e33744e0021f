"""The section ``rl``: one RL recipe, the chapter's REINFORCE or a variant of the clipped trainer, from one of 15.2's
checkpoints, measured the way the field reports RL (``agentrl sweep --rl``).

``agentrl sweep --rl --grid rl_variant=reinforce,clipped,dapo`` runs sections 15.2 and ``rl`` per seed and variant:
15.2 trains the weak base and the oracle SFT run (the same checkpoints at a seed, whatever the variant), then ``rl``
trains from ``rl_start`` (one of them, or any saved policy's file) with the recipe ``rl_variant`` (``recipes.pg_variants``) at the chapter's RL budget and
knobs (``rl_cold_steps`` or ``rl_only_steps`` steps of ``rl_tasks`` x ``rl_group`` episodes, ``rl_lr``, ...), and
records

- the curve ``hist`` (step, train pass, held-out pass; the chapter's ``evaluate``, every ``rl_every`` steps) and
  the episodes each step sampled (dynamic sampling's extra batches counted);
- ``episodes_to_target``: the episodes sampled when the train pass first reached ``rl_target`` (0 if it started
  there; None if it never did);
- pass@k after RL (``recipes.evaluation.pass_at_k_curve``: ``pass_k_samples`` episodes per task, Chen et al.'s
  unbiased estimator) on train and held-out tasks, and greedy decoding's pass (temperature 0);
- what the trainer saw (the clipped trainer's step logs, averaged): the share of informative groups, the clip
  fractions, the entropy and KL to the behaviour policy;
- the recipe's wall time.

``agentrl compare DIR`` then tables each variant against the first (REINFORCE when the grid names it first),
paired by seed.

The variants of one seed share its 15.2: a variant's job that finds another variant's folder of the same seed with
15.2 finished, on the same environment, policy, thread count and settings but for ``RL_KEYS``, copies that section
(``adopt_15_2``) instead of training it again (the figures are the same: the section is deterministic at a seed and a
thread count).
"""
from __future__ import annotations

import copy
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from ...policies.checkpoint import load_model
from ...recipes.evaluation import greedy_pass, pass_at_k_curve
from ...recipes.grpo import GRPOConfig, train_grpo
from ...recipes.pg_variants import variant_settings
from ...loggers import MemoryLogger
from ..run_folder import peek
from .config import RL_STARTS
from .sections import reads
from .settings import resume_differences

WATCHED = ('informative', 'entropy', 'reward', 'invalid_calls', 'clip_frac', 'clip_ratio/region_mean', 'clip_ratio/high_mean',
           'approx_kl', 'cispo_clip_ratio', 'dynamic_sampling/batches', 'grad_norm')
"""The recipe's logged monitors (``loggers.names.METRICS``) whose means over its steps the section records
(``monitors``): the share of informative groups, the action entropy, the sampled reward and invalid calls, and the
clipped trainer's clip ratios (TRL's), KL to the sampler, CISPO's clipped share and dynamic sampling's batches."""
RL_KEYS = ('rl_variant', 'rl_start', 'rl_target', 'pass_k_samples')
"""The settings only the section ``rl`` reads: runs of a seed differing in no other key have the same 15.2."""
SHARED_FILES = ('checkpoints/weak.safetensors', 'checkpoints/sft_step20.safetensors', 'checkpoints/sft_step60.safetensors',
                'episodes/weak.json', 'episodes/sft_step20.json', 'episodes/sft_step60.json', 'episodes/dpo_pairs.json')
"""What 15.2 leaves in a run folder beside ``results.json``: its checkpoints and the report's episodes of them."""
PASS_K_SEED = 20_000
"""Offset of the pass@k evaluation's sampling seed, apart from every stream the recipes draw."""


def episodes_to_target(hist, episodes: list, target: float, start: int):
    """Episodes sampled when the train pass (``hist``'s second column) first reached ``target`` -> int, or None if it
    never did. ``episodes[i]``: what step ``start + i + 1`` sampled; ``hist``'s steps count from ``start``."""
    for step, train, *_ in hist:
        if train >= target:
            return int(sum(episodes[:step - start]))
    return None


class RLSection:
    """The section ``rl`` (a mixin of ``Reproduction``, beside ``Sections`` and ``Beyond``)."""

    def adopt_15_2(self, source) -> bool:
        """Take section 15.2 from the run folder ``source`` instead of running it -> whether it did: its results,
        transcript lines, time, checkpoints and episode files, when ``source`` finished 15.2 on this environment,
        seed, policy and torch thread count with these settings but for ``RL_KEYS`` (another variant of this seed in
        ``agentrl sweep --rl``). The copy is recorded in the provenance (``adopted``)."""
        source = Path(source)
        saved = peek(source / 'results.json')
        if '15.2' in self.results or not saved or '15.2' not in saved.get('sections', {}):
            return False
        same = (saved.get('env') == self.env.name and saved.get('seed') == self.seed
                and saved['sections'].get('setup', {}).get('policy', 'tiny') == self.policy
                and (saved.get('provenance') or {}).get('torch_threads') == self.provenance.get('torch_threads')
                and all(k in RL_KEYS for k, _, _ in resume_differences(saved.get('config'), self.config_record)))
        if not same or not all((source / f).exists() for f in SHARED_FILES[:3]):
            return False
        with self.session():
            for name in SHARED_FILES:
                if (source / name).exists():
                    (self.out / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source / name, self.out / name)
            self.provenance['adopted'] = {'15.2': str(source.resolve())}
            self.lines['15.2'] = list(saved['transcript']['15.2'])
            self._finish('15.2', saved['sections']['15.2'], (peek(source / 'timing.json') or {}).get('15.2', 0.0))
        return True

    @reads('15.2')
    def s_rl(self):
        c, s = self.cfg, self.seed
        if c.rl_start in RL_STARTS:
            steps, start = {'weak': (c.rl_only_steps, 0), 'sft_step20': (c.rl_cold_steps, c.cold_start_step),
                            'sft_step60': (c.rl_cold_steps, c.sft_steps)}[c.rl_start]
            model = copy.deepcopy(self._model(c.rl_start))
        else:  # a saved policy's file (config.check_ranges has seen it exists); its vocabulary must be the run's
            steps, start = c.rl_cold_steps, 0
            model = load_model(c.rl_start, self.tok)
        settings = variant_settings(c.rl_variant)
        batch = c.rl_tasks * c.rl_group
        t0 = time.perf_counter()
        watched = []  # (step, monitors) of every logged record: what the sample showed, the update's entropy and KL ...
        if settings is None:  # the chapter's REINFORCE, exactly as 15.5 runs it
            hist, logs = self._rl(model, steps, 'rl_variant', start=start, watched=watched), []
            recipe = {'recipe': 'train_rl', 'lr': c.rl_lr, 'n_tasks': c.rl_tasks, 'group': c.rl_group,
                      'temperature': c.rl_temperature, 'entropy_bonus': c.rl_entropy_bonus}
        else:  # the clipped trainer: the same samples per step and knobs as REINFORCE, plus the variant's settings
            knobs = GRPOConfig(n_tasks=c.rl_tasks, num_generations=c.rl_group, learning_rate=c.rl_lr,
                               temperature=c.rl_temperature, entropy_coef=c.rl_entropy_bonus, seed=0 + s,
                               micro_batch=c.rl_micro_batch, **settings)  # a pretrained model's minibatch, 8 at a time
            loggers = [x for x in (self.monitor_run('train_grpo', c.rl_variant), MemoryLogger(watched)) if x]
            hist, logs = train_grpo(model, self.train, self.tok, steps, knobs, evaluate=self.evaluate, every=c.rl_every,
                                    start=start, env=self.env.env_id, loggers=loggers,
                                    **self.recipe_run('rl_variant', c.rl_variant, watched=watched))
            recipe = {'recipe': 'train_grpo', **asdict(knobs)}
        seconds = time.perf_counter() - t0 + self.earlier_seconds()  # a recipe resumed inside: every attempt's kept steps
        hist = [tuple(h) for h in hist]
        episodes = [row.get('dynamic_sampling/episodes', batch) for row in logs] or [batch] * steps
        self._save('rl_variant', model)
        n, env = c.pass_k_samples, self.env.env_id
        pk = {split: pass_at_k_curve(model, tasks, self.tok, n, env=env, seed=PASS_K_SEED + s)
              for split, tasks in (('train', self.train), ('held', self.heldout))}
        greedy = {split: greedy_pass(model, tasks, self.tok, env=env)[0]
                  for split, tasks in (('train', self.train), ('held', self.heldout))}
        rows = [m for _, m in watched if 'eval/0' not in m]  # the steps' monitors, not the evaluations'
        monitors = {k: sum(r[k] for r in rows) / len(rows) for k in WATCHED
                    if rows and all(isinstance(r.get(k), (int, float)) for r in rows)}
        to_target = episodes_to_target(hist, episodes, c.rl_target, start)
        self._say(f"{c.rl_variant} from {c.rl_start}: {steps} steps, {sum(episodes)} episodes, {seconds:.0f} s | "
                  f"train/held {hist[-1][1]:.2f}/{hist[-1][2]:.2f} | greedy {greedy['train']:.2f}/{greedy['held']:.2f} | "
                  f"episodes to train {c.rl_target:g}: {to_target if to_target is not None else 'not reached'}", 'rl')
        self._say('pass@k train ' + ' '.join(f'{k}:{v:.2f}' for k, v in pk['train'].mean.items()) + ' | held-out '
                  + ' '.join(f'{k}:{v:.2f}' for k, v in pk['held'].mean.items()), 'rl')
        return {'variant': c.rl_variant, 'start': c.rl_start, 'settings': recipe, 'hist': hist, 'logs': logs,
                'episodes_per_step': episodes, 'episodes': int(sum(episodes)), 'target': c.rl_target,
                'episodes_to_target': to_target, 'final': {'train': hist[-1][1], 'held': hist[-1][2]},
                'greedy': greedy, 'monitors': monitors, 'seconds': round(seconds, 2),
                'pass_at_k': {split: {'n': p.n, 'mean': {str(k): v for k, v in p.mean.items()}, 'tasks': p.tasks,
                                      'successes': p.successes} for split, p in pk.items()}}


def rl_figures(rl: dict) -> list:
    """The figures of the section ``rl`` a sweep and ``agentrl compare`` table -> [(label, path)], ``path`` the keys
    from the section's results to the number (``'/'.join`` of it is the figure's key in ``sweep.json``). ``rl``: one
    seed's section, which says the k's of its pass@k and the monitors it has."""
    ks = sorted(rl['pass_at_k']['train']['mean'], key=int)
    out = [('final train pass', ('final', 'train')), ('final held-out pass', ('final', 'held')),
           ('greedy train pass', ('greedy', 'train')), ('greedy held-out pass', ('greedy', 'held'))]
    out += [(f'{name} pass@{k}', ('pass_at_k', split, 'mean', k)) for split, name in (('train', 'train'), ('held', 'held-out'))
            for k in ks]
    out += [(f"episodes to train pass {rl['target']:g}", ('episodes_to_target',)), ('episodes sampled', ('episodes',)),
            ('recipe seconds', ('seconds',))]
    out += [(f'mean {k}', ('monitors', k)) for k in WATCHED if k in rl['monitors']]
    return [(label, ('rl', *path)) for label, path in out]
