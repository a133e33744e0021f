"""Beyond the chapter (``reproduce --extended``): its exercises and a clipped trainer, as ``Beyond.beyond``.

A mixin of ``Reproduction``, like ``Sections`` (``sections.py``), whose helpers it reuses (``_rl``,
``_pairs``): each recipe is compared with the chapter's own at the same budget, from the same
checkpoints.
"""
from __future__ import annotations

import copy

from ...recipes.dpo import train_dpo
from ...recipes.evaluation import group_pass
from ...recipes.grpo import GRPOConfig, train_grpo
from ...recipes.online_dpo import train_online_dpo
from ...recipes.rft_baseline import rft_baseline_iteration
from ...recipes.select import select_sft_checkpoint
from ...recipes.star import star_iteration
from .sections import reads


class Beyond:
    """The ``beyond`` section: exercises 3 and 4, online DPO, checkpoint selection and a clipped group-PG trainer."""

    @reads('15.3', '15.4', '15.5', '15.6')
    def beyond(self):
        """Exercises 3 and 4, online DPO, checkpoint selection, and a clipped group-PG trainer, each
        compared with the chapter's own recipe at the same budget, from the same checkpoints.

        Everything is trained first; the chapter's own figures (15.3-15.6) are read, and the lines printed, at
        the end (``@reads``)."""
        s, tok, c, env = self.seed, self.tok, self.cfg, self.env.env_id
        weak = self._model('weak')

        def fam(model):
            n = c.eval_samples
            return {'train': self.pass_rate(model, self.train, n, s)[0],
                    'held': self.pass_rate(model, self.heldout, n, s)[0],
                    'family': group_pass(model, self.train, tok, n, seed=s, env=env)}

        # each part is kept as it finishes (``finished_part``): a run killed in a later one resumes there
        # exercise 3: STaR rationalization vs plain expert iteration (15.3)
        def star_part():
            star = {}
            for label, mask, run in [('STaR, forced op masked', True, 'forced_masked'),
                                     ('STaR, forced op trained', False, 'forced_trained')]:
                model = copy.deepcopy(weak)
                hist = star_iteration(model, self.train, tok, rounds=c.rft_rounds, n_samples=c.rft_samples,
                                      steps=c.rft_steps, seed=100 + s, mask_forced=mask, lr=c.sft_lr,
                                      batch_size=c.sft_batch_size, env=env, loggers=self.monitor_run('star_iteration', run))
                star[label] = {**fam(model), 'rationalized': [h['n_rationalized'] for h in hist]}
            return star

        star = self.finished_part('star', star_part)

        # exercise 4: RFT with a group baseline vs RFT (15.3)
        def rft_baseline_part():
            model = copy.deepcopy(weak)
            hist_b = [(0, *self.evaluate(weak))]

            def after(m):
                hist_b.append((c.rft_steps * len(hist_b), *self.evaluate(m)))
                return {'train': hist_b[-1][1], 'held': hist_b[-1][2]}  # logged as eval/train, eval/held

            rft_baseline_iteration(model, self.train, tok, rounds=c.rft_rounds, n_samples=c.rft_samples,
                                   steps=c.rft_steps, sample_seed=100 + s, sft_seed=0 + s, lr=c.sft_lr,
                                   batch_size=c.sft_batch_size, evaluate=after, env=env,
                                   loggers=self.monitor_run('rft_baseline_iteration', 'group_baseline'))
            return {'hist': hist_b}

        hist_b = self.finished_part('rft_baseline', rft_baseline_part)['hist']

        # online / iterative DPO vs offline DPO (15.4, 15.6), and the loss choice
        def evaluate_dpo(m):
            rate_train, trajs = self.pass_rate(m, self.train, c.eval_samples, s)
            return {'train': rate_train, 'held': self.pass_rate(m, self.heldout, c.eval_samples, s)[0],
                    'eval_invalid': sum(t.info['n_invalid'] for t in trajs) / len(trajs)}

        def dpo_part():
            dpo_new = {}
            for label, nll, run in [('online DPO', 0.0, 'online'), ('online DPO + NLL', 1.0, 'online_nll')]:
                model = copy.deepcopy(weak)
                dpo_new[label] = train_online_dpo(model, self.train, tok, steps=c.dpo_steps,
                                                  regen_every=max(c.dpo_steps // 4, 1), n_samples=c.rft_samples,
                                                  beta=c.dpo_beta, lr=c.dpo_lr, nll_weight=nll, seed=300 + s,
                                                  evaluate=evaluate_dpo, every=c.dpo_every, env=env, margin=c.dpo_margin,
                                                  loggers=self.monitor_run('train_online_dpo', run))
            for loss in ['ipo', 'hinge']:
                model, pairs = copy.deepcopy(weak), self._pairs()
                dpo_new[f'offline {loss.upper() if loss == "ipo" else loss}'] = train_dpo(
                    model, pairs, tok, steps=c.dpo_steps, beta=c.dpo_beta, lr=c.dpo_lr, loss=loss, every=c.dpo_every,
                    evaluate=evaluate_dpo, loggers=self.monitor_run('train_dpo', loss),
                    **self.recipe_run(f'dpo_{loss}', f'offline {loss}')) if pairs else []
            for rows_ in dpo_new.values():  # one name for the invalid calls the policy makes in evaluation
                for r in rows_:
                    if 'eval_invalid' in r:
                        r['invalid'] = r.pop('eval_invalid')
            return dpo_new

        dpo_new = self.finished_part('dpo', dpo_part)

        # SFT checkpoint chosen by the informative-group fraction vs the last checkpoint, then RL (15.6)
        def select_part():
            sel = select_sft_checkpoint(copy.deepcopy(weak), self.oracle_demos, tok, self.heldout, steps=c.sft_steps,
                                        every=c.sft_every, group=c.probe_group, seed=0 + s, lr=c.sft_lr,
                                        batch_size=c.sft_batch_size, env=env,
                                        loggers=self.monitor_run('select_sft_checkpoint', 'probe'))
            rl = {}
            for label, start, run in [(f'chosen (step {sel.step})', sel.best, 'from_chosen'),
                                      (f'last (step {c.sft_steps})', sel.last, 'from_last')]:
                model = copy.deepcopy(start)
                rl[label] = self._rl(model, c.rl_cold_steps, run)
            return {'step': sel.step, 'table': sel.table, 'rl': rl}

        select = self.finished_part('select', select_part)

        # a clipped group-policy-gradient trainer vs REINFORCE (15.5), same episodes per step
        grpo = {}
        for label, name, steps, start, run in [('SFT -> GRPO', 'sft_step20', c.rl_cold_steps, c.cold_start_step, 'sft_grpo'),
                                               ('GRPO only', 'weak', c.rl_only_steps, 0, 'grpo_only')]:
            model = copy.deepcopy(self._model(name))
            knobs = GRPOConfig(n_tasks=c.rl_tasks, group=c.rl_group, lr=c.rl_lr, temperature=c.rl_temperature,
                               ent_coef=c.rl_entropy_bonus, seed=0 + s)  # the same samples and knobs as REINFORCE
            hist, logs = train_grpo(model, self.train, tok, steps, knobs, evaluate=self.evaluate, every=c.rl_every,
                                    start=start, env=env, loggers=self.monitor_run('train_grpo', run),
                                    **self.recipe_run(run, label))
            grpo[label] = {'hist': hist, 'logs': logs}

        # the chapter's figures, now that every other section has finished
        r15 = {k: self._after(k) for k in ('15.3', '15.4', '15.5', '15.6')}
        solved = set().union(*(r['solved'] for r in r15['15.3']['rounds']))
        out = {'uncovered': [g for g in self.groups  # groups of which expert iteration solved no train task (BugFix: init)
                             if not any(t.name in solved for t in self.train if t.group == g)]}
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

        out['select'] = select
        self._say(f"checkpoint chosen by informative groups: step {select['step']}; RL from it vs from the last: "
                  + ' | '.join(f'{k} {h[-1][1]:.2f}/{h[-1][2]:.2f}' for k, h in select['rl'].items()), 'beyond')

        out['grpo'] = grpo
        curves = r15['15.5']['curves']
        self._say(f"SFT -> RL {curves['SFT -> RL'][-1][1]:.2f}/{curves['SFT -> RL'][-1][2]:.2f} vs SFT -> GRPO "
                  f"{grpo['SFT -> GRPO']['hist'][-1][1]:.2f}/{grpo['SFT -> GRPO']['hist'][-1][2]:.2f} | RL only "
                  f"{curves['RL only'][-1][1]:.2f}/{curves['RL only'][-1][2]:.2f} vs GRPO only "
                  f"{grpo['GRPO only']['hist'][-1][1]:.2f}/{grpo['GRPO only']['hist'][-1][2]:.2f}", 'beyond')
        return out
