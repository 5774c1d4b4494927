"""The Dashboard's joined view: stored runs over the same records as one table (a fake service over hand-made
cells and a real CoGenesis records file, no model), its refusals, and its wiring on a page."""

from __future__ import annotations

from datetime import UTC, datetime

import gradio as gr
import pytest
from evaluation.test_record_lora import cogenesis_record, write_records

from specsteer.method.events import GenerationStats
from specsteer.service.events import RunResults
from specsteer.stores.runs import CellResult, GridPoint, StoredRun
from ui import joined_view

RECORDS = ("0_1", "1_1", "2_1")


def cell(record: str, point: GridPoint, rouge_l: float, device_chosen: int | None = None) -> CellResult:
    stats = GenerationStats(method=point.method, new_tokens=10, seconds=2.0, device_chosen=device_chosen)
    return CellResult(record, point, "An invitation.", {"rougeL": rouge_l / 100, "rouge1": rouge_l / 100}, stats)


class FakeService:
    """Run 1: SLM+, LLM and SpecSteer over three records; run 2: P³ over two of them; run 3: other records."""

    def __init__(self, data: str, other: str):
        now = datetime.now(UTC)
        base = {"data": data, "task": "cogenesis", "retrieval_k": 2, "prompt_style": "clean"}
        steered = [
            cell(record, point, score + n)
            for n, record in enumerate(RECORDS)
            for point, score in (
                (GridPoint("slm+"), 10),
                (GridPoint("llm"), 12),
                (GridPoint("specsteer", 1.0, 1.0), 13),
            )
        ]
        p3 = [cell(record, GridPoint("p3"), 14 + n, device_chosen=2) for n, record in enumerate(RECORDS[:2])]
        self.runs = {
            1: (
                StoredRun(
                    1, "steered <i>", {**base, "methods": ["slm+", "llm", "specsteer"]}, "done", None, now, now, 9
                ),
                steered,
            ),
            2: (StoredRun(2, "p3", {**base, "methods": ["p3"]}, "done", None, now, now, 2), p3),
            3: (StoredRun(3, "elsewhere", {**base, "data": other, "methods": ["p3"]}, "done", None, now, now, 2), p3),
        }

    def run_results(self, run_id):
        found = self.runs.get(run_id)
        return RunResults(found[0], tuple(found[1])) if found else None


@pytest.fixture
def service(tmp_path):
    data = write_records(tmp_path, [cogenesis_record(n) for n in range(3)])
    (tmp_path / "other").mkdir()
    other = write_records(tmp_path / "other", [cogenesis_record(n) for n in range(3)])
    return FakeService(data, other)


def test_a_p3_run_joins_the_steered_run_over_the_records_both_have(service):
    view = joined_view.joined_view(service, [1, 2])
    assert "2 records that every row has" in view.status
    assert "steered &lt;i&gt;" in view.status  # run names are the user's: escaped
    frame = view.table
    assert list(frame["Method"]) == ["SLM+", "LLM", "P³ k=10 τ=0.05", "SpecSteer α=1 β=1"]
    assert set(frame["Records"]) == {2}
    p3 = frame[frame["Run"] == "p3"].iloc[0]
    assert p3["ROUGE-L [95 %]"].startswith("14.50 [14.00, 15.00]")
    assert p3["On device"] == "20.0 %"  # 2 of 10 tokens chosen on the device, in each cell
    assert frame[frame["Method"] == "SLM+"].iloc[0]["On device"] == "100.0 %"
    assert {"Facts sent", "Beyond the task", "In the output"} <= set(frame.columns)  # CoGenesis: the facts audit
    # P³ and SpecSteer, each against every other row, on both metrics
    assert view.differences.count("<li>") == 2 * (3 + 2)
    assert "P³ k=10 τ=0.05 − SpecSteer α=1 β=1: R-L +1.00 [+1.00, +1.00] (2/2 better)" in view.differences


def test_runs_that_cannot_be_joined_are_refused_with_the_reason(service):
    other = joined_view.joined_view(service, [2, 3])
    assert "cannot be joined: the runs must read the same records" in other.status and other.table is None
    view = joined_view.joined_view(service, [1, 2, 3])
    assert "cannot be joined" in view.status and view.table is None
    assert "does not exist" in joined_view.joined_view(service, [1, 9]).status
    assert "Choose" in joined_view.joined_view(service, None).status
    too_many = joined_view.joined_view(service, list(range(1, joined_view.JOINED_MAX_ROWS + 2)))
    assert "at most" in too_many.status and too_many.table is None


def test_too_many_methods_are_refused_before_any_interval_is_drawn(service, monkeypatch):
    monkeypatch.setattr(joined_view, "JOINED_MAX_ROWS", 3)
    view = joined_view.joined_view(service, [1, 2])
    assert "4 methods and settings" in view.status and "at most 3" in view.status


def test_the_view_is_wired_to_its_own_button(service):
    with gr.Blocks() as demo:
        runs = gr.Dropdown([("run", 1)], multiselect=True, allow_custom_value=True)
        view = joined_view.build(service, runs)
    assert isinstance(view.table, gr.Dataframe)
    assert "/joined_view" in demo.get_api_info()["named_endpoints"]
