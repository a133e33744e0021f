"""Chapter 15 end to end: sections 15.1 to 15.6 from one weak base (``agentrl reproduce``).

Each section runs the chapter's own protocol through the library's recipes, with the notebook's
seeds shifted by ``seed`` (``seed=0`` is the notebook exactly), and

- prints the lines the notebook prints (collected in ``transcript.txt``),
- stores its figures in ``results.json`` under its section key, written atomically when the
  section ends (timing lives apart, in ``timing.json``),
- checkpoints the models later sections need, as safetensors with config and vocabulary.

Budgets, recipe hyperparameters and model settings come from ``Ch15Config`` (``config.py``; the
chapter's own by default); ``results.json`` records the effective config (``config``) and where the
run ran (``provenance``: the overrides, version, commit, torch, threads, CPU).

A killed run continues with ``resume=True``: finished sections are loaded, not rerun, and the
final results equal an uninterrupted run's, because every random draw comes from a seeded
generator and models are reloaded bit for bit. Resuming with another seed or config is refused,
naming the keys that differ.

With ``jobs > 1`` the sections after 15.2 run in worker processes (``parallel.py``); each section
seeds every draw itself and reads other sections' results only at its end (``_after``), so the
figures equal a ``jobs=1`` run's at the same torch thread count.
"""
from __future__ import annotations

import copy
import json
import os
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

from ..checkpoint import load_model, save_checkpoint
from ..envs.bugfix import BugFixEnv
from ..model import TinyAgent, sequence_log_probs
from ..envs.bugfix import scripted_policy
from ..recipes.diagnostics import describe, probe, reads_first, strip_wrappers
from ..recipes.dpo import dpo_loss, make_pairs, train_dpo
from ..recipes.evaluation import family_pass, pass_rate
from ..recipes.grpo import GRPOConfig, train_grpo
from ..recipes.online_dpo import train_online_dpo
from ..recipes.reinforce import train_rl
from ..recipes.rejection import dedup_by_actions, expert_iteration, family_share
from ..recipes.rft_baseline import rft_baseline_iteration
from ..recipes.select import select_sft_checkpoint
from ..recipes.sft import sft_loss, sft_train
from ..recipes.star import star_iteration
from ..render import OWNER, collate
from ..rollout import scripted_rollout
from ..envs.bugfix import FAMILIES, make_tasks
from ..tokenizer import build_tokenizer
from ..trajio import load_trajectories, save_trajectories
from .config import Ch15Config, describe_differences, differences, effective
from .provenance import collect as collect_provenance

SECTIONS = ('15.1', '15.2', '15.3', '15.4', '15.5', '15.6')
POLICIES = {'weak': 'weak base', 'sft_step20': 'oracle SFT, step 20', 'sft_step60': 'oracle SFT, step 60',
            'rft': 'RFT (expert iteration)', 'dpo': 'DPO', 'dpo_nll': 'DPO + NLL', 'sft_rl': 'SFT -> RL',
            'rl_only': 'RL only', 'mismatched': 'SFT on mismatched template', 'hacker': 'public-test filter'}
"""Every policy a run checkpoints, with the label the report uses."""
EXTENDED = ('beyond',)
POLICY_ARCHS = ('tiny', 'gpt2', 'llama')
"""``agentrl reproduce --policy``: the TinyAgent, or a transformers GPT-2 / Llama of its shape (``hf.make_policy``)."""
TITLES = {'15.1': 'trajectory SFT and the action mask', '15.2': 'warm start: format first, then skill',
          '15.3': 'rejection sampling and expert iteration', '15.4': 'DPO for agent trajectories',
          '15.5': 'four recipes from the same weak base', '15.6': 'design questions in practice',
          'beyond': 'beyond the chapter: exercises and a clipped trainer'}


def _atomic_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


class Chapter15:
    """One reproduction of chapter 15 in ``out``; ``run()`` executes (or resumes) every section."""

    def __init__(self, out, seed: int = 0, resume: bool = False, log=print, progress=None, config: Ch15Config | None = None,
                 extended: bool = False, overrides: dict | None = None, policy: str = 'tiny', jobs: int = 1,
                 worker_threads: int | None = None):
        """``overrides``: the keys the user set (``--set``, ``--config``), recorded in the provenance; ``config`` is
        what they resolved to. Checks every setting before any work: a bad one raises ValueError naming it.
        ``policy``: the architecture, ``'tiny'`` (the TinyAgent) or ``'gpt2'`` / ``'llama'`` (see ``_new_model``).
        ``jobs``: worker processes for the sections after 15.2 (1: all in this process), each on ``worker_threads``
        torch threads (default ``max(1, cores // jobs)``); both are recorded in the provenance."""
        from .parallel import check_jobs, worker_threads as default_threads
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f'seed must be an int, got {type(seed).__name__}')
        self.jobs = check_jobs(jobs)
        if worker_threads is not None and (not isinstance(worker_threads, int) or isinstance(worker_threads, bool)
                                           or worker_threads < 1):
            raise ValueError(f'worker_threads must be a positive int, got {worker_threads!r}')
        self.worker_threads = default_threads(jobs, worker_threads)
        self.wait_for = None
        """In a worker (``parallel.run_section``): section -> its results, once another worker has finished it."""
        if policy not in POLICY_ARCHS:
            raise ValueError(f'unknown policy {policy!r}; valid policies are {list(POLICY_ARCHS)}')
        self.policy = policy
        self.out, self.seed, self.log, self.progress = Path(out), seed, log, progress
        self.cfg = config or Ch15Config()
        self.tasks = make_tasks('all')
        self.tok = build_tokenizer(self.tasks)
        self.train, self.heldout = make_tasks('train'), make_tasks('heldout')
        self.config_record = effective(self.cfg, self.tok.vocab_size)  # checks the model settings too
        """The effective config: every key of ``Ch15Config`` and the full model config (``results.json['config']``)."""
        self.provenance = collect_provenance(overrides)
        self.provenance['jobs'] = jobs
        if jobs > 1:
            self.provenance['worker_torch_threads'] = self.worker_threads
        self.sections = SECTIONS + (EXTENDED if extended else ())
        self.ckpt = self.out / 'checkpoints'
        self.out.mkdir(parents=True, exist_ok=True)
        self.results, self.timing, self.lines = {}, {}, {}
        results_path = self.out / 'results.json'
        if resume and results_path.exists():
            saved = json.loads(results_path.read_text())
            if saved.get('seed') != seed:
                raise ValueError(f'{results_path} was written with another seed (seed {saved.get("seed")}, now {seed}); '
                                 'resume with the same settings or use another --out')
            if saved['sections'].get('setup', {}).get('policy', 'tiny') != policy:
                raise ValueError(f'{results_path} was written with another --policy; resume with the same one')
            diffs = differences(saved.get('config'), self.config_record)
            if diffs:
                raise ValueError(f'{results_path} was written with another config: {describe_differences(diffs)}; '
                                 'resume with the same settings or use another --out')
            self.results = saved['sections']
            self.lines = saved['transcript']
            if (self.out / 'timing.json').exists():
                self.timing = json.loads((self.out / 'timing.json').read_text())
            before = saved.get('provenance')
            if before:  # a resume by another process (other threads, commit, ...) keeps the earlier record
                earlier = before.pop('earlier', [])
                if before != self.provenance:
                    self.provenance = {**self.provenance, 'earlier': earlier + [before]}
                elif earlier:
                    self.provenance = {**self.provenance, 'earlier': earlier}
        elif not resume:  # a fresh run: nothing of an older run in this folder may survive into it
            for stale in ('results.json', 'timing.json', 'transcript.txt'):
                (self.out / stale).unlink(missing_ok=True)
            for folder in (self.out / 'episodes', self.ckpt):
                for f in folder.glob('*') if folder.is_dir() else []:
                    f.unlink()
        s = seed
        self.models = {}
        self.data = {}
        self.lines['setup'] = []
        self._say(f'vocab: {self.tok.vocab_size} | train tasks: {len(self.train)} | held-out tasks: {len(self.heldout)}',
                  'setup')
        self.results.setdefault('setup', {'vocab': self.tok.vocab_size, 'train_tasks': len(self.train),
                                          'heldout_tasks': len(self.heldout), 'seed_shift': s})
        if policy != 'tiny':
            self.results['setup']['policy'] = policy
        self.oracle_demos = [scripted_rollout(scripted_policy('oracle'), BugFixEnv(), t, self.tok) for t in self.train]
        self.demo_batch = collate(self.oracle_demos, self.tok.pad_id)

    # --- helpers
    def _new_model(self):
        """A fresh policy (seed torch first): the TinyAgent, or for ``policy='gpt2'`` / ``'llama'`` a randomly
        initialised ``transformers`` model of the TinyAgent's width, depth and heads on the same vocabulary (issue 13)."""
        if self.policy == 'tiny':
            return TinyAgent(self.tok.vocab_size, **self.cfg.model)
        from ..hf import make_policy
        m = self.config_record['model']
        return make_policy(self.policy, self.tok, d_model=m['d_model'], n_layers=m['n_layers'], n_heads=m['n_heads'])

    def _say(self, line: str, section: str):
        self.lines.setdefault(section, []).append(line)
        self.log(line)

    def evaluate(self, model):
        """The chapter's ``evaluate``: (train pass, held-out pass), 4 samples per task."""
        s, n = self.seed, self.cfg.eval_samples
        return (pass_rate(model, self.train, self.tok, n, seed=s)[0], pass_rate(model, self.heldout, self.tok, n, seed=s)[0])

    def _describe(self, model, label, section, by_family=False):
        d = describe(model, self.train, self.heldout, self.tok, n=self.cfg.describe_samples, seed=self.seed,
                     by_family=by_family)
        self._say(f"{label:<12} train {d['train']:.3f} | held-out {d['held']:.3f} | invalid/ep {d['invalid']:.2f}"
                  f" | reads {d['reads']:.2f} | action entropy {d['entropy']:.3f}", section)
        return d

    def _save(self, name, model):
        self.models[name] = model
        save_checkpoint(model, self.ckpt / f'{name}.safetensors', self.tok)

    def _model(self, name):
        if name not in self.models:
            self.models[name] = load_model(self.ckpt / f'{name}.safetensors', self.tok)
        return self.models[name]

    def _after(self, section):
        """The results of ``section``, which this one reads (at its end: see ``parallel.DEPENDS``). With ``jobs=1``
        it ran before; in a worker, wait until the parent has written it."""
        if section not in self.results and self.wait_for is not None:
            self.results[section] = self.wait_for(section)
        return self.results[section]

    def _merge(self, section, results, lines, seconds, worker=None):
        """Record a section a worker ran: write it like ``run`` does, then echo its lines."""
        self.lines[section] = list(lines)
        self._finish(section, results, seconds)
        if self.progress:
            self.progress(section, done=True, worker=worker, seconds=seconds)
        for line in lines:
            self.log(line)

    def _finish(self, section, results, seconds):
        self.results[section] = results
        self.timing[section] = round(seconds, 2)
        _atomic_json(self.out / 'results.json', {'seed': self.seed, 'config': self.config_record,
                                                 'provenance': self.provenance, 'sections': self.results,
                                                 'transcript': self.lines})
        _atomic_json(self.out / 'timing.json', self.timing)
        (self.out / 'transcript.txt').write_text(self.transcript())

    def transcript(self) -> str:
        """Everything printed so far, in the notebook's format."""
        order = ['setup', *SECTIONS, *EXTENDED]
        return '\n'.join(line for sec in order for line in self.lines.get(sec, [])) + '\n'

    # --- the run
    def run(self):
        """Run every unfinished section in order -> results dict keyed by section.

        With ``jobs > 1``, 15.1 and 15.2 run here and the unfinished later sections in worker processes
        (``parallel.run_sections``); each is written as it finishes, so a resume works per section either way.
        For those, ``progress`` is also given ``worker`` (1..jobs), and ``seconds`` when done, before the lines are echoed.
        """
        from . import parallel
        later = [s for s in self.sections if s not in parallel.PARENT and s not in self.results] if self.jobs > 1 else []
        if later:
            parallel.prestart()
        for section in self.sections:
            if section in self.results:
                for line in self.lines.get(section, []):
                    self.log(line)
                if self.progress:
                    self.progress(section, done=True, resumed=True)
                continue
            if section in later:
                continue
            if self.progress:
                self.progress(section, done=False)
            results, _, seconds = self.run_section(section)
            self._finish(section, results, seconds)
            if self.progress:
                self.progress(section, done=True)
        if later:
            parallel.run_sections(self, later)
            order = [k for k in ('setup', *self.sections) if k in self.results]  # section order, not finishing order
            self.results = {**{k: self.results[k] for k in order}, **self.results}
        self.save_episodes()
        return self.results

    def run_section(self, section):
        """Run one section (its inputs done or, in a worker, awaited) -> (results, printed lines, seconds)."""
        steps = {'15.1': self.s15_1, '15.2': self.s15_2, '15.3': self.s15_3, '15.4': self.s15_4,
                 '15.5': self.s15_5, '15.6': self.s15_6, 'beyond': self.beyond}
        t0 = time.perf_counter()
        self.lines[section] = []
        results = steps[section]()
        return results, self.lines[section], time.perf_counter() - t0

    def save_episodes(self, per_task: int = 2, names=None):
        """Sample ``per_task`` episodes per task (all 30) from every saved policy, for the report's browser.

        Uses its own generator, after the results are final, so it changes no figure of the run. ``names``: only
        these policies (and ``'dpo_pairs'``: the DPO pairs file); files already written are kept.
        """
        folder = self.out / 'episodes'
        for name in POLICIES:
            path = folder / f'{name}.json'
            if (names is not None and name not in names) or path.exists() or not (self.ckpt / f'{name}.safetensors').exists():
                continue
            _, trajs = pass_rate(self._model(name), self.tasks, self.tok, per_task, seed=10_000 + self.seed)
            save_trajectories(path, trajs)
        if (names is None or 'dpo_pairs' in names) and not (folder / 'dpo_pairs.json').exists() \
                and (self.ckpt / 'weak.safetensors').exists():
            pairs = self._pairs()[:40]
            save_trajectories(folder / 'dpo_pairs.json', [t for pair in pairs for t in pair])

    # --- 15.1 trajectory SFT and the action mask
    def s15_1(self):
        s, tok, batch = self.seed, self.tok, self.demo_batch
        torch.manual_seed(0 + s)
        fresh = self._new_model()
        with torch.no_grad():
            logp = sequence_log_probs(fresh, batch['ids'], batch['lengths'])  # [B, T-1]
            masked = sft_loss(fresh, batch).item()
        real = batch['attention_mask'][:, 1:]  # [B, T-1], non-padding
        owner = batch['owner'][:, 1:]  # [B, T-1], -1 on padding
        names = {v: k for k, v in OWNER.items()}
        counts = {names[o]: int((owner == o).sum()) for o in range(4)}
        unmasked = -(logp * real).sum().item() / real.sum().item()
        self._say(f'predicted tokens by owner: {counts}', '15.1')
        self._say(f'masked SFT loss {masked:.3f} | unmasked {unmasked:.3f}', '15.1')
        return {'owner_counts': counts, 'loss_masked': masked, 'loss_unmasked': unmasked,
                'log_vocab': float(torch.tensor(float(tok.vocab_size)).log())}

    # --- 15.2 warm start: format first, then skill
    def s15_2(self):
        s, tok = self.seed, self.tok
        weak_play = [scripted_rollout(scripted_policy(kind, seed=k + s), BugFixEnv(), t, tok)
                     for kind in ['blind', 'random'] for k in range(4) for t in self.train]
        torch.manual_seed(0 + s)
        weak = self._new_model()
        c = self.cfg
        weak_losses = sft_train(weak, weak_play, tok, steps=c.weak_steps, lr=c.sft_lr, batch_size=c.sft_batch_size, seed=0 + s)
        self._save('weak', weak)
        d_weak = self._describe(weak, 'weak base', '15.2')
        sft_model = copy.deepcopy(weak)
        hist = [(0, *self.evaluate(weak))]

        def hook(step):
            hist.append((step, *self.evaluate(sft_model)))
            if step == self.cfg.cold_start_step:
                self._save('sft_step20', copy.deepcopy(sft_model))

        sft_losses = sft_train(sft_model, self.oracle_demos, tok, steps=c.sft_steps, lr=c.sft_lr, batch_size=c.sft_batch_size,
                               hook=hook, every=c.sft_every, seed=0 + s)
        self._save('sft_step60', sft_model)
        self._say(f'oracle SFT (step, train, held-out): {[(k, round(a, 2), round(b, 2)) for k, a, b in hist]}', '15.2')
        d_sft = self._describe(sft_model, 'oracle SFT', '15.2', by_family=True)
        by_family = d_sft.pop('held_by_family')  # from the held-out episodes describe sampled: no extra draw
        return {'weak': d_weak, 'oracle_sft': d_sft, 'hist_sft': hist, 'weak_losses': weak_losses,
                'sft_losses': sft_losses, 'heldout_by_family': by_family}

    # --- 15.3 rejection sampling and expert iteration
    def s15_3(self):
        s, tok, weak = self.seed, self.tok, self._model('weak')

        def flat_grad(loss, model):
            return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)])

        rate, sample = pass_rate(weak, self.train, tok, self.cfg.eval_samples, seed=7 + s)
        kept = [t for t in sample if t.reward == 1.0]
        gap = cosine = scale = None
        if kept:
            b_all, b_kept = collate(sample, tok.pad_id), collate(kept, tok.pad_id)
            logp = sequence_log_probs(weak, b_all['ids'], b_all['lengths'])  # [B, T-1]
            mask, rewards = b_all['action_mask'], b_all['rewards'][:, None]  # [B, T-1], [B, 1]
            g_pg = flat_grad(-(rewards * logp * mask).sum() / mask.sum(), weak)
            g_rft = flat_grad(sft_loss(weak, b_kept), weak)
            scale = (b_kept['action_mask'].sum() / mask.sum()).item()
            gap = (g_pg - scale * g_rft).abs().max().item()
            self._say(f'kept {len(kept)} of {len(sample)} | token ratio {scale:.4f} | max |g_pg - ratio * g_rft| = {gap:.1e}', '15.3')
            g_base = flat_grad(-((rewards - rewards.mean()) * logp * mask).sum() / mask.sum(), weak)
            cosine = F.cosine_similarity(g_base, g_rft, 0).item()
            self._say(f'cosine(baseline PG, RFT) = {cosine:.3f}', '15.3')
        else:
            self._say(f'kept 0 of {len(sample)}: no success to compare gradients on', '15.3')

        rft = copy.deepcopy(weak)
        hist_rft = [(0, *self.evaluate(weak))]
        rounds = []

        def after_round(model):
            hist_rft.append((self.cfg.rft_steps * len(hist_rft), *self.evaluate(model)))
            return {}

        c = self.cfg
        for row in expert_iteration(rft, self.train, tok, rounds=c.rft_rounds, n_samples=c.rft_samples, steps=c.rft_steps,
                                    sample_seed=100 + s, sft_seed=0 + s, lr=c.sft_lr, batch_size=c.sft_batch_size,
                                    temperature=c.sample_temperature, evaluate=after_round):
            rounds.append(row)
            k = row['round']
            self._say(f"round {k}: sample pass {row['rate']:.3f}, kept {len(row['kept']):>3}, tasks solved "
                      f"{len(row['solved']):>2}/{len(self.train)} -> train {hist_rft[k + 1][1]:.2f}, held-out {hist_rft[k + 1][2]:.2f}", '15.3')
        self._save('rft', rft)
        d_rft = self._describe(rft, 'after RFT', '15.3')
        never = sorted({t.name for t in self.train} - set(rounds[0]['solved']))
        self._say(f'tasks never solved by the weak base: {never}', '15.3')
        first = Counter(t.info['actions'][0] for t in rounds[0]['kept']).most_common(3)
        self._say(f'first action of kept episodes, round 0: {first}', '15.3')
        save_trajectories(self.out / 'episodes' / 'rft_round1_kept.json', rounds[1]['kept'])
        return {'kept_of_sample': [len(kept), len(sample)], 'token_ratio': scale, 'grad_gap': gap,
                'cosine': cosine, 'rounds': [{'rate': r['rate'], 'kept': len(r['kept']), 'solved': r['solved'],
                                              'first_actions': dict(r['first_actions'])} for r in rounds],
                'hist_rft': hist_rft, 'after_rft': d_rft, 'never_solved': never, 'first_kept': first}

    # --- 15.4 DPO for agent trajectories
    def _pairs(self):
        if 'pairs' not in self.data:
            _, sample = pass_rate(self._model('weak'), self.train, self.tok, self.cfg.rft_samples,
                                  temperature=self.cfg.sample_temperature, seed=300 + self.seed)
            self.data['pairs'] = make_pairs(sample, self.train, seed=0 + self.seed)
        return self.data['pairs']

    def _train_dpo(self, nll_weight):
        policy, monitor = copy.deepcopy(self._model('weak')), []

        def evaluate(model):
            n = self.cfg.eval_samples
            rate_train, trajs = pass_rate(model, self.train, self.tok, n, seed=self.seed)
            return {'train': rate_train, 'held': pass_rate(model, self.heldout, self.tok, n, seed=self.seed)[0],
                    'invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs)}

        if not self._pairs():
            return policy, [], monitor
        log = train_dpo(policy, self._pairs(), self.tok, steps=self.cfg.dpo_steps, beta=self.cfg.dpo_beta, lr=self.cfg.dpo_lr,
                        nll_weight=nll_weight,
                        every=self.cfg.dpo_every, evaluate=evaluate, monitor=monitor)
        return policy, log, monitor

    def s15_4(self):
        zero = torch.zeros(1)
        values = []
        for c, r in [(0.0, 0.0), (2.0, -2.0), (-2.0, 2.0)]:
            v = dpo_loss(torch.tensor([c]), torch.tensor([r]), zero, zero, beta=0.5).item()
            values.append(round(v, 4))
            self._say(f'chosen ratio {c:+.0f}, rejected ratio {r:+.0f}: loss {v:.4f}', '15.4')
        pairs = self._pairs()
        n_tasks = len({w.info['task'] for w, _ in pairs})
        self._say(f'pairs: {len(pairs)} | tasks with a pair: {n_tasks}', '15.4')
        policy, log, monitor = self._train_dpo(0.0)
        self._save('dpo', policy)
        for row in log:
            self._say(' | '.join(f'{k} {v:.2f}' if isinstance(v, float) else f'{k} {v}' for k, v in row.items()), '15.4')
        return {'loss_values': values, 'pairs': len(pairs), 'tasks_with_pair': n_tasks, 'log': log, 'monitor': monitor}

    # --- 15.5 four recipes from the same weak base
    def _rl(self, model, steps, start=0):
        """REINFORCE with the run's RL knobs, in place -> history of (step, train pass, held-out pass)."""
        c = self.cfg
        return train_rl(model, self.train, self.tok, steps, start=start, lr=c.rl_lr, seed=0 + self.seed, n_tasks=c.rl_tasks,
                        group=c.rl_group, every=c.rl_every, evaluate=self.evaluate, temperature=c.rl_temperature,
                        entropy_bonus=c.rl_entropy_bonus)

    def s15_5(self):
        s, tok = self.seed, self.tok
        hist_sft = [tuple(x) for x in self.results['15.2']['hist_sft']]
        c = self.cfg
        cold_rl = copy.deepcopy(self._model('sft_step20'))
        n_cold = c.cold_start_step // c.sft_every + 1  # SFT curve points up to the cold start
        hist_cold = hist_sft[:n_cold] + self._rl(cold_rl, c.rl_cold_steps, start=c.cold_start_step)[1:]
        self._save('sft_rl', cold_rl)
        rl_only = copy.deepcopy(self._model('weak'))
        hist_rl = self._rl(rl_only, c.rl_only_steps)
        self._save('rl_only', rl_only)
        hist_rft = [tuple(x) for x in self._after('15.3')['hist_rft']]  # read last: see parallel.DEPENDS
        recipes = {'SFT (oracle)': hist_sft, 'RFT': hist_rft, 'SFT -> RL': hist_cold, 'RL only': hist_rl}
        for name, hist in recipes.items():
            self._say(f'{name:<13}' + ' '.join(f'{k:>3}:{a:.2f}/{b:.2f}' for k, a, b in hist), '15.5')
        n_train, batch = len(self.train), c.rl_tasks * c.rl_group  # REINFORCE: tasks x group per step
        cost = {'SFT (oracle)': (n_train, 0), 'RFT': (0, c.rft_rounds * c.rft_samples * n_train),
                'SFT -> RL': (n_train, c.rl_cold_steps * batch), 'RL only': (0, c.rl_only_steps * batch)}
        self._say(f'{"recipe":<13}{"demos":>7}{"sampled":>9}{"train":>7}{"held":>6}', '15.5')
        for name, hist in recipes.items():
            self._say(f'{name:<13}{cost[name][0]:>7}{cost[name][1]:>9}{hist[-1][1]:>7.2f}{hist[-1][2]:>6.2f}', '15.5')
        # the final evaluation's train episodes again (same model, same seed): which road each RL policy took
        roads = {name: reads_first(pass_rate(m, self.train, tok, c.eval_samples, seed=s)[1])
                 for name, m in (('SFT -> RL', cold_rl), ('RL only', rl_only))}
        return {'curves': recipes, 'cost': {k: {'demos': d, 'sampled': n} for k, (d, n) in cost.items()},
                'reads_first': roads}

    # --- 15.6 design questions in practice
    def s15_6(self):
        s, tok = self.seed, self.tok
        probes = {}
        for label, name in [('weak base', 'weak'), ('SFT step 20', 'sft_step20'), ('SFT step 60', 'sft_step60')]:
            rate, informative, ent = probe(self._model(name), self.heldout, tok, group=self.cfg.probe_group, seed=5 + s)
            probes[label] = {'held': rate, 'signal': informative, 'entropy': ent}
            self._say(f'{label:<12} held-out pass {rate:.2f} | groups with signal {informative:.2f} | action entropy {ent:.3f}', '15.6')

        mismatched = copy.deepcopy(self._model('weak'))
        c = self.cfg
        sft_train(mismatched, [strip_wrappers(t) for t in self.oracle_demos], tok, steps=c.mismatch_steps, lr=c.sft_lr,
                  batch_size=c.sft_batch_size, seed=0 + s)
        self._save('mismatched', mismatched)
        demo_text = tok.decode(strip_wrappers(self.oracle_demos[0]).ids[7:16].tolist())
        self._say(f'demo text: {demo_text}', '15.6')
        with torch.no_grad():
            nll = sft_loss(mismatched, self.demo_batch).item()
        self._say(f'NLL on correctly rendered demos: {nll:.3f}', '15.6')
        d_mis = self._describe(mismatched, 'mismatched', '15.6')

        policy, nll_log, nll_monitor = self._train_dpo(1.0)
        self._save('dpo_nll', policy)

        hacker, hack_log = copy.deepcopy(self._model('weak')), []

        def after_round(model):
            _, trajs = pass_rate(model, self.train, tok, self.cfg.eval_samples, seed=s, reward='public')
            return {'public': sum(t.reward for t in trajs) / len(trajs),
                    'hidden': sum(t.info['hidden_pass'] and t.info['submitted'] for t in trajs) / len(trajs)}

        # trained before the lines that read 15.4's log and 15.3's kept episodes (see parallel.DEPENDS), printed after
        hack_rows = expert_iteration(hacker, self.train, tok, rounds=c.hack_rounds, n_samples=c.rft_samples,
                                     steps=c.rft_steps, sample_seed=200 + s, sft_seed=0 + s, reward='public', lr=c.sft_lr,
                                     batch_size=c.sft_batch_size, temperature=c.sample_temperature, evaluate=after_round)
        self._save('hacker', hacker)

        dpo_log = self._after('15.4')['log']
        for row in (dpo_log[-1:] + nll_log[-1:]) if dpo_log and nll_log else []:
            self._say(f"step {row['step']}: train {row['train']:.2f} | held {row['held']:.2f} | invalid/ep {row['invalid']:.2f}"
                      f" | d_chosen {row['d_chosen']:+.2f} | d_rejected {row['d_rejected']:+.2f}", '15.6')

        self._after('15.3')  # it wrote the kept episodes
        kept1 = load_trajectories(self.out / 'episodes' / 'rft_round1_kept.json')
        unique = dedup_by_actions(kept1)
        self._say(f'kept {len(kept1)} episodes, {len(unique)} distinct action sequences', '15.6')
        self._say(f'family share, raw:     {family_share(kept1, FAMILIES)}', '15.6')
        self._say(f'family share, deduped: {family_share(unique, FAMILIES)}', '15.6')

        for row in hack_rows:
            k = row['round']
            hack_log.append({'round': k + 1, 'kept': len(row['kept']), 'hacks': row['hacks'],
                             'public': row['public'], 'hidden': row['hidden']})
            self._say(f"round {k}: kept {len(row['kept'])} ({row['hacks']} fail hidden tests) -> public "
                      f"{row['public']:.2f}, hidden {row['hidden']:.2f}", '15.6')
        return {'probe': probes, 'mismatch': {'nll': nll, 'demo_text': demo_text, **d_mis},
                'dpo_vs_dpo_nll': dpo_log[-1:] + nll_log[-1:], 'dpo_nll_log': nll_log, 'dpo_nll_monitor': nll_monitor,
                'dedup': {'kept': len(kept1), 'distinct': len(unique), 'share_raw': family_share(kept1, FAMILIES),
                          'share_deduped': family_share(unique, FAMILIES)},
                'hacking': hack_log}

    # --- beyond the chapter: its exercises and a clipped trainer (issue 7)
    def beyond(self):
        """Exercises 3 and 4, online DPO, checkpoint selection, and a clipped group-PG trainer, each
        compared with the chapter's own recipe at the same budget, from the same checkpoints.

        Everything is trained first; the chapter's own figures (15.3-15.6) are read, and the lines printed, at
        the end (see ``parallel.DEPENDS``)."""
        s, tok, c = self.seed, self.tok, self.cfg
        weak = self._model('weak')

        def fam(model):
            n = c.eval_samples
            return {'train': pass_rate(model, self.train, tok, n, seed=s)[0],
                    'held': pass_rate(model, self.heldout, tok, n, seed=s)[0],
                    'family': family_pass(model, self.train, tok, n, seed=s)}

        # exercise 3: STaR rationalization vs plain expert iteration (15.3)
        star = {}
        for label, mask in [('STaR, forced op masked', True), ('STaR, forced op trained', False)]:
            model = copy.deepcopy(weak)
            hist = star_iteration(model, self.train, tok, rounds=c.rft_rounds, n_samples=c.rft_samples, steps=c.rft_steps,
                                  seed=100 + s, mask_forced=mask, lr=c.sft_lr, batch_size=c.sft_batch_size)
            star[label] = {**fam(model), 'rationalized': [h['n_rationalized'] for h in hist]}

        # exercise 4: RFT with a group baseline vs RFT (15.3)
        model = copy.deepcopy(weak)
        hist_b = [(0, *self.evaluate(weak))]

        def after(m):
            hist_b.append((c.rft_steps * len(hist_b), *self.evaluate(m)))
            return {}

        rft_baseline_iteration(model, self.train, tok, rounds=c.rft_rounds, n_samples=c.rft_samples, steps=c.rft_steps,
                               sample_seed=100 + s, sft_seed=0 + s, lr=c.sft_lr, batch_size=c.sft_batch_size, evaluate=after)

        # online / iterative DPO vs offline DPO (15.4, 15.6), and the loss choice
        def evaluate_dpo(m):
            rate_train, trajs = pass_rate(m, self.train, tok, c.eval_samples, seed=s)
            return {'train': rate_train, 'held': pass_rate(m, self.heldout, tok, c.eval_samples, seed=s)[0],
                    'eval_invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs)}

        dpo_new = {}
        for label, nll in [('online DPO', 0.0), ('online DPO + NLL', 1.0)]:
            model = copy.deepcopy(weak)
            dpo_new[label] = train_online_dpo(model, self.train, tok, steps=c.dpo_steps, regen_every=max(c.dpo_steps // 4, 1),
                                              n_samples=c.rft_samples, beta=c.dpo_beta, lr=c.dpo_lr, nll_weight=nll,
                                              seed=300 + s, evaluate=evaluate_dpo, every=c.dpo_every)
        for loss in ['ipo', 'hinge']:
            model, pairs = copy.deepcopy(weak), self._pairs()
            dpo_new[f'offline {loss.upper() if loss == "ipo" else loss}'] = train_dpo(
                model, pairs, tok, steps=c.dpo_steps, beta=c.dpo_beta, lr=c.dpo_lr, loss=loss, every=c.dpo_every,
                evaluate=evaluate_dpo) if pairs else []
        for rows_ in dpo_new.values():  # one name for the invalid calls the policy makes in evaluation
            for r in rows_:
                if 'eval_invalid' in r:
                    r['invalid'] = r.pop('eval_invalid')

        # SFT checkpoint chosen by the informative-group fraction vs the last checkpoint, then RL (15.6)
        sel = select_sft_checkpoint(copy.deepcopy(weak), self.oracle_demos, tok, self.heldout, steps=c.sft_steps,
                                    every=c.sft_every, group=c.probe_group, seed=0 + s, lr=c.sft_lr,
                                    batch_size=c.sft_batch_size)
        rl = {}
        for label, start in [(f'chosen (step {sel.step})', sel.best), (f'last (step {c.sft_steps})', sel.last)]:
            model = copy.deepcopy(start)
            rl[label] = self._rl(model, c.rl_cold_steps)

        # a clipped group-policy-gradient trainer vs REINFORCE (15.5), same episodes per step
        grpo = {}
        for label, name, steps, start in [('SFT -> GRPO', 'sft_step20', c.rl_cold_steps, c.cold_start_step),
                                          ('GRPO only', 'weak', c.rl_only_steps, 0)]:
            model = copy.deepcopy(self._model(name))
            knobs = GRPOConfig(n_tasks=c.rl_tasks, group=c.rl_group, lr=c.rl_lr, temperature=c.rl_temperature,
                               ent_coef=c.rl_entropy_bonus, seed=0 + s)  # the same samples and knobs as REINFORCE
            hist, logs = train_grpo(model, self.train, tok, steps, knobs, evaluate=self.evaluate, every=c.rl_every,
                                    start=start)
            grpo[label] = {'hist': hist, 'logs': logs}

        # the chapter's figures, now that every other section has finished
        r15 = {k: self._after(k) for k in ('15.3', '15.4', '15.5', '15.6')}
        out = {}
        rows = {'RFT (15.3)': fam(self._model('rft')), **star}
        out['star'] = rows
        self._say('STaR vs expert iteration, train pass per family: ' + ' | '.join(
            f"{k}: " + ' '.join(f"{f} {v:.2f}" for f, v in r['family'].items()) for k, r in rows.items()), 'beyond')

        hist_rft = r15['15.3']['hist_rft']
        out['rft_baseline'] = {'RFT': hist_rft, 'RFT + group baseline': hist_b}
        self._say(f"RFT final train/held {hist_rft[-1][1]:.2f}/{hist_rft[-1][2]:.2f}"
                  f" | RFT + group baseline {hist_b[-1][1]:.2f}/{hist_b[-1][2]:.2f}", 'beyond')

        dpo = {'offline DPO': r15['15.4']['log'], 'offline DPO + NLL': r15['15.6']['dpo_nll_log'], **dpo_new}
        out['dpo'] = dpo
        self._say('at the last DPO step, invalid/ep and held-out: ' + ' | '.join(
            f"{k} {r[-1]['invalid']:.2f}, {r[-1]['held']:.2f}" for k, r in dpo.items() if r), 'beyond')

        out['select'] = {'step': sel.step, 'table': sel.table, 'rl': rl}
        self._say(f'checkpoint chosen by informative groups: step {sel.step}; RL from it vs from the last: ' + ' | '.join(
            f'{k} {h[-1][1]:.2f}/{h[-1][2]:.2f}' for k, h in rl.items()), 'beyond')

        out['grpo'] = grpo
        curves = r15['15.5']['curves']
        self._say(f"SFT -> RL {curves['SFT -> RL'][-1][1]:.2f}/{curves['SFT -> RL'][-1][2]:.2f} vs SFT -> GRPO "
                  f"{grpo['SFT -> GRPO']['hist'][-1][1]:.2f}/{grpo['SFT -> GRPO']['hist'][-1][2]:.2f} | RL only "
                  f"{curves['RL only'][-1][1]:.2f}/{curves['RL only'][-1][2]:.2f} vs GRPO only "
                  f"{grpo['GRPO only']['hist'][-1][1]:.2f}/{grpo['GRPO only']['hist'][-1][2]:.2f}", 'beyond')
        return out
