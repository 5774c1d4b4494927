"""The GPU tier: the engine on a CUDA device (tiny models moved there), skipped where torch sees no GPU.

``SPECSTEER_GPU_TIER_DEVICE`` names the device instead: ``cpu`` runs the same tests on the CPU, which proves them
(under the pinned transformers and under the GPU machines' 5.17: scripts/test_gpu_tier.sh) before a GPU is at
hand; ``cuda`` makes a missing GPU a failure, not a skip (benchmarks/gpu_session.sh sets it). Light on purpose:
nothing here or in the tier imports gradio or sqlalchemy, which the GPU machines do not have.
"""

from __future__ import annotations

import os

import pytest
import torch

DEVICE_ENV = "SPECSTEER_GPU_TIER_DEVICE"


def tier_device() -> str | None:
    """The device the tier runs on: the one named in the environment, else CUDA where torch sees it, else None."""
    named = os.environ.get(DEVICE_ENV, "").strip()
    if named:
        return named
    return "cuda" if torch.cuda.is_available() else None


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    tier = [item for item in items if str(item.fspath).startswith(here)]
    for item in tier:
        item.add_marker(pytest.mark.gpu)
    if tier_device() is None:
        skip = pytest.mark.skip(reason=f"no CUDA device (set {DEVICE_ENV}=cpu to run the GPU tier on the CPU)")
        for item in tier:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device() -> str:
    named = tier_device()
    assert named is not None  # collection skipped the tier otherwise
    if named.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail(f"{DEVICE_ENV}={named}, but torch {torch.__version__} sees no CUDA device")
    return named


@pytest.fixture(scope="session")
def on_cuda(device) -> bool:
    return device.startswith("cuda")
