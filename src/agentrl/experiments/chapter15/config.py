"""What a chapter 15 run is set to: ``Ch15Config``, its keys and the valid range of each (``settings.py`` reads them
from the command line and a TOML file, and compares configs).

Three kinds of key, all settable the same way:

- **budgets**: how much each section trains and samples (``sft_steps``, ``rft_samples``, ...); the
  chapter's own by default, ``Ch15Config.smoke()`` for a run of seconds. ``agentrl compare``
  refuses runs whose budgets differ unless told which may.
- **recipe hyperparameters**: what the chapter passes or its functions default to (learning rates,
  DPO beta, batch sizes, temperatures), and section 15.6's remedies for an SFT policy that leaves
  RL no signal: an earlier cold-start checkpoint (``cold_start_step``), a hotter RL rollout
  (``rl_temperature``) and an entropy bonus in REINFORCE (``rl_entropy_bonus``). Every default is
  today's value, so an unset knob changes no figure.
- **precision**: where a pretrained policy runs, ``dtype`` (``auto``, ``fp32``, ``bf16``) and ``device`` (``auto``,
  ``cpu``, ``cuda``); ``auto`` picks as ``precision.resolve`` says. The only keys that take words, not numbers.
- **model**: ``model.FIELD`` for every field of ``TinyAgentConfig`` but ``vocab_size``
  (``model.qk_temperature=4``). Only the keys set are passed to ``TinyAgent``; the rest keep the
  model's defaults, and the run records the full effective model config.

Every key has a valid range (``RANGES``: its least value is where a section stops working, e.g.
``rft_rounds >= 2`` because 15.6 deduplicates round 1's kept episodes), checked whenever a
``Ch15Config`` is made; ``check_env`` adds the limits an environment sets. This module imports
neither torch nor the model: the model's fields are read from ``policies/tinyagent.py``'s source with ``ast``,
so a bad key or value fails in milliseconds, before any work starts, with one line naming the key
and its range.
"""
from __future__ import annotations

import ast
import difflib
import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path

from ...policies.precision import DEVICES, DTYPES
from ...recipes.pg_variants import VARIANTS

MODEL = 'model.'
"""Prefix of the model's keys."""
RL_STARTS = ('sft_step20', 'weak', 'sft_step60')
"""The chapter's checkpoints ``agentrl sweep --rl`` can start RL from (``rl_start``); a saved policy's
``.safetensors`` file (``save_checkpoint``) is the other kind of start."""
CHECKPOINT = '.safetensors'
"""How the name of a saved policy's file ends (``policies.checkpoint.save_checkpoint``)."""


@dataclass(frozen=True)
class Ch15Config:
    """The chapter's budgets and recipe hyperparameters. Defaults are the chapter's own; ``smoke()`` is a tiny run for tests."""
    weak_steps: int = 150
    """SFT steps of the weak base on blind + random play (15.2)."""
    sft_steps: int = 60
    """Oracle SFT steps from the weak base (15.2)."""
    sft_every: int = 10
    """Evaluate the SFT run every this many steps (15.2)."""
    cold_start_step: int = 20
    """The SFT checkpoint that RL starts from and that 15.6 probes (15.5, 15.6; remedy (a) of 15.6). A multiple of
    ``sft_every``; the checkpoint keeps its name ``sft_step20`` whatever the step."""
    eval_samples: int = 4
    """Episodes per task in ``evaluate`` (train and held-out pass)."""
    describe_samples: int = 8
    """Episodes per task when describing a policy (and for 15.2's held-out pass per family)."""
    rft_rounds: int = 4
    """Expert-iteration rounds (15.3)."""
    rft_samples: int = 16
    """Episodes sampled per task per round (15.3, 15.4, 15.6)."""
    rft_steps: int = 15
    """SFT steps per expert-iteration round (15.3, 15.6)."""
    dpo_steps: int = 100
    """DPO steps (15.4, 15.6)."""
    dpo_every: int = 25
    """Evaluate DPO every this many steps."""
    rl_cold_steps: int = 40
    """REINFORCE steps from the cold-start checkpoint (15.5)."""
    rl_only_steps: int = 60
    """REINFORCE steps from the weak base (15.5)."""
    rl_every: int = 10
    """Evaluate RL every this many steps."""
    mismatch_steps: int = 60
    """SFT steps on demos rendered without wrappers (15.6)."""
    probe_group: int = 8
    """Group size of the informative-group probe (15.6)."""
    hack_rounds: int = 3
    """Public-test-filter rounds (15.6)."""
    sft_lr: float = 3e-3
    """AdamW learning rate of every SFT run: weak base, oracle SFT, RFT and public-filter rounds, mismatch (15.2-15.6)."""
    sft_batch_size: int = 32
    """Trajectories per SFT step (sampled with replacement), in every SFT run."""
    rl_lr: float = 1e-3
    """AdamW learning rate of REINFORCE (15.5)."""
    rl_tasks: int = 8
    """Tasks per REINFORCE step (15.5)."""
    rl_group: int = 8
    """Episodes per task per REINFORCE step: the group whose mean is the baseline (15.5)."""
    rl_temperature: float = 1.0
    """Sampling temperature of REINFORCE's rollouts (remedy (b) of 15.6). The update scores the episodes at the same
    temperature: it follows the policy gradient of the tempered policy they were drawn from (``recipes.reinforce``)."""
    rl_entropy_bonus: float = 0.0
    """Weight of the action-token entropy subtracted from REINFORCE's loss (remedy (c) of 15.6)."""
    rl_micro_batch: int = 0
    """Episodes REINFORCE forwards at a time, their gradients added into one update (``reinforce_step``'s
    ``micro_batch``): the same update to float rounding, in the memory of that many episodes; 0 forwards the whole
    batch at once, as the chapter does."""
    rl_variant: str = 'reinforce'
    """The RL recipe of ``agentrl sweep --rl`` (its section ``rl``): ``'reinforce'`` (15.5's REINFORCE) or a variant of
    the clipped trainer by its name in ``recipes.pg_variants.VARIANTS`` (``'clipped'``, ``'grpo'``, ``'dr_grpo'``,
    ``'dapo'``, ``'cispo'``, ``'gspo'``, ``'rloo'`` ...), with the RL knobs above (tasks, group, learning rate,
    temperature, entropy bonus). The chapter's sections ignore it."""
    rl_start: str = 'sft_step20'
    """The checkpoint ``agentrl sweep --rl`` starts RL from: ``'sft_step20'`` (15.5's cold start; ``rl_cold_steps``
    steps), ``'weak'`` (the weak base; ``rl_only_steps``), ``'sft_step60'`` (the last SFT step; ``rl_cold_steps``), or
    the path of any saved policy's ``.safetensors`` file (``arl.save_checkpoint``; ``rl_cold_steps``), on the run's
    tokenizer."""
    rl_target: float = 0.9
    """``agentrl sweep --rl`` counts the episodes sampled until the train pass first reaches this (sample efficiency)."""
    pass_k_samples: int = 16
    """Episodes per task of ``agentrl sweep --rl``'s pass@k after RL, on train and held-out tasks (pass@1, 2, 4, ...
    up to this, Chen et al. 2021's unbiased estimator)."""
    dpo_lr: float = 1e-3
    """AdamW learning rate of DPO (15.4, 15.6)."""
    dpo_beta: float = 0.1
    """DPO's beta: how strongly the log-ratio margin is scaled (15.4, 15.6)."""
    dpo_batch_size: int = 0
    """Pairs per DPO step, drawn with replacement (15.4, 15.6); 0: every pair at every step, as the chapter trains."""
    dpo_margin: float = 1.0
    """The least gap of returns between a DPO pair's chosen and rejected episodes (``make_pairs``, 15.4, 15.6).
    With 0/1 rewards, 1.0 pairs a success against a failure; a game that pays partial credit sets less."""
    sample_temperature: float = 1.0
    """Temperature of the episodes RFT, the public filter and the DPO pairs are built from (15.3, 15.4, 15.6).
    Evaluations always sample at 1."""
    lora_rank: int = 16
    """A pretrained policy's LoRA rank (``--policy smollm2``): its weights stay frozen and adapters of this rank train
    on every linear layer; 0 trains every weight instead. The TinyAgent and the models built from a config ignore it."""
    dtype: str = 'auto'
    """A pretrained policy's precision: ``fp32``, ``bf16`` (autocast, master weights in float32) or ``auto`` (bf16 where
    the hardware multiplies it natively). The TinyAgent always runs in float32."""
    device: str = 'auto'
    """A pretrained policy's device: ``cpu``, ``cuda`` or ``auto`` (a CUDA device when torch sees one). The TinyAgent
    always runs on the CPU."""
    checkpoint_every: int = 10
    """Save a running recipe's state (weights, optimizer, random streams, outputs) after every this many of its steps, a
    round of expert iteration being a step: ``--resume`` continues a killed run from there (``recipes.loop``). Saving
    changes no figure."""
    model: dict = field(default_factory=dict)
    """Overrides of the TinyAgent's config (``TinyAgentConfig`` fields but ``vocab_size``); empty: the model's defaults."""

    def __post_init__(self):
        for f in fields(self):
            if f.name != 'model':
                object.__setattr__(self, f.name, _typed(f.name, f.type, getattr(self, f.name)))
        if not isinstance(self.model, dict):
            raise ValueError(f'model must be a dict of TinyAgentConfig overrides, got {type(self.model).__name__}')
        known = model_fields()
        clean = {}
        for name, value in sorted(self.model.items()):
            key = MODEL + str(name).removeprefix(MODEL)
            if key not in known:
                raise unknown_key(key)
            clean[key[len(MODEL):]] = coerce(known[key], value)
        object.__setattr__(self, 'model', clean)
        check_ranges(self)

    @classmethod
    def for_env(cls, env, policy: str = 'tiny') -> 'Ch15Config':
        """The chapter's budgets with an environment's own (``envs.ChapterEnv.budgets``) on top, and a pretrained
        policy's (``real_model.BUDGETS``) on top of those."""
        from .real_model import BUDGETS, is_pretrained
        config = apply(cls(), env.budgets) if env.budgets else cls()
        return apply(config, BUDGETS) if is_pretrained(policy) else config

    @classmethod
    def smoke(cls) -> 'Ch15Config':
        """A run of a few seconds that exercises every section (the findings are meaningless). The weak
        base trains just long enough (12 steps) and 15.3/15.4 sample 4 episodes per task, so that
        some tasks are both won and lost and DPO has preference pairs at any seed."""
        return cls(weak_steps=12, sft_steps=4, sft_every=2, cold_start_step=2, eval_samples=1, describe_samples=1,
                   rft_rounds=2, rft_samples=4, rft_steps=2, dpo_steps=2, dpo_every=1, rl_cold_steps=2,
                   rl_only_steps=2, rl_every=1, mismatch_steps=2, probe_group=2, hack_rounds=2)


BUDGETS = ('weak_steps', 'sft_steps', 'sft_every', 'eval_samples', 'describe_samples', 'rft_rounds', 'rft_samples',
           'rft_steps', 'dpo_steps', 'dpo_every', 'rl_cold_steps', 'rl_only_steps', 'rl_every', 'mismatch_steps',
           'probe_group', 'hack_rounds')
"""The keys that set how much a run trains and samples (``smoke()`` changes exactly these)."""


def _real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _typed(name: str, kind: str, value):
    """A field's value as its type (``'int'``: an int, not a bool; ``'float'``: a finite number, as a float; ``'str'``:
    a string, its range checked by ``check_ranges``)."""
    if kind == 'str':
        if not isinstance(value, str):
            raise ValueError(f'{name} must be one of {_choices(name)}, got {value!r}')
        return value
    if kind == 'int':
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f'{name} must be an int, got {value!r}')
        return value
    if not _real(value):
        raise ValueError(f'{name} must be a finite number, got {value!r}')
    return float(value)


# --- the valid range of every key

@dataclass(frozen=True)
class Bound:
    """The values one key may take: from ``low`` to ``high``, each a number or other keys' names."""
    low: object
    """The least value: a number, or the name of the key it may not be below."""
    high: object = None
    """The greatest value: None (no limit), a number, or a tuple of keys' names it may exceed none of."""
    above: bool = False
    """Strictly above ``low`` (a learning rate is ``> 0``) rather than at least ``low``."""
    multiple_of: str | None = None
    """The name of a key the value must be a multiple of."""
    why: str = ''
    """Why the limit is where it is, said in the error."""
    choices: tuple = ()
    """The words a key that takes words may be (``low`` is then unused)."""
    file: str = ''
    """How the name of an existing file ends that the key may be instead of one of ``choices`` ('' : none may)."""


RANGES = {
    'weak_steps': Bound(1), 'sft_steps': Bound(1),
    'sft_every': Bound(1, ('sft_steps',), why='the SFT curve needs a point'),
    'cold_start_step': Bound('sft_every', ('sft_steps',), multiple_of='sft_every',
                             why='the SFT run saves its cold-start checkpoint only where it evaluates'),
    'eval_samples': Bound(1), 'describe_samples': Bound(1),
    'rft_rounds': Bound(2, why="15.6 deduplicates the kept episodes of expert iteration's round 1 (its second)"),
    'rft_samples': Bound(2, why="15.4's DPO pairs a passing with a failing episode of one task"),
    'rft_steps': Bound(1), 'dpo_steps': Bound(1),
    'dpo_every': Bound(1, ('dpo_steps',), why='the DPO curve needs a point'),
    'rl_cold_steps': Bound(1), 'rl_only_steps': Bound(1),
    'rl_every': Bound(1, ('rl_cold_steps', 'rl_only_steps'), why='each RL curve needs a point'),
    'mismatch_steps': Bound(1),
    'probe_group': Bound(2, why="15.6's probe counts groups with a pass and a fail: a group of one has never both"),
    'hack_rounds': Bound(1),
    'sft_lr': Bound(0, above=True), 'sft_batch_size': Bound(1), 'rl_lr': Bound(0, above=True),
    'rl_tasks': Bound(1, why="and at most the environment's train tasks"),
    'rl_group': Bound(2, why="REINFORCE's baseline is the group's mean: a group of one has no advantage to learn from"),
    'rl_temperature': Bound(0, above=True), 'rl_entropy_bonus': Bound(0),
    'rl_micro_batch': Bound(0, why='0 forwards the whole batch at once'),
    'lora_rank': Bound(0, why='0 trains every weight of a pretrained policy'),
    'dpo_batch_size': Bound(0, why='0 takes every pair at every step'),
    'dtype': Bound(None, choices=DTYPES, why='auto: bf16 where the hardware multiplies it natively'),
    'device': Bound(None, choices=DEVICES, why='auto: a CUDA device when torch sees one'),
    'checkpoint_every': Bound(1),
    'rl_variant': Bound(None, choices=tuple(VARIANTS), why='recipes.pg_variants'),
    'rl_start': Bound(None, choices=RL_STARTS, file=CHECKPOINT,
                      why="the chapter's checkpoints RL can start from, or a saved policy's file"),
    'rl_target': Bound(0, 1, above=True), 'pass_k_samples': Bound(1),
    'dpo_lr': Bound(0, above=True), 'dpo_beta': Bound(0, above=True), 'dpo_margin': Bound(0, above=True), 'sample_temperature': Bound(0, above=True),
    # the model's (TinyAgentConfig.__post_init__ checks the same; tests/test_config.py holds the two together)
    'model.d_model': Bound(1, multiple_of='model.n_heads', why='each head gets d_model / n_heads dims'),
    'model.n_layers': Bound(1), 'model.n_heads': Bound(1),
    'model.block_size': Bound(1, why="and at least the environment's longest episode"),
    'model.rotary_frac': Bound(0, 1), 'model.qk_temperature': Bound(0, above=True),
    'model.abs_pos_std': Bound(0), 'model.init_std': Bound(0, above=True),
}
"""The valid range of every key (``knobs()``), checked when a ``Ch15Config`` is made, before any work. The least
values are where the sections stop working (``why``); what the environment sets (the number of train tasks, the
longest episode) is checked by ``check_env``."""


def values(config: Ch15Config) -> dict:
    """Every key's value in ``config`` -> {key: value}, the model's unset keys at their defaults."""
    out = {f.name: getattr(config, f.name) for f in fields(config) if f.name != 'model'}
    out.update({k: config.model.get(k[len(MODEL):], knob.default) for k, knob in model_fields().items()})
    return out


def limits(key: str, vals: dict) -> tuple:
    """(least, greatest or None) of ``key`` given the other keys' values ``vals`` (``values(config)``)."""
    bound = RANGES[key]
    low = vals[bound.low] if isinstance(bound.low, str) else bound.low
    high = min(vals[k] for k in bound.high) if isinstance(bound.high, tuple) else bound.high
    return low, high


def _choices(key: str) -> str:
    """The words ``key`` may be, listed: ``'auto', 'fp32' or 'bf16'``."""
    words = [repr(w) for w in RANGES[key].choices]
    return ', '.join(words[:-1]) + ' or ' + words[-1]


def range_text(key: str, vals: dict) -> str:
    """``key``'s valid range in words, with the other keys it depends on and their values."""
    bound, kind = RANGES[key], knobs()[key].kind
    if bound.choices:
        path = f', or the path of an existing {bound.file} file' if bound.file else ''
        return f'one of {_choices(key)}{path}' + (f' ({bound.why})' if bound.why else '')
    name = lambda k: f'{k} ({vals[k]!r})'  # noqa: E731
    low = name(bound.low) if isinstance(bound.low, str) else repr(bound.low)
    text = 'an int' if kind == 'int' else 'a number'
    if isinstance(bound.high, tuple):
        text += f' from {low} to ' + ' and to '.join(name(k) for k in bound.high)
    elif bound.high is not None:
        text += f' from {low} to {bound.high!r}'
    else:
        text += f" {'>' if bound.above else '>='} {low}"
    if bound.multiple_of:
        text += f', a multiple of {name(bound.multiple_of)}'
    return text + (f' ({bound.why})' if bound.why else '')


def check_ranges(config: Ch15Config) -> None:
    """Every key of ``config`` in its range (``RANGES``); else ValueError naming the key, its value and its range."""
    vals = values(config)
    for key in knobs():  # the limits first, then the multiples (whose divisors are then >= 1)
        if RANGES[key].choices:
            if vals[key] not in RANGES[key].choices and not _is_file(vals[key], RANGES[key].file):
                raise ValueError(f'{key} must be {range_text(key, vals)}, got {vals[key]!r}')
            continue
        value, (low, high), bound = vals[key], limits(key, vals), RANGES[key]
        if not ((value > low if bound.above else value >= low) and (high is None or value <= high)):
            raise ValueError(f'{key} must be {range_text(key, vals)}, got {value!r}')
    for key in knobs():
        if RANGES[key].multiple_of and vals[key] % vals[RANGES[key].multiple_of]:
            raise ValueError(f'{key} must be {range_text(key, vals)}, got {vals[key]!r}')


def _is_file(value: str, suffix: str) -> bool:
    """Whether ``value`` names an existing file whose name ends with ``suffix`` (never, if ``suffix`` is '')."""
    return bool(suffix) and value.endswith(suffix) and Path(value).is_file()


def check_env(config: Ch15Config, env) -> None:
    """What only the environment (an ``envs.ChapterEnv``) bounds: ``rl_tasks`` (at most its train tasks) and
    ``model.block_size`` (at least its longest episode); ValueError naming the key and its range. No torch."""
    vals = values(config)
    n_train, longest = len(env.tasks('train')), env.make().max_tokens
    if not vals['rl_tasks'] <= n_train:
        raise ValueError(f"rl_tasks must be an int from 1 to {n_train} (the train tasks of {env.title}), "
                         f"got {vals['rl_tasks']!r}")
    if not vals['model.block_size'] >= longest:
        raise ValueError(f"model.block_size must be an int >= {longest} (the longest an episode of {env.title} "
                         f"may grow, in tokens), got {vals['model.block_size']!r}")


# --- the keys

@dataclass(frozen=True)
class Knob:
    """One settable key."""
    key: str
    """``sft_steps`` or ``model.qk_temperature``."""
    kind: str
    """``'int'``, ``'float'`` or ``'str'`` (a word of ``RANGES[key].choices``)."""
    default: object
    """Its default (for model keys: the value in ``policies/tinyagent.py``'s source)."""
    doc: str
    """What it sets."""
    group: str
    """``'budget'``, ``'recipe'`` or ``'model'``."""


def _dataclass_fields(path: Path, name: str) -> dict:
    """The fields of dataclass ``name`` in the source file ``path``, read with ast -> {field: (annotation, default, doc)}."""
    tree = ast.parse(path.read_text(encoding='utf-8'))
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        raise RuntimeError(f'no class {name} in {path}')
    out = {}
    for i, node in enumerate(cls.body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        nxt = cls.body[i + 1] if i + 1 < len(cls.body) else None
        doc = ' '.join(nxt.value.value.split()) if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                                                     and isinstance(nxt.value.value, str)) else ''
        try:
            default = ast.literal_eval(node.value) if node.value is not None else None
        except ValueError:
            default = None
        out[node.target.id] = (ast.unparse(node.annotation), default, doc)
    return out


@lru_cache(maxsize=None)
def model_fields() -> dict:
    """``{'model.FIELD': Knob}`` for every int or float field of ``TinyAgentConfig`` but ``vocab_size``."""
    src = Path(__file__).resolve().parents[2] / 'policies' / 'tinyagent.py'
    return {MODEL + name: Knob(MODEL + name, ann, default, doc, 'model')
            for name, (ann, default, doc) in _dataclass_fields(src, 'TinyAgentConfig').items()
            if name != 'vocab_size' and ann in ('int', 'float')}


@lru_cache(maxsize=None)
def knobs() -> dict:
    """Every settable key -> ``Knob``: ``Ch15Config``'s fields, then the model's (``model.FIELD``)."""
    docs = _dataclass_fields(Path(__file__), 'Ch15Config')
    out = {f.name: Knob(f.name, f.type, f.default, docs[f.name][2], 'budget' if f.name in BUDGETS else 'recipe')
           for f in fields(Ch15Config) if f.name != 'model'}
    out.update(model_fields())
    return out


def unknown_key(key: str, where: str = '') -> ValueError:
    """The error for a key that is not settable: close matches first, then every valid key."""
    names = list(knobs())
    suffix = [n for n in names if n.endswith('.' + key)]  # 'qk_temperature' -> model.qk_temperature
    close = suffix + [n for n in difflib.get_close_matches(key, names, n=4, cutoff=0.6) if n not in suffix]
    hint = f"; did you mean {' or '.join(close)}?" if close else '.'
    return ValueError(f'unknown key {key!r}{where}{hint} Valid keys: ' + ', '.join(close + [n for n in names if n not in close]))


def coerce(knob: Knob, value):
    """A value of the knob's type (TOML values, or strings from the command line) -> int, finite float or (a key that
    takes words) str; ValueError naming the key."""
    if knob.kind == 'str':
        if not isinstance(value, str):
            raise ValueError(f'bad value for {knob.key}: {value!r} is not a word (e.g. {knob.key}={knob.default})')
        return value.strip()
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if knob.kind == 'int' else float(text)
        except ValueError:
            kind = 'an int' if knob.kind == 'int' else 'a number'
            raise ValueError(f'bad value for {knob.key}: {text!r} is not {kind} (e.g. {knob.key}={knob.default!r})') from None
    if knob.kind == 'int':
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f'bad value for {knob.key}: {value!r} is not an int (e.g. {knob.key}={knob.default!r})')
        return value
    if not _real(value):
        raise ValueError(f'bad value for {knob.key}: {value!r} is not a finite number (e.g. {knob.key}={knob.default!r})')
    return float(value)


def apply(base: Ch15Config, overrides: dict) -> Ch15Config:
    """``base`` with ``{key: value}`` applied (model keys merged into ``base.model``); ValueError naming the key."""
    top, model = {}, dict(base.model)
    for key, value in overrides.items():
        if key not in knobs():
            raise unknown_key(key)
        value = coerce(knobs()[key], value)
        if key.startswith(MODEL):
            model[key[len(MODEL):]] = value
        else:
            top[key] = value
    return replace(base, **top, model=model)
