"""Oracle SFT of a pretrained model on BugFix's twenty train demonstrations, evaluated every 10 steps.

    python scripts/pretrained_sft_curve.py LR STEPS LORA_RANK [SOURCE]

One torch thread; batch 8; each evaluation samples 2 episodes per task (seed 0) and prints train pass, held-out pass
and invalid calls per episode. What chose the chapter's SFT budget for a pretrained policy (docs/real-models.md).
"""
import sys
import time

import torch

import agentrl as arl

torch.set_num_threads(1)
lr, steps, rank = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
policy = arl.load_pretrained(sys.argv[4] if len(sys.argv) > 4 else 'smollm2', lora_rank=rank, quiet=True)
chat = policy.renderer()
train, held = arl.make_tasks('train'), arl.make_tasks('heldout')
demos = [arl.scripted_rollout(arl.scripted_policy('oracle'), arl.BugFixEnv(), t, chat) for t in train]
t0 = time.time()


def hook(step):
    rate, trajs = arl.pass_rate(policy, train, chat, 2, seed=0)
    held_rate, _ = arl.pass_rate(policy, held, chat, 2, seed=0)
    invalid = sum(t.info['n_invalid'] for t in trajs) / len(trajs)
    print(f'lr {lr} r{rank} step {step} train {rate:.2f} held {held_rate:.2f} invalid {invalid:.2f} t {time.time() - t0:.0f}s',
          flush=True)


losses = arl.sft_train(policy, demos, chat, steps=steps, lr=lr, batch_size=8, seed=0, hook=hook, every=10)
print('losses', [round(v, 3) for v in losses[::5]])
