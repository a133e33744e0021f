"""One exercise's run (``agentrl exercise N``): its folder, the chapter's checkpoints it starts from, resume by part.

An exercise starts from the chapter's own checkpoints and figures: the sections its module names in ``NEEDS``
(and the sections those read). With ``source`` (``--from RUN_DIR``) they are read from a finished ``agentrl
reproduce`` folder of the same environment, seed and settings, which is never written to; without it they are
trained here first, into ``OUT/chapter`` (a ``Reproduction`` of just those sections, resumable like any).

The exercise's own work is a sequence of named parts (``part(name, fn)``). Each part's figures and printed lines
are written to ``OUT/results.json`` when it ends, and the models a later part needs are checkpointed
(``save``), so a killed run continues from its last finished part (``resume=True``) and ends with the figures of
an uninterrupted one: every draw comes from a generator seeded by the part itself. At the end the module's
answers are checked on the figures (``answers.check_answers``) and its figure is drawn.

The folder is held while the run writes (``lock.FolderLock``): a second run on it is refused at once.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from ...policies.checkpoint import load_model, save_checkpoint
from ..chapter15.config import Ch15Config
from ..chapter15.settings import describe_differences, differences, effective, resume_differences
from ..chapter15.env_registry import DEFAULT, get_env
from ..chapter15.provenance import collect as collect_provenance
from ..chapter15.findings import summary
from ..chapter15.reproduction import SECTIONS, Reproduction, check_seed
from ..lock import FolderLock
from ..run_folder import read_json, read_run, write_json
from .answers import as_records, check_answers
from .catalog import get_spec

RESULTS = 'results.json'


def _plain(value):
    """``value`` as JSON gives it back (tuples as lists, int keys as str): a fresh part equals a resumed one."""
    return json.loads(json.dumps(value))


class ExerciseRun:
    """Exercise ``number`` on one seed, into ``out``; ``run()`` does (or resumes) it and checks its answers."""

    def __init__(self, number: int, out, seed: int | None = None, env: str | None = None, config: Ch15Config | None = None,
                 overrides: dict | None = None, source=None, resume: bool = False, log=print, policy: str | None = None):
        """``seed`` and ``env``: the chapter's seed shift and environment (default: ``source``'s, else 0 and the chapter's
        own). ``config``: the settings (default the chapter's budgets with the environment's own), which ``source``
        must have been run with. ``source``: a finished ``agentrl reproduce`` folder to start from (``--from``).
        ``policy``: the chapter's policy, as ``reproduce --policy`` (default: ``source``'s, else the TinyAgent).
        Checks everything it can before any work (ValueError naming what is wrong); writes nothing: ``run()`` does."""
        self.spec = get_spec(number)
        self.out, self.log, self.resume = Path(out), log, resume
        self.source = None if source is None else Path(source)
        saved = read_run(self.source) if self.source is not None else None
        if saved is not None:
            env = env or saved.get('env', DEFAULT)
            if env != saved.get('env', DEFAULT):
                raise ValueError(f"{self.source} ran on {saved.get('env', DEFAULT)}, not {env}: give --from a run of the "
                                 'same environment, or leave --env out')
            seed = saved.get('seed') if seed is None else seed
            ran = saved['sections'].get('setup', {}).get('policy', 'tiny')
            policy = policy or ran
            if policy != ran:
                raise ValueError(f'{self.source} ran with --policy {ran}, not {policy}: give --from a run of the same '
                                 'policy, or leave --policy out')
            if seed != saved.get('seed'):
                raise ValueError(f"{self.source} ran at seed {saved.get('seed')}, not {seed}: give --from a run of the "
                                 'same seed, or leave --seed out')
        env, seed, self.policy = env or DEFAULT, 0 if seed is None else seed, policy or 'tiny'
        check_seed(seed)
        self.env, self.seed = get_env(env), seed
        self.cfg = config or Ch15Config.for_env(self.env, self.policy)
        self.module = self.spec.load()
        if saved is not None:
            self._check_source(saved)
        self.ch = Reproduction(self.source if self.source is not None else self.out / 'chapter', seed=seed,
                               resume=True, log=lambda line: None, config=self.cfg, overrides=overrides, env=env,
                               policy=self.policy)
        """The chapter's run the exercise starts from: its checkpoints (``chapter_model``), its figures
        (``chapter_results``) and its helpers (``evaluate``, ``pass_rate``, the tasks, the tokenizer, the config)."""
        self.provenance = {**collect_provenance(overrides), 'from': None if self.source is None else str(self.source.resolve())}
        self.parts, self.lines, self.seconds = {}, {}, {}
        self.current = None
        if resume and (self.out / RESULTS).exists():
            self._load_saved()

    # --- what the exercise starts from
    def needed_sections(self) -> list:
        """The chapter's sections the exercise reads, with every section those read (``@reads``), in order."""
        todo, need = list(self.module.NEEDS), set()
        while todo:
            s = todo.pop()
            if s not in need:
                need.add(s)
                todo += list(self.ch.depends.get(s, ()))
        need.add('15.2')  # every later section starts from its checkpoints
        return [s for s in SECTIONS if s in need]

    def _check_source(self, saved: dict) -> None:
        """A ``--from`` folder must hold the sections and checkpoints the exercise reads, made with these settings."""
        here = effective(self.cfg, env=self.env, policy=self.policy)
        diffs = differences(saved.get('config'), here)
        if diffs:
            raise ValueError(f'{self.source} was run with other settings: {describe_differences(diffs, "there", "here")}; '
                             'give the exercise the same --set (or --config), or leave --from out to train the chapter '
                             'anew')
        reads = set(self.module.NEEDS) | {'15.2'}
        missing = [s for s in SECTIONS if s in reads and s not in saved['sections']]
        if missing:
            raise ValueError(f"{self.source} holds no section {', '.join(missing)} (exercise {self.spec.number} reads "
                             f'them): finish that run first (agentrl reproduce --out {self.source} --resume)')
        absent = [n for n in self.module.CHECKPOINTS if not (self.source / 'checkpoints' / f'{n}.safetensors').is_file()]
        if absent:
            raise ValueError(f"{self.source}/checkpoints has no {', '.join(absent)}.safetensors (exercise "
                             f'{self.spec.number} starts from it): give --from a complete agentrl reproduce folder')

    def chapter_results(self, section: str) -> dict:
        """The figures of the chapter's ``section`` (in ``NEEDS``)."""
        if section not in self.module.NEEDS:
            raise RuntimeError(f'exercise {self.spec.number} reads section {section} but its NEEDS does not name it')
        return self.ch.results[section]

    def chapter_model(self, name: str):
        """The chapter's checkpoint ``name`` (``weak``, ``sft_step20`` ...), loaded once; copy it before training it."""
        if name not in self.module.CHECKPOINTS:
            raise RuntimeError(f'exercise {self.spec.number} loads the checkpoint {name} but its CHECKPOINTS does not '
                               'name it')
        return self.ch._model(name)

    def _prepare_chapter(self) -> None:
        """Train the chapter's sections the exercise reads (no ``--from``), into ``OUT/chapter``, resuming what is there."""
        if self.source is not None:
            return
        todo = [s for s in self.needed_sections() if s not in self.ch.results]
        if not todo:
            return
        self.log(f"the chapter's sections {', '.join(todo)} first, into {self.ch.out} (give --from RUN_DIR, an "
                 'agentrl reproduce folder, to start from its checkpoints instead)')
        with self.ch.session():
            for section in todo:
                results, _, seconds = self.ch.run_section(section)
                self.ch._finish(section, results, seconds)
                self.log(f'  section {section} done in {seconds:.0f} s')

    # --- the exercise's own work
    def part(self, name: str, work):
        """Run ``work()`` (-> its figures, JSON-able) as the part ``name``, or give back what a resumed run saved.

        The part's figures, its printed lines (``say``) and its time are written when it ends."""
        if name in self.parts:
            for line in self.lines.get(name, []):
                self.log(line)
            return self.parts[name]
        self.current, self.lines[name] = name, []
        t0 = time.perf_counter()
        try:
            value = _plain(work())
        finally:
            self.current = None
        self.parts[name], self.seconds[name] = value, round(time.perf_counter() - t0, 2)
        self._write()
        return value

    def say(self, line: str) -> None:
        """Print a line of the exercise's answer (kept with its part, and echoed again on resume)."""
        self.lines.setdefault(self.current or 'end', []).append(line)
        self.log(line)

    def save(self, name: str, model) -> None:
        """Checkpoint a model a later part reads (``model(name)``)."""
        save_checkpoint(model, self.out / 'checkpoints' / f'{name}.safetensors', self.ch.tok)

    def model(self, name: str):
        """A model an earlier part saved (``save``), freshly loaded."""
        return load_model(self.out / 'checkpoints' / f'{name}.safetensors', self.ch.tok)

    # --- the run
    def run(self) -> dict:
        """Do (or resume) the exercise -> its results: the figures by part, the answers, the figure files."""
        with FolderLock(self.out):
            if not self.resume:  # nothing of an older run in this folder may survive into this one
                (self.out / RESULTS).unlink(missing_ok=True)
                for f in (self.out / 'checkpoints').glob('*') if (self.out / 'checkpoints').is_dir() else []:
                    f.unlink()
            self._prepare_chapter()
            t0 = time.perf_counter()
            self.module.run(self)
            self.answers = check_answers(self.module.ANSWERS, self.parts)
            draw = getattr(self.module, 'draw', None)
            self.figures = [str(p.name) for p in draw(self.parts, self.out)] if draw else []
            self.seconds['total'] = round(sum(v for k, v in self.seconds.items() if k != 'total'), 2)
            self.wall = time.perf_counter() - t0
            self._write(final=True)
        return self.record()

    def record(self) -> dict:
        """What ``results.json`` holds."""
        out = {'exercise': self.spec.number, 'title': self.spec.title, 'env': self.env.name, 'seed': self.seed,
               'from': None if self.source is None else str(self.source), 'config': self.ch.config_record,
               'provenance': self.provenance, 'parts': self.parts, 'lines': self.lines, 'seconds': self.seconds}
        if hasattr(self, 'answers'):
            out.update(answers=as_records(self.answers), figures=self.figures, summary=summary(self.answers))
        return out

    def _write(self, final: bool = False) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        write_json(self.out / RESULTS, self.record())

    def _load_saved(self) -> None:
        """The finished parts of the run in ``out`` (``resume``): refused when it was another exercise, environment, seed,
        starting folder or config (naming what differs)."""
        path = self.out / RESULTS
        saved = read_json(path, kind='exercise')
        for key, here in (('exercise', self.spec.number), ('env', self.env.name), ('seed', self.seed),
                          ('from', None if self.source is None else str(self.source))):
            if saved.get(key) != here:
                raise ValueError(f'{path} was written with another {key} ({saved.get(key)!r}, now {here!r}); resume '
                                 'with the same arguments or use another --out')
        diffs = resume_differences(saved.get('config'), self.ch.config_record)
        if diffs:
            raise ValueError(f'{path} was written with another config: {describe_differences(diffs)}; resume with the '
                             'same settings or use another --out')
        self.parts, self.lines, self.seconds = saved.get('parts', {}), saved.get('lines', {}), saved.get('seconds', {})
        self.seconds.pop('total', None)
