"""Where the transformers runtime puts models (``Placement``) and the dtype policy on CUDA: the CPU by default,
cuda in bf16 on a GPU that computes it natively. No GPU needed: torch's CUDA queries are monkeypatched."""

from __future__ import annotations

import pytest
import torch

from specsteer.runtimes import hardware
from specsteer.runtimes.placement import Placement


def fake_gpu(monkeypatch, capability: tuple[int, int]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args, **kwargs: capability)


def test_the_default_is_the_cpu_in_the_cpus_own_dtype():
    placement = Placement()
    assert placement.device == "cpu" and placement.dtype is None and not placement.on_gpu
    assert placement.dtype_name == hardware.default_dtype()
    assert placement.describe() == f"the CPU ({placement.dtype_name})"


def test_on_a_cpu_detect_changes_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Placement.detect() == Placement()


@pytest.mark.parametrize(("capability", "dtype"), [((8, 0), "bf16"), ((9, 0), "bf16"), ((7, 5), "fp32")])
def test_on_a_gpu_detect_places_on_cuda_in_bf16_where_the_gpu_computes_it(monkeypatch, capability, dtype):
    fake_gpu(monkeypatch, capability)
    placement = Placement.detect()
    assert placement == Placement("cuda", dtype)
    assert placement.on_gpu and placement.describe() == f"the GPU (cuda, {dtype})"
    assert hardware.cuda_dtype() == dtype == hardware.default_dtype()


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:0", "mps"])
def test_an_unknown_device_is_refused_at_once(device):
    with pytest.raises(ValueError, match="unknown device"):
        Placement(device)


def test_an_unknown_dtype_is_refused_at_once():
    with pytest.raises(ValueError, match="unknown dtype"):
        Placement("cuda", "int3")
    assert Placement("cuda:1", "bf16").on_gpu
