"""Rollouts: episodes played by a script or sampled from a policy.

- ``engine``: ``scripted_rollout``, and ``rollout_batch`` / ``rollout_groups``, which play many episodes in
  lockstep, one batched forward per turn, through the environment's checked ``reset`` / ``step``.
"""
