"""The runtime note of a pairing that auto splits: both streams' runtimes and why, and the Specialist pair's rule."""

from __future__ import annotations

from specsteer.models.calibration import RuntimeChoice
from specsteer.models.runtime_plan import RuntimePlan
from specsteer.service import pair_catalog as service_module
from specsteer.service.pair_catalog import PairCatalog


def test_the_note_of_a_split_names_both_runtimes_and_the_reasons(monkeypatch):
    split = RuntimePlan(
        RuntimeChoice("transformers", "reads the 825-token private prompt at 1194 tok/s against 239"),
        RuntimeChoice("llama.cpp", "verifies 90 ms a pass"),
    )
    monkeypatch.setattr(service_module, "runtime_plan", lambda pairing, requested, progress: split)
    note = PairCatalog().runtime_note("offline-qwen2.5-coder")
    assert note.startswith("Auto splits the streams here: the Specialist and its generic copy on transformers")
    assert "the Generalist on llama.cpp" in note and "1194 tok/s" in note and "verifies 90 ms" in note
    assert "quantization noise" in note  # why the Specialist and its copy never run apart
