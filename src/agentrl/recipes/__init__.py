"""The chapter's recipes, one module each; every one takes the environment as ``env=`` (``agentrl.envs.protocol``).

- ``sft``: masked SFT on trajectories (15.1-15.2);
- ``evaluation``: pass rates, per group, and action entropy (15.2);
- ``rejection``: rejection sampling and expert iteration, dedup, the public filter (15.3, 15.6);
- ``dpo``: DPO on agent episodes, IPO and hinge, pairs (15.4, 15.6);
- ``reinforce``: REINFORCE with a per-task group baseline (15.5);
- ``diagnostics``: probes, reads-first, the template mismatch, a rendering check (15.5-15.6);
- beyond the chapter: ``star`` (STaR rationalization), ``rft_baseline`` (RFT with a group baseline),
  ``online_dpo``, ``select`` (the SFT checkpoint by informative groups), ``grpo`` (a clipped trainer).
"""
