"""How a user sets a chapter 15 run (``--set KEY=VALUE``, ``--config FILE.toml``, ``--grid``), and how two runs'
configs compare (``differences``, ``budget_name``) and what a run records (``effective``).

The keys, their types and ranges are ``config.py``'s; this module reads them from the command line and TOML, and
checks nothing ``config.py`` does not.
"""
from __future__ import annotations

import itertools
from dataclasses import MISSING, asdict, fields
from pathlib import Path

from .config import BUDGETS, MODEL, Ch15Config, apply, check_env, coerce, knobs, unknown_key


def parse_assignment(item: str, where: str = '') -> tuple:
    """``'KEY=VALUE'`` -> (key, typed value); ValueError naming the key."""
    key, sep, raw = str(item).partition('=')
    key = key.strip()
    if not sep or not key:
        raise ValueError(f'expected KEY=VALUE{where}, got {item!r} (e.g. sft_steps=30 or model.qk_temperature=4)')
    if key not in knobs():
        raise unknown_key(key, where)
    return key, coerce(knobs()[key], raw)


def read_config_file(path) -> dict:
    """A TOML file of keys (top level, and a ``[model]`` table or ``model.FIELD = ...``) -> {key: typed value}."""
    import tomllib
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding='utf-8'))
    except OSError as e:
        raise ValueError(f'cannot read config file {path}: {e.strerror or e}') from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f'config file {path} is not valid TOML: {e}') from None
    out = {}

    def walk(table, prefix):
        for k, v in table.items():
            key = prefix + k
            if isinstance(v, dict):
                walk(v, key + '.')
                continue
            if key not in knobs():
                raise unknown_key(key, f' in {path}')
            out[key] = coerce(knobs()[key], v)
    walk(data, '')
    return out


def resolve(smoke: bool = False, config_file=None, sets=(), env=None, policy: str = 'tiny') -> tuple:
    """The preset (the chapter's budgets, with ``env``'s own if given and a pretrained ``policy``'s, or smoke), then a
    TOML file, then ``--set`` items -> (Ch15Config, overrides as {key: value})."""
    overrides = dict(read_config_file(config_file)) if config_file else {}
    for item in sets or ():
        key, value = parse_assignment(item, ' in --set')
        overrides[key] = value
    base = Ch15Config.smoke() if smoke else Ch15Config.for_env(env, policy) if env is not None else Ch15Config()
    config = apply(base, overrides)
    if env is not None:
        check_env(config, env)
    return config, overrides


def add_setting_args(p) -> None:
    """``--set`` and ``--config`` (shared by reproduce and sweep)."""
    p.add_argument('--set', dest='sets', action='append', default=[], metavar='KEY=VALUE',
                   help='change one setting: a budget or recipe hyperparameter (sft_steps=30, rl_temperature=1.5, '
                   'rl_entropy_bonus=0.01, cold_start_step=10, sft_lr=1e-3, dpo_beta=0.2, ...) or the model '
                   '(model.qk_temperature=4), or where a pretrained policy runs (dtype=fp32, device=cuda); repeatable; a wrong '
                   'key lists the valid ones')
    p.add_argument('--config', default=None, metavar='FILE.toml',
                   help='settings from a TOML file (the same keys; model keys in a [model] table); --set wins')


def parse_grid(items) -> list:
    """``['KEY=V1,V2', ...]`` -> every combination as [(variant name, {key: value})], in the order given.

    The name is ``KEY=V`` (several keys joined by ``+``), the value as typed, e.g. ``model.qk_temperature=4``.
    """
    axes = []
    for item in items or ():
        key, sep, raw = str(item).partition('=')
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise ValueError(f'expected KEY=V1,V2,... in --grid, got {item!r} (e.g. model.qk_temperature=4,8)')
        if key not in knobs():
            raise unknown_key(key, ' in --grid')
        if key in [k for k, _ in axes]:
            raise ValueError(f'--grid names {key} twice; give all its values at once ({key}=V1,V2,...)')
        values = [v.strip() for v in raw.split(',')]
        if len(set(values)) < len(values) or '' in values:
            raise ValueError(f'--grid {key}: values must be distinct and non-empty, got {raw!r}')
        axes.append((key, [(v, coerce(knobs()[key], v)) for v in values]))
    if not axes:  # no --grid: no variants (a plain sweep)
        return []
    variants = []
    for combo in itertools.product(*[[(k, text, val) for text, val in vals] for k, vals in axes]):
        variants.append(('+'.join(f'{k}={text}' for k, text, _ in combo), {k: val for k, _, val in combo}))
    return variants


# --- comparing configs

def flat(config: dict) -> dict:
    """A config dict (``asdict`` or an effective config) -> {key: value}, model fields as ``model.FIELD``."""
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update({f'{k}.{kk}': vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def differences(a: dict, b: dict, keys=None) -> list:
    """Keys whose values differ between two configs -> [(key, value in a, value in b)] (a missing key is None)."""
    fa, fb = flat(a or {}), flat(b or {})
    names = sorted(set(fa) | set(fb)) if keys is None else list(keys)
    return [(k, fa.get(k), fb.get(k)) for k in names if fa.get(k) != fb.get(k)]


def resume_differences(saved: dict, now: dict) -> list:
    """``differences`` between a saved run's config and this one's, for a resume: a key the saved run predates
    (absent from its record) is no difference when it is now at its default, the value that keeps the earlier
    behaviour (a setting added by a later version)."""
    defaults = {f.name: f.default for f in fields(Ch15Config) if f.default is not MISSING}
    had = flat(saved or {})
    return [(k, a, b) for k, a, b in differences(saved, now)
            if k in had or k not in defaults or b != defaults[k]]


def describe_differences(diffs: list, a: str = 'saved', b: str = 'now') -> str:
    """``differences`` as text: ``sft_steps (saved 60, now 3); ...``."""
    return '; '.join(f'{k} ({a} {va!r}, {b} {vb!r})' for k, va, vb in diffs)


def effective(config: Ch15Config, vocab_size: int | None = None, env=None, policy: str = 'tiny') -> dict:
    """The config a run records: ``asdict(config)`` with ``model`` the full effective ``TinyAgentConfig`` (every field),
    or for a pretrained ``policy`` (``real_model.py``) ``{'pretrained': policy}``.

    Also checks what only the environment (``env``, an ``envs.ChapterEnv``; default the chapter's) bounds
    (``check_env``), and lets the model check its own settings (imports torch; ``RANGES`` holds the same limits, so
    a bad one has already been refused); ValueError naming the key.
    """
    from ...policies.tinyagent import TinyAgentConfig
    from .env_registry import DEFAULT, get_env
    from .real_model import is_pretrained
    env = env or get_env(DEFAULT)
    if is_pretrained(policy):  # the TinyAgent's config describes no part of it
        check_env(config, env)
        return {**asdict(config), 'model': {'pretrained': str(policy)}}
    if vocab_size is None:
        vocab_size = env.tokenizer().vocab_size
    try:
        model = asdict(TinyAgentConfig(vocab_size, **config.model))
    except (TypeError, ValueError) as e:
        given = ', '.join(f'{MODEL}{k}={v}' for k, v in config.model.items())
        raise ValueError(f'bad model setting ({given}): {e}') from None
    check_env(config, env)
    return {**asdict(config), 'model': model}


def budget_name(config: dict, env=None, policy: str = 'tiny') -> str:
    """``'chapter'``, ``'smoke'`` or ``'custom'``: which preset's budgets a config has (the chapter's: on ``env``, an
    ``envs.ChapterEnv``, with its own budgets and a pretrained ``policy``'s)."""
    chapter = Ch15Config.for_env(env, policy) if env is not None else Ch15Config()
    for name, preset in [('chapter', chapter), ('smoke', Ch15Config.smoke())]:
        if all(config.get(k) == getattr(preset, k) for k in BUDGETS):
            return name
    return 'custom'

