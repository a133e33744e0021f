"""TensorBoard event files through ``torch.utils.tensorboard`` (the optional extra ``agentrl[tensorboard]``).

One scalar series per metric name (its TensorBoard tag), one point per record. ``tensorboard --logdir DIR``
then shows every run below ``DIR``; a run is a folder (``loggers.runs.run_dir`` names them).
"""
from __future__ import annotations

from pathlib import Path

INSTALL = "pip install -e '.[tensorboard]'"
"""How to get the optional dependency (the ``tensorboard`` package, which ``torch.utils.tensorboard`` needs)."""


def tensorboard_available() -> bool:
    """Whether the optional ``tensorboard`` package is installed (``TensorBoardLogger`` needs it); imports nothing."""
    from importlib.util import find_spec
    return find_spec('tensorboard') is not None


def summary_writer_class():
    """``torch.utils.tensorboard.SummaryWriter``, or ImportError saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # torch is there; the tensorboard package is not
        raise ImportError(f'TensorBoardLogger needs the tensorboard package: {INSTALL} ({err})') from err
    return SummaryWriter


class TensorBoardLogger:
    """Write each record's metrics as TensorBoard scalars (tag = metric name) into the folder ``logdir``.

    ``flush_secs``: how often the writer flushes to disk (``close()`` flushes the rest). Use as a context
    manager, or ``close()``."""

    def __init__(self, logdir, flush_secs: int = 10):
        self.logdir = Path(logdir)
        self.writer = summary_writer_class()(log_dir=str(self.logdir), flush_secs=flush_secs)

    def log(self, metrics: dict, step: int) -> None:
        """One scalar point per metric at ``step``."""
        for name, value in metrics.items():
            self.writer.add_scalar(name, float(value), global_step=int(step))

    def close(self) -> None:
        self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
