"""Stored runs over the same records read as one table (``specsteer report``); tiny fp32 models on CoGenesis records."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest
from evaluation.test_record_lora import cogenesis_record, write_records

import storage
from specsteer.evaluation.grid import EvalSpec, paired_difference, run_grid
from specsteer.evaluation.joined import StoredRun, device_tokens, join_runs
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.method.catalog import METHODS
from specsteer.models.tiny import tiny_pair
from specsteer.stores.runs import GridPoint

pytestmark = pytest.mark.usefixtures("fresh_engines")
# the tables' order: the catalog's
ORDER = [method for method in METHODS if method in {"slm+", "llm", "specsteer", "p3"}]


def retest_spec(data: str, **changes) -> EvalSpec:
    """A re-test's kind of run, named "steered": SLM+, LLM and SpecSteer at α = 1 over the records of ``data``."""
    spec = EvalSpec(
        data=data,
        task="cogenesis",
        methods=("slm+", "llm", "specsteer"),
        alphas=(1.0,),
        max_new_tokens=6,
        retrieval_k=2,
        prompt_style="clean",
        runtime="transformers",
        run_name="steered",
    )
    return replace(spec, **changes)


@pytest.fixture
def runs(tmp_path, url):
    """A re-test's kind of run (slm+, llm, specsteer) over three records, and a P³ run added to two of them."""
    data = write_records(tmp_path, [cogenesis_record(n) for n in range(3)])
    base = retest_spec(data)
    pair = tiny_pair(seed=0, generalist_seed=1)
    store = storage.SqlRunStore(url)
    run_grid(base, store, pair=pair)
    run_grid(replace(base, methods=("p3",), p3_draft_len=3, p3_tau=0.05, limit=2, run_name="p3"), store, pair=pair)
    return url, data


def _cells(name: str, url: str):
    return storage.run_cells(storage.get_run_by_name(name, url=url).id, url=url)


def test_the_report_joins_a_p3_run_to_the_steered_run_record_by_record(runs, capsys):
    from specsteer.cli import main

    url, _ = runs
    assert main(["report", "--run", "steered", "--run", "p3", "--database", url, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = {row["method"]: row for row in document["rows"]}
    assert list(rows) == ORDER
    # Only the records every row has: the P³ run covers two of the three.
    assert len(document["records"]) == 2 and all(row["records"] == 2 for row in rows.values())
    p3 = _cells("p3", url)
    steered = [c for c in _cells("steered", url) if c.record_id in document["records"]]
    scores = [100 * c.rouge["rougeL"] for c in p3]
    assert rows["p3"]["rougeL"] == pytest.approx(statistics.fmean(scores))
    assert (rows["p3"]["rougeL_low"], rows["p3"]["rougeL_high"]) == pytest.approx(bootstrap_interval(scores))
    assert rows["p3"]["label"] == "P³ k=3 τ=0.05"
    # The share chosen on the device: P³'s corrections; SpecSteer's accepted drafts; all of SLM+; none of LLM.
    assert rows["p3"]["device_share"] == pytest.approx(
        sum(c.stats.device_chosen for c in p3) / sum(c.stats.new_tokens for c in p3)
    )
    spec = [c for c in steered if c.point.method == "specsteer"]
    assert rows["specsteer"]["device_share"] == pytest.approx(
        sum(c.stats.accepted for c in spec) / sum(c.stats.new_tokens for c in spec)
    )
    assert rows["slm+"]["device_share"] == 1.0 and rows["llm"]["device_share"] == 0.0
    assert {"facts_sent", "facts_sent_beyond_task", "facts_in_output"} <= set(rows["p3"])
    # The history that crossed, over the records kept: SLM+ sends nothing; the others as their cells say.
    assert rows["slm+"]["history_crossed"] == 0.0 and rows["slm+"]["history_phrases"] == 0.0
    assert rows["p3"]["history_phrases"] == pytest.approx(statistics.fmean(c.history_crossed.count for c in p3))
    # P³ − SpecSteer pairs the two runs' cells by record.
    expected = paired_difference([*p3, *steered], GridPoint("p3"), GridPoint("specsteer", 1.0, 1.0))
    (found,) = [d for d in document["differences"] if d["metric"] == "rougeL" and d["ours"] == rows["p3"]["label"]
                and d["theirs"] == rows["specsteer"]["label"]]  # fmt: skip
    assert (found["mean"], found["low"], found["high"], found["wins"]) == pytest.approx(
        (expected.mean, expected.low, expected.high, expected.wins)
    )
    # SpecSteer against P³ is not repeated the other way round.
    assert not [d for d in document["differences"] if d["ours"] == rows["specsteer"]["label"]
                and d["theirs"] == rows["p3"]["label"]]  # fmt: skip
    # The runs differ only in which points they computed (and limit): the limit is a note.
    assert any("limit" in note for note in document["notes"])
    assert main(["report", "--run", "steered", "--run", "p3", "--database", url]) == 0
    text = capsys.readouterr().out
    assert "P³ k=3 τ=0.05 − SpecSteer α=1 β=1: R-L" in text and "on device" in text
    assert "history crossed" in text and "phrases" in text


def test_runs_that_cannot_be_joined_are_refused_with_the_reason(runs, tmp_path, capsys):
    from specsteer.cli import main

    url, data = runs
    steered = _cells("steered", url)
    config = storage.get_run_by_name("steered", url=url).config
    # The same point in two runs: two answers to one question.
    with pytest.raises(ValueError, match="both 'steered' and 'again' have "):
        join_runs([StoredRun("steered", config, steered), StoredRun("again", config, steered)])
    # Other records.
    other = {**config, "data": str(tmp_path / "other.json")}
    p3 = _cells("p3", url)
    with pytest.raises(ValueError, match="the same records: data"):
        join_runs([StoredRun("steered", config, steered), StoredRun("p3", other, p3)])
    assert main(["report", "--run", "steered", "--run", "nothing", "--database", url]) == 2
    assert "no run named 'nothing'" in capsys.readouterr().err
    assert main(["report", "--run", "p3", "--run", "p3", "--database", url]) == 2
    assert "named twice" in capsys.readouterr().err
    assert main(["report", "--run", "p3", "--database", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no database file" in capsys.readouterr().err


def test_device_tokens_counts_what_the_device_chose():
    from specsteer.method.events import GenerationStats

    assert device_tokens("p3", GenerationStats("p3", new_tokens=10, device_chosen=3)) == 3
    assert device_tokens("specsteer", GenerationStats("specsteer", new_tokens=10, drafted=12, accepted=7)) == 7
    assert device_tokens("slm+", GenerationStats("slm+", new_tokens=10)) == 10
    assert device_tokens("llm", GenerationStats("llm", new_tokens=10)) == 0
