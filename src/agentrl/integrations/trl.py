"""agentrl's environments trained by TRL's ``GRPOTrainer``: its ``environment_factory`` door, and what both doors share.

``trl_environment(env, tasks)`` -> ``(environment_class, dataset)`` for ``GRPOTrainer(environment_factory=...)``.
TRL generates (with ``transformers`` or vLLM, on one GPU or many under ``accelerate``), parses the tool calls
out of the text with the tokenizer's response template, runs them, masks the tool replies (``tool_mask``) and
scores each rollout with ``get_reward``. The class is built from any environment of the text-env protocol
(``envs.protocol``):

- one public method per call the environment describes (``calls``: ``envs.calls.Call``), named after its verb,
  its arguments typed ``str`` and documented (``Args:``, an argument's ``choices`` as an enum), so the chat
  template shows the model the same schema ``tool_schemas`` gives; an environment that describes no calls gets
  one method, ``call(text)``, taking the call's text. A method writes the call as the environment reads it
  (``edit swap_minmax``), steps the environment and returns its reply as ``readable`` text;
- ``reset(**row)``: a fresh environment per episode (the protocol's rule), reset on the row's task; the prompt it
  returns is appended to the dataset's empty user message;
- ``get_reward()``: the episode's return, the sum of every step's reward. The episode is kept as ``episode`` (an
  ``envs.play.Episode``: the prompt, each call, reply and step reward, the last info), which reward functions read
  from the instances TRL passes them as ``environments=``. An episode the model leaves by answering without a
  call earns what it was paid so far.

An environment that raises (``EnvStepError``: a sandbox that times out, a service that fails) ends its episode,
whichever door plays it (``on_env_error``, ``ON_ENV_ERROR``): by default the episode's return is 0, a warning names
the task and the error, and ``env_error_frequency`` (the share of a batch's episodes an error ended) is logged
(by ``trl_monitors`` here, by ``trl_rollout``'s reward function there); ``on_env_error='raise'`` stops the training
instead. One that breaks the protocol (``EnvProtocolError``: a bug in its code) always stops it.

TRL parses tool calls only out of the chat templates it knows (``TRL_TEMPLATES``) or a tokenizer that carries
its own ``response_template``; ``trl_environment(..., tokenizer=tok)`` checks that first and says which work.

The other door, ``rollout_func`` (any chat template, a word-level policy, a model under peft's LoRA), is
``trl_rollout.trl_rollout``: agentrl's own engine plays the episodes.

Imports ``datasets`` (and, for the checks, ``trl``) only when called: ``pip install -e '.[trl]'``.
"""
from __future__ import annotations

import inspect
import json
import re
import warnings

from ..envs.calls import env_calls, env_readable
from ..envs.play import EpisodeState
from ..envs.protocol import (
    DEFAULT_ENV,
    EnvStepError,
    env_attr,
    env_name,
    make_env_factory,
    task_name,
)

TRL_TEMPLATES = {
    'Qwen2.5': 'qwen2_5', 'Qwen3': 'qwen3', 'Qwen3-Instruct-2507': 'qwen3_instruct_2507', 'Qwen3-VL': 'qwen3_vl',
    'Qwen3.5 (think, no-think)': 'qwen3_5_think', 'Qwen3.6': 'qwen3_6', 'Qwen3.8': 'qwen3_8',
    'Llama 3.1': 'llama3_1', 'Llama 3.2': 'llama3_2', 'GLM-4-MoE': 'glm4moe', 'GPT-OSS': 'gptoss',
    'Gemma 4': 'gemma4', 'LFM2 (v2, 2.5)': 'lfm2_v2', 'Nemotron 3': 'nemotron_3_nano',
    'DeepSeek-R1-Distill': 'deepseek_r1_distill',
}
"""The chat templates TRL 1.16 parses tool calls from (``trl.chat_template_utils.add_response_schema``), by model
family -> the file of one of them in ``trl/chat_templates/``. A tokenizer must carry one of them byte for byte (as
the model's own tokenizer does), or its own ``response_template``."""
RESERVED = ('reset', 'get_reward', 'episode', 'max_turns', 'env_error')
"""Names a call's method cannot take (TRL's own, and the class's public attributes): a call with such a verb becomes
the method ``call_<verb>``."""
ENDED = 'the episode has ended: answer without a tool call'
"""A tool's answer to a call made after the episode ended (the environment is not stepped again), and the prompt of
an episode whose environment failed to reset."""
ON_ENV_ERROR = ('zero', 'raise')
"""What an environment that raises during TRL's training does (``on_env_error=``): ``'zero'`` ends its episode with
return 0, warns naming the task and the error and counts it (``env_error_frequency``); ``'raise'`` stops the
training with its ``EnvStepError``."""
ERROR_METRIC = 'env_error_frequency'
"""The metric logged through TRL's ``log_metric``: the share of a batch's episodes an environment error ended (as
TRL's ``tools/failure_frequency`` is the share of calls that failed)."""


def _datasets():
    try:
        import datasets
    except ImportError:
        raise ImportError("trl_environment needs datasets and trl: pip install -e '.[trl]'") from None
    return datasets


def check_on_env_error(value: str) -> str:
    """``value`` if it is one of ``ON_ENV_ERROR``, else ValueError naming them."""
    if value not in ON_ENV_ERROR:
        raise ValueError(f'unknown on_env_error {value!r}; valid values are {list(ON_ENV_ERROR)}')
    return value


def warn_env_error(error: Exception) -> None:
    """The warning of an episode an environment error ended (``on_env_error='zero'``): the error's message names the
    environment, the task and what it raised (``envs.protocol.checked_step``)."""
    warnings.warn(f"{error}. The episode ends with return 0 (on_env_error='zero'; 'raise' stops the training)",
                  RuntimeWarning, stacklevel=3)


def _task_table(tasks) -> dict:
    """name -> task (ValueError for no tasks or a name given twice)."""
    tasks = list(tasks or ())
    if not tasks:
        raise ValueError('trl_environment needs the tasks to train on (one dataset row each), e.g. '
                         "arl.make_tasks('train')")
    table = {task_name(t): t for t in tasks}
    if len(table) < len(tasks):
        raise ValueError('two tasks share a name: a dataset row names its task, so names must be unique')
    return table


class TRLEnvironment:
    """One rollout's agentrl environment, as TRL's ``environment_factory`` drives it (see the module docstring).

    ``trl_environment`` makes a subclass per environment, named after it, with one method per call. TRL offers the
    model every public method but ``reset`` and ``get_reward`` as a tool, so the rest is private but for
    ``episode`` (an ``envs.play.Episode``: the prompt, each call, reply and step reward in the environment's own
    words, the return and the last info), ``env_error`` (what the environment raised, which ended the episode) and
    ``max_turns`` (a call with one of the names ``RESERVED`` becomes ``call_<verb>``).
    """
    _make = None      # a zero-argument factory of the agentrl environment
    _tasks = {}       # task name -> task
    _show = staticmethod(lambda text: text)  # the environment's text as the model reads it (``readable``)
    _source = None    # the environment (factory or Gymnasium id) given to trl_environment
    _calls = {}       # verb -> envs.calls.Call (empty: the one method ``call(text)``)
    _on_env_error = 'zero'  # ON_ENV_ERROR
    max_turns = None
    """The environment's ``max_turns``: a good ``GRPOConfig(max_tool_calling_iterations=...)``."""

    def __init__(self):
        self._state, self._error = None, None  # the episode in play (envs.play.EpisodeState); what the env raised

    @property
    def episode(self):
        """The episode so far (an ``envs.play.Episode``); None before ``reset``."""
        return None if self._state is None else self._state.episode

    @property
    def _env(self):
        return None if self._state is None else self._state.env

    @property
    def _done(self) -> bool:
        return self._state is None or self._state.done or self._error is not None

    def reset(self, task: str | None = None, **row) -> str:
        """Start the episode of the row's ``task`` (its name) in a fresh environment -> its prompt (``ENDED`` if the
        environment raised, under ``on_env_error='zero'``: the episode is over before it began)."""
        if task not in self._tasks:
            raise ValueError(f'{type(self).__name__}.reset: the row names task {task!r}, which is not among the '
                             f'{len(self._tasks)} tasks given to trl_environment (e.g. {sorted(self._tasks)[:3]})')
        self._state, self._error = None, None
        try:
            self._state = EpisodeState(self._make(), self._tasks[task])
        except EnvStepError as e:
            if self._on_env_error == 'raise':
                raise
            self._failed(e)
            return ENDED
        return self._show(self._state.episode.prompt)

    def get_reward(self) -> float:
        """The episode's return: the sum of its steps' rewards; 0 if the environment raised (``on_env_error='zero'``).
        Raises what the environment raised under ``'raise'``, and a protocol error (``EnvProtocolError``) always."""
        if self._error is not None:
            if self._on_env_error == 'raise' or not isinstance(self._error, EnvStepError):
                raise self._error
            return 0.0
        return self.episode.reward

    @property
    def env_error(self) -> Exception | None:
        """What the environment raised in this episode (which ended it), or None."""
        return self._error

    def _failed(self, error: Exception) -> None:
        self._error = error
        if isinstance(error, EnvStepError) and self._on_env_error == 'zero':
            warn_env_error(error)

    def _step(self, text: str) -> str:
        """Make one call (its text) -> the reply the model reads."""
        if self._state is None and self._error is None:
            raise RuntimeError(f'{type(self).__name__}: a call before reset()')
        if self._done:
            return ENDED
        try:
            obs = self._state.step(text)  # the turn every loop takes: the call, reply and step reward join the episode
        except (EnvStepError, TypeError) as e:  # TRL hands a tool's exception to the model and counts it as failed
            self._failed(e)
            raise
        return self._show(obs) if obs else ENDED

    def _tool_call(self, text: str) -> dict:
        """A call's text as the tool call a model writes for it: ``{'name': ..., 'arguments': {...}}``."""
        if not self._calls:
            return {'name': 'call', 'arguments': {'text': text}}
        verb, *words = text.split() or ['']
        call = self._calls.get(verb)
        if call is None or len(words) != len(call.args):
            raise ValueError(f'{text!r} is not a well-formed call of {type(self).__name__} (its calls: '
                             f"{', '.join(c.usage for c in self._calls.values())})")
        return {'name': _method_name(verb), 'arguments': {a.name: w for a, w in zip(call.args, words)}}

    def __repr__(self):
        calls = self.episode.calls if self.episode else []
        return f'{type(self).__name__}(calls={calls}, {"ended" if self._done else "live"})'


def _class_name(make) -> str:
    """The environment's class name (what a factory or Gymnasium id builds), as TRL logs its reward under it."""
    name = re.sub(r'\W', '_', env_name(make))
    return name if name.isidentifier() else f'Env_{name}'


def _method_name(verb: str) -> str:
    return f'call_{verb.lstrip("_")}' if verb in RESERVED or verb.startswith('_') else verb


def _call_method(call):
    """The method of one ``Call``: ``verb(arg: str, ...)`` writes ``verb arg ...`` and steps the environment."""
    names = [a.name for a in call.args]

    def method(self, **kwargs):
        values = [str(kwargs.pop(n)) for n in names if n in kwargs] + [str(v) for v in kwargs.values()]
        return self._step(' '.join([call.verb, *values]))  # a missing or extra argument: the environment answers

    params = [inspect.Parameter('self', inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=str) for n in names]
    method.__signature__ = inspect.Signature(params, return_annotation=str)
    method.__annotations__ = {**{n: str for n in names}, 'return': str}
    args = ''.join(f'\n    {a.name}: {a.doc}' + (f' (choices: {json.dumps(list(a.choices))})' if a.choices else '')
                   for a in call.args)
    method.__doc__ = f'{call.doc[:1].upper()}{call.doc[1:]}.' + (f'\n\nArgs:{args}' if args else '') + \
        '\n\nReturns:\n    The reply of the environment.'
    method.__name__ = method.__qualname__ = _method_name(call.verb)
    return method


def _text_method(env):
    """The one method of an environment that describes no calls: ``call(text)``."""
    def call(self, text: str) -> str:
        return self._step(' '.join(str(text).split()))

    examples = [c for c in (env_attr(env, 'example_calls', ()) or ()) if isinstance(c, str)][:6]
    hint = f" (for example {', '.join(repr(c) for c in examples)})" if examples else ''
    call.__doc__ = (f'Make one call in the {env_name(env)} environment and read its reply.\n\nArgs:\n'
                    f'    text: the call, as the environment reads it{hint}\n\nReturns:\n    The reply of the environment.')
    return call


def trl_environment(env=DEFAULT_ENV, tasks=None, reward: str = 'hidden', tokenizer=None, on_env_error: str = 'zero'):
    """An agentrl environment and its tasks as TRL's ``GRPOTrainer`` takes them -> ``(environment_class, dataset)``.

    Args:
        env: an environment class or factory, or a registered Gymnasium id (default: the BugFix gym).
        tasks: the tasks to train on; the dataset has one row per task (repeat or shuffle it as you like).
        reward: ``'hidden'`` (the environment's true reward) or ``'public'`` (``envs.protocol``).
        tokenizer: the trainer's tokenizer, checked (``check_trl_template``): TRL parses tool calls only from
            the templates it knows (``TRL_TEMPLATES``).
        on_env_error: ``'zero'`` or ``'raise'`` (``ON_ENV_ERROR``): when the environment raises in ``reset`` or a
            tool call, the episode ends (later calls answer ``ENDED``) and ``get_reward`` returns 0 with a warning
            naming the task and the error, or raises it, stopping the training. Either way TRL shows a tool's
            error to the model and counts it in ``tools/failure_frequency``; ``trl_monitors`` logs
            ``env_error_frequency``.

    Returns:
        ``environment_class`` for ``GRPOTrainer(environment_factory=...)`` (``TRLEnvironment`` with one method per
        call), and a ``datasets.Dataset`` with columns ``prompt`` (an empty user message: ``reset`` appends the
        task's prompt) and ``task`` (its name), for ``train_dataset=``.
    """
    datasets = _datasets()
    check_on_env_error(on_env_error)
    make, table = make_env_factory(env, reward), _task_table(tasks)
    calls, name = env_calls(env), _class_name(make)
    members = {'_make': staticmethod(make), '_tasks': table, '_show': staticmethod(env_readable(env)),
               '_source': env, '_calls': {c.verb: c for c in calls}, 'max_turns': env_attr(env, 'max_turns'),
               '_on_env_error': on_env_error,
               '__doc__': f'{name} as a TRL environment: ' + (
                   f"calls {', '.join(_method_name(c.verb) for c in calls)}" if calls else 'call(text)')}
    for c in calls:
        members[_method_name(c.verb)] = _call_method(c)
    if not calls:
        members['call'] = _text_method(env)
    cls = type(name, (TRLEnvironment,), members)
    cls.__module__ = __name__
    if tokenizer is not None:
        check_trl_template(tokenizer)
    names = list(table)
    dataset = datasets.Dataset.from_dict({'prompt': [[{'role': 'user', 'content': ''}] for _ in names], 'task': names})
    return cls, dataset


def check_trl_template(tokenizer) -> None:
    """Raise ``ValueError`` (one line, naming the fix) unless TRL's ``GRPOTrainer`` can run tools through
    ``tokenizer``: its template renders a tool-calling conversation, and TRL parses tool calls out of it (a
    template of ``TRL_TEMPLATES``, or the tokenizer's own ``response_template``). Sets the response template
    on the tokenizer, as the trainer would."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling
    known = ', '.join(TRL_TEMPLATES)
    fix = (f"use a model whose template TRL parses tool calls from ({known}) or set tokenizer.response_template; "
           "for any other template, or a word-level policy, use arl.trl_rollout(env, tasks)")
    name = type(tokenizer).__name__
    if not supports_tool_calling(tokenizer):
        raise ValueError(f"{name}'s chat template does not render tool calls and tool replies, so TRL's "
                         f'environment_factory cannot run it: {fix}')
    if getattr(tokenizer, 'response_template', None) is None and getattr(tokenizer, 'response_schema', None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            raise ValueError(f"TRL cannot parse tool calls out of {name}'s chat template (it is none of the "
                             f'templates it knows): {fix}') from None


def tool_methods(environment) -> list:
    """The methods TRL offers the model as tools (every public one but ``reset`` and ``get_reward``), of an instance
    of ``environment`` (a class from ``trl_environment``, or an instance): what ``apply_chat_template(tools=)`` takes."""
    env = environment() if isinstance(environment, type) else environment
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), inspect.isfunction)
            if name not in ('reset', 'get_reward') and not name.startswith('_')]


def scripted_conversations(environment_class, kind: str = 'oracle', seed: int = 0) -> list:
    """Each task's episode by the environment's scripted player ``kind``, played through ``environment_class`` (from
    ``trl_environment``) -> one chat per task, as TRL's trainers read one: the prompt (``user``), each call as an
    ``assistant`` message with ``tool_calls``, each reply as a ``tool`` message. Demonstrations of the tool-call
    format, for a warm start (``SFTTrainer``, or ``apply_chat_template(..., tools=)``) before GRPO."""
    from ..envs.play import scripted_player
    env, player = environment_class(), scripted_player(environment_class._source, kind, seed)
    chats = []
    for name in environment_class._tasks:
        messages = [{'role': 'user', 'content': env.reset(task=name)}]
        if hasattr(player, 'reset'):
            player.reset(name)
        observation = env.episode.prompt  # the player reads the environment's own words
        while not env._done:
            text = player(observation)
            if text is None:
                break
            tool_call = env._tool_call(text)
            reply = getattr(env, tool_call['name'])(**tool_call['arguments'])
            messages += [{'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': tool_call}]},
                         {'role': 'tool', 'name': tool_call['name'], 'content': reply}]
            observation = env.episode.replies[-1]
        chats.append(messages)
    return chats


def trl_monitors(env=DEFAULT_ENV, threshold: float = 1.0):
    """A reward function that scores nothing and logs the chapter's monitors TRL does not (``docs/watching.md``),
    for either door: pass it in ``reward_funcs``; TRL logs each through ``log_metric`` beside its own.

    ``success_rate`` (share of episodes whose return reaches ``threshold``), ``invalid_calls`` (per episode, where
    the environment counts them: ``info['n_invalid']``) and ``reads_first`` (share whose first call only looks,
    where the environment tells: ``is_read_call``). Under ``environment_factory`` also ``env_error_frequency`` (the
    share of episodes an environment error ended; under ``rollout_func`` ``trl_rollout``'s reward function logs it).
    It returns None for every completion (TRL leaves it out of the reward), so TRL logs no value (None) under
    ``rewards/agentrl_monitors/mean``."""
    from ..envs.protocol import RETURN_TOL
    is_read = env_attr(env, 'is_read_call', None)

    def agentrl_monitors(completions, environments=None, env_return=None, env_info=None, log_metric=None, **kw):
        if environments is not None:  # environment_factory: the episodes as the environments kept them
            ours = [e for e in environments if isinstance(e, TRLEnvironment)
                    and (e.episode is not None or e.env_error is not None)]
            returns = [e.get_reward() for e in ours]  # 0 for an episode an environment error ended
            infos = [e.episode.info for e in ours if e.episode is not None]
            if log_metric is not None and ours:
                log_metric(ERROR_METRIC, sum(e.env_error is not None for e in ours) / len(ours))
        else:  # rollout_func: what it returned
            returns, infos = list(env_return or ()), list(env_info or ())
        if log_metric is not None and returns:
            log_metric('success_rate', sum(r >= threshold - RETURN_TOL for r in returns) / len(returns))
            if infos and all('n_invalid' in i for i in infos):
                log_metric('invalid_calls', sum(i['n_invalid'] for i in infos) / len(infos))
            if callable(is_read) and infos:
                log_metric('reads_first', sum(bool(i.get('actions')) and bool(is_read(' '.join(i['actions'][0].split())))
                                              for i in infos) / len(infos))
        return [None] * len(completions)
    return agentrl_monitors
