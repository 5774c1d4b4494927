"""The Cloud with its two models served by vLLM: ``specsteer cloud --engine vllm`` (docs/VLLM_CLOUD.md).

The Generalist and the generic Specialist copy each live in a vLLM OpenAI-compatible server, started here as
child processes from ``.venv-vllm`` or already running at URLs the operator gives. The wire protocol, the Edge
and the CloudService's sessions, limits, secret and HTTP server are unchanged; one job per module:

* :mod:`~specsteer.cloud.vllm.client`: the HTTP client of one engine (one-token completions, log-probabilities);
* :mod:`~specsteer.cloud.vllm.pair`: the two engines one Cloud serves, and the tokens they computed;
* :mod:`~specsteer.cloud.vllm.session`: one session, a round's verdict computed from log-probabilities;
* :mod:`~specsteer.cloud.vllm.service`: the CloudService over a pair (admission by the engines' memory, the
  rules it refuses at Open);
* :mod:`~specsteer.cloud.vllm.launch`: starting, waiting for and stopping engine processes, or finding them;
* :mod:`~specsteer.cloud.vllm.export`: the model directories launched engines serve.

The ``cloud`` command's ``--engine vllm`` options and composition root are in :mod:`specsteer.cli.vllm_cloud`.
"""

from specsteer.cloud.vllm.client import Completion, EngineUnavailable, VllmEngine
from specsteer.cloud.vllm.export import pairing_model_dirs, save_pair
from specsteer.cloud.vllm.launch import (
    EngineSettings,
    LaunchedCloud,
    admission_budget,
    connect_cloud,
    launch_cloud,
    vllm_available,
)
from specsteer.cloud.vllm.pair import ENGINE_NAME, EngineStats, VllmPair
from specsteer.cloud.vllm.service import VllmCloudService
from specsteer.cloud.vllm.session import VllmCloud

__all__ = [
    "ENGINE_NAME",
    "Completion",
    "EngineSettings",
    "EngineStats",
    "EngineUnavailable",
    "LaunchedCloud",
    "VllmCloud",
    "VllmCloudService",
    "VllmEngine",
    "VllmPair",
    "admission_budget",
    "connect_cloud",
    "launch_cloud",
    "pairing_model_dirs",
    "save_pair",
    "vllm_available",
]
