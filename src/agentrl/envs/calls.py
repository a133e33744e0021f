"""What an environment tells a language model: its calls, described, and its text as a subword tokenizer reads it.

The TinyAgent reads an episode as words (``fix clamp : tests fail``, a source as ``def clamp ( n , a , b ) :
<nl> <in> ...``) and learns the calls from demonstrations alone. A pretrained language model reads text, and
it is told what it may do. An environment may offer both (optional members of the text-env protocol,
``agentrl.envs.protocol``), which a chat renderer (``chat.ChatRenderer``) uses and a word-level one never does:

- ``calls``: a tuple of ``Call`` (a verb, its arguments, what it does in one line). ``describe_calls`` turns
  them into the text a system message holds, ``tool_schemas`` into the JSON schemas a chat template's own
  ``tools=`` takes, and a trainer that calls tools by name (TRL) makes one method per call of them;
- ``readable(text) -> str`` (a static method): the environment's prompt or reply as a person writes it. The
  environment's ``step`` still answers in its own words (the TinyAgent's ids, ``info['actions']`` and every
  figure are unchanged); the renderer shows the model ``readable`` of them. ``plain_text`` is the default
  of ``TextEnv``: words joined as prose joins them (no space before ``:`` or ``,``).

For example, BugFix's ``read`` reply ``def clamp ( n , a , b ) : <nl> <in> return max ( min ( n , a ) , b )``
reads as::

    def clamp(n, a, b):
        return max(min(n, a), b)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .protocol import env_attr, env_name


@dataclass(frozen=True)
class Arg:
    """One argument of a call."""
    name: str
    """Its name (``op``), written in the call's description in capitals (``edit OP``)."""
    doc: str
    """What it is, in a few words."""
    choices: tuple = ()
    """The values it takes, when there are few enough to list (empty: any word)."""

    def __post_init__(self):
        if not re.fullmatch(r'[a-z_][a-z0-9_]*', self.name or ''):
            raise ValueError(f'an argument name is a lower-case identifier, got {self.name!r}')
        object.__setattr__(self, 'choices', tuple(str(c) for c in self.choices))


@dataclass(frozen=True)
class Call:
    """One call an environment takes: ``verb ARG ARG ...``, and what it does in one line."""
    verb: str
    """The call's first word (``edit``)."""
    doc: str
    """What the call does, one line."""
    args: tuple = ()
    """Its arguments (``Arg``), in the order they are written."""

    def __post_init__(self):
        if not re.fullmatch(r'[a-z_][a-z0-9_]*', self.verb or ''):
            raise ValueError(f'a call verb is a lower-case identifier, got {self.verb!r}')
        if not isinstance(self.doc, str) or not self.doc.strip() or '\n' in self.doc:
            raise ValueError(f'call {self.verb!r}: doc is one line saying what the call does, got {self.doc!r}')
        args = tuple(self.args)
        if not all(isinstance(a, Arg) for a in args):
            raise TypeError(f'call {self.verb!r}: args must be Arg objects')
        object.__setattr__(self, 'args', args)

    @property
    def usage(self) -> str:
        """``edit OP``: the verb and its arguments' names in capitals."""
        return ' '.join([self.verb, *(a.name.upper() for a in self.args)])

    def line(self) -> str:
        """The call in one line of a description: ``edit OP: apply one fix ...; OP is one of a, b``."""
        parts = [f'{self.usage}: {self.doc}']
        for a in self.args:
            parts.append(f'{a.name.upper()} is {a.doc}' + (f", one of {', '.join(a.choices)}" if a.choices else ''))
        return '; '.join(parts)


def env_calls(env) -> tuple:
    """The ``calls`` an environment (a factory, a Gymnasium id or an instance) describes -> tuple of ``Call`` (empty
    when it describes none); TypeError naming the environment when ``calls`` holds anything else."""
    calls = env_attr(env, 'calls', ()) or ()
    if not all(isinstance(c, Call) for c in calls):
        raise TypeError(f'{env_name(env)}.calls must be a tuple of agentrl.envs.calls.Call')
    verbs = [c.verb for c in calls]
    if len(set(verbs)) < len(verbs):
        raise ValueError(f'{env_name(env)}.calls names a verb twice: {verbs}')
    return tuple(calls)


def describe_calls(calls) -> str:
    """The text of a system message that tells a model which calls exist, one line each ('' for no calls)."""
    calls = tuple(calls)
    if not calls:
        return ''
    lines = ['Answer every message with exactly one call and nothing else. The calls:']
    lines += [c.line() for c in calls]
    return '\n'.join(lines)


def tool_schemas(calls) -> list:
    """The calls as the JSON schemas a chat template's ``tools=`` takes (the OpenAI function format)."""
    out = []
    for c in calls:
        props = {a.name: {'type': 'string', 'description': a.doc, **({'enum': list(a.choices)} if a.choices else {})}
                 for a in c.args}
        out.append({'type': 'function', 'function': {
            'name': c.verb, 'description': c.doc,
            'parameters': {'type': 'object', 'properties': props, 'required': [a.name for a in c.args]}}})
    return out


_BEFORE = re.compile(r' ([:,;.)\]])')  # no space before closing punctuation
_AFTER = re.compile(r'([(\[]) ')       # nor after an opening bracket


def plain_text(text: str) -> str:
    """Words joined as prose joins them: ``'db : host h3 , port p7'`` -> ``'db: host h3, port p7'``."""
    return _AFTER.sub(r'\1', _BEFORE.sub(r'\1', ' '.join(text.split())))


def env_readable(env):
    """The environment's ``readable(text)`` (identity when it has none)."""
    fn = env_attr(env, 'readable', None)
    return fn if callable(fn) else (lambda text: text)
