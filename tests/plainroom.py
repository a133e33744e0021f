"""A ``ChapterEnv`` whose environment lacks what some of the chapter's claims need: ``--env plainroom:PLAIN``.

The Mailroom of ``examples/mailroom.py`` has a public check and a read call (``label``); the plain
Mailroom has neither: it is built with no ``reward=`` (no check the agent can see beside the hidden one)
and answers no ``is_read_call``. Its tasks keep their groups. ``NOT_A_CHAPTER_ENV`` is what a user might
pass by mistake: the environment class itself.
"""
from __future__ import annotations

from ownenv import mailroom

from agentrl.experiments.chapter15.env_registry import ChapterEnv

_M = mailroom()


class PlainMailroom(_M.Mailroom):
    """The Mailroom with no public check (its constructor takes no ``reward=``) and no read call."""
    is_read_call = None

    def __init__(self):
        super().__init__()


PLAIN = ChapterEnv('plainroom', 'the plain Mailroom', PlainMailroom, _M.make_parcels, task_label='parcels')
NOT_A_CHAPTER_ENV = _M.Mailroom
