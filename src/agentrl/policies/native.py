"""The decoding kernels of ``decode_kernels.c``, compiled once on this machine and called through ``ctypes``.

``kernels()`` returns the loaded library, or None when it cannot be had (no C compiler, a compile error, not Linux,
``AGENTRL_NATIVE=0``); ``why_not()`` then says why. The library is built with the machine's C compiler (``$CC``,
else ``cc``) for this CPU (``-march=native``) with OpenMP, and kept in ``cache_dir()/kernels`` under a name that
hashes the source, the flags, the compiler's version and the CPU's flags: a later process loads it in milliseconds.
Nothing is downloaded; without a compiler the lean path runs in torch alone (``llama_sampler``), slower, with the
same logits to float rounding.

The library links the OpenMP runtime by its name, ``libgomp.so.1``, which is the one torch has already loaded: the
kernels share torch's threads and follow ``torch.set_num_threads``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from ..runtime.cache import cache_dir
from ..runtime.files import atomic_path

SOURCE = Path(__file__).with_name('decode_kernels.c')
FLAGS = ('-O3', '-march=native', '-ffast-math', '-fopenmp', '-shared', '-fPIC')
"""How the library is compiled (``-ffast-math`` lets the compiler vectorise ``expf`` and the sums)."""
LIBS = ('-lmvec', '-lm')
"""glibc's vector math library (``expf`` on 16 floats at once), then the scalar one."""
SWITCH = 'AGENTRL_NATIVE'
"""``AGENTRL_NATIVE=0`` keeps the lean path in torch alone (for comparing the two, or where a build misbehaves)."""

_why = None


def why_not() -> str | None:
    """Why ``kernels()`` is None (one line), or None when the kernels are loaded."""
    kernels()
    return _why


def _cpu_flags() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            return next((line for line in f if line.startswith('flags')), '')
    except OSError:
        return platform.processor()


def _compiler() -> str | None:
    return shutil.which(os.environ.get('CC') or 'cc') or shutil.which('gcc')


def _library_path(cc: str) -> Path:
    version = subprocess.run([cc, '--version'], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256('\n'.join([SOURCE.read_text(), ' '.join(FLAGS + LIBS), version, _cpu_flags()]).encode())
    return cache_dir() / 'kernels' / f'decode-{key.hexdigest()[:16]}.so'


def _build(cc: str, path: Path) -> None:
    """Compile ``SOURCE`` into ``path`` (written whole or not at all: another process may be building it too)."""
    with atomic_path(path) as tmp:
        done = subprocess.run([cc, *FLAGS, str(SOURCE), '-o', str(tmp), *LIBS], capture_output=True, text=True,
                              timeout=300)
        if done.returncode:
            raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f'{cc} failed')


def _declare(lib) -> None:
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    lib.agentrl_add_rmsnorm.argtypes = [ptr, ptr, ptr, ptr, i64, i64, f32]
    lib.agentrl_silu_mul.argtypes = [ptr, ptr, i64, i64]
    lib.agentrl_decode_attention.argtypes = [ptr] * 8 + [i64] * 5 + [f32]
    lib.agentrl_rope.argtypes = [ptr] * 5 + [i64] * 4 + [f32]
    for name in ('agentrl_add_rmsnorm', 'agentrl_silu_mul', 'agentrl_decode_attention', 'agentrl_rope'):
        getattr(lib, name).restype = None
    lib.agentrl_avx512_bf16.restype = ctypes.c_int


@lru_cache(maxsize=None)
def kernels():
    """The compiled kernels (a ``ctypes.CDLL``), built on first use; None if they cannot be had (``why_not``)."""
    global _why
    if os.environ.get(SWITCH, '1') == '0':
        _why = f'{SWITCH}=0'
        return None
    if not sys.platform.startswith('linux'):
        _why = f'the decoding kernels are built on Linux only (this is {sys.platform})'
        return None
    cc = _compiler()
    if cc is None:
        _why = 'no C compiler (cc or gcc) on the PATH'
        return None
    import torch  # noqa: F401  (its OpenMP runtime first: the library links the same one)
    try:
        path = _library_path(cc)
        if not path.is_file():
            _build(cc, path)
        lib = ctypes.CDLL(str(path))
        _declare(lib)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        _why = f'the decoding kernels did not build: {e}'
        return None
    _why = None
    return lib


def ptr(t) -> ctypes.c_void_p:
    """A tensor's data as a C pointer (the tensor must be contiguous and stay alive during the call)."""
    return ctypes.c_void_p(t.data_ptr())
