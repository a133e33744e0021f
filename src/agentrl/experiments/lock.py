"""One run per folder: the OS lock on ``DIR/.lock`` that ``agentrl reproduce`` and ``agentrl sweep`` hold while they write.

Two runs writing one folder at once would replace each other's ``results.json`` and leave a mix of
both. A run therefore takes ``fcntl.flock`` on ``DIR/.lock`` before it writes anything, and a second
run on the folder is refused at once (``FolderInUse``, naming the folder and the PID that holds it).
The kernel drops the lock when its process ends, however it ends, so a killed run never leaves a
stale lock; the file stays, holding the last holder's PID. Where there is no ``fcntl`` (Windows),
folders are not locked.
"""
from __future__ import annotations

import os
from pathlib import Path

LOCK_FILE = '.lock'
"""The lock's file in the folder it guards."""


class FolderInUse(ValueError):
    """Another run holds the folder's lock (a ValueError: the commands print it as their one-line error)."""


class FolderLock:
    """The lock on ``folder`` (created if missing): ``acquire()`` or refuse, ``release()``; also a context manager."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.fd = None

    def acquire(self) -> FolderLock:
        """Take the lock without waiting, and write this process's PID into it; ``FolderInUse`` if another holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # no flock on this platform: no lock
            return self
        fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (BlockingIOError), or a file system without locks
            holder = os.pread(fd, 32, 0).decode(errors='replace').strip() or 'unknown'
            os.close(fd)
            raise FolderInUse(f'{self.folder} is in use by another run (PID {holder}); wait for it to end, or give '
                              'another --out') from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f'{os.getpid()}\n'.encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays)."""
        if self.fd is not None:
            import fcntl
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
