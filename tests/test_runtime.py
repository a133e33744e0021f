"""runtime.memory.keep_freed_memory: freed tensors are reused without page faults, and nothing numerical changes."""
import os
import subprocess
import sys

import pytest

from agentrl.runtime import memory as runtime

_PROBE = '''
import resource, sys, torch
from agentrl.runtime import memory as runtime
if sys.argv[1] == "on":
    assert runtime.keep_freed_memory()
for _ in range(10):  # warm up: the first blocks fault in either way
    torch.empty(10 << 20).fill_(1.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    torch.empty(10 << 20).fill_(1.0)  # 40 MiB, freed at once: above glibc's largest adaptive mmap threshold
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
'''


def _faults(mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith('MALLOC_')}
    out = subprocess.run([sys.executable, '-c', _PROBE, mode], capture_output=True, text=True, env=env, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(runtime._glibc() is None, reason='glibc only')
def test_freed_blocks_are_reused_without_page_faults():
    # 8 blocks of 40 MiB are 80,000 pages: by default each block is a fresh mmap that faults in anew
    off, on = _faults('off'), _faults('on')
    assert off > 40_000, off
    assert on < 1_000, on


@pytest.mark.skipif(runtime._glibc() is None, reason='glibc only')
def test_workers_inherit_the_setting_but_a_user_setting_is_kept(monkeypatch):
    monkeypatch.delenv('MALLOC_MMAP_THRESHOLD_', raising=False)
    monkeypatch.setenv('MALLOC_TRIM_THRESHOLD_', '4194304')
    assert runtime.keep_freed_memory() is True
    assert os.environ['MALLOC_MMAP_THRESHOLD_'] == str(runtime.MMAP_THRESHOLD)  # processes started later read it
    assert os.environ['MALLOC_TRIM_THRESHOLD_'] == '4194304'


def test_off_glibc_nothing_changes(monkeypatch):
    monkeypatch.setattr(sys, 'platform', 'darwin')
    monkeypatch.delenv('MALLOC_MMAP_THRESHOLD_', raising=False)
    assert runtime.keep_freed_memory() is False
    assert 'MALLOC_MMAP_THRESHOLD_' not in os.environ
