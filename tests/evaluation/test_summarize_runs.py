"""benchmarks/summarize_runs.py states the claims of specsteer.evaluation.claims (the Dashboard's sentences), not a
logic of its own: each SpecSteer setting against SLM+ and LLM with its interval and verdict, on R-L and R-1."""

from __future__ import annotations

import runpy
from pathlib import Path

import storage
from specsteer.data.crossing import CrossedPhrase, Crossing, HistoryCrossing
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.claims import claim_sentences
from specsteer.evaluation.grid import EvalSpec, load_evaluation_records, run_config
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import CellResult, GridPoint

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "summarize_runs.py"
STEERED = GridPoint("specsteer", 0.1, 1.0)
CROSSED = CrossedPhrase("InnovTech Solutions", (Crossing(1, "rejected"),))
# R-L (0-100) per record: SpecSteer above SLM+ on every record, beside LLM on some and below on others.
SCORES = {GridPoint("slm+"): [10, 12, 11], GridPoint("llm"): [15, 12, 20], STEERED: [14, 16, 15]}


def test_the_script_prints_the_claims_of_claims_py(url, capsys):
    spec = EvalSpec(data=str(bundled_sample_path("review")), task="review", methods=("slm+", "llm", "specsteer"))
    records, _ = load_evaluation_records(spec)
    ids = [record.id for record in records][:3]
    cells = [
        CellResult(
            record_id,
            point,
            "an output",
            {"rouge1": v / 100, "rougeL": v / 100, "rouge1_stemmed": v / 100, "rougeL_stemmed": v / 100},
            GenerationStats(method=point.method, new_tokens=4, seconds=1.0),
            # SpecSteer's first record: one phrase of the history crossed; the other cells crossed none.
            HistoryCrossing((CROSSED,) if (point, record_id) == (STEERED, ids[0]) else ()),
        )
        for point, values in SCORES.items()
        for record_id, v in zip(ids, values, strict=True)
    ]
    run_id = storage.create_run("claims", run_config(spec, "tiny-test", "transformers", "fp32", len(cells)), url=url)
    for cell in cells:
        storage.save_cell(run_id, cell, url=url)
    script = runpy.run_path(str(SCRIPT), run_name="summarize_runs")
    script["main"](url, ["claims"])
    out = capsys.readouterr().out
    stored = storage.run_cells(run_id, url=url)
    sentences = claim_sentences(stored, ("rougeL", "rouge1"))
    assert sentences and all(f"- {sentence}" in out for sentence in sentences)
    assert "SpecSteer α=0.1 β=1 − SLM+: R-L +4.00" in out and "higher on these records" in out
    assert "SpecSteer α=0.1 β=1 − LLM: R-L −0.67" in out and "not established on these records" in out
    assert "| α=0.1 β=1 | 3/3 better, +4.00 [" in out  # the record-by-record table, with the verdict
    assert "stronger baseline" not in out
    assert "| SpecSteer | 0.1 | 1 | 33% | 0.3 |" in out and "| LLM | – | – | 0% | 0.0 |" in out
