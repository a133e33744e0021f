"""``agentrl bench``'s timing machinery: warm-up-then-repeat timers, the interleaved (ABBA) session timer and
its per-pair ratio statistics, and what a run records about the machine (load average, versions).

How things are timed (``time.perf_counter``). The items of one comparison are interleaved: each is
called once to warm up, then ``repeats`` rounds each call every item once, in the given order in
even rounds and in reverse order in odd ones (A B, B A, A B, ...: ABBA), so that slow drift (other
processes, clock speed, caches) hits both sides alike. Every ratio is the median of its per-round
pair ratios (A_i / B_i, scaled by fixed token or episode counts where it compares rates), reported
with its spread (min, max, quartiles, every pair). ``timed_interleaved`` and ``pair_ratio`` do this.
"""
from __future__ import annotations

import os
import platform
import statistics
import time

import torch

METHOD = ('interleaved rounds: one warm-up call of each compared item, then `repeats` rounds calling every item '
          'once, in reverse order every other round (A B, B A, ...: ABBA); each ratio is the median of its '
          'per-round pair ratios (time of one item / time of the other, times a fixed count ratio when it '
          'compares rates), with min, max and quartiles in `ratios`; absolute figures are median seconds '
          'of the same calls')


def check_repeats(repeats) -> None:
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f'repeats must be a positive int, got {repeats!r}')


def timed(fn, repeats: int):
    """Call ``fn`` once to warm up, then ``repeats`` times -> (median seconds, all seconds, last result)."""
    check_repeats(repeats)
    fn()
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def timed_interleaved(fns: dict, repeats: int) -> dict:
    """Time the items of ``fns`` (name -> zero-argument callable) interleaved -> one session dict.

    Each item is called once to warm up (in the given order), then ``repeats`` rounds call every item
    once: in the given order in even rounds, reversed in odd ones (two items: A B, B A, A B, ...). So
    round i holds one time of every item, taken close together; ``pair_ratio`` turns them into ratios.
    Returns ``{'names', 'repeats', 'order': [[name, ...] per round], 'seconds': {name: [s per round]},
    'median': {name: median s}, 'out': {name: result of its last call}, 'loadavg_1m': load at the end}``.
    """
    check_repeats(repeats)
    names = list(fns)
    if not names:
        raise ValueError('timed_interleaved needs at least one callable')
    for name in names:
        fns[name]()
    seconds = {name: [] for name in names}
    out, order = {}, []
    for i in range(repeats):
        this = names if i % 2 == 0 else names[::-1]
        order.append(list(this))
        for name in this:
            t0 = time.perf_counter()
            out[name] = fns[name]()
            seconds[name].append(time.perf_counter() - t0)
    return {'names': names, 'repeats': repeats, 'order': order, 'seconds': seconds,
            'median': {name: statistics.median(s) for name, s in seconds.items()}, 'out': out,
            'loadavg_1m': loadavg()}


def pair_ratio(session: dict, num: str, den: str, scale: float = 1.0) -> dict:
    """The per-round ratios ``scale * seconds[num][i] / seconds[den][i]`` of a ``timed_interleaved`` session.

    A rate ratio (ours/s over theirs/s) is ``(n_ours / n_theirs) * t_theirs / t_ours``: ``num`` is the
    peer, ``den`` is ours and ``scale`` the count ratio. Returns the median (the headline figure),
    min, max, quartiles and every pair, with a ``method`` string saying so.
    """
    a, b = session['seconds'][num], session['seconds'][den]
    pairs = [scale * x / y for x, y in zip(a, b)]
    n = len(pairs)
    q1, _, q3 = statistics.quantiles(pairs, n=4, method='inclusive') if n > 1 else (pairs[0],) * 3
    return {'median': statistics.median(pairs), 'min': min(pairs), 'max': max(pairs), 'q1': q1, 'q3': q3,
            'iqr': q3 - q1, 'n': n, 'pairs': pairs, 'num': num, 'den': den, 'scale': scale,
            'loadavg_1m': session.get('loadavg_1m'),
            'method': f'median of {n} interleaved pair ratios, {scale:.4g} x seconds({num}) / seconds({den}), '
                      f'order alternating each round (ABBA)'}


def timed_pairs(fn_a, fn_b, repeats: int, scale: float = 1.0) -> tuple[dict, dict]:
    """Two items interleaved (A B, B A, ...) -> (session, ``pair_ratio`` of ``scale`` * A / B)."""
    session = timed_interleaved({'A': fn_a, 'B': fn_b}, repeats)
    return session, pair_ratio(session, 'A', 'B', scale)


def train_step_fn(model, loss_fn, lr=3e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()

    def step():
        loss = loss_fn()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def loadavg():
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def machine_info(threads: int) -> dict:
    return {'loadavg_1m_start': loadavg(), 'torch': torch.__version__, 'threads': threads, 'torch_threads': torch.get_num_threads(),
            'cpu_count': os.cpu_count(), 'python': platform.python_version(), 'platform': platform.platform(),
            'processor': platform.processor() or platform.machine(),
            'transformers': _transformers_version()}


def _transformers_version():
    try:
        import transformers
        return transformers.__version__
    except ImportError:
        return None
