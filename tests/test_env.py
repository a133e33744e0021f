"""BugFixEnv: Gymnasium conventions, the call grammar, limits, and a fuzz of arbitrary calls."""
from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentrl as arl
from agentrl.envs.bugfix.ops import OPS
from agentrl.rendering.tokenizer import SPECIALS

ALL = arl.make_tasks('all')
_VOCAB = arl.build_tokenizer(ALL).vocab
VALID_CALLS = ['read', 'test', 'submit'] + [f'edit {op}' for op in OPS]


def is_well_formed(call: str) -> bool:
    """The grammar: exactly ``read``, ``test``, ``submit`` or ``edit <op>`` (words split on whitespace)."""
    words = call.split()
    return words in (['read'], ['test'], ['submit']) or (len(words) == 2 and words[0] == 'edit' and words[1] in OPS)


# --- Gymnasium conventions

def test_reset_and_step_follow_gymnasium():
    env = arl.BugFixEnv()
    out = env.reset(seed=0, options={'task': 'minmax/clamp'})
    assert isinstance(out, tuple) and len(out) == 2
    obs, info = out
    assert isinstance(obs, str) and isinstance(info, dict)
    assert obs == 'fix clamp : tests fail'
    assert info['task'] == 'minmax/clamp' and info['family'] == 'minmax'
    assert info['actions'] == [] and info['n_invalid'] == 0 and info['submitted'] is False
    out = env.step('read')
    assert isinstance(out, tuple) and len(out) == 5
    obs, reward, terminated, truncated, info = out
    assert isinstance(obs, str) and isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool) and isinstance(info, dict)
    assert obs.split() == list(ALL[0].source)
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_reset_with_seed_only_draws_a_reproducible_task():
    env = arl.BugFixEnv()
    names = [env.reset(seed=s)[1]['task'] for s in range(10)]
    assert names == [env.reset(seed=s)[1]['task'] for s in range(10)]
    assert len(set(names)) > 1
    assert set(names) <= {t.name for t in ALL}


def test_gymnasium_env_checker_accepts_env():
    from gymnasium.utils.env_checker import check_env
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        check_env(arl.BugFixEnv(), skip_render_check=True)


def test_info_and_actions_format():
    env = arl.BugFixEnv()
    env.reset(options={'task': 'init/factorial'})
    env.step('read')
    env.step('edit  fix_init')  # extra whitespace is still the same two words
    _, reward, terminated, _, info = env.step('submit')
    assert terminated and reward == 1.0
    assert info['actions'] == [' read ', ' edit fix_init ', ' submit ']
    for key in ('task', 'family', 'actions', 'n_invalid', 'submitted', 'hidden_pass', 'public_pass'):
        assert key in info
    assert info['submitted'] and info['hidden_pass'] and info['public_pass']


def test_hidden_pass_reported_without_submit():
    env = arl.BugFixEnv(max_turns=2)
    env.reset(options={'task': 'zero/share'})
    _, _, _, _, info = env.step('edit guard_zero')
    assert info['hidden_pass'] is True and info['submitted'] is False
    _, reward, terminated, truncated, info = env.step('test')
    assert truncated and not terminated and reward == 0.0, 'no submit, no reward'
    assert info['hidden_pass'] is True


def test_turn_limit_truncates():
    env = arl.BugFixEnv(max_turns=3)
    env.reset(options={'task': 'range/total'})
    results = [env.step('test') for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)
    with pytest.raises(RuntimeError, match='reset'):
        env.step('submit')


def test_token_count_matches_rendered_episode(train_tasks, tok):
    """env.n_tokens counts exactly the tokens the renderer writes for a scripted episode."""
    for kind in ('oracle', 'blind', 'random'):
        for task in train_tasks:
            env = arl.BugFixEnv()
            rendered = arl.scripted_rollout(arl.scripted_policy(kind, seed=2), env, task, tok)
            assert env.n_tokens == len(rendered.ids), (kind, task.name)
            assert env.n_tokens <= env.max_tokens


def test_token_limit_truncates_before_overflow(tok):
    """A small max_tokens ends the episode (truncated) rather than let the rendering exceed it."""
    for max_tokens in (24, 40, 64):
        env = arl.BugFixEnv(max_tokens=max_tokens, max_turns=50)
        traj = arl.scripted_rollout(arl.scripted_policy('random', seed=1), env, ALL[6], tok)
        assert len(traj.ids) <= max_tokens
        assert env.n_tokens <= max_tokens


# --- fuzzing the call grammar

_specials = st.sampled_from(list(SPECIALS))
_vocab_word = st.sampled_from(_VOCAB)
_word = st.one_of(_vocab_word, _specials, st.text(min_size=0, max_size=12))
_sep = st.sampled_from([' ', '  ', '\t', '\n', ' \u00a0 '])


@st.composite
def _calls(draw):
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(st.sampled_from([c for c in VALID_CALLS if c != 'submit']))
    if kind == 1:  # near misses of the grammar
        return draw(st.sampled_from(['', ' ', 'edit', 'edit nope', 'Read', 'READ', 'read read', 'submit now',
                                     'edit fix_init extra', 'edit edit', 'fix_init', 'test 1', '<stop>', 'read<stop>',
                                     'edit\tswap_minmax', '\nsubmit\n', 'edit swap_minmax swap_minmax']))
    if kind == 2:  # a few words from the vocabulary, specials and arbitrary strings
        words = draw(st.lists(_word, min_size=0, max_size=5))
        return draw(_sep).join(words)
    if kind == 3:  # arbitrary text
        return draw(st.text(max_size=40))
    if kind == 4:  # a very long call
        return ' '.join(draw(st.lists(_vocab_word, min_size=1, max_size=8)) * draw(st.integers(1, 300)))
    if kind == 5:
        return draw(st.sampled_from(VALID_CALLS)) + draw(_sep)
    return draw(st.sampled_from(VALID_CALLS))


FUZZ_CALLS = []
"""Every call the fuzz test made (test_fuzz_covered_thousands_of_calls checks the total)."""


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(task=st.sampled_from(ALL), reward=st.sampled_from(['hidden', 'public']), max_turns=st.integers(3, 12),
       max_tokens=st.sampled_from([64, 320, 320]), data=st.data())
def test_fuzz_env_never_raises_and_always_ends(task, reward, max_turns, max_tokens, data):
    """Episodes of arbitrary calls: the env never raises, ends within max_turns, counts every invalid call once."""
    env = arl.BugFixEnv(reward=reward, max_turns=max_turns, max_tokens=max_tokens)
    obs, info = env.reset(options={'task': task})
    assert isinstance(obs, str)
    n_invalid, steps, edited = 0, 0, False
    while True:
        call = data.draw(_calls(), label=f'call {steps}')
        obs, r, terminated, truncated, info = env.step(call)
        FUZZ_CALLS.append(call)
        steps += 1
        second_edit = is_well_formed(call) and call.split()[0] == 'edit' and edited  # one edit per episode
        n_invalid += not is_well_formed(call) or second_edit
        edited |= is_well_formed(call) and call.split()[0] == 'edit'
        assert isinstance(obs, str)
        assert info['n_invalid'] == n_invalid, f'call {call!r}'
        assert info['actions'][-1] == ' ' + ' '.join(call.split()[:env.max_call_tokens]) + ' '  # calls are capped
        assert len(info['actions']) == steps == info['turn']
        assert r in (0.0, 1.0)
        if terminated:
            assert call.split() == ['submit'] and info['submitted']
            assert r == float(info['hidden_pass'] if reward == 'hidden' else info['public_pass'])
        else:
            assert r == 0.0
        assert not (terminated and truncated)
        assert env.n_tokens <= env.max_tokens
        if terminated or truncated:
            break
        assert steps < max_turns, 'the episode must end by max_turns calls'
    assert steps <= max_turns
    with pytest.raises(RuntimeError):
        env.step('submit')


def test_fuzz_covered_thousands_of_calls():
    """Runs after the fuzz test (file order): it must have fed thousands of calls of every kind."""
    if not FUZZ_CALLS:
        pytest.skip('run together with test_fuzz_env_never_raises_and_always_ends')
    assert len(FUZZ_CALLS) >= 2000, len(FUZZ_CALLS)
    assert sum(not is_well_formed(c) for c in FUZZ_CALLS) >= 500
    assert sum(c.strip() == '' for c in FUZZ_CALLS) >= 10
    assert sum(len(c.split()) > 100 for c in FUZZ_CALLS) >= 10
    assert sum(any(w in SPECIALS for w in c.split()) for c in FUZZ_CALLS) >= 10


def test_one_edit_per_episode():
    """A second edit is refused and counted invalid: trying every op in turn would skip reading."""
    env = arl.BugFixEnv()
    env.reset(options={'task': 'minmax/clamp'})
    env.step('edit fix_compare')
    obs, _, _, _, info = env.step('edit swap_minmax')
    assert obs == 'error : already edited' and info['n_invalid'] == 1
    assert not info['hidden_pass']  # the second op was not applied


def test_long_call_token_bookkeeping(tok):
    env = arl.BugFixEnv()
    env.reset(options={'task': 'minmax/clamp'})
    _, _, terminated, truncated, info = env.step('read ' * 400)
    assert info['n_invalid'] == 1
    assert env.n_tokens <= env.max_tokens, f'n_tokens {env.n_tokens} > max_tokens {env.max_tokens}'


# --- bad input

@pytest.mark.parametrize('kwargs, fragment', [
    ({'reward': 'nope'}, 'hidden'),
    ({'max_turns': 0}, 'max_turns'),
    ({'max_tokens': -5}, 'max_tokens'),
    ({'max_call_words': 1.5}, 'max_call_words'),
    ({'render_mode': 'human'}, 'render_mode'),
])
def test_constructor_errors(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        arl.BugFixEnv(**kwargs)
