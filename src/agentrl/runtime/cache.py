"""Where the library keeps what it makes once and reuses: converted models, compiled kernels.

``cache_dir()`` is ``$AGENTRL_CACHE``, else ``$XDG_CACHE_HOME/agentrl``, else ``~/.cache/agentrl``: pretrained models
converted from GGUF (``policies.pretrained``) and the decoding kernels compiled for this machine (``policies.native``).
Deleting it costs the time to make them again, nothing else.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$AGENTRL_CACHE``, else ``$XDG_CACHE_HOME/agentrl`` or ``~/.cache/agentrl``."""
    if os.environ.get('AGENTRL_CACHE'):
        return Path(os.environ['AGENTRL_CACHE'])
    return Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'agentrl'
