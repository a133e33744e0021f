"""Experiments: the chapter reproduced on any environment, over seeds and variants, and the benchmark (the
``agentrl`` subcommands ``reproduce``, ``claims``, ``report``, ``show``, ``sweep``, ``compare``, ``bench`` and
``export``).

- ``chapter15/``: sections 15.1-15.6 end to end (``Chapter15``) on the environment ``--env`` names, their
  settings, findings and claims, figures and reports (Markdown and HTML); ``reproduce --jobs`` runs the
  later sections in worker processes;
- ``sweeps/``: many seeds of that reproduction and grids of variants (local or Ray backends), the
  statistics over seeds, ``sweep.md``, and ``compare``; built on ``chapter15/``;
- ``bench/``: rollout, KV-cache and SFT-step throughput against a same-size Hugging Face peer, on the
  chapter's workload (``chapter15/env_registry.py``'s BugFix);
- ``workers.py``: the worker processes of ``reproduce --jobs``, ``sweep`` and ``exercise --seeds``
  (threads, the forkserver, SIGTERM, and the runner all three use);
- ``run_folder.py``: a run folder's JSON files, written whole and read with one set of checks by every
  command that reads one;
- ``export_command.py``: ``agentrl export``, a run folder's episodes as chat JSON Lines through the renderer its
  policy rendered them with (the format: ``integrations/export.py``);
- ``cli.py``: the argparse glue that registers the subcommands.

Imports go one way: ``cli.py`` -> ``sweeps/``, ``bench/`` and ``export_command.py`` -> ``chapter15/`` -> ``workers.py``
and ``run_folder.py``.
"""
