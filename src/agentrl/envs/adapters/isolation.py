"""What an adapted game may touch: its own random streams, and no network.

GEM's ``reset(seed)`` seeds Python's and NumPy's *global* generators (``random.seed``,
``np.random.seed``), TextArena's game state seeds Python's, and both move Python's when imported. Left
alone, a game's reset would move the random state of the caller's own code (its data shuffles, its
sampling). ``GameRandomness`` keeps a game's global streams apart: around every call into the game
(import, construction, ``reset``, ``step``) it swaps the game's own Python and NumPy states in and the
caller's back out, and puts torch's global state back as it was. The game's draws are then a function of
its seed alone (reproducible, whatever the caller drew before), and the caller's draws are untouched.

``offline`` refuses the network while a game runs: a game that downloads data at first use (GEM's and
TextArena's word games fetch NLTK's word list) raises ``OfflineGameError`` naming the game, rather than
a network error from deep inside it, and nothing leaves the machine. ``held_output`` keeps what a library
prints while a game is first built (NLTK's ``[nltk_data] Error loading words`` lines) from reaching the user
before that message: it is dropped when the game turns out to need the network, and passed on otherwise.
"""
from __future__ import annotations

import io
import os
import random
import re
import socket
import sys
import tempfile
from contextlib import ExitStack, contextmanager

import numpy as np


class OfflineGameError(RuntimeError):
    """A game needs data from the network (it downloads at first use); agentrl runs games offline."""


class GameRandomness:
    """A game's own Python and NumPy global random states, swapped in only while the game runs (see the module)."""

    def __init__(self, seed: int = 0):
        self.reseed(seed)

    def reseed(self, seed: int):
        """Start the game's streams afresh from ``seed`` (an int >= 0): ``random.seed(seed)``, ``np.random.seed``."""
        self.python = random.Random(seed).getstate()
        self.numpy = np.random.RandomState(seed % 2**32).get_state()

    @contextmanager
    def swapped(self):
        """Run the body with the game's states as the globals; after it, keep what the game drew and restore the
        caller's Python, NumPy and (if imported) torch global states exactly."""
        caller_python, caller_numpy = random.getstate(), np.random.get_state()
        torch = sys.modules.get('torch')
        caller_torch = torch.get_rng_state() if torch is not None else None
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        try:
            yield self
        finally:
            self.python, self.numpy = random.getstate(), np.random.get_state()
            random.setstate(caller_python)
            np.random.set_state(caller_numpy)
            if caller_torch is not None:
                torch.set_rng_state(caller_torch)


@contextmanager
def offline(game: str):
    """Refuse every connection and name lookup while the body runs -> the list of refused attempts.

    An exception the body raises after a refused attempt, or NLTK's error for data it does not have, becomes
    ``OfflineGameError`` (the original chained): the game needed the network. A body that succeeds despite a refused attempt (its data was on disk and it
    only checked for updates) goes on."""
    attempts = []

    def refuser(where: int):
        def refuse(*args, **kwargs):  # where: the argument that names the address
            attempts.append(args[where] if len(args) > where else '?')
            raise OSError(f'agentrl runs {game} offline: no network connection')
        return refuse

    saved = (socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo, socket.create_connection)
    socket.socket.connect = socket.socket.connect_ex = refuser(1)  # (self, address)
    socket.getaddrinfo = socket.create_connection = refuser(0)  # (host, ...) / (address, ...)
    try:
        yield attempts
    except Exception as e:
        said = ' '.join(re.sub(r'\x1b\[[0-9;]*m', '', str(e)).replace('*', ' ').split())  # one line, no colours
        if attempts:
            where = f'it tried to reach {attempts[0]!r}: it downloads data at first use, such as a word list'
        elif type(e) is LookupError and 'nltk' in said.lower():  # NLTK's "Resource words not found"
            where = "it reads NLTK data that is not on this machine, such as the 'words' list"
        else:
            raise
        raise OfflineGameError(
            f'{game} needs data from the network ({where}) and agentrl runs games offline: choose a game that ships '
            f'its data, or install the data beforehand the way its library documents ({type(e).__name__}: '
            f'{said[:120]}{"..." if len(said) > 120 else ""})') from e
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo, socket.create_connection = saved


@contextmanager
def game_call(game: str, randomness: GameRandomness):
    """A call into a game: its own random streams swapped in, and no network."""
    with randomness.swapped(), offline(game):
        yield


class _HeldStream(io.TextIOBase):
    """Stands in for ``sys.stdout`` or ``sys.stderr``: holds what is written while ``holding``, then writes through
    (a library that kept a reference to it, as NLTK's ``download`` does in a default argument, still prints)."""

    def __init__(self, stream):
        self.stream, self.held, self.holding = stream, [], True

    def write(self, text):
        if self.holding:
            self.held.append(text)
            return len(text)
        return self.stream.write(text)

    def flush(self):
        if not self.holding:
            self.stream.flush()

    @property
    def encoding(self):
        return getattr(self.stream, 'encoding', 'utf-8')


@contextmanager
def _held_fd(fd: int):
    """Point file descriptor ``fd`` at a temporary file while the body runs -> yields ``read()`` of what it got
    (``b''`` when the descriptor cannot be duplicated)."""
    try:
        saved = os.dup(fd)
    except OSError:
        yield lambda: b''
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield lambda: (held.seek(0), held.read())[1]
        finally:
            os.dup2(saved, fd)
            os.close(saved)


@contextmanager
def held_output():
    """Hold what the body prints (``sys.stdout``, ``sys.stderr`` and file descriptors 1 and 2): dropped when it
    raises ``OfflineGameError`` (agentrl's message says what went wrong), passed on as it was otherwise."""
    if sys.stdout is None or sys.stderr is None:  # no console (pythonw): nothing reaches the user anyway
        yield
        return
    streams = {'stdout': _HeldStream(sys.stdout), 'stderr': _HeldStream(sys.stderr)}
    dropped = False
    with ExitStack() as stack:
        sys.stdout.flush(), sys.stderr.flush()
        reads = {fd: stack.enter_context(_held_fd(fd)) for fd in (1, 2)}
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = streams['stdout'], streams['stderr']
        try:
            yield
        except OfflineGameError:
            dropped = True
            raise
        finally:
            sys.stdout, sys.stderr = saved
            for stream in streams.values():
                stream.holding = False
            for stream in {*saved, sys.__stdout__, sys.__stderr__} - {None}:
                stream.flush()  # what the body wrote through them reaches the held descriptors now
            written = {fd: read() for fd, read in reads.items()}
            stack.close()  # the descriptors are the caller's again
            if not dropped:
                for (name, stream), fd in zip(streams.items(), (1, 2)):
                    getattr(sys, name).write(''.join(stream.held))
                    getattr(sys, name).flush()
                    if written[fd]:
                        os.write(fd, written[fd])
