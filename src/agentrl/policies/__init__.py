"""Policies: the models that play, and how they are stored and run.

- ``tinyagent``: ``TinyAgent``, the chapter's small causal transformer with a key/value cache;
- ``scoring``: ``sequence_log_probs`` and ``entropy_from_logits``, the recipes' view of any policy's tokens;
- ``hf``: ``HFPolicy``, any ``transformers`` causal LM as a policy (lockstep decoding, the shared prompt prefix);
- ``kv_cache``: a key/value cache for ``transformers`` models that grows by doubling;
- ``llama_sampler``: the lean cached forward of Llama models for sampling (merged adapters, a lockstep cache);
- ``native``: the decoding kernels of ``decode_kernels.c``, compiled once on this machine (``ctypes``);
- ``pretrained``: pretrained models offline, by name (``'smollm2'``), a model folder or a ``.gguf`` file;
- ``lora``: LoRA adapters with ``peft`` (DPO's reference is the adapter switched off);
- ``precision``: the device and autocast dtype a ``transformers`` policy runs in, chosen or given;
- ``checkpoint``: safetensors checkpoints of either kind of policy (a LoRA policy's adapters only).

Above rendering (a policy renders through a renderer), below the rollouts that sample from them.
"""
