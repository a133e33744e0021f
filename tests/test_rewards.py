"""Rewards as real environments pay them: per-turn rewards, partial credit, thresholds, margins, turn credit."""
import random
import warnings

import pytest
import torch

import agentrl as arl
from agentrl.envs import TextEnv
from agentrl.recipes.credit import group_credit, rewards_to_go, turn_advantages
from agentrl.recipes.outcomes import NoSignalWarning, returns_seen, success_rate
from agentrl.rendering.trajectory import Trajectory
from agentrl.rollouts.engine import rollout_groups


class Code:
    """A task: the digits to press, in order."""

    def __init__(self, digits):
        self.digits = tuple(digits)
        self.name = 'code/' + ''.join(map(str, digits))
        self.words = ['press', 'done', 'ok', 'wrong', 'enter', 'the', 'code', *map(str, range(10))]


CODES = [Code(d) for d in ((1, 2, 3), (4, 5, 6), (7, 8, 9), (3, 1, 4))]


class Keypad(TextEnv):
    """Pays 0.25 for each digit pressed right, in order (at that step), and 0.25 more when ``done`` follows the
    whole code: per-turn rewards and partial credit (returns 0, 0.25, ..., 1.0)."""

    max_turns, max_tokens, max_call_words = 5, 64, 2
    tasks = tuple(CODES)

    def start(self, task):
        self.pressed = 0
        return 'enter the code ' + ' '.join(map(str, task.digits))

    def act(self, verb, args):
        if verb == 'done' and not args:
            return 'ok', True
        if verb != 'press' or len(args) != 1 or not args[0].isdigit():
            raise arl.InvalidCall('press a digit')
        right = self.pressed < 3 and int(args[0]) == self.task.digits[self.pressed]
        self.pressed += right
        return ('ok' if right else 'wrong'), False, 0.25 if right else 0.0

    def checks(self):
        return self.pressed == 3, self.pressed == 3

    def end_reward(self, hidden_pass, public_pass):
        return 0.25 if hidden_pass else 0.0

    @staticmethod
    def scripted_policy(kind, seed=0):
        return KeypadPlayer(kind, seed)

    scripted_kinds = ('oracle', 'random')


class KeypadPlayer(arl.envs.ScriptedPlayer if hasattr(arl.envs, 'ScriptedPlayer') else object):
    KINDS = ('oracle', 'random')

    def __init__(self, kind, seed=0):
        self.kind, self.seed, self.n = kind, seed, 0

    def reset(self, task_name):
        self.digits = [int(c) for c in task_name.split('/')[1]]
        self.turn = 0
        self.rng = random.Random(f'{self.kind}:{self.seed}:{task_name}:{self.n}')
        self.n += 1

    def __call__(self, obs):
        self.turn += 1
        if self.turn > 3:
            return 'done'
        d = self.digits[self.turn - 1] if self.kind == 'oracle' else self.rng.choice(self.digits)
        return f'press {d}'


class Recording(Keypad):
    """Keypad that records what each step paid."""
    paid = {}

    def reset(self, **kw):
        out = super().reset(**kw)
        self.log = Recording.paid.setdefault(id(self), [])
        self.log.clear()
        return out

    def step(self, action):
        out = super().step(action)
        self.log.append(out[1])
        return out


@pytest.fixture(scope='module')
def tok():
    return arl.build_tokenizer(CODES)


def _traj(turn_rewards, task='code/123'):
    """A tiny hand-built trajectory: a prompt token, then per call one policy token and one reply token."""
    ids, owner, turn = [1, 5], [arl.OWNER['template'], arl.OWNER['prompt']], [0, 0]
    for k in range(1, len(turn_rewards) + 1):
        ids += [6, 7]
        owner += [arl.OWNER['policy'], arl.OWNER['tool']]
        turn += [k, k]
    owner_t = torch.tensor(owner)
    return Trajectory(torch.tensor(ids), (owner_t[1:] == arl.OWNER['policy']).float(), torch.zeros(len(ids) - 1),
                      sum(turn_rewards), {'task': task, 'actions': ['x'] * len(turn_rewards), 'n_invalid': 0},
                      owner_t, torch.tensor(turn), turn_rewards=list(turn_rewards))


def test_check_text_env_accepts_per_step_rewards(tok):
    summary = arl.check_text_env(Keypad, CODES, tok)
    assert summary['episodes'] > 0


def test_scripted_rollout_keeps_every_step_reward(tok):
    env = Recording()
    for kind in ('oracle', 'random'):
        player = Keypad.scripted_policy(kind, seed=3)
        for task in CODES:
            traj = arl.scripted_rollout(player, env, task, tok)
            assert traj.turn_rewards == env.log
            assert traj.reward == sum(env.log)
    oracle = arl.scripted_rollout(Keypad.scripted_policy('oracle'), Keypad(), CODES[0], tok)
    assert oracle.turn_rewards == [0.25, 0.25, 0.25, 0.25] and oracle.reward == 1.0


def test_rollout_batch_keeps_every_step_reward(tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    envs = [Recording() for _ in range(24)]
    tasks = [CODES[i % 4] for i in range(24)]
    trajs = arl.rollout_batch(model, envs, tasks, tok, generator=torch.Generator().manual_seed(0))
    for env, t in zip(envs, trajs):
        assert t.turn_rewards == env.log
        assert t.reward == pytest.approx(sum(env.log), abs=1e-12)
        assert len(t.turn_rewards) == int(t.turn.max())


def test_trajectory_built_positionally_pays_its_return_at_the_end():
    t = _traj([0.0, 0.0, 1.0])
    plain = Trajectory(t.ids, t.action_mask, t.logprobs, 1.0, t.info, t.owner, t.turn)  # the chapter's seven fields
    assert plain.turn_rewards == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match='not the sum of turn_rewards'):
        Trajectory(t.ids, t.action_mask, t.logprobs, 0.5, t.info, t.owner, t.turn, turn_rewards=[0.25, 0.0, 0.0])
    with pytest.raises(ValueError, match='one reward per call'):
        Trajectory(t.ids, t.action_mask, t.logprobs, 0.5, t.info, t.owner, t.turn, turn_rewards=[0.5])


def test_collate_exposes_returns_and_turn_rewards():
    b = arl.collate([_traj([0.25, 0.5]), _traj([1.0, 0.0, -0.5])], 0)
    assert b['rewards'].tolist() == [0.75, 0.5]
    assert b['turn_rewards'].tolist() == [[0.25, 0.5, 0.0], [1.0, 0.0, -0.5]]


def test_keep_successes_threshold_and_rounding():
    trajs = [_traj([0.1] * 10), _traj([0.5]), _traj([0.25, 0.5]), _traj([1.0])]
    assert trajs[0].reward != 1.0  # 0.9999999999999999: a sum rounds
    assert arl.keep_successes(trajs) == [trajs[0], trajs[3]]
    assert arl.keep_successes(trajs, threshold=0.75) == [trajs[0], trajs[2], trajs[3]]
    assert success_rate(trajs, 0.5) == 1.0
    with pytest.raises(ValueError, match='threshold must be a finite number'):
        arl.keep_successes(trajs, threshold=float('nan'))


def test_expert_iteration_keeps_exactly_the_episodes_at_or_above_the_threshold(tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    demos = [arl.scripted_rollout(Keypad.scripted_policy('random', s), Keypad(), t, tok) for t in CODES for s in range(4)]
    arl.sft_train(model, demos, tok, steps=30, seed=0)
    _, sample = arl.pass_rate(model, CODES, tok, 8, seed=100, env=Keypad)  # the first round's own sample
    returns = sorted({t.reward for t in sample})
    assert len(returns) >= 3, returns  # partial credit: several distinct returns
    threshold = returns[len(returns) // 2]
    history = arl.expert_iteration(model, CODES, tok, rounds=1, n_samples=8, steps=1, env=Keypad, threshold=threshold)
    kept = history[0]['kept']
    expected = [t for t in sample if t.reward >= threshold]
    assert [t.ids.tolist() for t in kept] == [t.ids.tolist() for t in expected]
    assert 0 < len(kept) < len(sample)


def test_no_episode_reaches_the_threshold_is_told(tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    with pytest.warns(NoSignalWarning, match=r'expert_iteration round 0: no episode reached the threshold 5 '
                                              r'\(returns seen over 16 episodes: min'):
        history = arl.expert_iteration(model, CODES, tok, rounds=1, n_samples=4, steps=1, env=Keypad, threshold=5.0)
    assert history[0]['kept'] == []
    with pytest.raises(ValueError, match="Keypad's scripted oracle does not solve task 'code/123': its return 1 is "
                                         'below the threshold 5'):  # STaR has no answer to force
        arl.star_iteration(model, CODES[:1], tok, rounds=1, n_samples=2, steps=1, env=Keypad, threshold=5.0)


def test_make_pairs_pairs_exactly_the_returns_a_margin_apart():
    returns = [0.0, 0.25, 0.5, 0.75, 1.0, 0.3]
    sample = [_traj([r]) for r in returns]
    tasks = [Code((1, 2, 3))]
    for margin in (0.25, 0.5, 0.7, 1.0):
        pairs = arl.make_pairs(sample, tasks, seed=0, margin=margin) if margin != 1.0 else arl.make_pairs(sample, tasks)
        for chosen, rejected in pairs:
            assert chosen.reward - rejected.reward >= margin - 1e-9
        chosen = [c.reward for c, _ in pairs]
        assert chosen == [r for r in returns if any(r - o >= margin - 1e-9 for o in returns)]
    with pytest.warns(NoSignalWarning, match='make_pairs: no two episodes of a task have returns 2 or more apart'):
        assert arl.make_pairs(sample, tasks, margin=2.0) == []


def test_make_pairs_default_is_the_chapters_success_failure_pairs():
    rng_sample = [_traj([r]) for r in (1.0, 0.0, 1.0, 0.0, 0.0, 1.0)]
    pairs = arl.make_pairs(rng_sample, [Code((1, 2, 3))], seed=4)
    assert [(c.reward, r.reward) for c, r in pairs] == [(1.0, 0.0)] * 3
    # the same draws as pairing each success with random.Random(seed).choice(failures)
    rng, losses = random.Random(4), [t for t in rng_sample if t.reward == 0]
    assert [r for _, r in pairs] == [rng.choice(losses) for _ in range(3)]


def test_rewards_to_go_and_turn_advantages_equal_the_documented_values():
    # a group of three two-or-one-turn episodes of one task
    trajs = [_traj([0.5, 1.0]), _traj([0.0, 1.0]), _traj([0.25])]
    b = arl.collate(trajs, 0)
    G = rewards_to_go(b['turn_rewards'], gamma=0.5)
    assert G.tolist() == [[1.0, 1.0], [0.5, 1.0], [0.25, 0.0]]
    A = turn_advantages(b['turn_rewards'], torch.tensor([2, 2, 1]), group=3, gamma=0.5)
    # turn 1: each minus the mean of the other two; turn 2: only episodes 0 and 1 reached it
    expected = torch.tensor([[1.0 - (0.5 + 0.25) / 2, 1.0 - 1.0],
                             [0.5 - (1.0 + 0.25) / 2, 1.0 - 1.0],
                             [0.25 - (1.0 + 0.5) / 2, 0.0]])
    assert torch.allclose(A, expected, atol=1e-7)
    W = group_credit(b, 3, 'turn', 0.5)  # [B, T-1], entry t weighs the token t + 1 predicts
    mask = b['action_mask']
    for i, t in enumerate(trajs):
        for pos in range(len(t.ids) - 1):
            if mask[i, pos]:
                assert W[i, pos].item() == pytest.approx(A[i, int(t.turn[pos + 1]) - 1].item())


def test_episode_credit_is_the_chapters_group_baseline():
    trajs = [_traj([0.5, 1.0]), _traj([0.0, 1.0]), _traj([0.25]), _traj([0.0, 0.0])]
    b = arl.collate(trajs, 0)
    W = group_credit(b, 2, 'episode')
    R = b['rewards'].view(2, 2)
    assert torch.equal(W, (R - R.mean(1, keepdim=True)).view(-1, 1))
    with pytest.raises(ValueError, match=r"unknown credit 'step'; valid choices are \['episode', 'turn'\]"):
        group_credit(b, 2, 'step')


def test_turn_credit_trains_and_episode_credit_is_unchanged(tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    demos = [arl.scripted_rollout(Keypad.scripted_policy('random', s), Keypad(), t, tok) for t in CODES for s in range(4)]
    arl.sft_train(model, demos, tok, steps=20, seed=0)
    for credit in ('episode', 'turn'):
        m = __import__('copy').deepcopy(model)
        arl.train_rl(m, CODES, tok, steps=2, n_tasks=2, group=4, env=Keypad, credit=credit, gamma=0.9)
        _, logs = arl.train_grpo(__import__('copy').deepcopy(model), CODES, tok, 1,
                                 arl.GRPOConfig(n_tasks=2, group=4, credit=credit), env=Keypad)
        assert logs[0]['step'] == 1
    with pytest.raises(ValueError, match='gamma must be a number in'):
        arl.GRPOConfig(credit='turn', gamma=0.0)


def test_returns_seen_names_the_distinct_values():
    assert returns_seen([_traj([0.0]), _traj([0.25, 0.64]), _traj([0.0])]) == 'min 0, max 0.89, 2 distinct (0, 0.89)'


def test_oracle_must_reach_the_threshold():
    from agentrl.envs.play import oracle_calls
    assert oracle_calls(CODES[0], env=Keypad) == ['press 1', 'press 2', 'press 3', 'done']
    with pytest.raises(ValueError, match='return 1 is below the threshold 2'):
        oracle_calls(CODES[0], env=Keypad, threshold=2.0)


def test_rollout_groups_is_task_major(tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    trajs = rollout_groups(model, CODES, tok, 3, env=Keypad, generator=torch.Generator().manual_seed(0))
    assert [t.info['task'] for t in trajs] == [c.name for c in CODES for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        arl.pass_rate(model, CODES, tok, 2, env=Keypad)


def test_tasks_of_another_environment_without_env_say_env_was_forgotten(tok):
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    with pytest.raises(arl.EnvStepError, match=r"BugFixEnv.reset raised on task 'code/123'.*No env= was given, so "
                                               r"the episodes were played in the default environment, "
                                               r"'agentrl/BugFix-v0': if these tasks belong to another environment, "
                                               r"pass it as env="):
        arl.pass_rate(model, CODES, tok, 2)
