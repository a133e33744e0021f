"""``agentrl bench``: rollout, KV-cache and SFT-step throughput, side by side with a same-size Hugging Face GPT-2.

Every comparison is timed interleaved (a warm-up call each, then rounds in ABBA order) and reported as
the median of its per-round pair ratios with their spread; ``bench.py``'s docstring lists what is
measured. Independent of ``chapter15/`` and ``sweeps/``: it imports only the library. The modules:

- ``timing.py``: the timers (interleaved sessions, pair ratios) and what a run records about the machine;
- ``flops.py``: analytic FLOP counts, the GEMM peak probe and the efficiency figures (g);
- ``workloads.py``: the models and workloads (a)-(e): rollouts, sampling vs ``generate``, the SFT step;
- ``hf_loop.py``: our engine vs a plain ``transformers`` agent loop on the same GPT-2 policy (f);
- ``bench_render.py``: the result as a rich table;
- ``bench.py``: ``run`` (every measurement -> one result dict) and ``main`` (the command).
"""
