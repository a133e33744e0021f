"""A first end-to-end smoke check: the gym, the renderer and a rollout fit together."""
import torch

import agentrl as arl


def test_oracle_solves_every_task_and_rollouts_run():
    tasks = arl.make_tasks('all')
    tok = arl.build_tokenizer(tasks)
    demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, tok) for t in tasks]
    assert all(d.reward == 1.0 for d in demos)
    torch.manual_seed(0)
    model = arl.TinyAgent(tok.vocab_size)
    rate, trajs = arl.pass_rate(model, tasks[:4], tok, n_samples=2)
    assert len(trajs) == 8 and 0.0 <= rate <= 1.0
