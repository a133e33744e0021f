"""Who produced each token of a rendered episode (section 15.1): the ``OWNER`` codes every renderer writes.

A module of its own, below the renderers and the viewer that both read it (and free of torch, so the
``agentrl`` command's export can use it without importing torch).
"""
OWNER = {'template': 0, 'prompt': 1, 'policy': 2, 'tool': 3}
"""Who produced a token: template wrappers, the task prompt, the policy, or the environment's tools."""
OWNER_NAMES = {code: name for name, code in OWNER.items()}
"""``OWNER`` inverted: code -> name."""
