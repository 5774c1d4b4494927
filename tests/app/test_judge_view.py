"""The Dashboard's run table shows a run's LLM-judge grades beside ROUGE (a column per judge and criterion, mean
and record bootstrap interval; a weak judge named so) and says who judged; an example run opens with the grades its
judge gave, copied into the examples' read-only file with it (benchmarks/build_example_runs.py, JUDGED)."""

from __future__ import annotations

import pytest

import app
import storage
from specsteer.method.events import GenerationStats
from specsteer.stores.judges import JudgeIdentity, JudgeScore, PairVerdict
from specsteer.stores.runs import CellResult, GridPoint
from ui import dashboard_handlers

pytestmark = pytest.mark.usefixtures("tiny_app")

WEAK = JudgeIdentity("small-model", "local", weak=True)
LLM, STEER = GridPoint("llm"), GridPoint("specsteer", 0.1, 1.0)


@pytest.fixture
def dashboard():
    service = app.build_service()
    return dashboard_handlers.DashboardTab(service, judges=app.judge_reader(getattr(service.store, "url", None)))


def test_a_judged_run_shows_its_grades_beside_rouge(dashboard):
    run_id = storage.create_run("judged", {"task": "review", "methods": ["llm", "specsteer"]})
    judges = storage.SqlJudgeStore()
    for record, (llm, steer) in {"r1": (5.0, 7.0), "r2": (7.0, None)}.items():
        for point, score in ((LLM, llm), (STEER, steer)):
            storage.save_cell(run_id, CellResult(record, point, "out", {"rougeL": 0.2}, GenerationStats(point.method)))
            kind = None if score is not None else "malformed"
            judges.save_score(
                run_id, JudgeScore(record, point, "personalization", WEAK, score, reason_kind=kind, reason=kind)
            )
    for first, second in ((LLM, STEER), (STEER, LLM)):
        judges.save_verdict(run_id, PairVerdict("r1", first, second, "personalization", WEAK, "first"))
    view = dashboard.open_runs([run_id])
    table = view.table["value"]
    assert list(table["weak judge: personalization"]) == ["6.00 [5.00, 7.00]", "7.00 [7.00, 7.00]"]
    assert "small-model (local, weak judge)" in view.status and "1 malformed" in view.status
    assert "flip with the order" in view.status
    # Several runs compared: each row keeps its run's grades.
    plain = storage.create_run("plain", {"task": "review", "methods": ["llm"]})
    storage.save_cell(plain, CellResult("r1", LLM, "out", {"rougeL": 0.2}, GenerationStats("llm")))
    both = dashboard.open_runs([run_id, plain]).table["value"]
    assert list(both["weak judge: personalization"])[:2] == ["6.00 [5.00, 7.00]", "7.00 [7.00, 7.00]"]
    # A caller repeating a run (the picker never does) gets each run once: the work stays bounded by the runs stored.
    repeated = dashboard.open_runs([str(run_id)] * 500 + [plain, run_id])
    assert repeated.table["value"].equals(both) and repeated.status.count("Showing") == 1


def test_an_example_run_opens_with_the_grades_copied_with_it(dashboard):
    example = next(
        run_id for label, run_id in dashboard.run_choices() if label.startswith("example: cogenesis-retest ")
    )
    view = dashboard.open_runs([example])
    assert "ss-box-ok" in view.status and "(local, weak judge)" in view.status and "flip with the order" in view.status
    table = view.table["value"]
    # A column per rubric version the judge graded under (the first version's few grades kept beside); the local
    # judge's current one filled for SLM+, LLM and SpecSteer.
    from specsteer.evaluation.judges import LOCAL_RUBRIC
    from specsteer.stores.judges import RUBRIC_VERSION

    assert {column for column in table.columns if column.endswith(": overall")} == {
        f"weak judge ({RUBRIC_VERSION}): overall",
        f"weak judge ({LOCAL_RUBRIC}): overall",
    }
    assert all(value != "–" for value in table[f"weak judge ({LOCAL_RUBRIC}): overall"])
