"""``agentrl bench`` (h): a slow environment, stepped one after another and in ``rollout_batch``'s thread pool.

An environment that waits (a subprocess, a sandbox, a local service) costs a lockstep rollout the sum of its
waits when the live episodes are stepped one after another: 320 episodes x 3 turns x 20 ms = 19 s. With
``env_workers=N`` each turn's calls run in N threads (``rollout._EnvPool``), so the waits overlap. The
workload: a fresh TinyAgent playing ``Waiting``, an environment whose ``step`` sleeps ``delay``
seconds and whose episodes last exactly ``turns`` calls; serial and pooled rollouts interleaved (ABBA), the
same generator seed, and the trajectories must be identical.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...envs.base import TextEnv
from ...policies.tinyagent import TinyAgent
from ...rollouts.engine import rollout_batch
from ...rendering.tokenizer import build_tokenizer
from .timing import pair_ratio, timed_interleaved


@dataclass(frozen=True)
class Job:
    name: str
    words: tuple = ('wait', 'for', 'the', 'tool', 'done', 'call', 'run', 'status')


class Waiting(TextEnv):
    """Sleeps ``delay`` seconds in every ``step``; any call is answered ``done``; ``turns`` calls end it."""
    max_tokens, max_call_words = 128, 3
    delay = 0.02

    def __init__(self, turns: int = 3, delay: float = 0.02):
        super().__init__(max_turns=turns)
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)

    def start(self, task):
        return 'wait for the tool'

    def act(self, verb, args):
        return 'done', False

    def checks(self):
        return False, False


def bench_slow_env(episodes: int = 64, turns: int = 3, delay: float = 0.02, workers: int = 8, repeats: int = 3) -> dict:
    """Serial vs ``env_workers=workers`` rollouts of ``episodes`` Waiting episodes -> figures and the ratio."""
    tasks = [Job(f'job/{i}') for i in range(episodes)]
    tok = build_tokenizer(tasks[:1])
    torch.manual_seed(0)
    model = TinyAgent(tok.vocab_size)

    def rollout(n_workers):
        envs = [Waiting(turns, delay) for _ in tasks]
        return rollout_batch(model, envs, tasks, tok, generator=torch.Generator().manual_seed(0), env_workers=n_workers)

    s = timed_interleaved({'serial': lambda: rollout(1), 'pool': lambda: rollout(workers)}, repeats)
    a, b = s['out']['serial'], s['out']['pool']
    same = all(torch.equal(x.ids, y.ids) and torch.equal(x.logprobs, y.logprobs) and x.info == y.info
               for x, y in zip(a, b)) and len(a) == len(b)
    ratio = pair_ratio(s, 'serial', 'pool')
    return {'episodes': episodes, 'turns': turns, 'delay_s': delay, 'workers': workers,
            'serial_seconds': s['median']['serial'], 'pool_seconds': s['median']['pool'],
            'waits_seconds': episodes * turns * delay, 'identical': bool(same),
            'serial_vs_pool': ratio['median'], 'ratio': ratio, 'order': s['order']}
