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


def test_the_note_of_a_hand_off_says_who_reads_the_private_prompt(monkeypatch):
    """A calibration that compared the runtimes whole (a CPU with fast bf16) and handed the prompt over: the note
    gives the plan's reason, which names the bf16 reader, not the whole-runtime estimate alone."""
    reason = "llama.cpp+handoff (transformers bf16) is estimated …; the Specialist's long prompts are read by transformers bf16"
    handed = RuntimePlan.uniform(RuntimeChoice("llama.cpp", reason, True, "transformers", "bf16"))
    monkeypatch.setattr(service_module, "runtime_plan", lambda pairing, requested, progress: handed)
    monkeypatch.setattr(service_module, "_measured_choice", lambda pairing: " Measured here: llama.cpp is fastest.")
    note = PairCatalog().runtime_note("offline-qwen2.5-coder")
    assert note.startswith("Auto picks llama.cpp here") and "read by transformers bf16" in note
