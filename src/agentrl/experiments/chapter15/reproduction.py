"""Chapter 15 end to end in one process: sections 15.1 to 15.6 from one weak base (``Reproduction``).

Each section runs the chapter's own protocol through the library's recipes, with the chapter's
seeds shifted by ``seed`` (``seed=0`` is the chapter's code exactly), and

- prints the lines the chapter's code prints (collected in ``transcript.txt``),
- stores its figures in ``results.json`` under its section key, written atomically when the
  section ends (timing lives apart, in ``timing.json``),
- checkpoints the models later sections need, as safetensors with config and vocabulary.

This module is the run driver: the run folder, resume, the helpers the sections share, writing a
finished section and the transcript. The sections themselves are ``sections.py`` (15.1-15.6) and
``extended.py`` (``--extended``); ``chapter.py``'s ``Chapter15`` adds ``--jobs`` on top.

Budgets, recipe hyperparameters and model settings come from ``Ch15Config`` (``config.py``; the
chapter's own by default); ``results.json`` records the effective config (``config``) and where the
run ran (``provenance``: the overrides, version, commit, torch, threads, CPU).

A killed run continues with ``resume=True``: finished sections are loaded, not rerun, and a section
killed inside a recipe continues from the recipe's last saved step (``recipes.loop``: every
``checkpoint_every`` steps each recipe run saves its state in ``partial/SECTION/``, and says
``resuming RECIPE at step N of M`` in the transcript when it picks up from there). The final results
equal an uninterrupted run's, because every random draw comes from a seeded generator or a saved
stream and models are reloaded bit for bit. Resuming with another seed or config is refused, naming
the keys that differ. While a recipe runs, ``progress/SECTION.json`` holds its step, its total and the
time it has taken (what ``agentrl reproduce`` shows under its progress bar).

One run per folder: constructing a ``Reproduction`` checks and reads but writes nothing; ``run()``
first takes the folder (``session``: the lock of ``experiments/lock.py``), so a second run on a
folder in use is refused at once, naming the PID that holds it, before it can touch the first's files.
"""
from __future__ import annotations

import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from ...policies.checkpoint import load_model, save_checkpoint
from ...loggers import open_run, run_dir, tensorboard_available
from ...policies.tinyagent import TinyAgent
from ...recipes.diagnostics import describe
from ...recipes.evaluation import pass_rate
from ...recipes.outcomes import success_rate
from ...rendering.trajectory import collate
from ...rollouts.engine import scripted_rollout
from ...rendering.trajio import save_trajectories
from .extended import Beyond
from ..lock import FolderLock
from ..run_folder import peek, read_json, write_json
from .config import Ch15Config
from .settings import describe_differences, effective, resume_differences
from .env_registry import DEFAULT, get_env
from .provenance import collect as collect_provenance
from .real_model import check_policy, is_pretrained, load_policy
from .rl_section import RLSection
from .sections import Sections

SECTIONS = ('15.1', '15.2', '15.3', '15.4', '15.5', '15.6')
POLICIES = {'weak': 'weak base', 'sft_step20': 'oracle SFT, step 20', 'sft_step60': 'oracle SFT, step 60',
            'rft': 'RFT (expert iteration)', 'dpo': 'DPO', 'dpo_nll': 'DPO + NLL', 'sft_rl': 'SFT -> RL',
            'rl_only': 'RL only', 'mismatched': 'SFT on mismatched template', 'hacker': 'public-test filter'}
"""Every policy a run checkpoints, with the label the report uses."""
EXTENDED = ('beyond',)
RL_SECTIONS = ('15.2', 'rl')
"""What ``agentrl sweep --rl`` runs: 15.2's checkpoints, then one RL recipe from one of them (``rl_section.py``)."""
PARTIAL, PROGRESS = 'partial', 'progress'
"""The run folder's subfolders of running recipes' saved states and of their progress (``Reproduction.recipe_run``)."""
PROGRESS_EVERY = 0.5
"""Seconds between two writes of a recipe's progress file."""
METHODS = {'15.1': 's15_1', '15.2': 's15_2', '15.3': 's15_3', '15.4': 's15_4', '15.5': 's15_5', '15.6': 's15_6',
           'beyond': 'beyond', 'rl': 's_rl'}
"""Each section's method (``Sections``, ``Beyond``, ``RLSection``); each declares the sections it reads with ``@reads``."""
TITLES = {'15.1': 'trajectory SFT and the action mask', '15.2': 'warm start: format first, then skill',
          '15.3': 'rejection sampling and expert iteration', '15.4': 'DPO for agent trajectories',
          '15.5': 'four recipes from the same weak base', '15.6': 'design questions in practice',
          'beyond': 'beyond the chapter: exercises and a clipped trainer',
          'rl': 'one RL recipe from one checkpoint (sweep --rl)'}


def dependencies(cls, sections) -> dict:
    """Section -> the sections whose results it reads, from its method's ``@reads`` (``sections.reads``).

    ValueError naming a section that has no method in ``METHODS`` or whose method declares nothing, at once, before
    any work: ``--jobs`` could not schedule it, and a read it made would wait for a section nobody runs."""
    out = {}
    for section in sections:
        name = METHODS.get(section)
        if name is None:
            raise ValueError(f'unknown section {section!r}; valid sections are {list(METHODS)}')
        declared = getattr(getattr(cls, name), 'reads', None)
        if declared is None:
            raise ValueError(f'section {section} ({cls.__name__}.{name}) declares no reads: put @reads(...) above it, '
                             'naming the sections whose results it reads (@reads() for none)')
        unknown = [d for d in declared if d not in METHODS]
        if unknown:
            raise ValueError(f'section {section} declares reads of unknown sections {unknown}; valid sections are '
                             f'{list(METHODS)}')
        out[section] = declared
    return out


def check_seed(seed) -> None:
    """A seed shift is an int (not a bool): TypeError otherwise."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f'seed must be an int, got {type(seed).__name__}')


class Reproduction(Sections, Beyond, RLSection):
    """One reproduction of chapter 15 in ``out``, every section in this process; ``run()`` executes (or resumes) each."""

    def __init__(self, out, seed: int = 0, resume: bool = False, log=print, progress=None, config: Ch15Config | None = None,
                 extended: bool = False, overrides: dict | None = None, policy: str = 'tiny', env: str = DEFAULT,
                 logdir=None, rl: bool = False):
        """``overrides``: the keys the user set (``--set``, ``--config``), recorded in the provenance; ``config`` is
        what they resolved to (default: the chapter's budgets with ``env``'s own). Checks every setting before any
        work: a bad one raises ValueError naming it. ``policy``: the architecture, ``'tiny'`` (the TinyAgent) or
        ``'gpt2'`` / ``'llama'`` (see ``_new_model``), or a pretrained model (``'smollm2'``, a model folder or a
        ``.gguf`` file; ``real_model.py``). ``env``: the environment, by its ``--env`` name (``envs.py``).
        ``logdir``: where every recipe run writes its monitors (``--logdir``; ``monitor_run``), or None for no logging.
        ``rl``: run only ``RL_SECTIONS`` (15.2, then the RL recipe ``rl_variant`` from ``rl_start``; ``agentrl sweep
        --rl``) instead of the chapter. Writes nothing: ``run()`` takes the folder (``session``)."""
        check_seed(seed)
        self.env = get_env(env)
        """The environment (``envs.ChapterEnv``); ``self.env.env_id`` is what every recipe is given as ``env=``."""
        check_policy(policy)
        self.policy = str(policy)
        self.pretrained = is_pretrained(self.policy)
        """Whether the policy is a pretrained language model (``real_model.py``), not one built from scratch."""
        self.out, self.seed, self.log, self.progress, self.resume = Path(out), seed, log, progress, resume
        self.cfg = config or Ch15Config.for_env(self.env, self.policy)
        if rl and extended:
            raise ValueError('rl runs 15.2 and one RL recipe, not the chapter: it cannot be extended too')
        self.sections = RL_SECTIONS if rl else SECTIONS + (EXTENDED if extended else ())
        self.depends = dependencies(type(self), self.sections)
        """Section -> the sections it reads (its method's ``@reads``), for ``--jobs`` and for ``_after``."""
        self.running = None
        """The section ``run_section`` is running (``_after`` checks its reads against ``depends``)."""
        self.wait_for = None
        """In a worker (``parallel.run_section``): section -> its results, once another worker has finished it."""
        self.ckpt = self.out / 'checkpoints'
        self.partial = self.out / PARTIAL
        """Where running recipes keep their state (``recipe_run``), a folder per section, deleted when it finishes."""
        self.logdir = None if logdir is None else Path(logdir)
        """The log folder of the recipes' monitors (``monitor_run``), or None."""
        self._runs, self._checkpoints = [], []  # the running section's monitor runs and recipe runs' checkpoints
        self.models, self.data = {}, {}
        self._lock, self._cleared = None, False
        self._load_environment()
        self.config_record = effective(self.cfg, self.tok.vocab_size, self.env, self.policy)  # checks the model settings too
        """The effective config: every key of ``Ch15Config`` and the full model config (``results.json['config']``)."""
        self.provenance = {**collect_provenance(overrides), **self.spread(),
                           **({'logdir': str(self.logdir.resolve())} if self.logdir is not None else {})}
        self.results, self.timing, self.lines = {}, {}, {}
        if resume and (self.out / 'results.json').exists():
            self._load_saved()
        self._record_setup()
        self._play_demos()

    def _load_environment(self):
        """The environment's tasks, tokenizer and groups (what the settings are checked against)."""
        self.tasks = self.env.tasks('all')
        self.base = None
        """A pretrained policy as loaded (its tokenizer renders the episodes), or None."""
        if self.pretrained:
            self.base = load_policy(self.policy, 0, self.seed, self.cfg.dtype, self.cfg.device)
            self.tok = self.base.renderer()  # its own tokenizer and chat template; the environment's calls described
        else:
            self.tok = self.env.tokenizer()
        self.train, self.heldout = self.env.tasks('train'), self.env.tasks('heldout')
        self.groups = self.env.groups()

    def _play_demos(self):
        """The oracle's demo of every train task, and their batch (what 15.1, 15.2 and 15.6 train or score on)."""
        self.oracle_demos = [scripted_rollout(self.env.player('oracle'), self.env.make(), t, self.tok) for t in self.train]
        self.demo_batch = collate(self.oracle_demos, self.tok.pad_id)

    def _load_saved(self):
        """The finished sections of the run in ``out`` (for ``resume``): refused when written on another environment,
        seed, policy or config (naming what differs); an earlier process's provenance is kept under ``earlier``."""
        path = self.out / 'results.json'
        saved = read_json(path, kind='reproduce')
        if saved.get('env', DEFAULT) != self.env.name:
            raise ValueError(f"{path} was written on another environment ({saved.get('env', DEFAULT)}, now "
                             f'{self.env.name}); resume with the same --env or use another --out')
        if saved.get('seed') != self.seed:
            raise ValueError(f'{path} was written with another seed (seed {saved.get("seed")}, now {self.seed}); '
                             'resume with the same settings or use another --out')
        if saved['sections'].get('setup', {}).get('policy', 'tiny') != self.policy:
            raise ValueError(f'{path} was written with another --policy; resume with the same one')
        diffs = resume_differences(saved.get('config'), self.config_record)
        if diffs:
            raise ValueError(f'{path} was written with another config: {describe_differences(diffs)}; '
                             'resume with the same settings or use another --out')
        self.results, self.lines = saved['sections'], saved['transcript']
        self.timing = peek(self.out / 'timing.json') or {}
        before = saved.get('provenance')
        if before:  # a resume by another process (other threads, commit, ...) keeps the earlier record
            earlier = before.pop('earlier', [])
            if before != self.provenance:
                self.provenance = {**self.provenance, 'earlier': earlier + [before]}
            elif earlier:
                self.provenance = {**self.provenance, 'earlier': earlier}

    def _record_setup(self):
        """The ``setup`` entry: its transcript line (echoed when the run starts) and, unless resumed, its results."""
        self.lines['setup'] = [f'vocab: {self.tok.vocab_size} | train tasks: {len(self.train)} | held-out tasks: '
                               f'{len(self.heldout)}']
        self.results.setdefault('setup', {'vocab': self.tok.vocab_size, 'train_tasks': len(self.train),
                                          'heldout_tasks': len(self.heldout), 'seed_shift': self.seed})
        if self.policy != 'tiny':
            self.results['setup']['policy'] = self.policy
        if self.pretrained:
            lora = f'LoRA rank {self.cfg.lora_rank}' if self.cfg.lora_rank else 'every weight trains'
            self.lines['setup'].append(f'policy: {self.policy}, {self.base.arch}, '
                                       f'{sum(p.numel() for p in self.base.parameters()) / 1e6:.1f} M parameters, '
                                       f'{lora}, {self.base.precision}')
            self.results['setup']['precision'] = str(self.base.precision)

    @contextmanager
    def session(self):
        """Hold the run folder while writing it: take its lock (``FolderInUse`` at once if another run holds it, naming
        the folder and that run's PID), and on a fresh run's first session delete what an older run left there.
        Re-entrant: ``agentrl reproduce`` holds it around ``run()`` and the report."""
        if self._lock is not None:
            yield self
            return
        self._lock = FolderLock(self.out).acquire()
        try:
            if not self.resume and not self._cleared:  # nothing of an older run in this folder may survive into it
                for stale in ('results.json', 'timing.json', 'transcript.txt'):
                    (self.out / stale).unlink(missing_ok=True)
                for folder in (self.out / 'episodes', self.ckpt):
                    for f in folder.glob('*') if folder.is_dir() else []:
                        f.unlink()
                for folder in (self.partial, self.out / PROGRESS):
                    shutil.rmtree(folder, ignore_errors=True)
                self._cleared = True
            yield self
        finally:
            self._lock.release()
            self._lock = None

    # --- helpers
    def _new_model(self):
        """A fresh policy (seed torch first): the TinyAgent, or for ``policy='gpt2'`` / ``'llama'`` a randomly
        initialised ``transformers`` model of the TinyAgent's width, depth and heads on the same vocabulary, or the
        pretrained model with fresh LoRA adapters drawn from the run's seed (``real_model.load_policy``)."""
        if self.pretrained:
            return load_policy(self.policy, self.cfg.lora_rank, self.seed, self.cfg.dtype, self.cfg.device)
        if self.policy == 'tiny':
            return TinyAgent(self.tok.vocab_size, **self.cfg.model)
        from ...policies.hf import make_policy
        m = self.config_record['model']
        return make_policy(self.policy, self.tok, d_model=m['d_model'], n_layers=m['n_layers'], n_heads=m['n_heads'])

    def _say(self, line: str, section: str):
        self.lines.setdefault(section, []).append(line)
        self.log(line)

    def pass_rate(self, model, tasks, n, seed, **kw):
        """``recipes.pass_rate``'s episodes in this run's environment -> (the share that succeed, the episodes).

        The chapter's pass is a success (a return that reaches 1, ``recipes.outcomes.success_rate``): with 0/1
        rewards it equals ``recipes.pass_rate``'s mean return, and in a game that pays partial credit for a
        near miss (``--env guess``) it counts the wins only."""
        _, trajs = pass_rate(model, tasks, self.tok, n, seed=seed, env=self.env.env_id, **kw)
        return success_rate(trajs), trajs

    def round_pass(self, row) -> float:
        """The sample pass of an expert-iteration round on the train tasks (its dict ``row``), the chapter's: the share
        of its ``rft_samples`` episodes per task that succeed, which its filter kept (the reproduction neither dedups
        nor caps). With 0/1 rewards it is the round's mean return, ``row['rate']``, to the bit; in a game that pays
        partial credit it counts the wins only, as ``pass_rate`` above does."""
        return len(row['kept']) / (self.cfg.rft_samples * len(self.train))

    def evaluate(self, model):
        """The chapter's ``evaluate``: (train pass, held-out pass), 4 samples per task."""
        s, n = self.seed, self.cfg.eval_samples
        return self.pass_rate(model, self.train, n, s)[0], self.pass_rate(model, self.heldout, n, s)[0]

    def _describe(self, model, label, section, by_group=False):
        d = describe(model, self.train, self.heldout, self.tok, n=self.cfg.describe_samples, seed=self.seed,
                     by_group=by_group, env=self.env.env_id)
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
        """The results of ``section``, which the running one reads (at its end; declared by its ``@reads``). With
        ``jobs=1`` it ran before; in a worker, wait until the parent has written it. A read the running section
        does not declare raises at once (``--jobs`` would not have scheduled for it)."""
        if self.running is not None and section not in self.depends[self.running]:
            raise RuntimeError(f'section {self.running} reads section {section} but its @reads does not declare it: '
                               f'add {section!r} to the @reads above {METHODS[self.running]}')
        if section not in self.results and self.wait_for is not None:
            self.results[section] = self.wait_for(section)
        return self.results[section]

    def recipe_run(self, key: str, label: str | None = None, **extra) -> dict:
        """The keyword arguments that make one recipe run of the running section resumable and visible:
        ``checkpoint`` (``recipes.loop.Checkpoint``: ``partial/SECTION/KEY.pt``, saved every ``checkpoint_every``
        steps, with the caller's lists ``extra`` that its hooks or evaluations append to; its resume line goes to the
        section's transcript) and ``progress`` (its step, total and time in ``progress/SECTION.json``)."""
        from ...recipes.loop import Checkpoint
        section = self.running
        if section is None:
            raise RuntimeError('recipe_run is for a recipe run inside a section (run_section sets the section)')
        checkpoint = Checkpoint(self.partial / section.replace('.', '_') / f'{key}.safetensors', every=self.cfg.checkpoint_every,
                                extra=extra, say=lambda line: self._say(line, section))
        self._checkpoints.append(checkpoint)
        path, last = self.out / PROGRESS / f"{section.replace('.', '_')}.json", [0.0]
        path.parent.mkdir(parents=True, exist_ok=True)

        def progress(recipe, step, total, seconds, first):
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY and step < total:
                return
            last[0] = now
            left = seconds / (step - first) * (total - step) if step > first else None
            write_json(path, {'section': section, 'recipe': recipe, 'label': label or key, 'step': step, 'total': total,
                              'seconds': round(seconds, 1), 'left_seconds': None if left is None else round(left, 1)})
        return {'checkpoint': checkpoint, 'progress': progress}

    def finished_part(self, key: str, compute):
        """``compute()``'s JSON result, kept in ``partial/SECTION/KEY.json`` once computed: a section of several
        independent parts, killed in a later one, resumes without computing this one again (its recipes are seeded,
        so the result is the one it would compute). Kept until the section finishes, as its recipes' saved states."""
        path = self.partial / self.running.replace('.', '_') / f'{key}.json'
        if path.is_file():
            return read_json(path)
        result = compute()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, result, sort_keys=False)  # in its own order: the transcript's lines follow it
        return result

    def _finish(self, section, results, seconds):
        shutil.rmtree(self.partial / section.replace('.', '_'), ignore_errors=True)  # its recipes' saved states
        (self.out / PROGRESS / f"{section.replace('.', '_')}.json").unlink(missing_ok=True)
        self.results[section] = results
        self.timing[section] = round(seconds, 2)
        write_json(self.out / 'results.json', {'env': self.env.name, 'groups': self.groups, 'seed': self.seed,
                                               'config': self.config_record, 'provenance': self.provenance,
                                               'sections': self.results, 'transcript': self.lines})
        write_json(self.out / 'timing.json', self.timing)
        (self.out / 'transcript.txt').write_text(self.transcript())

    def transcript(self) -> str:
        """Everything printed so far, in the chapter's format."""
        order = ['setup', *SECTIONS, *EXTENDED, 'rl']
        return '\n'.join(line for sec in order for line in self.lines.get(sec, [])) + '\n'

    # --- the run
    def spread(self) -> dict:
        """How the run is spread over processes, for the provenance: here, every section in this one."""
        return {'jobs': 1}

    def run(self):
        """Run every unfinished section in order, in this process -> results dict keyed by section. Holds the folder
        (``session``): a second run on it is refused at once."""
        with self.session():
            self.run_here()
            self.save_episodes()
            self.tidy()
        return self.results

    def tidy(self) -> None:
        """Remove the folders of running recipes' states and progress once every section has finished (a run killed
        before keeps them for ``--resume``)."""
        if all(section in self.results for section in self.sections):
            for folder in (self.partial, self.out / PROGRESS):
                shutil.rmtree(folder, ignore_errors=True)

    def run_here(self, skip=()):
        """Run the unfinished sections in order, in this process, but those in ``skip``; a finished one echoes its lines."""
        for line in self.lines['setup']:
            self.log(line)
        for section in self.sections:
            if section in self.results:
                for line in self.lines.get(section, []):
                    self.log(line)
                if self.progress:
                    self.progress(section, done=True, resumed=True)
                continue
            if section in skip:
                continue
            if self.progress:
                self.progress(section, done=False)
            results, _, seconds = self.run_section(section)
            self._finish(section, results, seconds)
            if self.progress:
                self.progress(section, done=True)

    def run_section(self, section):
        """Run one section (its inputs done or, in a worker, awaited) -> (results, printed lines, seconds)."""
        t0 = time.perf_counter()
        self.lines[section] = []
        self.running, self._checkpoints = section, []
        try:
            results = getattr(self, METHODS[section])()
        finally:
            self.running = None
            while self._runs:  # the section's monitor runs (``monitor_run``), flushed and closed
                self._runs.pop().close()
        return results, self.lines[section], time.perf_counter() - t0 + self.earlier_seconds()

    def earlier_seconds(self) -> float:
        """The seconds the running section's recipe runs (``recipe_run``) took before they resumed here, in the
        processes killed before this one (up to their last saves): added to this process's time, a section resumed
        inside a recipe records the time its kept steps took, not its last attempt's."""
        return sum(c.resumed_seconds for c in self._checkpoints)

    def monitor_run(self, recipe: str, label: str):
        """The loggers of one recipe run of this reproduction, to pass as the recipe's ``loggers=`` (section 15.6).

        With a log folder (``--logdir``), a ``LoggerSet`` writing ``LOGDIR/RECIPE/LABEL/seedN`` (``loggers.run_dir``):
        its ``metrics.jsonl``, and TensorBoard event files when the ``tensorboard`` extra is installed. The run
        starts afresh (a section that runs again replaces its runs) and is closed when its section ends. Without
        one, None: the recipe computes no monitor, and its figures are those of a run without logging."""
        if self.logdir is None:
            return None
        folder = run_dir(self.logdir, recipe, self.seed, label)
        if folder.exists():
            shutil.rmtree(folder)
        loggers = open_run(self.logdir, recipe, self.seed, label, tensorboard=tensorboard_available())
        self._runs.append(loggers)
        return loggers

    def save_episodes(self, per_task: int = 2, names=None):
        """Sample ``per_task`` episodes per task (all of them) from every saved policy, for the report's browser.

        Uses its own generator, after the results are final, so it changes no figure of the run. ``names``: only
        these policies (and ``'dpo_pairs'``: the DPO pairs file); files already written are kept.
        """
        folder = self.out / 'episodes'
        for name in POLICIES:
            path = folder / f'{name}.json'
            if (names is not None and name not in names) or path.exists() or not (self.ckpt / f'{name}.safetensors').exists():
                continue
            _, trajs = self.pass_rate(self._model(name), self.tasks, per_task, 10_000 + self.seed)
            save_trajectories(path, trajs)
        if (names is None or 'dpo_pairs' in names) and not (folder / 'dpo_pairs.json').exists() \
                and (self.ckpt / 'weak.safetensors').exists():
            pairs = self._pairs()[:40]
            save_trajectories(folder / 'dpo_pairs.json', [t for pair in pairs for t in pair])
