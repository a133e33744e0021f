"""The process the library runs in: torch threads, the console, memory, the cache folder, files written whole.

- ``threads``: one torch thread while a small model trains or samples (``small_model_threads``);
- ``terminal``: the commands' console (a terminal's own width, no folded values in a pipe or a file);
- ``memory``: keep freed memory for reuse (glibc's malloc settings for the ``agentrl`` command);
- ``cache``: where converted models and compiled kernels are kept (``cache_dir``);
- ``files``: files and folders written whole or not at all (``atomic_path``).

The bottom layer with ``envs`` and ``loggers``: it imports nothing else of agentrl.
"""
