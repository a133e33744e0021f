"""TRL's ``rollout_func`` door: agentrl's own engine plays the episodes ``GRPOTrainer`` trains on.

``trl_rollout(env, tasks)`` -> ``(rollout_func, reward_func, dataset)`` for ``GRPOTrainer(rollout_func=...)``, for a
chat template TRL cannot parse tool calls from, or a word-level policy: ``rollout.rollout_batch`` plays one episode
per prompt through agentrl's renderer, the trainer's model as an ``hf.HFPolicy``, so TRL trains on exactly the ids,
behaviour log-probs and action mask agentrl's recipes would (``env_mask``: 1 on the policy's tokens only).

The trainer's model is sampled as TRL's set-ups hold it (``trainer_model``): unwrapped as TRL unwraps it for its own
generation (accelerate, DDP, DeepSpeed with ZeRO-3's weights gathered, FSDP's summoned), then down to the causal LM
(``causal_lm``: of peft's ``PeftModel``, which ``GRPOTrainer(peft_config=...)`` makes, the causal LM with its LoRA
layers in place). So the episodes are sampled from the policy TRL trains, its adapters on, as TRL's own generation
samples them; every module's train/eval mode is as it was afterwards.

An environment that raises ends its episode, the batch's other episodes play on (``on_env_error``,
``trl.ON_ENV_ERROR``): its return is 0, a warning names the task and the error, and the reward function logs
``env_error_frequency``; ``on_env_error='raise'`` stops the training with its ``EnvStepError`` instead.
"""
from __future__ import annotations

from contextlib import contextmanager

from torch import nn

from ..envs.protocol import DEFAULT_ENV, EnvStepError, make_env_factory
from ..rendering.owners import OWNER
from .trl import (
    ERROR_METRIC,
    _class_name,
    _datasets,
    _task_table,
    check_on_env_error,
    warn_env_error,
)

_POLICY = OWNER['policy']


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


def _inner(model):
    """What ``model`` wraps, or None when it wraps nothing ``causal_lm`` knows."""
    if hasattr(model, 'get_base_model'):  # peft's PeftModel
        return model.get_base_model()
    for name in ('_orig_mod', 'module'):  # torch.compile; DDP, DeepSpeed's engine, accelerate's wrappers
        inner = getattr(model, name, None)
        if isinstance(inner, nn.Module):
            return inner
    return None


def causal_lm(model):
    """The causal LM inside whatever wraps it -> the ``transformers`` model an ``HFPolicy`` holds: its
    ``base_model`` is the decoder (hidden states), its output embeddings the output layer.

    Unwraps, however they nest: a distributed wrapper's ``module`` (DDP, DeepSpeed's engine, accelerate's),
    ``torch.compile``'s ``_orig_mod``, and peft's ``PeftModel`` through ``get_base_model()``: the causal LM with the
    LoRA layers injected in place, so the adapters stay on (a ``PeftModel``'s own ``base_model`` is peft's
    ``LoraModel``, which runs the whole LM: logits where ``HFPolicy`` reads hidden states). TypeError if what is
    left is no causal LM."""
    while (inner := _inner(model)) is not None and inner is not model:
        model = inner
    if not callable(getattr(model, 'get_output_embeddings', None)) or not hasattr(model, 'config'):
        raise TypeError(f'{type(model).__name__} is not a transformers causal LM (it has no output embeddings), nor '
                        'a wrapper around one that causal_lm knows (peft, DDP, DeepSpeed, accelerate, torch.compile)')
    return model


@contextmanager
def trainer_model(trainer):
    """The model a ``GRPOTrainer`` trains, as the causal LM to sample from while inside (``causal_lm``).

    Unwrapped as TRL unwraps it for its own generation (``trl.models.unwrap_model_for_generation``: the
    accelerate/DDP/DeepSpeed wrapper off, ZeRO-3's sharded weights gathered, gradient checkpointing off while inside;
    FSDP's full weights summoned), so the weights are the ones TRL trains, its adapters active. Every module's
    train/eval mode is put back on leaving (the rollout switches dropout off)."""
    from trl.distributed import DistributedBackend
    from trl.models import unwrap_model_for_generation
    wrapped, args = getattr(trainer, 'model_wrapped', trainer.model), trainer.args
    with unwrap_model_for_generation(wrapped, trainer.accelerator, gather_deepspeed3_params=args.ds3_gather_for_generation,
                                     gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs) as unwrapped, \
            DistributedBackend(trainer.accelerator).summon_full_params(wrapped, recurse=False):
        model = causal_lm(unwrapped)
        modes = [(m, m.training) for m in model.modules()]
        try:
            yield model
        finally:
            for m, training in modes:
                m.training = training


class _Guard:
    """Makes one environment instance end its episode where it raises (``on_env_error='zero'``): its ``reset`` and
    ``step`` keep what it raised (``error``: an ``EnvStepError`` naming the environment, the task, the turn and the
    call) and end the episode there (an empty prompt or reply, reward 0, terminated, the last info), so the batch's
    other episodes play on. The instance keeps its class, so a renderer reads it as before; the protocol's checks
    still run on what it returns."""

    def __init__(self, env):
        self.env, self.error, self.task, self.turn, self.info = env, None, None, 0, {}
        self._reset, self._step = env.reset, env.step
        env.reset, env.step = self.reset, self.step

    def _fail(self, where: str, e: Exception) -> None:
        self.error = EnvStepError(f'{type(self.env).__name__}.{where} raised on task '
                                  f'{getattr(self.task, "name", self.task)!r}: {type(e).__name__}: {e}')
        self.error.__cause__ = e

    def reset(self, *args, **kwargs):
        self.task = (kwargs.get('options') or {}).get('task')
        try:
            out = self._reset(*args, **kwargs)
        except Exception as e:
            self._fail('reset', e)
            return '', {}
        self.info = out[1] if isinstance(out, tuple) and len(out) == 2 else {}
        return out

    def step(self, call):
        if self.error is None:
            self.turn += 1
            try:
                out = self._step(call)
            except Exception as e:
                self._fail(f'step (turn {self.turn}, call {call!r})', e)
            else:
                if isinstance(out, tuple) and len(out) == 5 and isinstance(out[4], dict):
                    self.info = out[4]
                return out
        return '', 0.0, True, False, dict(self.info)


def trainer_precision(trainer, model):
    """The precision TRL trains ``model`` in, for sampling in it too: bf16 autocast where the trainer's ``args.bf16``
    asks for it (as TRL's own generation runs under the trainer's autocast), else float32."""
    from ..policies.precision import Precision
    bf16 = bool(getattr(getattr(trainer, 'args', None), 'bf16', False))
    return Precision('bf16' if bf16 else 'fp32', model.device.type,
                     'the trainer places the model' + (', args.bf16' if bf16 else ''))


def trl_rollout(env=DEFAULT_ENV, tasks=None, reward: str = 'hidden', renderer=None, on_env_error: str = 'zero'):
    """An agentrl environment and its tasks for ``GRPOTrainer(rollout_func=...)`` -> ``(rollout_func, reward_func,
    dataset)``: agentrl's engine plays every episode, so any chat template (or a word-level vocabulary) works, with
    or without ``peft_config``.

    Args:
        env: as ``trl_environment``.
        tasks: as ``trl_environment``.
        reward: as ``trl_environment``.
        renderer: how episodes become tokens: default ``ChatRenderer(trainer.processing_class)`` (its chat
            template, the calls described, ``readable`` text); ``hf.word_renderer(tok)`` for a word-level policy.
        on_env_error: ``'zero'`` or ``'raise'`` (``trl.ON_ENV_ERROR``): an episode whose environment raises ends
            there with return 0 and a warning naming the task and the error, or the training stops with the
            ``EnvStepError``.

    Returns:
        ``rollout_func(prompts, trainer)``: one episode per prompt (TRL repeats each task ``num_generations``
        times), sampled by ``rollout.rollout_batch`` from the trainer's model (``trainer_model``) at its
        temperature, as ``episode_record`` writes it, plus ``env_return`` (each episode's return),
        ``env_turn_rewards``, ``env_info`` (its final info) and ``env_error`` (what its environment raised, as text,
        or None);
        ``reward_func``: the returns, logged by TRL under the environment's name, and ``env_error_frequency`` (the
        share of the batch's episodes an environment error ended) through TRL's ``log_metric``; and a
        ``datasets.Dataset`` whose ``prompt`` is the task's name.
    """
    datasets = _datasets()
    check_on_env_error(on_env_error)
    make, table = make_env_factory(env, reward), _task_table(tasks)
    cache = {}

    def rollout_func(prompts, trainer) -> dict:
        from ..policies.hf import HFPolicy
        from ..rendering.chat import ChatRenderer
        from ..rollouts.engine import rollout_batch
        if 'renderer' not in cache:
            cache['renderer'] = renderer if renderer is not None else ChatRenderer(trainer.processing_class)
        unknown = [p for p in prompts if p not in table]
        if unknown:
            raise ValueError(f'rollout_func: prompt {unknown[0]!r} names no task given to trl_rollout; train on the '
                             'dataset trl_rollout returned (its prompts are task names)')
        envs = [make() for _ in prompts]
        guards = [_Guard(e) for e in envs] if on_env_error == 'zero' else [None] * len(envs)
        with trainer_model(trainer) as model:
            policy = HFPolicy(model, precision=trainer_precision(trainer, model))
            trajs = rollout_batch(policy, envs, [table[p] for p in prompts], cache['renderer'],
                                  temperature=trainer.temperature)
        out = {k: [] for k in ('prompt_ids', 'completion_ids', 'logprobs', 'env_mask', 'env_return',
                               'env_turn_rewards', 'env_info', 'env_error')}
        for traj, guard in zip(trajs, guards):
            for k, v in episode_record(traj).items():
                out[k].append(v)
            error = guard.error if guard is not None else None
            if error is not None:
                warn_env_error(error)
            out['env_return'].append(0.0 if error else float(traj.reward))  # an episode the environment failed pays 0
            out['env_turn_rewards'].append([0.0] * len(traj.turn_rewards) if error else list(traj.turn_rewards))
            out['env_info'].append(dict(traj.info))
            out['env_error'].append(str(error) if error else None)
        return out

    def reward_func(completions, env_return, env_error=None, log_metric=None, **kw) -> list:
        if log_metric is not None and env_error:
            log_metric(ERROR_METRIC, sum(e is not None for e in env_error) / len(env_error))
        return list(env_return)

    reward_func.__name__ = reward_func.__qualname__ = _class_name(make)
    reward_func.__doc__ = f"Each episode's return in {reward_func.__name__}, as rollout_func played it."
    dataset = datasets.Dataset.from_dict({'prompt': list(table)})
    return rollout_func, reward_func, dataset
