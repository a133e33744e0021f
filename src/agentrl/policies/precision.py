"""Where and in which precision a ``transformers`` policy runs: the device and the autocast dtype, chosen or given.

``resolve(dtype='auto', device='auto')`` picks, and says why:

- device: ``cuda`` when torch sees a CUDA device, else ``cpu``;
- dtype: ``bf16`` autocast (matrix products in bfloat16, master weights, norms, softmax and losses in
  float32) where the hardware multiplies bfloat16 natively (a CUDA device that supports it; a CPU with
  AVX512-BF16 or AMX), else ``fp32``. On such a CPU, bf16 autocast runs SmolLM2-135M's forward and backward
  2-3x faster than fp32 (``agentrl bench --policy smollm2`` measures it); without the instructions it is
  emulated and slower.

Either is set by hand with ``dtype='fp32' | 'bf16'`` and ``device='cpu' | 'cuda'`` (``--set dtype=fp32``).
The TinyAgent always runs in float32 on the CPU: nothing here touches it.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache

DTYPES = ('auto', 'fp32', 'bf16')
"""``dtype=``: choose, float32, or bfloat16 autocast."""
DEVICES = ('auto', 'cpu', 'cuda')
"""``device=``: choose, the CPU, or the first CUDA device."""
CPU_BF16_FLAGS = ('avx512_bf16', 'amx_bf16')
"""CPU flags (``/proc/cpuinfo``) of native bfloat16 arithmetic."""


@dataclass(frozen=True)
class Precision:
    """Where a policy runs and in which precision, and why."""
    dtype: str
    """``'fp32'`` or ``'bf16'`` (autocast)."""
    device: str
    """``'cpu'`` or ``'cuda'``."""
    why: str = ''
    """How it was chosen, in words (printed by the commands that load a policy)."""

    def autocast(self):
        """The autocast context of this precision (none for fp32)."""
        if self.dtype != 'bf16':
            return nullcontext()
        import torch
        return torch.autocast(device_type=self.device, dtype=torch.bfloat16)

    def __str__(self):
        return f"{self.dtype} on {self.device}" + (f' ({self.why})' if self.why else '')


@lru_cache(maxsize=None)
def cpu_bf16() -> str | None:
    """The CPU flag of native bfloat16 arithmetic this machine has (``'avx512_bf16'``...), or None."""
    try:
        with open('/proc/cpuinfo') as f:
            flags = next((line.split(':', 1)[1].split() for line in f if line.startswith('flags')), [])
    except OSError:
        return None
    return next((flag for flag in CPU_BF16_FLAGS if flag in flags), None)


def resolve(dtype: str = 'auto', device: str = 'auto') -> Precision:
    """The device and dtype a policy runs on (``'auto'``: chosen as the module docstring says); ValueError naming
    the valid values for an unknown one, or a CUDA device torch does not see."""
    if dtype not in DTYPES:
        raise ValueError(f'unknown dtype {dtype!r}; valid values are {list(DTYPES)}')
    if device not in DEVICES:
        raise ValueError(f'unknown device {device!r}; valid values are {list(DEVICES)}')
    import torch
    why = []
    if device == 'auto':
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
        why.append('a CUDA device is present' if device == 'cuda' else 'no CUDA device')
    elif device == 'cuda' and not torch.cuda.is_available():
        raise ValueError('device=cuda, but torch sees no CUDA device (torch.cuda.is_available() is False)')
    if dtype == 'auto':
        if device == 'cuda':
            dtype = 'bf16' if torch.cuda.is_bf16_supported() else 'fp32'
            why.append('the GPU multiplies bfloat16' if dtype == 'bf16' else 'the GPU has no bfloat16')
        else:
            flag = cpu_bf16()
            dtype = 'bf16' if flag else 'fp32'
            why.append(f'this CPU has {flag.upper().replace("_", "-")}' if flag else 'this CPU has no native bfloat16')
    return Precision(dtype, device, ', '.join(why) or 'as set')
