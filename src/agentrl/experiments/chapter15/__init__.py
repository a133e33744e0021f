"""Chapter 15 reproduced end to end on any environment (``agentrl reproduce [--env ENV]``), and what is made from
one run (``report``, ``show``, ``claims``).

A run trains every recipe of the chapter's sections 15.1 to 15.6 from one weak base, prints the
chapter's printed lines, writes ``results.json``, ``timing.json``, ``transcript.txt``, checkpoints and
sampled episodes into its folder, and checks the chapter's claims on its results (on BugFix, also
the chapter's findings as bands on the transcript). The layers, each importing only the ones above it in this list:

- ``bands.py``: the findings as bands, checked on a transcript;
- ``env_registry.py``: the environments ``--env`` takes (``ChapterEnv``: environment, tasks, tokenizer, players, own
  budgets, what it has; a built-in name, an import path or an entry point); the only module of the experiments
  that imports a gym's code; ``guess_game.py``: GEM's Guess The Number as a ``ChapterEnv`` (``--env guess``);
- ``probes.py``: the SFT checkpoints 15.5 and 15.6 start from and probe, and their labels from the config;
- ``config.py``: ``Ch15Config``, every setting of a run and its valid range; ``settings.py``: ``--set`` / ``--config`` /
  ``--grid``, comparing configs, and what a run records;
- ``provenance.py``: what a run records about where it ran;
- ``real_model.py``: the chapter on a pretrained language model (``--policy smollm2``, a folder, a ``.gguf``): its
  budgets, precision and device;
- ``sections.py``: sections 15.1-15.6, the methods of a mixin;
- ``extended.py``: the ``--extended`` section (the chapter's exercises and a clipped trainer);
- ``reproduction.py``: ``Reproduction``, the run driver in one process: run folder, resume, finish, transcript;
- ``parallel.py``: ``--jobs``: the sections after 15.2 in worker processes, each building a ``Reproduction``;
- ``chapter.py``: ``Chapter15``, a ``Reproduction`` whose ``run()`` drives ``parallel.py`` with ``jobs > 1``;
- ``reproduce_command.py``: ``agentrl reproduce``: settings checked, the run with a progress bar, the findings printed;
- ``claims.py``: the chapter's claims as directions and relations, checked on any environment's results;
- ``findings.py``: ``Finding``, what a band, a claim and an exercise's answer each are (a rule, a verdict and a
  measured reason), and the one table they are shown in;
- ``tables.py``: Markdown table and number formatting (``sweep.md`` and ``compare`` use it too);
- ``figures.py``: figures 15.2-15.4 and the ``--extended`` ones;
- ``report.py``: ``report.md``; ``monitors_page.py``: its training monitors (``--logdir``'s curves);
- ``page_data.py``, ``page_assets.py``: the episodes as the page's JSON, the page's CSS and JS;
- ``html_report.py``: ``report.html`` (``agentrl report``; ``report.md`` through Python-Markdown);
- ``show.py``: episodes in the terminal (``agentrl show``).
"""
