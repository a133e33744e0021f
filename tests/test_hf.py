"""HFPolicy: a transformers causal LM through our lockstep engine and every chapter recipe.

Models are built from GPT-2 and Llama configs (random init), tokenizers locally: our word-level
vocabulary wrapped as a PreTrainedTokenizerFast, and a byte-level BPE with a ChatML template
(tests/hfkit.py). Nothing is downloaded.
"""
from __future__ import annotations

import copy
import random
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip('tokenizers')
pytest.importorskip('transformers')

import agentrl as arl  # noqa: E402
from agentrl.rendering.chat import ChatRenderer, replay  # noqa: E402
from agentrl.policies.hf import ARCHS, HFPolicy, hf_config, make_policy, word_renderer, word_tokenizer  # noqa: E402
from agentrl.rendering.protocols import Policy  # noqa: E402
from agentrl.recipes.dpo import episode_logp, preference_loss  # noqa: E402
from gradcheck import LogitGrads, assert_only_policy_positions, reinforce_step_logit_grads  # noqa: E402

from conftest import SMALL, one_thread  # noqa: E402
from feeding import feed_schedules  # noqa: E402
from hfkit import bpe_tokenizer  # noqa: E402

POLICY = arl.OWNER['policy']


def small_policy(arch, tok, seed=0):
    torch.manual_seed(seed)
    return make_policy(arch, tok, **SMALL)


@pytest.fixture(scope='module')
def chatml():
    return ChatRenderer(bpe_tokenizer('chatml'))


def chat_policy(arch, renderer, seed=0):
    tk = renderer.tokenizer
    torch.manual_seed(seed)
    cfg = hf_config(arch, len(tk), SMALL['d_model'], SMALL['n_layers'], SMALL['n_heads'], 1024, pad_id=tk.pad_token_id)
    return HFPolicy.from_config(cfg, tk)


def scripted_play(renderer, tasks, kinds=('blind', 'random', 'oracle'), seeds=(0, 1)):
    return [arl.scripted_rollout(arl.scripted_policy(k, seed=s), arl.BugFixEnv(), t, renderer)
            for k in kinds for s in seeds for t in tasks]


@pytest.fixture(scope='module')
def trained_chat_gpt2(chatml, tasks):
    """A small GPT-2 after 60 SFT steps on scripted play rendered through the ChatML template."""
    model = chat_policy('gpt2', chatml)
    with one_thread():
        arl.sft_train(model, scripted_play(chatml, tasks), chatml, steps=60, batch_size=16)
    model.eval()
    return model


@pytest.fixture(scope='module')
def trained_word(tok, blind_trajs, random_trajs):
    """Small GPT-2 and Llama after 30 SFT steps on blind + random play (word-level): multi-turn episodes."""
    out = {}
    for arch in ARCHS:
        model = small_policy(arch, tok)
        with one_thread():
            arl.sft_train(model, blind_trajs + random_trajs, tok, steps=30, batch_size=16, seed=0)
        out[arch] = model.eval()
    return out


def test_policy_protocol(tok):
    for arch in ARCHS:
        model = small_policy(arch, tok)
        assert isinstance(model, Policy) and isinstance(model, torch.nn.Module)
        assert model.vocab_size == tok.vocab_size and model.arch == arch
        logits = model(torch.randint(tok.vocab_size, (3, 7)))
        assert logits.shape == (3, 7, tok.vocab_size)
    assert isinstance(arl.TinyAgent(tok.vocab_size, **SMALL), Policy)


def test_vocab_size_is_read_from_the_config_where_a_weight_is_an_empty_shard(tok):
    """Under DeepSpeed ZeRO-3 a weight outside its gather has no rows; the config says the vocabulary's size."""
    policy = small_policy('llama', tok)
    head = policy.model.get_output_embeddings()
    rows = head.weight.shape[0]
    head.weight = torch.nn.Parameter(torch.empty(0))  # what a ZeRO-3 shard looks like from outside its gather
    assert policy.vocab_size == tok.vocab_size == rows
    head.weight = torch.nn.Parameter(torch.zeros(rows + 3, 1))
    policy.model.config = SimpleNamespace(model_type='llama')  # a config that does not say: the output layer's rows
    assert policy.vocab_size == rows + 3


def test_word_tokenizer_keeps_our_ids(tok, oracle_demos):
    wt = word_tokenizer(tok)
    assert len(wt) == tok.vocab_size and wt.pad_token_id == tok.pad_id
    renderer = word_renderer(tok)
    assert renderer.stop_id == tok.stop_id
    for demo in oracle_demos:
        again = arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), arl.make_tasks('all')[
            [t.name for t in arl.make_tasks('all')].index(demo.info['task'])], renderer)
        assert torch.equal(again.ids, demo.ids) and torch.equal(again.owner, demo.owner)


# --- the cache: logits equal to a full forward at every step --------------------------------------

@pytest.mark.parametrize('arch', ARCHS)
@pytest.mark.parametrize('mode', ['turns', 'tokens', 'ragged'])
@pytest.mark.parametrize('vocab', ['word', 'chatml'])
def test_cached_logits_equal_full_forward(arch, mode, vocab, tok, chatml, train_tasks):
    renderer = tok if vocab == 'word' else chatml
    model = small_policy(arch, tok) if vocab == 'word' else chat_policy(arch, chatml)
    trajs = scripted_play(renderer, train_tasks[:4], kinds=('random', 'oracle'), seeds=(0, 3))
    assert sum(len(t.info['actions']) >= 3 for t in trajs) >= 4 and len({len(t) for t in trajs}) >= 4
    B = len(trajs)
    worst, n = 0.0, 0
    with torch.no_grad():
        cache = model.new_cache(B)
        # a causal model's full forward of a whole episode has, at each position, the logits of that prefix's
        full = [model(t.ids[None])[0] for t in trajs]  # B x (T, V)
        schedules = feed_schedules(trajs, mode, random.Random(0))
        for r in range(max(len(s) for s in schedules)):
            chunks = [s[r] if r < len(s) else (0, 0) for s in schedules]
            n_new = torch.tensor([e - s for s, e in chunks])
            ids = torch.zeros(B, max(int(n_new.max()), 1), dtype=torch.long)
            for b, (s, e) in enumerate(chunks):
                ids[b, :e - s] = trajs[b].ids[s:e]
            logits = model.forward_cached(ids, n_new, cache)
            for b, (s, e) in enumerate(chunks):
                if e > s:  # the full forward of the row so far, at its last position
                    worst = max(worst, (logits[b] - full[b][e - 1]).abs().max().item())
                    n += 1
                else:
                    assert logits[b].abs().max().item() == 0.0
            if r == 2:  # rows may leave the batch mid-way, as finished episodes do
                keep = torch.arange(B)
                cache.keep(keep)
        assert cache.lengths.tolist() == [len(t) for t in trajs]
    assert n >= sum(len(s) for s in schedules) and worst <= 1e-4, worst


@pytest.mark.parametrize('arch', ARCHS)
def test_rollout_logprobs_match_full_forward_and_seed_fixes_trajectories(arch, trained_word, tasks, tok):
    """Every sampled step's behaviour log-prob (from the cached forward) equals the full forward's to 1e-4;
    the same generator seed gives the same trajectories; the no-cache path agrees."""
    model = trained_word[arch]
    batch = [t for t in tasks for _ in range(2)]

    def sample(seed, **kw):
        return arl.rollout_batch(model, [arl.BugFixEnv() for _ in batch], batch, tok,
                                 generator=torch.Generator().manual_seed(seed), **kw)

    a, b, c = sample(3), sample(3), sample(4)
    assert sum(len(t.info['actions']) >= 3 for t in a) >= 5
    worst = 0.0
    with torch.no_grad():
        for t in a:
            lp = arl.sequence_log_probs(model, t.ids[None])[0]
            mask = t.action_mask.bool()
            worst = max(worst, (t.logprobs[mask] - lp[mask]).abs().max().item())
    assert worst <= 1e-4, worst
    for x, y in zip(a, b):
        assert torch.equal(x.ids, y.ids) and torch.equal(x.logprobs, y.logprobs) and x.info == y.info
    assert any(not torch.equal(x.ids, z.ids) for x, z in zip(a, c))
    for x, y in zip(a[:20], sample(3, use_cache=False)[:20]):
        assert torch.equal(x.ids, y.ids)


def test_chat_rollouts_equal_their_scripted_replay(trained_chat_gpt2, chatml, tasks):
    """rollout_batch with an HFPolicy and the chat renderer: wherever every sampled call is the tokenizer's
    own encoding of its text, the episode is token-identical to replaying its calls as scripted play."""
    batch = [t for t in tasks for _ in range(2)]
    trajs = arl.rollout_batch(trained_chat_gpt2, [arl.BugFixEnv() for _ in batch], batch, chatml,
                              generator=torch.Generator().manual_seed(0))
    canonical = []
    for t in trajs:
        ids, owner, turn = t.ids.tolist(), t.owner.tolist(), t.turn.tolist()
        calls = [[i for i, o, k2 in zip(ids, owner, turn) if k2 == k and o == POLICY]
                 for k in range(1, len(t.info['actions']) + 1)]
        words = arl.BugFixEnv().max_call_tokens  # the env keeps this many words of a call
        assert [' '.join(chatml.call_text(c).split()[:words]) for c in calls] == [' '.join(a.split()) for a in t.info['actions']]
        if all(c == chatml.encode_call(' '.join(a.split())) for c, a in zip(calls, t.info['actions'])):
            canonical.append(t)
    assert len(canonical) >= 10 and sum(len(t.info['actions']) >= 2 for t in canonical) >= 5
    for t in canonical:
        again = replay(t, chatml)
        assert torch.equal(again.ids, t.ids), t.info['actions']
        assert torch.equal(again.owner, t.owner) and torch.equal(again.turn, t.turn)
        assert again.reward == t.reward
        msgs = [{'role': 'system', 'content': arl.describe_calls(arl.BugFixEnv.calls)},
                {'role': 'user', 'content': chatml.decode(t.ids[t.owner == arl.OWNER['prompt']])}]
        assert t.ids.tolist()[:len(chatml.apply_chat_template(msgs, add_generation_prompt=True))] == \
            chatml.apply_chat_template(msgs, add_generation_prompt=True)
    with torch.no_grad():  # behaviour log-probs of the chat rollouts match the full forward too
        for t in trajs[:20]:
            lp = arl.sequence_log_probs(trained_chat_gpt2, t.ids[None])[0]
            mask = t.action_mask.bool()
            assert torch.allclose(t.logprobs[mask], lp[mask], atol=1e-4)


# --- the recipes, unchanged, on an HFPolicy ----------------------------------------------------------

@pytest.mark.parametrize('setup', ['gpt2-word', 'llama-word', 'gpt2-chatml', 'llama-chatml'])
def test_losses_train_only_policy_tokens(setup, tok, chatml, train_tasks):
    """SFT, DPO + NLL and REINFORCE on an HFPolicy: the gradient at non-policy positions is exactly 0."""
    arch, vocab = setup.split('-')
    renderer = tok if vocab == 'word' else chatml
    model = small_policy(arch, tok) if vocab == 'word' else chat_policy(arch, chatml)
    demos = scripted_play(renderer, train_tasks[:5], kinds=('oracle', 'random'), seeds=(0,))
    chosen, rejected = demos[:5], demos[5:]
    m = copy.deepcopy(model)
    with LogitGrads(m) as g:
        arl.sft_loss(m, arl.collate(demos, renderer.pad_id)).backward()
    assert_only_policy_positions(g.seen, demos)

    m = copy.deepcopy(model)
    b_c, b_r = arl.collate(chosen, renderer.pad_id), arl.collate(rejected, renderer.pad_id)
    with torch.no_grad():
        ref_c, ref_r = episode_logp(model, b_c), episode_logp(model, b_r)
    with LogitGrads(m) as g:
        total = preference_loss(episode_logp(m, b_c), episode_logp(m, b_r), ref_c, ref_r, beta=0.5) + arl.sft_loss(m, b_c)
        total.backward()
    assert len(g.seen) == 3
    assert_only_policy_positions(g.seen[:1], chosen)
    assert_only_policy_positions(g.seen[1:2], rejected)
    assert_only_policy_positions(g.seen[2:], chosen)


def test_reinforce_step_trains_only_policy_tokens(trained_word, train_tasks, tok, monkeypatch):
    seen, sampled = reinforce_step_logit_grads(copy.deepcopy(trained_word['gpt2']), train_tasks, tok, monkeypatch)
    rewards = torch.tensor([t.reward for t in sampled]).view(10, 8)
    assert (rewards != 0).any()
    assert_only_policy_positions(seen, sampled)


@pytest.mark.parametrize('setup', ['gpt2-word', 'llama-chatml'])
def test_chapter_recipes_run_unchanged(setup, trained_word, trained_chat_gpt2, tok, chatml, train_tasks,
                                       heldout_tasks):
    """SFT, expert iteration, DPO + NLL, REINFORCE and the probe, each a few steps, on an HFPolicy."""
    arch, vocab = setup.split('-')
    if vocab == 'word':
        renderer, base = tok, trained_word[arch]
    else:
        renderer, base = chatml, chat_policy(arch, chatml)
        arl.sft_train(base, scripted_play(chatml, train_tasks, seeds=(0,)), chatml, steps=20, batch_size=16)
    tasks = train_tasks[:6]
    demos = scripted_play(renderer, tasks, kinds=('oracle',), seeds=(0,))
    model = copy.deepcopy(base)
    before = [p.detach().clone() for p in model.parameters()]
    losses = arl.sft_train(model, demos, renderer, steps=3, batch_size=4)
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(p, q) for p, q in zip(before, model.parameters()))

    rounds = arl.expert_iteration(copy.deepcopy(base), tasks, renderer, rounds=2, n_samples=4, steps=2)
    assert len(rounds) == 2 and all(t.reward == 1.0 for r in rounds for t in r['kept'])

    _, sample = arl.pass_rate(base, tasks, renderer, 8, seed=1)
    pairs = arl.make_pairs(sample, tasks) or [(demos[0], sample[0])]
    log = arl.train_dpo(copy.deepcopy(base), pairs, renderer, steps=2, every=1, nll_weight=1.0,
                        evaluate=lambda m: {'train': 0.0})
    assert [row['step'] for row in log] == [1, 2] and all(abs(row['d_chosen']) < 1e3 for row in log)

    hist = arl.train_rl(copy.deepcopy(base), tasks, renderer, steps=2, n_tasks=2, group=4, every=1,
                        evaluate=lambda m: (0.0,))
    assert [h[0] for h in hist] == [0, 1, 2]

    rate, informative, entropy = arl.probe(base, heldout_tasks[:3], renderer, group=4)
    assert 0 <= rate <= 1 and 0 <= informative <= 1 and entropy >= 0


def test_checkpoint_round_trip(tmp_path, tok, trained_word):
    model = trained_word['llama']
    path = arl.save_checkpoint(model, tmp_path / 'llama.safetensors', tok)
    again = arl.load_model(path, tok)
    assert isinstance(again, HFPolicy) and again.arch == 'llama'
    ids = torch.randint(tok.vocab_size, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(ids), again(ids))
