"""TRL's GRPOTrainer on agentrl environments (``agentrl.integrations.trl``): both doors, two real trainer steps each.

``environment_factory``: an environment the docs do not show (``Lamps``: calls with an enum argument, a cost per
step, partial credit at the end) goes through ``arl.trl_environment`` as the docs call it; a two-layer Qwen2 built
from a config, on a BPE tokenizer trained here with Qwen2.5's template (TRL ships it), is warm-started on the
scripted oracle's tool calls, then TRL trains two steps. The test reads what TRL trained on and logged: every
tool reply the model saw is the environment's own reply to a call it executed, TRL's rewards are the
environment's returns (summed from what the environment itself paid), and tool-reply tokens are masked.

``rollout_func``: a word-level GPT-2 (a template TRL cannot parse tool calls from) trains two steps; the ids TRL
trains on are agentrl's own rendering of the same calls, the mask is agentrl's action mask. Nothing is downloaded.
"""
from __future__ import annotations

import importlib.util
import math
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

trl = pytest.importorskip('trl', reason="TRL is not installed (pip install -e '.[trl]')")

import torch

import agentrl as arl
from agentrl.integrations.trl import ENDED, TRL_TEMPLATES, scripted_conversations, tool_methods

EXAMPLE = Path(__file__).resolve().parent.parent / 'examples' / 'trl_grpo.py'
COLOURS = ('red', 'green', 'blue')


def example():
    spec = importlib.util.spec_from_file_location('trl_grpo_example', EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Lamp:
    name: str


class Oracle:
    def reset(self, task_name):
        self.colour, self.switched = task_name, False

    def __call__(self, observation):
        if self.switched:
            return 'done'
        self.switched = True
        return f'switch {self.colour}'


class Lamps(arl.TextEnv):
    """Switch on the lamp the prompt names, then say done. Each call costs 0.1; the right lamp on at the end pays 1,
    any other lamp 0.25. Every instance keeps what it paid (``paid``) and every call it executed (``EXECUTED``)."""
    max_turns, max_tokens, max_call_words = 4, 64, 2
    calls = (arl.Call('switch', 'switch one lamp on', (arl.Arg('lamp', 'the lamp', COLOURS),)),
             arl.Call('done', 'end the episode'))
    example_calls = ('done', *(f'switch {c}' for c in COLOURS))
    scripted_kinds = ('oracle',)
    EXECUTED = []

    @staticmethod
    def scripted_policy(kind, seed=0):
        return Oracle()

    def start(self, task):
        self.on, self.paid, self.given = None, [], []
        if hasattr(Lamps, 'EPISODES'):
            Lamps.EPISODES.append(self)
        return f'light the {task.name} lamp'

    def act(self, verb, args):
        if verb == 'switch' and len(args) == 1 and args[0] in COLOURS:
            self.on = args[0]
            return f'the {args[0]} lamp is on', False
        if verb == 'done' and not args:
            return 'bye', True
        raise arl.InvalidCall('unknown call')

    def checks(self):
        return self.on == self.task.name, self.on is not None

    def end_reward(self, hidden_pass, public_pass):
        return 1.0 if hidden_pass else 0.25 if public_pass else 0.0

    def step(self, action):
        Lamps.EXECUTED.append((self.task.name, action))
        reply, reward, terminated, truncated, info = super().step(action)
        reward -= 0.1
        self.paid.append(reward)
        self.given.append(reply)
        return reply, reward, terminated, truncated, info


TASKS = [Lamp(c) for c in COLOURS]


class Spy:
    """Wraps GRPOTrainer._generate_and_score_completions: per step, what TRL trains on and what it logged, with each
    rollout's environment as the batch left it."""

    def __init__(self):
        self.steps = []
        self.original = trl.GRPOTrainer._generate_and_score_completions
        spy = self

        def wrapped(trainer, inputs):
            out = spy.original(trainer, inputs)
            n = len(inputs)
            spy.steps.append({
                'prompt_ids': out['prompt_ids'], 'prompt_mask': out['prompt_mask'],
                'completion_ids': out['completion_ids'], 'completion_mask': out['completion_mask'],
                'tool_mask': out.get('tool_mask'), 'logprobs': out.get('sampling_per_token_logps'),
                'envs': [e._env for e in trainer.environments or ()],
                'adapters': [(list(e.episode.calls), list(e.episode.replies)) for e in trainer.environments or ()],
                'completions': list(trainer._logs['completion'])[-n:],
                'rewards': {k: list(v)[-n:] for k, v in trainer._logs['rewards'].items()}})
            return out
        self.wrapped = wrapped

    def __enter__(self):
        self.patch = mock.patch.object(trl.GRPOTrainer, '_generate_and_score_completions', self.wrapped)
        self.patch.__enter__()
        return self

    def __exit__(self, *exc):
        self.patch.__exit__(*exc)


# --- the environment class and its dataset, without a trainer -----------------------------------------------------

def test_the_class_has_one_typed_documented_method_per_call_and_the_dataset_one_row_per_task():
    from transformers.utils import get_json_schema
    Env, dataset = arl.trl_environment(Lamps, TASKS)
    assert Env.__name__ == 'Lamps' and Env.max_turns == 4
    schemas = {s['function']['name']: s['function'] for s in map(get_json_schema, tool_methods(Env))}
    assert set(schemas) == {'switch', 'done'}
    lamp = schemas['switch']['parameters']
    assert lamp['required'] == ['lamp'] and lamp['properties']['lamp'] == {
        'type': 'string', 'enum': list(COLOURS), 'description': 'the lamp'}
    assert schemas['done']['description'] == 'End the episode.'
    assert dataset.column_names == ['prompt', 'task'] and dataset['task'] == list(COLOURS)
    assert dataset[0]['prompt'] == [{'role': 'user', 'content': ''}]


def test_an_episode_through_the_class_steps_the_environment_and_scores_its_return():
    Env, dataset = arl.trl_environment(Lamps, TASKS)
    env = Env()
    assert env.reset(**dataset[1]) == 'light the green lamp'
    assert env.switch(lamp='blue') == 'the blue lamp is on'
    assert env.switch() == 'error: unknown call'  # a missing argument: the environment answers, as to any bad call
    assert env.done() == 'bye'
    assert env.switch(lamp='red') == ENDED and len(env.episode.calls) == 3  # after the end: not stepped again
    assert env.episode.calls == ['switch blue', 'switch', 'done']
    assert env.episode.rewards == pytest.approx([-0.1, -0.1, 0.15]) and env.get_reward() == pytest.approx(-0.05)
    assert env.get_reward() == pytest.approx(math.fsum(env._env.paid))
    with pytest.raises(ValueError, match="task 'violet', which is not among the 3 tasks"):
        env.reset(task='violet')


def test_an_environment_without_calls_gets_one_method_taking_the_calls_text():
    from transformers.utils import get_json_schema

    class Plain(Lamps):
        calls = ()

    Env, _ = arl.trl_environment(Plain, TASKS)
    (method,) = tool_methods(Env)
    schema = get_json_schema(method)['function']
    assert schema['name'] == 'call' and schema['parameters']['required'] == ['text']
    assert "'switch red'" in schema['parameters']['properties']['text']['description']
    env = Env()
    env.reset(task='red')
    assert env.call(text='switch  red') == 'the red lamp is on' and env.episode.calls == ['switch red']


def test_a_verb_trl_reserves_is_renamed_and_on_env_error_raise_stops_training_at_scoring():
    class Odd(Lamps):
        calls = (arl.Call('reset', 'start again'), arl.Call('episode', 'show the episode'),
                 arl.Call('switch', 'switch a lamp on', (arl.Arg('lamp', 'it'),)))

        def act(self, verb, args):
            if verb == 'reset':
                raise RuntimeError('broken')
            return super().act(verb, args)

    Env, _ = arl.trl_environment(Odd, TASKS, on_env_error='raise')
    assert sorted(m.__name__ for m in tool_methods(Env)) == ['call_episode', 'call_reset', 'switch']
    env = Env()
    env.reset(task='red')
    with pytest.raises(arl.envs.EnvStepError, match='broken'):  # TRL hands this to the model as the tool's error ...
        env.call_reset()
    with pytest.raises(arl.envs.EnvStepError, match='broken'):  # ... and get_reward stops the training with it
        env.get_reward()


def test_scripted_conversations_are_the_players_episodes_as_tool_calls():
    Env, _ = arl.trl_environment(Lamps, TASKS)
    (chat, *_) = scripted_conversations(Env)
    assert [m['role'] for m in chat] == ['user', 'assistant', 'tool', 'assistant', 'tool']
    assert chat[1]['tool_calls'][0]['function'] == {'name': 'switch', 'arguments': {'lamp': 'red'}}
    assert chat[2] == {'role': 'tool', 'name': 'switch', 'content': 'the red lamp is on'}


# --- which templates TRL parses tool calls from ----------------------------------------------------------------------

def template_file(stem):
    return (Path(trl.__file__).parent / 'chat_templates' / f'{stem}.jinja').read_text()


def test_every_template_named_in_trl_templates_is_one_trl_parses_tool_calls_from():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import add_response_schema
    for family, stem in TRL_TEMPLATES.items():
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
        tok.chat_template = template_file(stem)
        add_response_schema(tok)  # raises for a template TRL does not know
        assert tok.response_template is not None, family


@pytest.mark.parametrize('style', ['chatml', 'word'])
def test_a_template_trl_cannot_parse_tool_calls_from_gets_a_one_line_error_naming_the_fix(style):
    from hfkit import bpe_tokenizer

    from agentrl.policies.hf import word_tokenizer
    tok = bpe_tokenizer('chatml') if style == 'chatml' else word_tokenizer(arl.build_tokenizer(TASKS, env=Lamps))
    with pytest.raises(ValueError) as err:
        arl.trl_environment(Lamps, TASKS, tokenizer=tok)
    message = str(err.value)
    assert '\n' not in message and 'arl.trl_rollout(env, tasks)' in message and 'Qwen2.5' in message


# --- environment_factory: two GRPO steps of TRL's trainer -----------------------------------------------------------

@pytest.fixture(scope='module')
def factory_run():
    ex = example()
    Env, dataset = arl.trl_environment(Lamps, TASKS)
    tools = tool_methods(Env)
    chats = scripted_conversations(Env)
    tok = ex.qwen_tokenizer(chats, tools)
    Env, dataset = arl.trl_environment(Lamps, TASKS, tokenizer=tok)
    model = ex.tiny_qwen(tok, seed=0)
    ex.warm_start(model, tok, chats, tools, steps=120, lr=1e-2, batch=3)
    Lamps.EXECUTED.clear()
    with Spy() as spy:
        trainer = ex.grpo(model, tok, Env, dataset, steps=2, per_device_train_batch_size=6, num_generations=3,
                          max_completion_length=160, reward_funcs=[arl.trl_monitors(Lamps, threshold=0.8)])
    return trainer, spy, tok, Env


def test_trl_executes_the_calls_in_the_environment_and_shows_the_model_its_replies(factory_run):
    trainer, spy, tok, Env = factory_run
    assert len(spy.steps) == 2
    executed = 0
    for step in spy.steps:
        for (calls, replies), completion in zip(step['adapters'], step['completions']):
            # each call of a tool the environment has, in order: its reply, until the episode ends, then ENDED
            shown = [m['content'] for m in completion if m['role'] == 'tool' and not m['content'].startswith("{'error'")]
            assert shown[:len(calls)] == [Lamps.readable(r) or ENDED for r in replies]
            assert set(shown[len(calls):]) <= {ENDED}
            executed += len(calls)
    assert executed == len(Lamps.EXECUTED) > 0  # every call the environments answered came from TRL's rollouts
    calls_logged = sum(row['tools/call_frequency'] * 6 for row in trainer.state.log_history if 'reward' in row)
    assert calls_logged >= executed


def test_trl_logs_the_environments_returns_as_its_rewards(factory_run):
    trainer, spy, _, Env = factory_run
    logged = [row for row in trainer.state.log_history if 'reward' in row]
    assert len(logged) == 2
    for step, row in zip(spy.steps, logged):
        returns = [math.fsum(env.paid) for env in step['envs']]  # what each environment paid, summed
        assert step['rewards'][Env.__name__] == pytest.approx(returns, abs=1e-6)
        assert row['reward'] == pytest.approx(sum(returns) / len(returns), abs=1e-6)
        assert row[f'rewards/{Env.__name__}/mean'] == pytest.approx(row['reward'])
        assert row['success_rate'] == pytest.approx(sum(r >= 0.8 - 1e-9 for r in returns) / len(returns))
        assert row['invalid_calls'] == pytest.approx(sum(e.n_invalid for e in step['envs']) / len(returns))
        assert row['rewards/agentrl_monitors/mean'] is None  # the monitors add nothing to the reward


def test_tool_reply_tokens_are_masked_out_of_the_loss(factory_run):
    _, spy, tok, _ = factory_run
    replies_masked = 0
    for step in spy.steps:
        ids, mask, tool = step['completion_ids'], step['completion_mask'], step['tool_mask']
        assert tool is not None
        for i, (_, replies) in enumerate(step['adapters']):
            real = mask[i].bool()
            trained = tok.decode(ids[i][real & tool[i].bool()])
            masked = tok.decode(ids[i][real & ~tool[i].bool()])
            assert '<tool_response>' not in trained
            for reply in filter(None, replies):
                assert f'<tool_response>\n{reply}\n</tool_response>' in masked
                replies_masked += 1
            assert '<tool_call>' not in masked
    assert replies_masked > 0


# --- rollout_func: agentrl's engine plays, TRL trains ---------------------------------------------------------------

@pytest.fixture(scope='module')
def rollout_run():
    from transformers import PrinterCallback

    from agentrl.policies.hf import make_policy, word_renderer, word_tokenizer
    word = arl.build_tokenizer(TASKS, env=Lamps)
    torch.manual_seed(0)
    policy = make_policy('gpt2', word, d_model=32, n_layers=1, n_heads=2)
    rollout_func, reward_func, dataset = arl.trl_rollout(Lamps, TASKS, renderer=word_renderer(word))
    Lamps.EXECUTED.clear()
    Lamps.EPISODES = []
    outputs = []

    def recorded(prompts, trainer):
        outputs.append((list(prompts), rollout_func(prompts, trainer)))
        return outputs[-1][1]
    with warnings.catch_warnings(), Spy() as spy, tempfile.TemporaryDirectory() as out:
        warnings.simplefilter('ignore')  # "experimental" rollout_func; gradient_checkpointing renamed
        args = trl.GRPOConfig(output_dir=out, max_steps=2, per_device_train_batch_size=6, num_generations=3,
                              learning_rate=1e-3, logging_steps=1, bf16=False, use_cpu=True, report_to='none',
                              save_strategy='no', gradient_checkpointing=False, disable_tqdm=True)
        trainer = trl.GRPOTrainer(policy.model, reward_funcs=[reward_func, arl.trl_monitors(Lamps)], args=args,
                                  train_dataset=dataset, processing_class=word_tokenizer(word), rollout_func=recorded)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    episodes = Lamps.EPISODES
    del Lamps.EPISODES
    return trainer, spy, outputs, episodes, word


def test_rollout_func_trains_on_the_policys_tokens_of_episodes_the_environment_played(rollout_run):
    trainer, spy, outputs, episodes, word = rollout_run
    assert [len(prompts) for prompts, _ in outputs] == [6, 6] and len(episodes) == 12
    executed = 0
    for (prompts, out), step in zip(outputs, spy.steps):
        for k, task in enumerate(prompts):
            env = episodes.pop(0)  # rollout_batch resets the environments in prompt order
            ids, env_mask = out['completion_ids'][k], out['env_mask'][k]
            text = ' '.join(word.vocab[i] for i in out['prompt_ids'][k])
            assert env.task.name == task and text == f'<bos> light the {task} lamp'
            # the policy's tokens are the calls the environment received; everything between them is its replies
            calls = [' '.join(word.vocab[i] for i in ids[s:e] if i != word.stop_id) for s, e in spans(env_mask)]
            kept = [' '.join(c.split()[:env.max_call_tokens]) for c in calls]  # a TextEnv keeps that many words
            assert [' '.join(c.split()) for c in env.actions] == kept
            between = [' '.join(word.vocab[i] for i in ids[e:s]) for (_, e), (s, _) in zip(spans(env_mask),
                                                                                           spans(env_mask)[1:])]
            shown = [' '.join(word.vocab[i] for i in word.encode(r)) for r in env.given[:len(between)]]  # <unk>: a word
            assert between == [f'<tool> {r} </tool>' for r in shown]                                  # no player said
            assert out['env_return'][k] == pytest.approx(math.fsum(env.paid))
            assert step['tool_mask'][k][:len(ids)].tolist() == env_mask  # TRL's loss mask: the policy's tokens only
            assert out['logprobs'][k][0] < 0 and all(lp == 0 for lp, m in zip(out['logprobs'][k], env_mask) if not m)
            executed += len(calls)
    assert executed == len(Lamps.EXECUTED) > 0
    logged = [row for row in trainer.state.log_history if 'reward' in row]
    for (_, out), step, row in zip(outputs, spy.steps, logged):
        assert step['rewards']['Lamps'] == pytest.approx(out['env_return'])
        assert row['reward'] == pytest.approx(sum(out['env_return']) / 6, abs=1e-6)
        assert row['invalid_calls'] == pytest.approx(sum(i['n_invalid'] for i in out['env_info']) / 6)


def test_episode_record_splits_agentrls_trajectory_at_the_first_call():
    from agentrl.integrations.trl_rollout import episode_record
    word = arl.build_tokenizer(TASKS, env=Lamps)
    traj = arl.scripted_rollout(Oracle(), Lamps(), TASKS[2], word)
    rec = episode_record(traj)
    ids, mask = traj.ids.tolist(), traj.action_mask.tolist()
    n, end = len(rec['prompt_ids']), len(rec['prompt_ids']) + len(rec['completion_ids'])
    assert ' '.join(word.vocab[i] for i in rec['prompt_ids']) == '<bos> light the blue lamp'
    assert rec['prompt_ids'] + rec['completion_ids'] == ids[:end] and ids[end - 1] == word.stop_id
    assert rec['env_mask'] == [int(m) for m in mask[n - 1:end - 1]] and sum(rec['env_mask']) == 5  # switch blue, done
    assert all(word.vocab[i] not in ('<tool>', '</tool>') for i, m in zip(rec['completion_ids'], rec['env_mask']) if m)


def fake_trainer(model, tok):
    """What rollout_func reads of a GRPOTrainer on one process, without one: its model, tokenizer, temperature, the
    arguments TRL's unwrapping for generation reads and an accelerator with no DeepSpeed or FSDP."""
    return SimpleNamespace(model=model, processing_class=tok, temperature=1.0,
                           args=SimpleNamespace(ds3_gather_for_generation=True, gradient_checkpointing_kwargs=None),
                           accelerator=SimpleNamespace(unwrap_model=lambda m: m,
                                                       state=SimpleNamespace(deepspeed_plugin=None)))


def tiny_gpt2(tok):
    from transformers import AutoModelForCausalLM

    from agentrl.policies.hf import hf_config
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(hf_config('gpt2', len(tok), d_model=32, n_layers=1, n_heads=2))


def test_rollout_func_plays_through_any_chat_template_with_agentrls_chat_renderer():
    from hfkit import bpe_tokenizer
    tok = bpe_tokenizer('chatml')
    model = tiny_gpt2(tok)
    rollout_func, reward_func, dataset = arl.trl_rollout(Lamps, TASKS)
    trainer = fake_trainer(model, tok)
    Lamps.EXECUTED.clear()
    out = rollout_func(dataset['prompt'], trainer)
    assert len(out['completion_ids']) == 3 and len(Lamps.EXECUTED) >= 3
    for prompt_ids, task in zip(out['prompt_ids'], dataset['prompt']):
        assert tok.decode(prompt_ids).endswith(f'light the {task} lamp<|im_end|>\n<|im_start|>assistant\n')
    for ids, env_mask in zip(out['completion_ids'], out['env_mask']):
        masked = tok.decode([i for i, m in zip(ids, env_mask) if not m])
        assert '<|im_start|>tool' in masked or sum(env_mask) == len(ids)
    assert reward_func(completions=[''] * 3, env_return=out['env_return']) == out['env_return']


def spans(mask):
    """(start, end) of each run of 1s."""
    out, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


# --- TRL's usual set-ups through rollout_func: peft_config, wrapped models, environment errors ----------------------

DOWN = 'the lamp service is down'


def flaky(at: str):
    """Lamps whose environment raises on the blue lamp's task, in ``reset`` (``at='reset'``) or at its first call."""
    class Flaky(Lamps):
        def start(self, task):
            if at == 'reset' and task.name == 'blue':
                raise ConnectionError(DOWN)
            return super().start(task)

        def step(self, action):
            if self.task.name == 'blue':
                raise ConnectionError(DOWN)
            return super().step(action)
    return Flaky


@pytest.fixture(scope='module')
def peft_run():
    """TRL's usual set-up on this CPU: ``GRPOTrainer(peft_config=LoraConfig(...), rollout_func=...)`` on a tiny Llama
    (the lean sampling path, LoRA layers merged), two steps, its environment failing on one task of three. The LoRA
    B matrices start random, so the adapters change the policy from the first step. Per step it keeps what the
    rollout played (``rollout_batch``'s trajectories) and, with the weights they were sampled from, agentrl's own
    log-probs of them: the adapters on and off."""
    from hfkit import tiny_llama
    from peft import LoraConfig
    from transformers import PrinterCallback

    from agentrl.policies.hf import HFPolicy
    from agentrl.rollouts import engine
    model, tok = tiny_llama()
    Env = flaky('step')
    rollout_func, reward_func, dataset = arl.trl_rollout(Env, TASKS)
    played, seen, outputs = engine.rollout_batch, [], []

    def recording(*args, **kw):
        seen.append({'trajs': played(*args, **kw)})
        return seen[-1]['trajs']

    def recorded(prompts, trainer):
        modes = [m.training for m in trainer.model.modules()]
        with mock.patch.object(engine, 'rollout_batch', recording):
            outputs.append((list(prompts), rollout_func(prompts, trainer)))
        step = seen[-1]
        step['modes_kept'] = modes == [m.training for m in trainer.model.modules()]
        step['training'] = all(modes)
        batch = arl.collate(step['trajs'], tok.pad_token_id)
        policy = HFPolicy(trainer.model.get_base_model())  # the causal LM, its LoRA layers in place (peft's API)
        with torch.no_grad():
            step['logp'] = arl.sequence_log_probs(policy, batch['ids'], batch['lengths'])
            with trainer.model.disable_adapter():
                step['logp_base'] = arl.sequence_log_probs(policy, batch['ids'], batch['lengths'])
        step['batch'] = batch
        return outputs[-1][1]

    with warnings.catch_warnings(record=True) as caught, Spy() as spy, tempfile.TemporaryDirectory() as out:
        warnings.simplefilter('always')
        args = trl.GRPOConfig(output_dir=out, max_steps=2, per_device_train_batch_size=6, num_generations=3,
                              learning_rate=1e-2, logging_steps=1, bf16=False, use_cpu=True, report_to='none',
                              save_strategy='no', gradient_checkpointing=False, disable_tqdm=True)
        trainer = trl.GRPOTrainer(model, reward_funcs=[reward_func], args=args, train_dataset=dataset,
                                  processing_class=tok, rollout_func=recorded,
                                  peft_config=LoraConfig(r=8, lora_alpha=16, target_modules='all-linear'))
        torch.manual_seed(1)
        with torch.no_grad():
            for name, p in trainer.model.named_parameters():
                if 'lora_B' in name:
                    p.normal_(0.0, 0.5)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    errors = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and DOWN in str(w.message)]
    return trainer, spy, outputs, seen, errors


def test_grpo_with_peft_config_trains_two_steps_on_the_ids_mask_and_logprobs_agentrl_computes(peft_run):
    from peft import PeftModel
    trainer, spy, outputs, seen, _ = peft_run
    assert isinstance(trainer.model, PeftModel) and trainer.state.global_step == 2
    assert len(spy.steps) == len(seen) == len(outputs) == 2
    checked = 0
    for step, mine in zip(spy.steps, seen):
        batch, logp = mine['batch'], mine['logp']
        for i in range(len(mine['trajs'])):
            prompt = step['prompt_ids'][i][step['prompt_mask'][i].bool()].tolist()  # TRL pads prompts on the left
            n = int(step['completion_mask'][i].sum())
            completion = step['completion_ids'][i][:n].tolist()
            P, end = len(prompt), len(prompt) + n
            # the ids TRL trains on are agentrl's episode up to its last policy token ...
            assert prompt + completion == batch['ids'][i, :end].tolist()
            assert batch['action_mask'][i, end - 1:].sum() == 0 and batch['action_mask'][i, P - 2] == 0
            # ... its loss mask is agentrl's action mask (entry p - 1 predicts token p) ...
            assert step['tool_mask'][i][:n].tolist() == batch['action_mask'][i, P - 1:end - 1].long().tolist()
            # ... and its behaviour log-probs are agentrl's full forward of the policy tokens, in float32
            mask = batch['action_mask'][i, P - 1:end - 1].bool()
            trl_lp = step['logprobs'][i][:n]
            torch.testing.assert_close(trl_lp[mask], logp[i, P - 1:end - 1][mask], rtol=0, atol=1e-5)
            assert bool((trl_lp[~mask] == 0).all())
            checked += int(mask.sum())
    assert checked > 20


def test_the_rollout_samples_with_the_trainers_adapters_on_and_leaves_each_modules_mode(peft_run):
    _, _, _, seen, _ = peft_run
    for mine in seen:
        mask = mine['batch']['action_mask'].bool()
        assert (mine['logp'] - mine['logp_base'])[mask].abs().max() > 0.05  # the adapters change what was sampled
        assert mine['training'] and mine['modes_kept']


def test_an_environment_error_inside_trl_training_ends_that_episode_with_return_0_warns_and_is_logged(peft_run):
    trainer, spy, outputs, _, errors = peft_run
    logged = [row for row in trainer.state.log_history if 'reward' in row]
    blue = 0
    for (prompts, out), step, row in zip(outputs, spy.steps, logged):
        for task, ret, error, paid in zip(prompts, out['env_return'], out['env_error'], out['env_turn_rewards']):
            assert (error is not None) == (task == 'blue')
            if task == 'blue':
                assert ret == 0.0 and paid == [0.0] and "task 'blue'" in error and f'ConnectionError: {DOWN}' in error
                blue += 1
            else:
                assert ret == pytest.approx(sum(paid)) and ret < 0  # every call costs 0.1
        assert step['rewards']['Flaky'] == pytest.approx(out['env_return'])
        assert row['env_error_frequency'] == pytest.approx(prompts.count('blue') / len(prompts))
    assert blue >= 3 and len(errors) == blue  # blue is one of the 4 prompts of 2 steps: 3 episodes each, one warning each
    assert all("Flaky.step (turn 1, call" in e and "task 'blue'" in e for e in errors)


@pytest.mark.parametrize('at', ['reset', 'step'])
def test_rollout_funcs_on_env_error_zero_ends_the_episode_and_raise_stops(at):
    from hfkit import bpe_tokenizer
    tok = bpe_tokenizer('chatml')
    trainer = fake_trainer(tiny_gpt2(tok), tok)
    rollout_func, reward_func, dataset = arl.trl_rollout(flaky(at), TASKS)
    with pytest.warns(RuntimeWarning, match=rf"Flaky\.{at}.* task 'blue': ConnectionError: {DOWN}"):
        out = rollout_func(dataset['prompt'], trainer)
    assert [e is not None for e in out['env_error']] == [False, False, True]  # red, green, blue
    assert out['env_return'][2] == 0.0 and out['env_return'][0] < 0 and out['env_return'][1] < 0
    assert sum(out['env_mask'][2]) > 0  # the model's call is still in the episode, paid 0
    logged = {}
    rewards = reward_func(completions=[''] * 3, env_return=out['env_return'], env_error=out['env_error'],
                          log_metric=logged.__setitem__)
    assert rewards == out['env_return'] and logged == {'env_error_frequency': pytest.approx(1 / 3)}
    rollout_func, _, _ = arl.trl_rollout(flaky(at), TASKS, on_env_error='raise')
    with pytest.raises(arl.envs.EnvStepError, match=rf"task 'blue'.*ConnectionError: {DOWN}"):
        rollout_func(dataset['prompt'], trainer)


def test_trl_environments_on_env_error_zero_ends_the_episode_with_return_0_and_raise_stops():
    Env, _ = arl.trl_environment(flaky('step'), TASKS)
    env = Env()
    env.reset(task='blue')
    warns = pytest.warns(RuntimeWarning, match=rf"task 'blue', turn 1, call 'switch red': ConnectionError: {DOWN}")
    with warns, pytest.raises(arl.envs.EnvStepError):  # TRL shows the model the tool's error, counts it as failed
        env.switch(lamp='red')
    assert env.done() == ENDED and env.get_reward() == 0.0 and isinstance(env.env_error, arl.envs.EnvStepError)
    Env, _ = arl.trl_environment(flaky('reset'), TASKS)
    failed, fine = Env(), Env()
    with pytest.warns(RuntimeWarning, match=rf"reset raised on task 'blue': ConnectionError: {DOWN}"):
        assert failed.reset(task='blue') == ENDED
    assert failed.switch(lamp='red') == ENDED and failed.get_reward() == 0.0
    fine.reset(task='red')
    fine.switch(lamp='red')
    logged = {}
    arl.trl_monitors(Lamps)([''] * 2, environments=[failed, fine], log_metric=logged.__setitem__)
    assert logged['env_error_frequency'] == 0.5 and logged['success_rate'] == 0.0
    Env, _ = arl.trl_environment(flaky('reset'), TASKS, on_env_error='raise')
    with pytest.raises(arl.envs.EnvStepError, match=DOWN):
        Env().reset(task='blue')


@pytest.mark.parametrize('door', ['trl_environment', 'trl_rollout'])
def test_an_unknown_on_env_error_names_the_valid_values(door):
    with pytest.raises(ValueError, match=r"unknown on_env_error 'skip'; valid values are \['zero', 'raise'\]"):
        getattr(arl, door)(Lamps, TASKS, on_env_error='skip')


def test_causal_lm_unwraps_peft_distributed_and_compiled_wrappers_to_the_model_hfpolicy_holds():
    from hfkit import tiny_llama
    from peft import LoraConfig, get_peft_model

    from agentrl.integrations.trl_rollout import causal_lm
    from agentrl.policies.hf import HFPolicy

    class Distributed(torch.nn.Module):  # what DDP and DeepSpeed's engine look like from outside
        def __init__(self, module):
            super().__init__()
            self.module = module

    class Compiled(torch.nn.Module):  # torch.compile's OptimizedModule
        def __init__(self, module):
            super().__init__()
            self._orig_mod = module

    model, _ = tiny_llama()
    lm = model
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules='all-linear'))
    for wrapped in (peft_model, Distributed(peft_model), Compiled(Distributed(peft_model)), lm):
        assert causal_lm(wrapped) is lm
    assert 'default' in lm.model.layers[0].self_attn.q_proj.lora_A  # the LoRA layers in place: sampled with them on
    with pytest.raises(TypeError, match='pass model.get_base_model'):
        HFPolicy(peft_model)
    with pytest.raises(TypeError, match='is not a transformers causal LM'):
        causal_lm(Distributed(torch.nn.Linear(2, 2)))


def test_rollout_func_samples_in_the_precision_the_trainer_trains_in():
    """TRL's ``args.bf16`` trains under bf16 autocast; ``rollout_func`` samples under it too (TRL's own generation runs
    inside the trainer's autocast), and in float32 otherwise: the behaviour log-probs it hands TRL are the policy's
    that TRL trains."""
    from agentrl.integrations.trl_rollout import trainer_precision
    model = SimpleNamespace(device=torch.device('cpu'))  # all trainer_precision reads of the model
    for bf16, want in ((True, 'bf16'), (False, 'fp32')):
        got = trainer_precision(SimpleNamespace(args=SimpleNamespace(bf16=bf16)), model)
        assert (got.dtype, got.device) == (want, 'cpu')
    assert trainer_precision(SimpleNamespace(), model).dtype == 'fp32'  # a trainer without args: float32
    with trainer_precision(SimpleNamespace(args=SimpleNamespace(bf16=True)), model).autocast():
        assert torch.is_autocast_enabled('cpu') and torch.get_autocast_dtype('cpu') == torch.bfloat16


def test_the_examples_trl_settings_take_grpoconfigs_names_and_refuse_others_naming_the_nearest():
    settings = example().trl_settings
    assert settings(['lr_scheduler_type=constant', 'num_iterations=2', 'epsilon_high=0.28']) == \
        {'lr_scheduler_type': 'constant', 'num_iterations': 2, 'epsilon_high': 0.28}
    with pytest.raises(ValueError, match='nearest: num_iterations'):
        settings(['num_iteration=2'])
    with pytest.raises(ValueError, match='KEY=VALUE'):
        settings(['loss_type'])


def test_the_smollm2_example_trains_on_the_tasks_its_cold_start_passes_sometimes():
    """``with_signal``: of the probed train tasks, those whose episodes neither all passed nor all failed, in order."""
    from agentrl.recipes.evaluation import PassAtK
    train = arl.make_tasks('train')[:5]
    probed = PassAtK(n=4, ks=[1, 2, 4], tasks=[t.name for t in train], successes=[0, 2, 4, 1, 3], per_task={}, mean={},
                     threshold=1.0)
    assert example().with_signal(train, probed) == [train[1], train[3], train[4]]
