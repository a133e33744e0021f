"""Experiments: the chapter's sections run end to end (``ch15``), figures, reports, benchmarks and sweeps."""
