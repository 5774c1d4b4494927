"""The Cloud's memory budget from the memory where its caches live: pure functions of what the device reports
(a GPU's free and total bytes, as torch.cuda.mem_get_info gives them), so they are tested without a GPU."""

from __future__ import annotations

import pytest

from specsteer.cloud import admission
from specsteer.cloud import limits as cloud_limits

GIB = 2**30


def test_a_gpu_budget_is_a_share_of_its_free_memory_past_the_headroom():
    # An 80 GiB card with 12 GiB free once a 32B model is loaded: half of what is free past 8 GiB of headroom.
    assert admission.gpu_memory_budget(12 * GIB, 80 * GIB, 0.5) == int((12 - 8) * GIB * 0.5)
    assert admission.gpu_memory_budget(5 * GIB, 80 * GIB, 0.5) == 1  # all of it headroom: nothing to admit with
    assert admission.memory_budget(10 * GIB, 0.25) == int(2.5 * GIB)
    with pytest.raises(ValueError):
        admission.memory_budget(GIB, 0.0)


def test_the_default_budget_asks_the_device_where_the_generalist_is(monkeypatch):
    asked = []
    monkeypatch.setattr(
        cloud_limits.torch.cuda, "mem_get_info", lambda device: asked.append(str(device)) or (20 * GIB, 80 * GIB)
    )
    monkeypatch.setattr(cloud_limits, "available_memory_bytes", lambda: 100 * GIB)
    assert cloud_limits.default_memory_budget(0.5, "cuda:1") == admission.gpu_memory_budget(20 * GIB, 80 * GIB, 0.5)
    assert asked == ["cuda:1"]
    assert cloud_limits.default_memory_budget(0.5, "cpu") == 50 * GIB  # the host's memory for a CPU pair
    assert asked == ["cuda:1"]
