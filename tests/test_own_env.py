"""Every recipe on an environment that is not BugFix: the worked example's Mailroom.

Each recipe runs with ``env=Mailroom`` through our word renderer and through a ``ChatRenderer`` (a
ChatML template on a BPE tokenizer trained here on the Mailroom's text), and each test checks what
the recipe is documented to do there, plus that its loss gives exactly zero gradient to the logits
at every position whose next token is not the policy's.
"""
from __future__ import annotations

import copy
import random
import pytest
import torch

from agentrl.rollouts.engine import rollout_groups

import agentrl as arl
from agentrl.recipes.dpo import episode_logp, preference_loss
from agentrl.recipes import reinforce as reinforce_module
from agentrl.recipes.grpo import grpo_loss, group_advantages
from agentrl.recipes.rft_baseline import group_baseline_weights, weighted_sft_loss
from agentrl.recipes.star import answer_ids, rationalize
from agentrl.rendering.protocols import as_renderer
from gradcheck import LogitGrads, assert_only_policy_positions, reinforce_step_logit_grads
from ownenv import mailroom

M = mailroom()
ENV = M.Mailroom
ALL, TRAIN, HELD = M.make_parcels(), M.make_parcels('train'), M.make_parcels('heldout')
RENDERERS = ('words', 'chatml')


def _renderer(kind):
    if kind == 'words':
        return arl.build_tokenizer(ALL, env=ENV)
    pytest.importorskip('transformers')
    from hfkit import bpe_tokenizer
    # a TinyAgent learns the calls from the demos: no description of them (a pretrained model's need)
    return arl.ChatRenderer(bpe_tokenizer('chatml', corpus='mailroom'), describe='none')


_KITS = {}


@pytest.fixture(scope='module', params=RENDERERS)
def kit(request):
    """Per renderer: the tokenizer/renderer, oracle demos, weak play, a weak base and an oracle-SFT policy."""
    return make_kit(request.param)


def make_kit(name):
    if name in _KITS:
        return _KITS[name]
    tok = _renderer(name)
    demos = [arl.scripted_rollout(M.Courier('oracle'), ENV(), p, tok) for p in TRAIN]
    weak_play = [arl.scripted_rollout(M.Courier(kind, s), ENV(), p, tok)
                 for kind in ('blind', 'random') for s in range(3) for p in TRAIN]
    torch.manual_seed(0)
    fresh = arl.TinyAgent(tok.vocab_size)
    weak = copy.deepcopy(fresh)
    arl.sft_train(weak, weak_play, tok, steps=60, batch_size=16, seed=0)
    sft = copy.deepcopy(weak)
    arl.sft_train(sft, demos, tok, steps=60, batch_size=16, seed=0)
    _KITS[name] = {'name': name, 'tok': tok, 'demos': demos, 'weak_play': weak_play, 'fresh': fresh,
                   'weak': weak.eval(), 'sft': sft.eval()}
    return _KITS[name]


def rate(model, tok, tasks=TRAIN, n=4, seed=0, **kw):
    return arl.pass_rate(model, tasks, tok, n, seed=seed, env=ENV, **kw)


# --- the environment and its scripted players
def test_mailroom_keeps_the_protocol_and_its_oracle_solves_every_parcel():
    tok = arl.build_tokenizer(ALL, env=ENV)
    summary = arl.check_text_env(ENV, ALL, tok=tok)
    assert summary['unknown_words'] == [] and summary['tasks'] == len(ALL)
    for parcel in ALL:
        episode = arl.envs.play(ENV(), parcel, M.Courier('oracle'))
        assert episode.reward == 1.0 and len(episode.calls) == 3, parcel  # label, go ROOM, drop
        assert episode.calls[1] == f'go {parcel.room}'  # the open argument, copied from the label's reply
    blind = [arl.envs.play(ENV(), p, M.Courier('blind', s)).reward for p in ALL for s in range(8)]
    assert 0 < sum(blind) / len(blind) < 0.3  # one room in eight, by luck


@pytest.mark.parametrize('renderer', RENDERERS)
def test_demos_render_as_the_renderer_replays_them(renderer):
    tok = _renderer(renderer)
    demos = [arl.scripted_rollout(M.Courier('oracle'), ENV(), p, tok) for p in TRAIN]
    for demo in demos:
        assert demo.info['actions'][0] == ' label ' and demo.reward == 1.0
        assert demo.action_mask.sum() > 0
    if renderer == 'words':
        assert arl.check_rendering(demos, tok, env=ENV, tasks=TRAIN) == []
        stripped = [arl.strip_wrappers(d) for d in demos[:2]]
        assert len(arl.check_rendering(stripped, tok, env=ENV, tasks=TRAIN)) == 2
    else:
        from agentrl.rendering.chat import replay
        for demo in demos:
            again = replay(demo, tok, env=ENV, tasks=TRAIN)
            assert torch.equal(again.ids, demo.ids) and torch.equal(again.owner, demo.owner)
        msgs = [{'role': 'user', 'content': 'deliver parcel amber'}, {'role': 'assistant', 'content': 'label'},
                {'role': 'tool', 'content': 'parcel amber: room r1'}]
        assert tok.render_messages(msgs).ids.tolist() == tok.apply_chat_template(msgs)


# --- 15.1-15.2: SFT, pass rates, the weak base
def test_sft_learns_the_mailroom_and_trains_only_policy_tokens(kit):
    tok, demos = kit['tok'], kit['demos']
    assert rate(kit['fresh'], tok)[0] <= 0.15
    assert rate(kit["sft"], tok)[0] >= 0.7
    m = copy.deepcopy(kit['fresh'])
    with LogitGrads(m) as g:
        arl.sft_loss(m, arl.collate(demos, tok.pad_id)).backward()
    assert_only_policy_positions(g.seen, demos)


def test_weak_base_learns_format_and_reads_less_than_oracle_sft(kit):
    tok = kit['tok']
    weak = arl.describe(kit['weak'], TRAIN, HELD, tok, n=4, env=ENV)
    sft = arl.describe(kit['sft'], TRAIN, HELD, tok, n=4, env=ENV, by_group=True)
    assert weak['invalid'] <= 1.0 and weak['train'] < sft['train']
    assert weak['reads'] < 0.7 <= sft['reads']  # reads: episodes with a `label` call (Mailroom.is_read_call)
    assert set(sft['held_by_group']) <= {'ground', 'upper'}
    assert set(arl.group_pass(kit['sft'], TRAIN, tok, 2, env=ENV)) == {'ground', 'upper'}


# --- 15.3: rejection sampling, expert iteration, the public filter, STaR, RFT with a baseline
def test_expert_iteration_keeps_successes_and_the_public_filter_keeps_hacks(kit):
    tok = kit['tok']
    hidden = arl.expert_iteration(copy.deepcopy(kit['weak']), TRAIN, tok, rounds=2, n_samples=4, steps=5,
                                  batch_size=16, env=ENV)
    for row in hidden:
        assert all(t.reward == 1.0 and t.info['hidden_pass'] for t in row['kept'])
        assert row['hacks'] == 0 and set(row['solved']) <= {p.name for p in TRAIN}
    public = arl.expert_iteration(copy.deepcopy(kit['weak']), TRAIN, tok, rounds=1, n_samples=4, steps=5,
                                  batch_size=16, reward='public', env=ENV)
    kept = public[0]['kept']
    assert public[0]['hacks'] == sum(not t.info['hidden_pass'] for t in kept) > 0  # dropped in another room


def test_star_forces_the_oracles_answer_and_masks_it(kit):
    tok, weak = kit['tok'], kit['weak']
    trajs = rationalize(weak, TRAIN[:6], tok, 4, generator=torch.Generator().manual_seed(0), env=ENV)
    forced = [t for t in trajs if t.info['forced_positions']]
    assert forced, 'the weak base writes `go` often enough to be completed'
    renderer = as_renderer(tok)
    for t in forced:
        parcel = next(p for p in TRAIN if p.name == t.info['task'])
        (ids, verb), = answer_ids(parcel, renderer, env=ENV)  # the one answer call: go ROOM
        positions = t.info['forced_positions']
        assert [int(t.ids[p]) for p in positions] == ids[verb:]  # the room and the stop, as the oracle writes them
        assert all(t.action_mask[p - 1] == 0 for p in positions)
    assert sum(t.reward for t in forced) / len(forced) > rate(weak, tok, TRAIN[:6])[0]
    hist = arl.star_iteration(copy.deepcopy(weak), TRAIN[:6], tok, rounds=1, n_samples=4, steps=3, batch_size=16,
                              env=ENV)
    assert hist[0]['n_kept'] == hist[0]['n_plain'] + hist[0]['n_rationalized']


def test_rft_with_a_baseline_weights_failures_and_trains_only_policy_tokens(kit):
    tok = kit['tok']
    hist = arl.rft_baseline_iteration(copy.deepcopy(kit['weak']), TRAIN, tok, rounds=1, n_samples=4, steps=3,
                                      batch_size=16, env=ENV)
    assert hist[0]['n_pos'] > 0 and hist[0]['n_neg'] > 0 and hist[0]['min_weight'] < 0
    _, sample = rate(kit['weak'], tok, n=4)
    weights = group_baseline_weights(torch.tensor([t.reward for t in sample]).view(len(TRAIN), 4)).view(-1)
    m = copy.deepcopy(kit['weak'])
    with LogitGrads(m) as g:
        weighted_sft_loss(m, arl.collate(sample, tok.pad_id), weights).backward()
    assert_only_policy_positions(g.seen, sample)


# --- 15.4: DPO, offline and online
def test_dpo_separates_chosen_from_rejected_and_trains_only_policy_tokens(kit):
    tok = kit['tok']
    _, sample = rate(kit['weak'], tok, n=8, seed=3)
    pairs = arl.make_pairs(sample, TRAIN, seed=0)
    assert pairs and all(c.reward == 1 and r.reward == 0 and c.info['task'] == r.info['task'] for c, r in pairs)
    log = arl.train_dpo(copy.deepcopy(kit['weak']), pairs, tok, steps=20, beta=0.1, every=10)
    assert log[-1]['d_chosen'] - log[-1]['d_rejected'] > log[0]['d_chosen'] - log[0]['d_rejected'] > 0
    m = copy.deepcopy(kit['weak'])
    chosen, rejected = [c for c, _ in pairs], [r for _, r in pairs]
    cb, rb = arl.collate(chosen, tok.pad_id), arl.collate(rejected, tok.pad_id)
    with torch.no_grad():
        ref_c, ref_r = episode_logp(m, cb), episode_logp(m, rb)
    with LogitGrads(m) as g:  # DPO + NLL: the chosen, the rejected, then the chosen again
        (preference_loss(episode_logp(m, cb), episode_logp(m, rb), ref_c, ref_r) + arl.sft_loss(m, cb)).backward()
    for logits, trajs in zip(g.seen, (chosen, rejected, chosen)):
        assert_only_policy_positions([logits], trajs)


def test_online_dpo_regenerates_pairs_from_the_policy(kit):
    log = arl.train_online_dpo(copy.deepcopy(kit['weak']), TRAIN, kit['tok'], steps=4, regen_every=2, n_samples=4,
                               every=1, env=ENV)
    assert [row['round'] for row in log] == [0, 0, 1, 1]
    assert all(row['pairs'] > 0 for row in log)


# --- 15.5: REINFORCE and the clipped trainer
def test_reinforce_step_ascends_the_advantage_weighted_log_likelihood(kit, monkeypatch):
    """One REINFORCE step (plain SGD, so the step is the gradient) raises sum_i A_i log pi(tau_i) on its own episodes,
    with A the per-task group-mean advantage, and its loss reaches only the policy positions."""
    tok, sampled = kit['tok'], []

    def rollout_and_keep(*args, **kwargs):
        trajs = rollout_groups(*args, **kwargs)
        sampled.extend(trajs)
        return trajs

    monkeypatch.setattr(reinforce_module, 'rollout_groups', rollout_and_keep)
    model = copy.deepcopy(kit['weak'])
    arl.reinforce_step(model, torch.optim.SGD(model.parameters(), lr=0.0), TRAIN, tok, random.Random(0),
                       torch.Generator().manual_seed(0), n_tasks=6, group=8, env=ENV)
    batch = arl.collate(sampled, tok.pad_id)
    rewards = batch['rewards'].view(6, 8)
    advantages = (rewards - rewards.mean(1, keepdim=True)).view(-1)
    assert advantages.abs().sum() > 0, 'some group must mix passes and failures'
    with torch.no_grad():
        before = episode_logp(model, batch)
    sampled.clear()
    arl.reinforce_step(model, torch.optim.SGD(model.parameters(), lr=0.05), TRAIN, tok, random.Random(0),
                       torch.Generator().manual_seed(0), n_tasks=6, group=8, env=ENV)
    with torch.no_grad():  # the same episodes (same seeds, same weights when sampled)
        assert torch.equal(arl.collate(sampled, tok.pad_id)['ids'], batch['ids'])
        after = episode_logp(model, batch)
    assert (advantages * (after - before)).sum() > 0
    assert ((after - before)[advantages > 0]).mean() > ((after - before)[advantages < 0]).mean()
    seen, steps = reinforce_step_logit_grads(copy.deepcopy(kit['weak']), TRAIN, tok, monkeypatch, n_tasks=6, group=4,
                                             env=ENV)
    assert_only_policy_positions(seen, steps)


def test_reinforce_from_a_warm_start_raises_the_pass_rate():
    """REINFORCE (word renderer) from a briefly warm-started policy: 20 steps raise train pass by a third or more."""
    words = make_kit('words')
    tok, model = words['tok'], copy.deepcopy(words['weak'])
    arl.sft_train(model, words['demos'], tok, steps=20, batch_size=16, seed=0)
    hist = arl.train_rl(model, TRAIN, tok, 20, lr=1e-3, seed=0, n_tasks=6, group=8, env=ENV, every=10,
                        evaluate=lambda m: (rate(m, tok, n=8, seed=1)[0],))
    (_, start), _, (_, end) = hist
    assert end >= start + 0.1 and end >= 1.3 * start, hist


def test_clipped_trainer_runs_and_its_loss_trains_only_policy_tokens(kit):
    tok = kit['tok']
    cfg = arl.GRPOConfig(n_tasks=6, group=4, seed=0)
    hist, logs = arl.train_grpo(copy.deepcopy(kit['weak']), TRAIN, tok, 3, cfg, env=ENV)
    assert len(logs) == 3 and all(0 <= row['informative'] <= 1 for row in logs)
    _, sample = rate(kit['weak'], tok, n=4)
    adv = group_advantages(torch.tensor([t.reward for t in sample]).view(len(TRAIN), 4)).view(-1)
    m = copy.deepcopy(kit['weak'])
    with LogitGrads(m) as g:
        loss, _ = grpo_loss(m, arl.collate(sample, tok.pad_id), adv, cfg)
        loss.backward()
    assert_only_policy_positions(g.seen, sample)


# --- 15.6: probes, checkpoint selection, the road a policy takes
def test_probe_select_and_reads_first(kit):
    tok = kit['tok']
    rate_, informative, entropy = arl.probe(kit['weak'], TRAIN, tok, group=4, env=ENV)
    assert 0 <= rate_ <= 1 and 0 <= informative <= 1 and entropy > 0
    sel = arl.select_sft_checkpoint(copy.deepcopy(kit['weak']), kit['demos'], tok, HELD, steps=20, every=10,
                                    group=4, batch_size=16, env=ENV)
    assert sel.step in (10, 20) and [row[0] for row in sel.table] == [10, 20]
    from agentrl.recipes.diagnostics import reads_first
    assert reads_first(kit['demos'], env=ENV) == 1.0
    blind = [t for t in kit['weak_play'] if t.info['actions'][0].split()[0] == 'go']
    assert blind and reads_first(blind, env=ENV) == 0.0


# --- the worked example, as a user runs it
def test_worked_example_runs_at_a_small_budget(capsys):
    rates = M.main(['--sft-steps', '10', '--rl-steps', '2'])  # what `python examples/mailroom.py` runs, small
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(rates) == 2 and all(0 <= r <= 1 for r in rates)
    assert lines[0].startswith('Mailroom: 18 train and 6 held-out parcels')
    assert [line.split()[0] for line in lines[1:]] == ['untrained', 'oracle', 'then']
    assert all(' train ' in line and ' held-out ' in line for line in lines[1:])


def test_rollout_names_the_environment_task_turn_and_call_when_it_raises(kit):
    class Flaky(ENV):
        def act(self, verb, args):
            if verb == 'drop':
                raise KeyError('the floor is wet')
            return super().act(verb, args)

    tok = kit['tok']
    model = kit['weak']
    model.train()
    with pytest.raises(arl.EnvStepError) as err:
        arl.pass_rate(model, TRAIN, tok, 2, env=Flaky)
    msg = str(err.value)
    assert 'Flaky.step raised on task' in msg and "call 'drop'" in msg and 'turn ' in msg and 'wet' in msg
    assert isinstance(err.value.__cause__, KeyError)
    assert model.training  # the rollout left the model in the mode it found it in
    model.eval()
    random.seed(0)
