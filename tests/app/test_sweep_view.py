"""The Dashboard's α × β view: the handler over a stored run (a fake service), and its wiring on a page."""

from __future__ import annotations

from datetime import UTC, datetime

import gradio as gr

from specsteer.method.events import GenerationStats
from specsteer.service.events import RunResults
from specsteer.stores.runs import CellResult, GridPoint, StoredRun
from ui import sweep_view

CONFIG = {
    "data": "records.jsonl",
    "task": "review",
    "methods": ["slm+", "llm", "specsteer"],
    "alphas": [1.0, 0.1],
    "betas": [1.0],
    "cells_total": 12,  # 3 records x 4 points
}


def cell(record: str, point: GridPoint, rouge_l: float, seconds: float) -> CellResult:
    stats = GenerationStats(method=point.method, new_tokens=8, seconds=seconds)
    return CellResult(record, point, "x", {"rougeL": rouge_l / 100, "rouge1": rouge_l / 100}, stats)


def cells() -> tuple[CellResult, ...]:
    """Two of the three records are done; SpecSteer α=0.1 beats LLM by 1 on both."""
    done = []
    for record in ("r0", "r1"):
        done += [
            cell(record, GridPoint("slm+"), 18, 0.5),
            cell(record, GridPoint("llm"), 20, 2.0),
            cell(record, GridPoint("specsteer", 1.0, 1.0), 19, 1.0),
            cell(record, GridPoint("specsteer", 0.1, 1.0), 21, 1.5),
        ]
    return (*done, cell("r2", GridPoint("slm+"), 10, 0.5))


class FakeService:
    def __init__(self, config=CONFIG):
        now = datetime.now(UTC)
        self.run = StoredRun(7, "sweep <b>", config, "running", None, now, now, 9)

    def run_results(self, run_id):
        return RunResults(self.run, cells()) if run_id == 7 else None


def test_the_view_of_a_partial_run_says_how_many_records_and_what_the_rule_chooses():
    view = sweep_view.sweep_view(FakeService(), [7])
    assert "2 of 3 records have every cell" in view.status and "chosen: α=0.1 β=1" in view.status
    assert "sweep &lt;b&gt;" in view.status  # the run's name is escaped
    names = [trace.name for trace in view.figure.data]
    assert {"SpecSteer (α, β)", "SpecSteer − LLM", "Pareto front", "LLM (reference)"} <= set(names)


def test_nothing_chosen_missing_or_without_specsteer_is_said_not_drawn():
    assert sweep_view.sweep_view(FakeService(), None).figure is None
    assert "does not exist" in sweep_view.sweep_view(FakeService(), [8]).status
    baselines = FakeService({**CONFIG, "methods": ["slm+", "llm"]})
    assert "no SpecSteer setting" in sweep_view.sweep_view(baselines, "7").status
    # A config this version cannot read: the view falls back on the points the cells have.
    unreadable = FakeService({"task": "review"})
    assert "2 of 3 records" in sweep_view.sweep_view(unreadable, [7]).status


def test_the_view_is_wired_to_its_button_and_the_pages_show_button():
    with gr.Blocks() as demo:
        runs = gr.Dropdown([("run", 7)], multiselect=True, allow_custom_value=True)
        show = gr.Button("Show")
        view = sweep_view.build(FakeService(), runs, show)
    assert isinstance(view.figure, gr.Plot)
    assert "/sweep_view" in demo.get_api_info()["named_endpoints"]
