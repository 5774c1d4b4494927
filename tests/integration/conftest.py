"""The integration tier: tests on the real offline models (the GGUF files, their conversions, the real
tokenizers), loaded once per session and runtime.

Every test under this folder is marked ``integration``; a plain ``pytest`` leaves the tier out (pytest.ini)
and ``bash scripts/test.sh`` (the README's command, which CI runs) includes it. The pairs are fixtures
parametrized by runtime and scoped to the module that uses them (each pair is used by one module, so it is loaded
once a session): pytest groups the tests by parameter, loads each real pair once, and releases it before the next
loads and when its module ends, so no two real pairs (8 GB for the default pair in fp32) are held at once.
"""

from __future__ import annotations

import os

import pytest

from testkit import require_cross_models, require_llamacpp

RUNTIMES = ("llama.cpp", "transformers")
CROSS_PAIRINGS = ("offline-smollm2__qwen2.5-coder", "offline-smollm2__gemma3")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__) + os.sep
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.integration)


def _loaded(pairing_id: str, runtime: str):
    """The pair loaded on ``runtime`` with two threads (real models: matrix work two cores do share),
    released afterwards with the loader's own cache."""
    import torch

    from specsteer.models.loading import clear_loaded_pairs, load_pair

    torch.set_num_threads(2)
    try:
        yield load_pair(pairing_id, runtime=runtime)
    finally:
        torch.set_num_threads(1)
        clear_loaded_pairs()
        _return_freed_memory()


def _return_freed_memory() -> None:
    """Gives a released pair's memory back to the system: glibc keeps freed heap for the process (measured: 2.4 GB
    of the default pair's 9.5 GB on transformers, 0.6 GB after the trim), which the other workers, running the rest
    of the suite in the same 24 GiB, could otherwise not use."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):  # glibc's; other C libraries return memory their own way
        libc.malloc_trim(0)


@pytest.fixture(scope="module", params=RUNTIMES)
def default_pair(request):
    """The default offline pair (Qwen2.5-Coder 0.5B / 1.5B) on each runtime."""
    from specsteer.models.registry import DEFAULT_PAIRING

    if request.param == "llama.cpp":
        require_llamacpp()
    yield from _loaded(DEFAULT_PAIRING, request.param)


@pytest.fixture(
    scope="module",
    params=[(pairing, runtime) for pairing in CROSS_PAIRINGS for runtime in ("transformers", "llama.cpp")],
    ids=lambda param: "-".join(param),
)
def cross_pair(request):
    """Each offline cross-tokenizer pairing on each runtime (opt-in weights: requirements-cross-models.txt)."""
    pairing_id, runtime = request.param
    require_cross_models(pairing_id)
    if runtime == "llama.cpp":
        require_llamacpp()
    yield from _loaded(pairing_id, runtime)
