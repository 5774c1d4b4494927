"""The service's pairing catalog on a GPU and on a CPU: where it asks ``load_pair`` to put the models, what
auto picks and what the runtime note says. On a CPU everything is as it was; no GPU is needed (torch's CUDA
queries are monkeypatched, ``load_pair`` is recorded instead of run)."""

from __future__ import annotations

import pytest
import torch

from specsteer.models import planning
from specsteer.models.calibration import RuntimeChoice
from specsteer.models.registry import DEFAULT_PAIRING, get_pairing
from specsteer.models.runtime_plan import RuntimePlan
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.runtimes.placement import Placement
from specsteer.service import pair_catalog as service_module
from specsteer.service import pairings
from specsteer.service.pair_catalog import PairCatalog


def fake_gpu(monkeypatch, capability=(9, 0)) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args, **kwargs: capability)


@pytest.fixture
def loads(monkeypatch):
    calls: list[dict] = []
    monkeypatch.setattr(service_module, "load_pair", lambda pairing_id, **kwargs: calls.append(kwargs) or pairing_id)
    return calls


def test_the_catalog_loads_on_the_cpu_by_default(loads):
    assert PairCatalog().placement == Placement() == pairings.catalog().placement
    PairCatalog().load(DEFAULT_PAIRING, "auto", print)
    assert loads[0]["device"] == "cpu" and loads[0]["dtype"] is None


def test_on_a_gpu_the_catalog_loads_on_cuda_in_bf16(monkeypatch, loads):
    fake_gpu(monkeypatch)
    catalog = pairings.catalog(Placement.detect())
    catalog.load(DEFAULT_PAIRING, "auto", print)
    assert (loads[0]["device"], loads[0]["dtype"]) == ("cuda", "bf16")


def test_the_test_pairs_stay_on_the_cpu_in_fp32_on_a_gpu(monkeypatch):
    fake_gpu(monkeypatch)
    pair = PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}, Placement("cuda", "bf16")).load(
        TEST_PAIRING_ID, "auto", print
    )
    assert pair.precision == "fp32" and pair.specialist.model.device.type == "cpu"


@pytest.mark.parametrize("pairing_id", [DEFAULT_PAIRING, "qwen3-0.6b__qwen3-32b"])
def test_on_a_cpu_auto_and_the_note_are_as_before(monkeypatch, pairing_id):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    detected = PairCatalog(placement=Placement.detect())
    assert detected.placement == Placement()
    assert detected.runtime_note(pairing_id) == PairCatalog().runtime_note(pairing_id)
    assert "GPU (" not in detected.runtime_note(pairing_id)
    llama = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "no calibration; run `specsteer calibrate`"))
    monkeypatch.setattr(service_module, "runtime_plan", lambda pairing, requested, progress: llama)
    assert detected.runtime_note(DEFAULT_PAIRING).startswith("Auto picks llama.cpp here")


def test_on_a_gpu_auto_picks_transformers_and_the_note_names_the_device(monkeypatch):
    fake_gpu(monkeypatch)
    # The offline pair is GGUF files that llama.cpp reads on a CPU: with a GPU present auto still picks transformers.
    assert planning.runtime_choice(get_pairing(DEFAULT_PAIRING)).runtime == "transformers"
    note = PairCatalog(placement=Placement.detect()).runtime_note(DEFAULT_PAIRING)
    assert "transformers" in note and "the GPU (cuda, bf16)" in note and "CPU build" in note
    note = PairCatalog(placement=Placement.detect()).runtime_note("qwen3-0.6b__qwen3-32b")  # not GGUF files
    assert "the GPU (cuda, bf16)" in note
