"""Many seeds of the chapter 15 reproduction, grids of variants, and comparisons (``agentrl sweep``, ``agentrl compare``).

A sweep runs ``chapter15``'s ``Chapter15`` once per seed (and per variant of a ``--grid``), each
seed in its own worker process (a local pool or Ray), retries a failed seed once, then aggregates
the seeds: mean and 95% CI per figure, hold rate per finding. ``compare`` sets runs, sweeps or a
grid's variants side by side, their differences tested paired by seed (Holm-adjusted). Built on
``chapter15/`` (its runs, findings, tables and figures); nothing there imports this package. The modules:

- ``seeds.py``: seed specs (``--seeds 0-9``) and the state of the seed folders;
- ``backends.py``: the per-seed job, the local and Ray backends, and fault injection for tests;
- ``stats.py``: statistics over seeds and between variants (``scipy.stats``: t intervals, paired and Welch's tests,
  Holm's adjustment);
- ``figures.py``: figure 15.3 with CI bands (a sweep) and per variant (a comparison);
- ``sweep_report.py``: ``sweep.md``;
- ``summary.py``: what a sweep writes at the end (``sweep.json``, ``sweep.md``, the figure, ``grid.json``);
- ``sweep.py``: the orchestration and ``agentrl sweep``'s command line;
- ``compare.py``: ``agentrl compare``; ``compare_report.py``: its ``compare.md`` and terminal tables.
"""
