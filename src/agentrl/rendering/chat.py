"""A renderer for any tokenizer with a chat template.

An episode is a conversation: the task prompt as the ``user`` message, each call as an
``assistant`` message, each env reply as a ``tool`` message. ``ChatRenderer`` renders it token for
token as ``tokenizer.apply_chat_template(messages, tokenize=True)`` does, and gives every token
its owner (``render.OWNER``):

- the template's markers and role headers (``<|im_start|>tool\\n``, ``<|start_header_id|>...``,
  the generation prompt) are ``template``;
- the end-of-turn marker right after a call (``<|im_end|>``, ``<|eot_id|>``, ``<stop>``) is
  ``policy``: the policy must learn to emit it, and sampling stops at it;
- the prompt's content is ``prompt``, a call's content ``policy``, a reply's content ``tool``.

So ``action_mask`` is 1 exactly on each assistant message's content and its end-of-turn marker.

A language model is told what it may do, and reads text as a person writes it (``envs.calls``). An episode of
an environment that describes its ``calls`` starts with that description where the template expects it: the
template's own ``tools=`` where it renders tools, else a ``system`` message (``describe``); its tokens are
``template``, the same in every episode of the environment; ``description(env)`` is the same as chat data hold it
(that system message, or the ``tools`` schemas), which ``render_messages`` renders back. Its prompt and replies are
rendered as its ``readable`` text (BugFix's ``read`` as Python source); what the environment receives and records
is unchanged.

Token in, token out: a sampled call's ids are kept as sampled, never re-tokenised from its text;
only the prompt, the replies and the template are tokenised. When the sampled ids are the
tokenizer's own encoding of the call text, the episode is token-identical to rendering its
messages. A call cut at the length limit has no end-of-turn marker: none is added (the policy did
not emit one), and its message says so with ``"end_of_turn": false``.

How it works: the template is rendered once with placeholder contents and split into its literal
pieces (the header before the prompt, the text between a call and a reply, ...), each tokenised
once; an episode is then the concatenation of those pieces and the tokenised contents. The
constructor checks this against the tokenizer's own ``apply_chat_template`` on a probe
conversation and refuses templates or tokenizers where they differ (a template that renders a
message differently by position, or a tokenizer that merges across a template boundary).
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from ..envs.calls import describe_calls, env_calls, env_readable, tool_schemas
from ..envs.play import Replay
from ..envs.protocol import DEFAULT_ENV, find_task, make_env_factory
from .owners import OWNER
from .protocols import as_renderer
from .trajectory import Trajectory, TrajectoryBuilder, render_play

_TEMPLATE, _PROMPT, _POLICY, _TOOL = OWNER['template'], OWNER['prompt'], OWNER['policy'], OWNER['tool']
_SENTINELS = ('XXUSERXX', 'XXCALLAXX', 'XXREPLYAXX', 'XXCALLBXX', 'XXREPLYBXX', 'XXCALLCXX')
_SYSTEM = 'XXSYSTEMXX'
DESCRIBE = ('auto', 'system', 'tools', 'none')
"""Where ``ChatRenderer`` puts an environment's description of its calls: ``'auto'`` (the template's ``tools=``
where it renders tools, else a system message), ``'system'``, ``'tools'``, or ``'none'`` (nowhere)."""
_PROBE = ('find the key of room 3 : then open it', 'look room_3', 'room_3 : a box ( x , y ) <= 7 // [ k ]',
          'take key_7', 'taken : 1 key , done ?', 'submit', 'submitted')
"""A probe conversation (any text works: it checks that rendering piece by piece equals the template's)."""


def chat_ids(out) -> list[int]:
    """The ids of ``apply_chat_template(..., tokenize=True)``, whether it returned a list or (transformers 5)
    a dict-like ``BatchEncoding``."""
    if isinstance(out, Mapping) or hasattr(out, 'input_ids'):
        out = out['input_ids']
    if hasattr(out, 'tolist'):
        out = out.tolist()
    return list(out)


def episode_messages(prompt: str, calls, replies, system: str | None = None) -> list[dict]:
    """Messages of an episode: ``system`` (if given), ``prompt`` as user, then each call (assistant) and its reply
    (tool).

    ``replies`` may be one shorter than ``calls`` (an episode cut after its last call)."""
    messages = ([{'role': 'system', 'content': system}] if system else []) + [{'role': 'user', 'content': prompt}]
    for k, call in enumerate(calls):
        messages.append({'role': 'assistant', 'content': call})
        if k < len(replies):
            messages.append({'role': 'tool', 'content': replies[k]})
    return messages


class ChatRenderer:
    """Render episodes of any environment through ``tokenizer``'s chat template (a renderer: see ``agentrl.rendering.protocols``).

    Args:
        tokenizer: a Hugging Face tokenizer (a fast one: ``PreTrainedTokenizerFast``) with a chat template.
        chat_template: a template to use instead of the tokenizer's own.
        max_call_tokens: most tokens a sampled call may have, the end-of-turn marker included, in every
            environment. Default: per environment, the longest encoding of its well-formed calls + 1 +
            ``call_slack``, the calls being ``calls`` if given, else the environment's ``example_calls``.
        calls: well-formed calls that size the default limit, whatever the environment.
        call_slack: extra tokens a sampled call may take beyond the longest well-formed one
            (a model may spell a call with more tokens than the tokenizer would).
        describe: where an environment's description of its calls goes (``DESCRIBE``): ``'auto'`` (default:
            the template's ``tools=`` if it renders tools, else a system message), ``'system'``, ``'tools'``,
            ``'none'``.
        readable: show the environment's prompt and replies as its ``readable`` text (default); False: as its
            words (a word-level vocabulary: ``hf.word_renderer``).
    """

    def __init__(self, tokenizer, chat_template: str | None = None, max_call_tokens: int | None = None,
                 call_slack: int = 2, calls=None, describe: str = 'auto', readable: bool = True):
        if describe not in DESCRIBE:
            raise ValueError(f'unknown describe {describe!r}; valid values are {list(DESCRIBE)}')
        self.tokenizer = tokenizer
        self.template = chat_template
        self.readable = bool(readable)
        if chat_template is None and not getattr(tokenizer, 'chat_template', None):
            raise ValueError(f'{type(tokenizer).__name__} has no chat template; pass chat_template=...')
        backend = getattr(tokenizer, 'backend_tokenizer', None) or getattr(tokenizer, '_tokenizer', None)
        self._encode_fast = (lambda text: backend.encode(text, add_special_tokens=False).ids) if backend is not None \
            else (lambda text: tokenizer.encode(text, add_special_tokens=False))
        self._derive_pieces()
        self.vocab_size = len(tokenizer)
        pad = getattr(tokenizer, 'pad_token_id', None)
        self.pad_id = int(pad) if pad is not None else self.stop_id
        if max_call_tokens is not None and (not isinstance(max_call_tokens, int) or max_call_tokens < 1):
            raise ValueError(f'max_call_tokens must be a positive int, got {max_call_tokens!r}')
        if not isinstance(call_slack, int) or call_slack < 0:
            raise ValueError(f'call_slack must be an int >= 0, got {call_slack!r}')
        self.call_slack = call_slack
        self.max_call_tokens = max_call_tokens or (self._size_calls(calls, 'calls') if calls is not None else None)
        self._limits = {}  # environment class -> its call limit, from its example_calls
        self._vocab = None
        self._check_probe()
        source = chat_template if chat_template is not None else tokenizer.chat_template
        self.describe = describe if describe != 'auto' else 'tools' if 'tools' in str(source) else 'system'
        if self.describe == 'tools' and 'tools' not in str(source):
            raise ValueError("describe='tools' needs a chat template that renders tools=; this one does not mention "
                             "them (use describe='system')")
        self._heads = {}  # an environment's calls -> the episode header that describes them

    # --- the template's pieces
    def render_text(self, messages, add_generation_prompt: bool = False, **kw) -> str:
        """The template's text for ``messages`` (``kw``: more of ``apply_chat_template``'s arguments, e.g. ``tools``)."""
        if self.template is not None:
            kw.setdefault('chat_template', self.template)
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **kw)

    def apply_chat_template(self, messages, **kw) -> list[int]:
        """``tokenizer.apply_chat_template(messages, tokenize=True)`` as a list of ids (the reference)."""
        if self.template is not None:
            kw.setdefault('chat_template', self.template)
        return chat_ids(self.tokenizer.apply_chat_template(list(messages), tokenize=True, **kw))

    def _derive_pieces(self):
        u, a1, t1, a2, t2, a3 = _SENTINELS
        msgs = episode_messages(u, [a1, a2, a3], [t1, t2])
        pattern = '(' + '|'.join(_SENTINELS) + ')'

        def split(text, expect):
            parts = re.split(pattern, text)
            found = parts[1::2]
            if found != list(expect):
                raise ValueError(f'the chat template does not render each message content once, in order '
                                 f'(found {found}); it cannot be split into pieces')
            return parts[0::2]  # the literal pieces around the contents

        head, p_ua, p_at, p_ta, p_at2, p_ta2, tail_a = split(self.render_text(msgs), _SENTINELS)
        *_, tail_t = split(self.render_text(msgs[:5]), _SENTINELS[:5])
        _, gen_u = split(self.render_text(msgs[:1], add_generation_prompt=True), _SENTINELS[:1])
        *_, gen_t = split(self.render_text(msgs[:3], add_generation_prompt=True), _SENTINELS[:3])
        enc = self.encode
        self.head, self.user_to_call = enc(head), enc(p_ua)
        self.call_to_reply, self.reply_to_call = enc(p_at), enc(p_ta)
        self.call_end, self.reply_end = enc(tail_a), enc(tail_t)
        checks = {'a second call-to-reply piece': (enc(p_at2), self.call_to_reply),
                  'a second reply-to-call piece': (enc(p_ta2), self.reply_to_call),
                  'the generation prompt after the prompt': (enc(gen_u), self.user_to_call),
                  'the generation prompt after a reply': (enc(gen_t), self.reply_to_call)}
        for what, (got, want) in checks.items():
            if got != want:
                raise ValueError(f'the chat template renders {what} differently ({got} vs {want}); '
                                 'ChatRenderer needs a template that renders every turn the same way')
        if not self.call_to_reply or not self.call_end or self.call_to_reply[0] != self.call_end[0]:
            raise ValueError('could not find the end-of-turn marker after an assistant message: the template must '
                             'close each assistant message with the same token, both mid-episode and at its end')
        self.stop_id = self.call_to_reply[0]
        self.eot = self.tokenizer.convert_ids_to_tokens(self.stop_id)
        self.system_pieces = self._system_pieces(u)

    def _system_pieces(self, user: str):
        """(before a system message's content, between it and the prompt), tokenised; None when the template renders
        no system message."""
        try:
            text = self.render_text([{'role': 'system', 'content': _SYSTEM}, {'role': 'user', 'content': user}])
        except Exception:  # a template that refuses the role (raise_exception in Jinja)
            return None
        if text.count(_SYSTEM) != 1 or text.count(user) != 1 or text.index(_SYSTEM) > text.index(user):
            return None
        before, rest = text.split(_SYSTEM)
        between = rest.split(user)[0]
        return self.encode(before), self.encode(between)

    def header(self, env=None) -> list[int]:
        """The ids before an episode's prompt: the template's header, with ``env``'s description of its calls where
        ``describe`` puts it (none when the environment describes no calls, or ``describe='none'``)."""
        calls = env_calls(env) if env is not None and self.describe != 'none' else ()
        if not calls:
            return self.head
        if calls not in self._heads:
            if self.describe == 'system' and self.system_pieces is None:
                raise ValueError("the chat template renders no system message, so the environment's calls cannot be "
                                 "described in one; pass describe='none' (or a template with a system role)")
            system, tools = self.description(env)
            self._heads[calls] = self._head(system[0]['content'] if system else None, tools)
        return self._heads[calls]

    def description(self, env) -> tuple[list, list | None]:
        """How an episode of ``env`` describes its calls, as chat data holds it -> (messages before the prompt,
        ``tools``): ``[system message]`` where ``describe`` is ``'system'``, the JSON schemas the template's
        ``tools=`` takes where it is ``'tools'``; neither when the environment describes no calls or it is
        ``'none'``. ``render_messages(description + conversation, tools=tools)`` starts with ``header(env)``."""
        calls = env_calls(env) if env is not None and self.describe != 'none' else ()
        if not calls:
            return [], None
        if self.describe == 'tools':
            return [], tool_schemas(calls)
        return [{'role': 'system', 'content': describe_calls(calls)}], None

    def _head(self, system: str | None = None, tools=None) -> list[int]:
        """The ids before the prompt: the template's header with a system message's content and ``tools`` (the
        schemas ``tools=`` takes, rendered where the template puts them); the bare header with neither."""
        if tools:
            first = [{'role': 'system', 'content': system}] if system is not None else []
            text = self.render_text(first + [{'role': 'user', 'content': _SENTINELS[0]}], tools=tools)
            if text.count(_SENTINELS[0]) != 1:
                raise ValueError('the chat template renders the prompt more than once beside tools=; use '
                                 "describe='system'")
            return self.encode(text.split(_SENTINELS[0])[0])
        if system is None:
            return self.head
        if self.system_pieces is None:
            raise ValueError('the chat template renders no system message')
        before, between = self.system_pieces
        return before + self.encode(system) + between

    def _check_probe(self):
        prompt, *rest = _PROBE
        calls, replies = rest[0::2], rest[1::2]
        systems = (None, 'the calls: look ROOM, take KEY, submit') if self.system_pieces else (None,)
        for system, n_replies in [(s, n) for s in systems for n in (len(calls), len(calls) - 1)]:
            msgs = episode_messages(prompt, calls, replies[:n_replies], system=system)
            mine, theirs = self.render_messages(msgs).ids.tolist(), self.apply_chat_template(msgs)
            if mine != theirs:
                i = next((k for k, (x, y) in enumerate(zip(mine, theirs)) if x != y), min(len(mine), len(theirs)))
                raise ValueError(f'rendering piece by piece differs from apply_chat_template at token {i}: the '
                                 'tokenizer merges text across a template boundary, which ChatRenderer cannot follow')

    # --- the renderer protocol
    def encode(self, text: str) -> list[int]:
        """Tokenise ``text`` alone (no special tokens added)."""
        return list(self._encode_fast(text))

    def decode(self, ids) -> str:
        if hasattr(ids, 'tolist'):
            ids = ids.tolist()
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def new_episode(self, env=None) -> 'ChatEpisode':
        """A builder for one episode of ``env`` (its description of its calls in the header, its text as
        ``readable`` shows it); ``env=None``: the template's plain header, text as given."""
        return ChatEpisode(self, self.header(env), env_readable(env) if env is not None and self.readable else None)

    @property
    def vocab(self) -> list:
        """Every token id's string (``convert_ids_to_tokens``), built on first use: what the viewer shows."""
        if self._vocab is None:
            self._vocab = self.tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
        return self._vocab

    def _size_calls(self, calls, where) -> int:
        calls = [c for c in calls or () if isinstance(c, str) and c.strip()]
        if not calls:
            raise ValueError(f'{where} must hold at least one well-formed call to size the call limit')
        return max(len(self.encode(c)) for c in calls) + 1 + self.call_slack

    def call_limit(self, env) -> int:
        """Most tokens a sampled call may have in ``env`` (see the ``max_call_tokens`` argument)."""
        if self.max_call_tokens is not None:
            return self.max_call_tokens
        kind = type(env)
        if kind not in self._limits:
            calls = getattr(env, 'example_calls', None)
            if not calls:
                raise ValueError(f'ChatRenderer cannot size a call for {kind.__name__}: it lists no example_calls; pass '
                                 'ChatRenderer(..., max_call_tokens=N) or calls=[...] (well-formed calls)')
            self._limits[kind] = self._size_calls(calls, f'{kind.__name__}.example_calls')
        return self._limits[kind]

    def encode_call(self, text: str) -> list[int]:
        return self.encode(text) + [self.stop_id]

    def call_text(self, ids) -> str:
        ids = list(ids)
        if ids and ids[-1] == self.stop_id:
            ids = ids[:-1]
        return self.decode(ids)

    # --- messages <-> trajectories
    def render_messages(self, messages, reward: float = 0.0, info: dict | None = None, turn_rewards=None,
                        tools=None) -> Trajectory:
        """Render a conversation (an optional system message, user, then assistant / tool alternating) -> Trajectory
        with owners (the system message's tokens are ``template``, as an environment's description is; so are
        ``tools``, the schemas the template's ``tools=`` takes, where it renders them).

        An assistant message with ``"end_of_turn": false`` is rendered without its end-of-turn marker
        (a call cut at the length limit, as ``export`` writes it). ``reward`` is the return; ``turn_rewards``
        (optional) each call's reward (without it the return is paid at the last call)."""
        messages = list(messages)
        system = None
        if messages and messages[0].get('role') == 'system':
            system, messages = messages[0]['content'], messages[1:]
        if not messages or messages[0].get('role') != 'user':
            raise ValueError('an episode starts with the user message (the task prompt), after an optional system one')
        ep = ChatEpisode(self, self._head(system, tools))
        ep.prompt(messages[0]['content'])
        expect = 'assistant'
        for k, m in enumerate(messages[1:], start=1):
            role = m.get('role')
            if role != expect:
                raise ValueError(f'message {k}: expected role {expect!r}, got {role!r} (an episode alternates '
                                 'assistant and tool after the user message)')
            if role == 'assistant':
                ids = self.encode(m['content'])
                ep.call(ids + [self.stop_id] if m.get('end_of_turn', True) is not False else ids)
                expect = 'tool'
            else:
                ep.reply(m['content'], final=k == len(messages) - 1)
                expect = 'assistant'
        return ep.build(reward, dict(info or {}), turn_rewards)

    def __repr__(self):
        return f'ChatRenderer({type(self.tokenizer).__name__}, end of turn {self.eot!r}, vocab {self.vocab_size})'


class ChatEpisode(TrajectoryBuilder):
    """One episode's tokens, owners, turns and behaviour log-probs under a chat template
    (``render.TrajectoryBuilder`` with the template's ``prompt`` and ``reply``)."""

    def __init__(self, renderer: ChatRenderer, head=None, show=None):
        super().__init__(renderer.vocab)
        self.r = renderer
        self.head = renderer.head if head is None else head  # the header, with a description of the calls or not
        self.show = show or (lambda text: text)  # the environment's text as the model reads it
        self.open_call = False  # the last thing added is a call no reply has followed yet
        self.closed = False

    def prompt(self, text: str) -> list[int]:
        """The header, the prompt and the generation prompt -> the ids added."""
        r, head = self.r, self.head
        content = r.encode(self.show(text))
        return self._add(head + content + r.user_to_call,
                         [_TEMPLATE] * len(head) + [_PROMPT] * len(content) + [_TEMPLATE] * len(r.user_to_call))

    def call(self, ids, logprobs=None) -> list[int]:
        """The policy's sampled call, kept as sampled (normally ending in the end-of-turn marker) -> the ids added."""
        self.open_call = True
        return super().call(ids, logprobs)

    def reply(self, text: str, final: bool = False) -> list[int]:
        """A tool reply: the rest of the call's closing, the tool header, the reply, and the generation prompt
        (or, when ``final``, the template's closing) -> the ids added."""
        r = self.r
        before = r.call_to_reply[1:]  # the end-of-turn marker is the call's own (or absent, for a cut call)
        after = r.reply_end if final else r.reply_to_call
        content = r.encode(self.show(text))
        self.open_call, self.closed = False, final
        return self._add(before + content + after,
                         [_TEMPLATE] * len(before) + [_TOOL] * len(content) + [_TEMPLATE] * len(after))

    def build(self, reward: float, info: dict, turn_rewards=None) -> Trajectory:
        if self.open_call:  # the episode ended after a call: the template closes that message
            self._add(self.r.call_end[1:], _TEMPLATE)
            self.open_call = False
        return super().build(reward, info, turn_rewards)


def replay(traj: Trajectory, renderer, env=DEFAULT_ENV, tasks=None) -> Trajectory:
    """Replay ``traj``'s calls (``info['actions']``) as scripted calls, each written as the renderer's own
    encoding of its text, through ``renderer`` in a fresh ``env`` (a factory or Gymnasium id) -> the scripted
    episode (``render.render_play`` with an ``envs.play.Replay`` player). The task is the one of ``tasks``
    named ``info['task']``, or without ``tasks`` the name itself (an environment that resets by name takes it;
    BugFix does): ``envs.protocol.find_task``.

    A sampled episode equals its replay wherever each sampled call is the tokenizer's encoding of its text."""
    task = find_task(traj.info['task'], tasks)
    return render_play(make_env_factory(env)(), task, Replay(traj.info['actions']), as_renderer(renderer))
