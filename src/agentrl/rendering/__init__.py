"""Rendering: an episode as tokens, who wrote each one, and how to look at it (sections 15.1, 15.6).

- ``trajectory``: ``Trajectory`` (ids, owners, the loss mask), the builders every renderer writes through
  (``EpisodeBuilder``), ``render_play`` and ``collate``;
- ``owners``: the ``OWNER`` codes (template, prompt, policy, tool) every renderer writes;
- ``tokenizer``: the word-level ``Tokenizer`` the TinyAgent reads (``build_tokenizer``);
- ``chat``: ``ChatRenderer``, an episode as a conversation through any tokenizer's chat template;
- ``protocols``: the ``Policy`` and ``Renderer`` contracts the rollouts and recipes rely on, and the word renderer;
- ``trajio``: trajectories as compact JSON (resumable runs, the report's episode browser);
- ``viewer``: one episode coloured by owner, as HTML or in the terminal.

Below the policies: nothing here trains or samples; only ``trajectory`` and ``chat`` import torch.
"""
