"""Appendix A.2's table from a base run and a per-record-LoRA run (``specsteer lora table``); tiny fp32 models."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest
from evaluation.test_record_lora import cogenesis_record, lora_spec, write_records

import storage
from specsteer.evaluation.grid import paired_difference, run_grid
from specsteer.evaluation.lora_table import LORA_TAG, config_notes, lora_table, specsteer_point
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.method.events import GenerationStats
from specsteer.models.tiny import tiny_pair
from specsteer.stores.runs import CellResult, GridPoint

pytestmark = pytest.mark.usefixtures("fresh_engines")


@pytest.fixture
def runs(tmp_path, url):
    """A base run (slm+, llm, specsteer) and a per-record-LoRA run (slm+, specsteer) over three records."""
    data = write_records(tmp_path, [cogenesis_record(n) for n in range(3)])
    lora = lora_spec(data, tmp_path / "adapters", max_new_tokens=6, runtime="transformers", run_name="a2-lora")
    base = replace(lora, specialist_lora="", lora_settings=None, run_name="a2-base")
    pair = tiny_pair(seed=0, generalist_seed=1)
    store = storage.SqlRunStore(url)
    run_grid(base, store, pair=pair)
    run_grid(replace(lora, methods=("slm+", "specsteer")), store, pair=pair)
    return url


def test_the_table_reads_both_runs_over_the_shared_records(runs, capsys):
    from specsteer.cli import main

    assert main(["lora", "table", "--base", "a2-base", "--lora", "a2-lora", "--database", runs, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = {(row["method"], row["lora"]): row for row in document["rows"]}
    assert list(rows) == [("slm+", False), ("slm+", True), ("llm", False), ("specsteer", False), ("specsteer", True)]
    assert len(document["records"]) == 3 and all(row["records"] == 3 for row in rows.values())
    base = storage.run_cells(storage.get_run_by_name("a2-base", url=runs).id, url=runs)
    lora = storage.run_cells(storage.get_run_by_name("a2-lora", url=runs).id, url=runs)
    # Each row: the mean over records and its record bootstrap, as metrics computes them.
    scores = [100 * c.rouge["rougeL"] for c in lora if c.point.method == "specsteer"]
    row = rows[("specsteer", True)]
    assert row["rougeL"] == pytest.approx(statistics.fmean(scores))
    assert (row["rougeL_low"], row["rougeL_high"]) == pytest.approx(bootstrap_interval(scores))
    assert {"facts_sent", "facts_sent_beyond_task", "facts_in_output"} <= set(row)
    assert rows[("slm+", True)]["facts_sent"] == 0.0  # on the device: nothing sent
    # The paired difference of LoRA against none pairs the runs record by record.
    tagged = [replace(c, point=replace(c.point, method="specsteer" + LORA_TAG)) for c in lora]
    expected = paired_difference(
        [*base, *tagged], GridPoint("specsteer" + LORA_TAG, 0.1, 1.0), GridPoint("specsteer", 0.1, 1.0)
    )
    (found,) = [d for d in document["differences"] if d["metric"] == "rougeL" and d["ours"] == row["label"]
                and d["theirs"] == rows[("specsteer", False)]["label"]]  # fmt: skip
    assert (found["mean"], found["low"], found["high"], found["wins"]) == pytest.approx(
        (expected.mean, expected.low, expected.high, expected.wins)
    )
    seconds = {c.record_id: c.stats.lora_training_seconds for c in lora}
    assert document["training"]["users"] == 3 and document["training"]["mean_steps"] == 4
    assert document["training"]["mean_seconds"] == pytest.approx(statistics.fmean(seconds.values()))
    assert document["training"]["median_seconds"] == pytest.approx(statistics.median(seconds.values()))
    assert document["notes"] == []
    assert main(["lora", "table", "--base", "a2-base", "--lora", "a2-lora", "--database", runs]) == 0
    text = capsys.readouterr().out
    assert "SpecSteer α=0.1 β=1 + LoRA" in text and "training per user (3 adapters)" in text
    assert main(["lora", "table", "--base", "a2-base", "--lora", "none", "--database", runs]) == 2
    assert "no run named 'none'" in capsys.readouterr().err
    assert main(["lora", "table", "--base", "a2-base", "--lora", "a2-lora", "--database", runs, "--alpha", "0.5"]) == 2
    assert "do not share SpecSteer at a=0.5" in capsys.readouterr().err


def _cell(record: str, method: str, alpha=None, beta=None) -> CellResult:
    return CellResult(
        record, GridPoint(method, alpha, beta), "x", {"rouge1": 0.5, "rougeL": 0.25}, GenerationStats(method)
    )


def test_the_setting_and_the_runs_must_match():
    base = [_cell("r", "specsteer", 0.1, 1.0), _cell("r", "specsteer", 0.5, 1.0)]
    lora = [_cell("r", "specsteer", 0.1, 1.0), _cell("r", "specsteer", 0.5, 1.0)]
    with pytest.raises(ValueError, match="they share specsteer a=0.1 b=1, specsteer a=0.5 b=1"):
        specsteer_point(base, lora)
    assert specsteer_point(base, lora, alpha=0.5) == GridPoint("specsteer", 0.5, 1.0)
    config = {"data": "/d.json", "task": "cogenesis", "runtime": "transformers", "methods": ["llm"]}
    lora_config = {**config, "runtime": "llama.cpp", "methods": ["slm+"], "specialist_lora": "per-record"}
    assert config_notes(config, lora_config) == [
        "the runs differ in runtime: 'transformers' (base) and 'llama.cpp' (LoRA)"
    ]
    # the plans' reasons always differ (the adapter chose transformers): no note where the runtimes agree
    planned = {**config, "runtime_plan": {"runtime": "transformers", "reason": "asked for"}}
    chosen = {
        **planned,
        "specialist_lora": "per-record",
        "runtime_plan": {"runtime": "transformers", "reason": "a LoRA Specialist was given"},
    }
    assert config_notes(planned, chosen) == []
    with pytest.raises(ValueError, match="their data differs"):
        config_notes(config, {**lora_config, "data": "/other.json"})
    table = lora_table(base, lora, task="cogenesis", alpha=0.1)
    assert "no cells for SLM+, SLM+ + LoRA, LLM" in table.notes[0] and table.training is None
