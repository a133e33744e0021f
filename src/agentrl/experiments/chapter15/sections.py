"""The chapter's sections 15.1 to 15.6, as the methods of ``Sections``, a mixin of ``Reproduction``.

Each ``s15_N`` runs its section's protocol through the library's recipes, with the chapter's seeds
shifted by ``self.seed``, prints the chapter's lines (``self._say``), checkpoints the models later
sections need (``self._save``) and returns its figures (stored in ``results.json`` under its key).
The helpers they use (``evaluate``, ``_describe``, ``_model``, ``_after``, ...) are
``Reproduction``'s (``reproduction.py``). A section reads another section's results only at its
end, through ``_after``, and declares which it reads with ``@reads`` above its method: ``--jobs``
schedules by those declarations, so a section can start before the sections it reads.
"""
from __future__ import annotations

import copy
from collections import Counter

import torch
import torch.nn.functional as F

from ...loggers import MemoryLogger
from ...policies.scoring import sequence_log_probs
from ...recipes.diagnostics import probe_episodes, reads_first, strip_wrappers
from ...recipes.dpo import dpo_loss, make_pairs, train_dpo
from ...recipes.reinforce import train_rl
from ...recipes.outcomes import is_success, success_rate, zero_one
from ...recipes.rejection import dedup_by_actions, expert_iteration, family_share, keep_successes
from ...recipes.sft import sft_loss, sft_train
from ...rendering.trajectory import OWNER, collate
from ...rollouts.engine import scripted_rollout
from ...rendering.trajio import load_trajectories, save_trajectories
from .probes import probe_labels

GRAD_ROWS = 8
"""Episodes per chunk of 15.3's policy-gradient computation on a pretrained model (``Sections.s15_3``)."""
KEPT_ROUND1 = 'rft_round1_kept.json'
"""The episodes file (in ``episodes/``) of the episodes expert iteration's round 1 (its second) kept: 15.3 writes it,
15.6 deduplicates it. Rounds are numbered from 0, as the chapter prints them, wherever people read them (transcript,
report, figures, files)."""


def reads(*sections):
    """Declare the other sections whose results (or files) a section method reads, through ``_after``, at its end.

    Every section method carries one (``@reads()``: none). ``--jobs`` schedules the sections by them
    (``reproduction.dependencies``), and ``_after`` refuses a read its section does not declare, so a declaration
    cannot drift from the reads it stands for."""
    def declare(method):
        method.reads = tuple(sections)
        return method
    return declare


class Sections:
    """Sections 15.1-15.6 (``s15_1`` ... ``s15_6``) and the recipe helpers they share (``_pairs``, ``_train_dpo``, ``_rl``)."""

    # --- 15.1 trajectory SFT and the action mask
    @reads()
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
                'log_vocab': float(torch.tensor(float(tok.vocab_size)).log()),
                **({'pretrained': self.policy} if self.pretrained else {})}  # its start is the pretrained model's

    # --- 15.2 warm start: format first, then skill
    @reads()
    def s15_2(self):
        s, tok = self.seed, self.tok
        weak_play = [scripted_rollout(self.env.player(kind, seed=k + s), self.env.make(), t, tok)
                     for kind in ['blind', 'random'] for k in range(4) for t in self.train]
        torch.manual_seed(0 + s)
        weak = self._new_model()
        c = self.cfg
        weak_losses = sft_train(weak, weak_play, tok, steps=c.weak_steps, lr=c.sft_lr, batch_size=c.sft_batch_size, seed=0 + s,
                                loggers=self.monitor_run('sft_train', 'weak_base'), **self.recipe_run('weak_base', 'weak base'))
        self._save('weak', weak)
        d_weak = self._describe(weak, 'weak base', '15.2')
        sft_model = copy.deepcopy(weak)
        hist = [(0, *self.evaluate(weak))]
        loggers = self.monitor_run('sft_train', 'oracle')

        def log_eval(step, train, held):  # the SFT curve beside the loss (sft_train's hook evaluates it)
            if loggers is not None:
                loggers.log({'eval/train': train, 'eval/held': held}, step)

        log_eval(*hist[0])

        def hook(step):
            hist.append((step, *self.evaluate(sft_model)))
            log_eval(*hist[-1])
            if step == self.cfg.cold_start_step:
                self._save('sft_step20', copy.deepcopy(sft_model))

        sft_losses = sft_train(sft_model, self.oracle_demos, tok, steps=c.sft_steps, lr=c.sft_lr, batch_size=c.sft_batch_size,
                               hook=hook, every=c.sft_every, seed=0 + s, loggers=loggers,
                               **self.recipe_run('oracle_sft', 'oracle SFT', hist=hist))
        self._save('sft_step60', sft_model)
        self._say(f'oracle SFT (step, train, held-out): {[(k, round(a, 2), round(b, 2)) for k, a, b in hist]}', '15.2')
        d_sft = self._describe(sft_model, 'oracle SFT', '15.2', by_group=True)
        by_group = d_sft.pop('held_by_group')  # from the held-out episodes describe sampled: no extra draw
        return {'weak': d_weak, 'oracle_sft': d_sft, 'hist_sft': hist, 'weak_losses': weak_losses,
                'sft_losses': sft_losses, 'heldout_by_family': by_group}

    # --- 15.3 rejection sampling and expert iteration
    @reads()
    def s15_3(self):
        s, tok, weak = self.seed, self.tok, self._model('weak')

        def flat_grad(loss, model):  # over the trained weights (a LoRA policy's adapters; the TinyAgent's every weight)
            trained = [p for p in model.parameters() if p.requires_grad]
            return torch.cat([g.flatten() for g in torch.autograd.grad(loss, trained, retain_graph=True)])

        rate, sample = self.pass_rate(weak, self.train, self.cfg.eval_samples, 7 + s)
        kept = keep_successes(sample)  # the filter: a return that reaches 1 (the chapter's reward 1)
        gap = cosine = scale = None
        if kept:
            b_all, b_kept = collate(sample, tok.pad_id), collate(kept, tok.pad_id)
            mask = b_all['action_mask']  # [B, T-1]
            # the 0/1 policy gradient weighs each episode by whether the filter keeps it (its reward, in the chapter)
            rewards = torch.tensor([float(is_success(t)) for t in sample])[:, None]  # [B, 1]
            # a pretrained model's graph over every episode at once does not fit in memory: its rows go by chunks,
            # and the gradient, a sum over rows, is summed over them (the TinyAgent's: one chunk, as the chapter)
            chunk = GRAD_ROWS if self.pretrained else len(sample)

            def pg_grad(weights):  # d/dw of -(weights * logp * mask).sum() / mask.sum(), weights [B, 1]
                parts = []
                for i in range(0, len(sample), chunk):
                    rows = slice(i, i + chunk)
                    logp = sequence_log_probs(weak, b_all['ids'][rows], b_all['lengths'][rows], mask=mask[rows])  # [b, T-1]
                    parts.append(flat_grad(-(weights[rows] * logp * mask[rows]).sum() / mask.sum(), weak))
                return parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)

            g_pg = pg_grad(rewards)
            g_rft = flat_grad(sft_loss(weak, b_kept), weak)
            scale = (b_kept['action_mask'].sum() / mask.sum()).item()
            gap = (g_pg - scale * g_rft).abs().max().item()
            self._say(f'kept {len(kept)} of {len(sample)} | token ratio {scale:.4f} | max |g_pg - ratio * g_rft| = {gap:.1e}', '15.3')
            g_base = pg_grad(rewards - rewards.mean())
            cosine = F.cosine_similarity(g_base, g_rft, 0).item()
            self._say(f'cosine(baseline PG, RFT) = {cosine:.3f}', '15.3')
        else:
            self._say(f'kept 0 of {len(sample)}: no success to compare gradients on', '15.3')

        rft = copy.deepcopy(weak)
        hist_rft = [(0, *self.evaluate(weak))]
        rounds = []

        def after_round(model):
            hist_rft.append((self.cfg.rft_steps * len(hist_rft), *self.evaluate(model)))
            return {'train': hist_rft[-1][1], 'held': hist_rft[-1][2]}  # logged as eval/train, eval/held

        c = self.cfg
        for row in expert_iteration(rft, self.train, tok, rounds=c.rft_rounds, n_samples=c.rft_samples, steps=c.rft_steps,
                                    sample_seed=100 + s, sft_seed=0 + s, lr=c.sft_lr, batch_size=c.sft_batch_size,
                                    temperature=c.sample_temperature, evaluate=after_round, env=self.env.env_id,
                                    loggers=self.monitor_run('expert_iteration', 'hidden'),
                                    **self.recipe_run('expert_iteration', hist_rft=hist_rft)):
            rounds.append(row)
            k = row['round']  # from 0, as the chapter prints them (and results.json's lists)
            self._say(f"round {k}: sample pass {self.round_pass(row):.3f}, kept {len(row['kept']):>3}, tasks solved "
                      f"{len(row['solved']):>2}/{len(self.train)} -> train {hist_rft[k + 1][1]:.2f}, held-out {hist_rft[k + 1][2]:.2f}", '15.3')
        self._save('rft', rft)
        d_rft = self._describe(rft, 'after RFT', '15.3')
        never = sorted({t.name for t in self.train} - set(rounds[0]['solved']))
        self._say(f'tasks never solved by the weak base: {never}', '15.3')
        first = Counter(t.info['actions'][0] for t in rounds[0]['kept']).most_common(3)
        self._say(f'first action of kept episodes, round 0: {first}', '15.3')
        save_trajectories(self.out / 'episodes' / KEPT_ROUND1, rounds[1]['kept'])
        return {'kept_of_sample': [len(kept), len(sample)], 'token_ratio': scale, 'grad_gap': gap,
                'cosine': cosine, 'rounds': [{'rate': self.round_pass(r), 'kept': len(r['kept']), 'solved': r['solved'],
                                              'first_actions': dict(r['first_actions'])} for r in rounds],
                'hist_rft': hist_rft, 'after_rft': d_rft, 'never_solved': never, 'first_kept': first}

    # --- 15.4 DPO for agent trajectories
    def _pairs(self):
        if 'pairs' not in self.data:
            _, sample = self.pass_rate(self._model('weak'), self.train, self.cfg.rft_samples, 300 + self.seed,
                                       temperature=self.cfg.sample_temperature)
            self.data['pairs'] = make_pairs(sample, self.train, seed=0 + self.seed, margin=self.cfg.dpo_margin)
        return self.data['pairs']

    def _train_dpo(self, nll_weight):
        policy, monitor = copy.deepcopy(self._model('weak')), []

        def evaluate(model):
            n = self.cfg.eval_samples
            rate_train, trajs = self.pass_rate(model, self.train, n, self.seed)
            return {'train': rate_train, 'held': self.pass_rate(model, self.heldout, n, self.seed)[0],
                    'invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs)}

        if not self._pairs():
            return policy, [], monitor
        log = train_dpo(policy, self._pairs(), self.tok, steps=self.cfg.dpo_steps, beta=self.cfg.dpo_beta, lr=self.cfg.dpo_lr,
                        nll_weight=nll_weight, batch_size=self.cfg.dpo_batch_size or None, seed=0 + self.seed,
                        every=self.cfg.dpo_every, evaluate=evaluate, monitor=monitor,
                        loggers=self.monitor_run('train_dpo', 'dpo_nll' if nll_weight else 'dpo'),
                        **self.recipe_run('dpo_nll' if nll_weight else 'dpo', 'DPO + NLL' if nll_weight else 'DPO'))
        return policy, log, monitor

    @reads()
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
    def _rl(self, model, steps, label, start=0, watched=None):
        """REINFORCE with the run's RL knobs, in place -> history of (step, train pass, held-out pass); its monitors
        go to the run ``train_rl/LABEL`` (``monitor_run``), and with a list ``watched`` each step's monitors are
        appended to it too, as ``(step, metrics)`` (``loggers.MemoryLogger``; saved with the recipe's state, so a resumed run keeps the steps before)."""
        c = self.cfg
        loggers = [x for x in (self.monitor_run('train_rl', label), None if watched is None else MemoryLogger(watched)) if x]
        extra = {} if watched is None else {'watched': watched}
        return train_rl(model, self.train, self.tok, steps, start=start, lr=c.rl_lr, seed=0 + self.seed, n_tasks=c.rl_tasks,
                        group=c.rl_group, every=c.rl_every, evaluate=self.evaluate, temperature=c.rl_temperature,
                        entropy_bonus=c.rl_entropy_bonus, env=self.env.env_id, micro_batch=c.rl_micro_batch or None,
                        loggers=loggers or None,
                        **self.recipe_run(label, {'sft_rl': 'SFT -> RL', 'rl_only': 'RL only'}.get(label), **extra))

    @reads('15.2', '15.3')
    def s15_5(self):
        s = self.seed
        hist_sft = [tuple(x) for x in self._after('15.2')['hist_sft']]
        c = self.cfg
        cold_rl = copy.deepcopy(self._model('sft_step20'))
        n_cold = c.cold_start_step // c.sft_every + 1  # SFT curve points up to the cold start
        hist_cold = hist_sft[:n_cold] + self._rl(cold_rl, c.rl_cold_steps, 'sft_rl', start=c.cold_start_step)[1:]
        self._save('sft_rl', cold_rl)
        rl_only = copy.deepcopy(self._model('weak'))
        hist_rl = self._rl(rl_only, c.rl_only_steps, 'rl_only')
        self._save('rl_only', rl_only)
        hist_rft = [tuple(x) for x in self._after('15.3')['hist_rft']]  # read last: the section may run beside 15.3
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
        roads = {name: reads_first(self.pass_rate(m, self.train, c.eval_samples, s)[1], env=self.env.env_id)
                 for name, m in (('SFT -> RL', cold_rl), ('RL only', rl_only))}
        return {'curves': recipes, 'cost': {k: {'demos': d, 'sampled': n} for k, (d, n) in cost.items()},
                'reads_first': roads}

    # --- 15.6 design questions in practice
    @reads('15.3', '15.4')
    def s15_6(self):
        s, tok = self.seed, self.tok
        probes, probe_log = {}, self.monitor_run('probe', 'sft_checkpoints')  # logged at each checkpoint's SFT step
        sft_step = {'weak': 0, 'sft_step20': self.cfg.cold_start_step, 'sft_step60': self.cfg.sft_steps}
        for label, name in probe_labels(self.cfg.cold_start_step, self.cfg.sft_steps):
            reward, informative, ent, trajs = probe_episodes(self._model(name), self.heldout, tok,
                                                             group=self.cfg.probe_group, seed=5 + s, env=self.env.env_id)
            rate = reward if zero_one(trajs) else success_rate(trajs)  # the pass: with partial credit, the wins
            probes[label] = {'held': rate, 'signal': informative, 'entropy': ent}
            if probe_log is not None:
                probe_log.log({'probe/reward': reward, 'probe/informative': informative, 'probe/entropy': ent},
                              sft_step[name])
            self._say(f'{label:<12} held-out pass {rate:.2f} | groups with signal {informative:.2f} | action entropy {ent:.3f}', '15.6')

        mismatched = copy.deepcopy(self._model('weak'))
        c = self.cfg
        sft_train(mismatched, [strip_wrappers(t) for t in self.oracle_demos], tok, steps=c.mismatch_steps, lr=c.sft_lr,
                  batch_size=c.sft_batch_size, seed=0 + s, loggers=self.monitor_run('sft_train', 'mismatched'),
                  **self.recipe_run('mismatched', 'SFT on the mismatched template'))
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
            public, trajs = self.pass_rate(model, self.train, self.cfg.eval_samples, s, reward='public')
            return {'public': public,  # the public check's pass (0/1 rewards: their mean, to the bit)
                    'hidden': sum(t.info['hidden_pass'] and t.info['submitted'] for t in trajs) / len(trajs)}

        # trained before the lines that read 15.4's log and 15.3's kept episodes (@reads above), printed after;
        # an environment with no public check has no filter to game (its claims do not apply)
        hack_rows = []
        if self.env.public_check():
            hack_rows = expert_iteration(hacker, self.train, tok, rounds=c.hack_rounds, n_samples=c.rft_samples,
                                         steps=c.rft_steps, sample_seed=200 + s, sft_seed=0 + s, reward='public',
                                         lr=c.sft_lr, batch_size=c.sft_batch_size, temperature=c.sample_temperature,
                                         evaluate=after_round, env=self.env.env_id,
                                         loggers=self.monitor_run('expert_iteration', 'public'),
                                         **self.recipe_run('public_filter', 'the public-test filter'))
            self._save('hacker', hacker)

        dpo_log = self._after('15.4')['log']
        for row in (dpo_log[-1:] + nll_log[-1:]) if dpo_log and nll_log else []:
            self._say(f"step {row['step']}: train {row['train']:.2f} | held {row['held']:.2f} | invalid/ep {row['invalid']:.2f}"
                      f" | d_chosen {row['d_chosen']:+.2f} | d_rejected {row['d_rejected']:+.2f}", '15.6')

        self._after('15.3')  # it wrote the kept episodes
        kept_file = self.out / 'episodes' / KEPT_ROUND1
        if not kept_file.exists():  # 15.3 finished by an earlier version, which numbered the rounds from 1
            kept_file = kept_file.with_name('rft_round2_kept.json')
        kept1 = load_trajectories(kept_file)
        unique = dedup_by_actions(kept1)
        self._say(f'kept {len(kept1)} episodes, {len(unique)} distinct action sequences', '15.6')
        self._say(f'family share, raw:     {family_share(kept1, self.groups)}', '15.6')
        self._say(f'family share, deduped: {family_share(unique, self.groups)}', '15.6')

        for row in hack_rows:
            k = row['round']
            hack_log.append({'round': k + 1, 'kept': len(row['kept']), 'hacks': row['hacks'],
                             'public': row['public'], 'hidden': row['hidden']})
            self._say(f"round {k}: kept {len(row['kept'])} ({row['hacks']} fail hidden tests) -> public "
                      f"{row['public']:.2f}, hidden {row['hidden']:.2f}", '15.6')
        return {'probe': probes, 'mismatch': {'nll': nll, 'demo_text': demo_text, **d_mis},
                'dpo_vs_dpo_nll': dpo_log[-1:] + nll_log[-1:], 'dpo_nll_log': nll_log, 'dpo_nll_monitor': nll_monitor,
                'dedup': {'kept': len(kept1), 'distinct': len(unique), 'share_raw': family_share(kept1, self.groups),
                          'share_deduped': family_share(unique, self.groups)},
                'hacking': hack_log}
