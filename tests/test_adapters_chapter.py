"""The chapter's environment on GEM's Guess The Number (``chapter15.guess_game.GUESS``): what a run of it needs, checked
without running it (needs the ``agentrl[gem]`` extra; skips without it)."""
from __future__ import annotations

import pytest

pytest.importorskip('gem', reason="GEM is not installed: pip install 'agentrl[gem]' (gem-llm)")

import agentrl as arl  # noqa: E402
from agentrl.experiments.chapter15.config import Ch15Config  # noqa: E402
from agentrl.experiments.chapter15.guess_game import GUESS  # noqa: E402


def test_the_guess_chapter_env_has_disjoint_splits_a_covering_vocabulary_and_a_window_that_holds_an_episode():
    train, held = GUESS.tasks('train'), GUESS.tasks('heldout')
    assert not {t.seed for t in train} & {t.seed for t in held} and GUESS.groups() == ['guess']
    tok = GUESS.tokenizer()
    assert arl.check_text_env(GUESS.env_id, GUESS.tasks('all'), tok=tok)['unknown_words'] == []
    block = Ch15Config.for_env(GUESS).model['block_size']
    env = GUESS.make()
    assert env.max_tokens <= block
    for kind in ('oracle', 'random', 'blind'):
        trajs = [arl.scripted_rollout(GUESS.player(kind, 1), GUESS.make(), t, tok) for t in train]
        assert max(len(t) for t in trajs) <= env.max_tokens
    public = arl.make_env_factory(GUESS.env_id, reward='public')()
    assert public.reward_mode == 'public'
