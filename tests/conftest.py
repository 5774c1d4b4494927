"""Shared test settings: modest CPU use and no model-hub traffic."""

import os

# Tests must never reach a model hub; the offline pairing and tiny models cover loading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402  (after the environment is set)

# The tiny test models are dominated by per-op overhead, where a second thread only
# adds synchronisation; the integration tests on the real pair ask for two themselves.
torch.set_num_threads(1)

