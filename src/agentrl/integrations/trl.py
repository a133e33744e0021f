"""agentrl's environments trained by TRL's ``GRPOTrainer``: its two doors for multi-turn agents.

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

TRL parses tool calls only out of the chat templates it knows (``TRL_TEMPLATES``) or a tokenizer that carries
its own ``response_template``; ``trl_environment(..., tokenizer=tok)`` checks that first and says which work.

``trl_rollout(env, tasks)`` -> ``(rollout_func, reward_func, dataset)`` for ``GRPOTrainer(rollout_func=...)``,
for any other template or a word-level policy: agentrl's own engine plays the episodes (``rollout.rollout_batch``
through the renderer, the trainer's model as an ``hf.HFPolicy``), so TRL trains on exactly the ids, behaviour
log-probs and action mask agentrl's recipes would (``env_mask``: 1 on the policy's tokens only).

Imports ``datasets`` (and, for the checks, ``trl``) only when called: ``pip install -e '.[trl]'``.
"""
from __future__ import annotations

import inspect
import json
import re

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
from ..rendering.owners import OWNER

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
RESERVED = ('reset', 'get_reward', 'episode', 'max_turns')
"""Names a call's method cannot take (TRL's own, and the class's public attributes): a call with such a verb becomes
the method ``call_<verb>``."""
ENDED = 'the episode has ended: answer without a tool call'
"""A tool's answer to a call made after the episode ended (the environment is not stepped again)."""
_POLICY = OWNER['policy']


def _datasets():
    try:
        import datasets
    except ImportError:
        raise ImportError("trl_environment needs datasets and trl: pip install -e '.[trl]'") from None
    return datasets


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
    words, the return and the last info) and ``max_turns`` (a call with one of the names ``RESERVED`` becomes
    ``call_<verb>``).
    """
    _make = None      # a zero-argument factory of the agentrl environment
    _tasks = {}       # task name -> task
    _show = staticmethod(lambda text: text)  # the environment's text as the model reads it (``readable``)
    _source = None    # the environment (factory or Gymnasium id) given to trl_environment
    _calls = {}       # verb -> envs.calls.Call (empty: the one method ``call(text)``)
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
        """Start the episode of the row's ``task`` (its name) in a fresh environment -> its prompt."""
        if task not in self._tasks:
            raise ValueError(f'{type(self).__name__}.reset: the row names task {task!r}, which is not among the '
                             f'{len(self._tasks)} tasks given to trl_environment (e.g. {sorted(self._tasks)[:3]})')
        self._state, self._error = EpisodeState(self._make(), self._tasks[task]), None
        return self._show(self._state.episode.prompt)

    def get_reward(self) -> float:
        """The episode's return: the sum of its steps' rewards (raises what the environment raised, if it did)."""
        if self._error is not None:
            raise self._error
        return self.episode.reward

    def _step(self, text: str) -> str:
        """Make one call (its text) -> the reply the model reads."""
        if self._state is None:
            raise RuntimeError(f'{type(self).__name__}: a call before reset()')
        if self._done:
            return ENDED
        try:
            obs = self._state.step(text)  # the turn every loop takes: the call, reply and step reward join the episode
        except (EnvStepError, TypeError) as e:  # TRL hands a tool's exception to the model; get_reward raises it
            self._error = e
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


def trl_environment(env=DEFAULT_ENV, tasks=None, reward: str = 'hidden', tokenizer=None):
    """An agentrl environment and its tasks as TRL's ``GRPOTrainer`` takes them -> ``(environment_class, dataset)``.

    Args:
        env: an environment class or factory, or a registered Gymnasium id (default: the BugFix gym).
        tasks: the tasks to train on; the dataset has one row per task (repeat or shuffle it as you like).
        reward: ``'hidden'`` (the environment's true reward) or ``'public'`` (``envs.protocol``).
        tokenizer: the trainer's tokenizer, checked (``check_trl_template``): TRL parses tool calls only from
            the templates it knows (``TRL_TEMPLATES``).

    Returns:
        ``environment_class`` for ``GRPOTrainer(environment_factory=...)`` (``TRLEnvironment`` with one method per
        call), and a ``datasets.Dataset`` with columns ``prompt`` (an empty user message: ``reset`` appends the
        task's prompt) and ``task`` (its name), for ``train_dataset=``.
    """
    datasets = _datasets()
    make, table = make_env_factory(env, reward), _task_table(tasks)
    calls, name = env_calls(env), _class_name(make)
    members = {'_make': staticmethod(make), '_tasks': table, '_show': staticmethod(env_readable(env)),
               '_source': env, '_calls': {c.verb: c for c in calls}, 'max_turns': env_attr(env, 'max_turns'),
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


# --- the rollout_func door: agentrl's engine plays the episodes ---------------------------------------------------

def episode_record(traj) -> dict:
    """One ``Trajectory`` as ``rollout_func`` returns it: ``prompt_ids`` (up to the first call), ``completion_ids``
    (from it to the last policy token: what follows changes no logit of a policy token), ``logprobs`` (the
    behaviour log-prob of each completion token, 0 off the policy's) and ``env_mask`` (1 on the policy's tokens)."""
    ids, owner, lp = traj.ids.tolist(), traj.owner.tolist(), traj.logprobs.tolist()
    mine = [i for i, o in enumerate(owner) if o == _POLICY]
    if not mine:
        raise ValueError(f'the episode of task {traj.info.get("task")!r} has no policy token')
    start, end = mine[0], mine[-1] + 1
    return {'prompt_ids': ids[:start], 'completion_ids': ids[start:end], 'logprobs': lp[start - 1:end - 1],
            'env_mask': [int(o == _POLICY) for o in owner[start:end]]}


def trl_rollout(env=DEFAULT_ENV, tasks=None, reward: str = 'hidden', renderer=None):
    """An agentrl environment and its tasks for ``GRPOTrainer(rollout_func=...)`` -> ``(rollout_func, reward_func,
    dataset)``: agentrl's engine plays every episode, so any chat template (or a word-level vocabulary) works.

    Args:
        env: as ``trl_environment``.
        tasks: as ``trl_environment``.
        reward: as ``trl_environment``.
        renderer: how episodes become tokens: default ``ChatRenderer(trainer.processing_class)`` (its chat
            template, the calls described, ``readable`` text); ``hf.word_renderer(tok)`` for a word-level policy.

    Returns:
        ``rollout_func(prompts, trainer)``: one episode per prompt (TRL repeats each task ``num_generations``
        times), sampled by ``rollout.rollout_batch`` from the trainer's model at its temperature, as
        ``episode_record`` writes it, plus ``env_return`` (each episode's return), ``env_turn_rewards`` and
        ``env_info`` (its final info);
        ``reward_func``: the returns, logged by TRL under the environment's name; and a ``datasets.Dataset`` whose
        ``prompt`` is the task's name.
    """
    datasets = _datasets()
    make, table = make_env_factory(env, reward), _task_table(tasks)
    cache = {}

    def rollout_func(prompts, trainer) -> dict:
        from ..policies.hf import HFPolicy
        from ..policies.precision import Precision
        from ..rendering.chat import ChatRenderer
        from ..rollouts.engine import rollout_batch
        model = trainer.accelerator.unwrap_model(trainer.model)
        if 'renderer' not in cache:
            cache['renderer'] = renderer if renderer is not None else ChatRenderer(trainer.processing_class)
        unknown = [p for p in prompts if p not in table]
        if unknown:
            raise ValueError(f'rollout_func: prompt {unknown[0]!r} names no task given to trl_rollout; train on the '
                             'dataset trl_rollout returned (its prompts are task names)')
        policy = HFPolicy(model, precision=Precision('fp32', model.device.type, 'the trainer places the model'))
        trajs = rollout_batch(policy, [make() for _ in prompts], [table[p] for p in prompts], cache['renderer'],
                              temperature=trainer.temperature)
        out = {k: [] for k in ('prompt_ids', 'completion_ids', 'logprobs', 'env_mask')}
        for traj in trajs:
            for k, v in episode_record(traj).items():
                out[k].append(v)
        out['env_return'] = [float(t.reward) for t in trajs]
        out['env_turn_rewards'] = [list(t.turn_rewards) for t in trajs]
        out['env_info'] = [dict(t.info) for t in trajs]
        return out

    def reward_func(completions, env_return, **kw) -> list:
        return list(env_return)

    reward_func.__name__ = reward_func.__qualname__ = _class_name(make)
    reward_func.__doc__ = f"Each episode's return in {reward_func.__name__}, as rollout_func played it."
    dataset = datasets.Dataset.from_dict({'prompt': list(table)})
    return rollout_func, reward_func, dataset


def trl_monitors(env=DEFAULT_ENV, threshold: float = 1.0):
    """A reward function that scores nothing and logs the chapter's monitors TRL does not (``docs/watching.md``),
    for either door: pass it in ``reward_funcs``; TRL logs each through ``log_metric`` beside its own.

    ``success_rate`` (share of episodes whose return reaches ``threshold``), ``invalid_calls`` (per episode, where
    the environment counts them: ``info['n_invalid']``) and ``reads_first`` (share whose first call only looks,
    where the environment tells: ``is_read_call``). It returns None for every completion (TRL leaves it out of
    the reward), so TRL logs no value (None) under ``rewards/agentrl_monitors/mean``."""
    from ..envs.protocol import RETURN_TOL
    is_read = env_attr(env, 'is_read_call', None)

    def agentrl_monitors(completions, environments=None, env_return=None, env_info=None, log_metric=None, **kw):
        if environments is not None:  # environment_factory: the episodes as the environments kept them
            episodes = [e.episode for e in environments if e.episode is not None]
            returns, infos = [ep.reward for ep in episodes], [ep.info for ep in episodes]
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
