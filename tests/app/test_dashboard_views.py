"""What the Dashboard shows, without a server: the run a page opens on, the quality plot's intervals and the
paired differences as a table, the deployment view's series and its takeaway (GUI-free decisions of
``specsteer.service.evaluation_runs`` and the tab's handlers over a fake service)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.method.events import GenerationStats
from specsteer.service.evaluation_runs import (
    EMPTY_STORE,
    MAX_SERIES,
    chosen_series,
    default_run_ids,
    default_series,
    deployment_takeaway,
    run_numbers,
    with_intervals,
)
from specsteer.service.events import RunResults
from specsteer.service.example_runs import DEFAULT_EXAMPLE
from specsteer.stores.runs import CellResult, GridPoint, StoredRun
from ui.dashboard_handlers import DashboardTab

NOW = datetime.now(UTC)


def stored(run_id: int, name: str, example: bool = False, cells: int = 0) -> StoredRun:
    config = {"task": "review", "data": "records.jsonl", "methods": ["slm+", "llm", "specsteer"], "alphas": [0.1]}
    return StoredRun(run_id, name, config, "finished", None, NOW, NOW, cells, example)


def cell(record: str, point: GridPoint, rouge_l: float) -> CellResult:
    stats = GenerationStats(point.method, new_tokens=8, seconds=1.0)
    return CellResult(record, point, "x", {"rougeL": rouge_l / 100, "rouge1": rouge_l / 100}, stats)


CELLS = tuple(
    cell(f"r{n}", point, score + n % 3)
    for n in range(6)
    for point, score in ((GridPoint("slm+"), 10), (GridPoint("llm"), 12), (GridPoint("specsteer", 0.1, 1.0), 14))
)


def test_the_dashboard_opens_on_the_default_example_and_an_empty_store_on_nothing():
    user, other, default = stored(1, "mine"), stored(10**12 + 1, "x", True), stored(10**12 + 2, DEFAULT_EXAMPLE, True)
    assert default_run_ids([user, other, default]) == [default.id]
    assert default_run_ids([user, other]) == [other.id]  # another example when that one is gone
    assert default_run_ids([user]) == [user.id] and default_run_ids([]) == []


def test_each_rows_interval_is_the_record_bootstrap_of_its_scores():
    rows = [
        {"method": "llm", "alpha": None, "beta": None, "rougeL": 13.0},
        {"method": "sd", "alpha": None, "beta": None},
    ]
    shown = with_intervals(rows, CELLS)
    scores = [100 * c.rouge["rougeL"] for c in CELLS if c.point.method == "llm"]
    assert (shown[0]["rougeL_low"], shown[0]["rougeL_high"]) == bootstrap_interval(scores)
    assert shown[1]["rougeL_low"] is None  # no cell: no interval


def test_a_runs_numbers_hold_a_table_row_per_claim_and_are_computed_once():
    run = stored(3, "grid", cells=len(CELLS))
    numbers = run_numbers(run, CELLS)
    assert [row["against"] for row in numbers.differences] == ["SLM+", "LLM"]
    assert numbers.differences[1]["mean difference"] == "+2.00" and numbers.differences[1]["records better"] == "6 of 6"
    assert len(numbers.counts) == 2 and all("higher for" in line for line in numbers.counts)
    assert run_numbers(run, ()) is numbers  # kept: the same run, unchanged, is not bootstrapped again


class FakeService:
    def __init__(self, runs: list[StoredRun]):
        self.runs = {run.id: run for run in runs}

    def stored_runs(self):
        return list(self.runs.values())

    def run_results(self, run_id):
        run = self.runs.get(run_id)
        return RunResults(run, CELLS) if run is not None else None


def test_a_page_opens_on_the_example_shown_or_on_a_sentence():
    example = stored(10**12 + 6, DEFAULT_EXAMPLE, True, len(CELLS))
    view = DashboardTab(FakeService([stored(1, "mine"), example])).opening_view()  # type: ignore[arg-type]
    assert view.runs["value"] == [example.id] and "Showing example: cogenesis-retest" in view.status
    assert view.quality["visible"] and view.table["visible"] and view.differences["visible"]
    assert len(view.differences["value"]) == 2 and "higher for" in view.status
    assert "higher on these records (the interval" not in view.status  # no claim sentences: they are the table
    empty = DashboardTab(FakeService([])).opening_view()  # type: ignore[arg-type]
    assert EMPTY_STORE.split(",")[0] in empty.status and empty.runs["value"] == []
    assert all(part.get("__type__") == "update" and "value" not in part for part in empty[1:5])  # nothing drawn


def projection(method: str, alpha: float | None, speeds: dict[float, float], llm: dict[float, float]) -> list[dict]:
    return [
        {
            "method": method,
            "alpha": alpha,
            "beta": 1.0 if alpha is not None else None,
            "rtt_ms": rtt,
            "projected_tok_per_s": speed,
            "measured_tok_per_s": 1.0,
            "projected_speedup": speed / llm[rtt],
        }
        for rtt, speed in speeds.items()
    ]


LLM = {0.0: 10.0, 50.0: 8.0, 200.0: 5.0}
ROWS = [
    *projection("llm", None, LLM, LLM),
    *(
        row
        for n, alpha in enumerate((1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02))
        for row in projection("specsteer", alpha, {0.0: 11.0 + n, 50.0: 9.0 + n, 200.0: 4.0 + n / 10}, LLM)
    ),
]


def test_the_deployment_view_draws_at_most_six_series_llm_first_then_the_fastest():
    shown = default_series(ROWS, 55.0)
    assert len(shown) == MAX_SERIES and shown[0] == "LLM"
    assert shown[1:] == [f"SpecSteer α={alpha:g} β=1" for alpha in (0.02, 0.05, 0.1, 0.2, 0.3)]
    assert chosen_series(ROWS, ["SpecSteer α=1 β=1", "nonsense"], 55.0) == ["SpecSteer α=1 β=1"]
    assert chosen_series(ROWS, "not a list", 55.0) == shown
    assert len(chosen_series(ROWS, [f"SpecSteer α={a:g} β=1" for a in (1, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02)], 55.0)) == 6


def test_the_takeaway_is_read_off_the_numbers_at_the_profiles_round_trip():
    line = deployment_takeaway(ROWS, default_series(ROWS, 55.0), "Phone", 55.0)
    # 50 ms is the projection's nearest RTT to the profile's 55; α=0.02 is the fastest there: 15 tok/s, 8 for LLM.
    assert line == (
        "Under “Phone” at 50 ms round trip, SpecSteer α=0.02 β=1 is projected at 15.0 tok/s, 1.88× the "
        "cloud-streamed LLM (8.0 tok/s); at 200 ms, 0.92×."
    )
    alone = [row for row in ROWS if row["method"] == "specsteer"]
    assert deployment_takeaway(alone, ["SpecSteer α=1 β=1"], "Phone", 0.0).endswith(
        "(the run has no LLM to compare with)."
    )
    assert deployment_takeaway([], [], "Phone", 0.0) == ""


@pytest.mark.parametrize("asked", [None, [], ["LLM"]])
def test_the_series_asked_for_are_kept_when_the_projection_has_them(asked):
    assert chosen_series(ROWS, asked, 0.0)[0] == "LLM"
