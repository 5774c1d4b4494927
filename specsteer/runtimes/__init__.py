"""Where a model runs: the runtime interface (Sequence, prefix cache), transformers, llama.cpp with its check, hardware facts."""
