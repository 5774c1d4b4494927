"""Speed figures leave out the cells whose timing was disturbed and say how many; quality figures keep them:
the grid's summary and table, the sweep, the joined report, the deployment rows, ``bench speed``'s rows.
Synthetic cells whose answer is known: r2's SpecSteer cell stood still for 400 s."""

from __future__ import annotations

import pytest

from specsteer.engine.decode_config import DecodeConfig
from specsteer.evaluation import result_table
from specsteer.evaluation.bench_plan import BenchCase
from specsteer.evaluation.bench_report import Tally, format_table, speed_rows
from specsteer.evaluation.deployment_rows import TracedGeneration, deployment_rows, timed_runs
from specsteer.evaluation.grid import json_rows, summarize
from specsteer.evaluation.joined import StoredRun, join_runs, table_json, table_text
from specsteer.evaluation.sweep import report_json, report_table, sweep_report
from specsteer.evaluation.timing import disturbed_count, left_out_sentence, timed_cells
from specsteer.method.events import GenerationStats, TraceStep
from specsteer.stores.runs import CellResult, GridPoint

LLM, STEERED = GridPoint("llm"), GridPoint("specsteer", 0.1, 1.0)
RECORDS = ("r1", "r2", "r3")
PAUSE_S = 400.0
# one round of SpecSteer and the llm stream, as a generation's trace holds them
STEERED_TRACE = [
    TraceStep("forward", "specialist+", 30, 0.2),
    TraceStep("message", "uplink", 60, 0.0),
    TraceStep("forward", "generalist", 20, 0.1),
    TraceStep("forward", "specialist0", 20, 0.1),
    TraceStep("message", "downlink", 300, 0.0),
]
LLM_TRACE = [TraceStep("message", "uplink", 60, 0.0), TraceStep("forward", "generalist", 20, 0.5)] + [
    TraceStep("message", "downlink", 20, 0.0)
]


def cell(record: str, point: GridPoint, rouge_l: float, seconds: float, paused: bool = False) -> CellResult:
    """100 tokens in ``seconds`` (plus a 400 s pause when ``paused``), ROUGE-L ``rouge_l`` on 0-100."""
    scores = {"rouge1": rouge_l / 100, "rougeL": rouge_l / 100, "rouge1_stemmed": None, "rougeL_stemmed": None}
    stats = GenerationStats(
        method=point.method,
        new_tokens=100,
        seconds=seconds + (PAUSE_S if paused else 0.0),
        pauses=1 if paused else 0,
        paused_s=PAUSE_S if paused else 0.0,
        trace=list(STEERED_TRACE if point.method == "specsteer" else LLM_TRACE),
    )
    return CellResult(record, point, "text", scores, stats)


def run_cells(llm_paused: str = "") -> list[CellResult]:
    """LLM: 50 tok/s and R-L 20; SpecSteer: 100 tok/s and R-L 30, except r2's cell (R-L 60), paused."""
    cells = []
    for record in RECORDS:
        cells.append(cell(record, LLM, 20.0, 2.0, paused=record == llm_paused))
        cells.append(cell(record, STEERED, 60.0 if record == "r2" else 30.0, 1.0, paused=record == "r2"))
    return cells


def rows_by_method(rows):
    return {row["method"]: row for row in rows}


def test_the_summary_leaves_a_paused_cell_out_of_speed_and_keeps_its_rouge():
    rows = rows_by_method(summarize(run_cells()))
    steered, llm = rows["specsteer"], rows["llm"]
    assert steered["records"] == 3 and steered["rougeL"] == pytest.approx(40.0)  # (30 + 60 + 30) / 3: kept
    assert steered["speed_left_out"] == 1 and llm["speed_left_out"] == 0
    assert steered["tok_per_s"] == pytest.approx(100.0)  # with the pause it would read 300 / 403 s = 0.74
    assert steered["speedup"] == pytest.approx(2.0)
    assert steered["decode_tok_per_s"] == pytest.approx(100.0)
    assert json_rows(summarize(run_cells()))[1]["speed_left_out"] == 1


def test_a_paused_reference_cell_leaves_its_record_out_of_the_speedup():
    rows = rows_by_method(summarize(run_cells(llm_paused="r3")))
    assert rows["llm"]["speed_left_out"] == 1 and rows["llm"]["tok_per_s"] == pytest.approx(50.0)
    assert rows["specsteer"]["speedup"] == pytest.approx(2.0)  # over r1, the one record timed on both sides


def test_the_table_says_how_many_cells_it_left_out_of_speed():
    text = result_table.text_table(summarize(run_cells()))
    assert "left out of speed" in text.splitlines()[0]
    assert "1 cell whose timing was disturbed" in text and "quality figures keep it" in text
    shown = {row["method"]: row for row in result_table.display_rows(summarize(run_cells()))}
    assert shown["SpecSteer"]["left out of speed"] == "1" and shown["LLM"]["left out of speed"] == "0"
    steady = [cell for cell in run_cells() if not cell.stats.timing_disturbed]
    assert "left out of speed" not in result_table.text_table(summarize(steady))
    assert "disturbed" not in result_table.text_table(summarize(steady))


def test_the_cell_helpers_and_the_sentence():
    cells = run_cells(llm_paused="r1")
    assert disturbed_count(cells) == 2 and len(timed_cells(cells)) == 4
    assert left_out_sentence(0) == ""
    assert left_out_sentence(2, where={"LLM": 1, "SpecSteer": 1, "SLM+": 0}).startswith(
        "2 cells whose timing was disturbed"
    )
    assert "(LLM: 1, SpecSteer: 1)" in left_out_sentence(2, where={"LLM": 1, "SpecSteer": 1, "SLM+": 0})


def test_the_sweep_leaves_it_out_of_tokens_per_second_and_keeps_its_rouge():
    report = sweep_report(run_cells(), [LLM, STEERED])
    (setting,) = report.settings
    assert setting.records == 3 and setting.mean == pytest.approx(40.0)
    assert setting.tok_per_s == pytest.approx(100.0) and setting.speed_left_out == 1
    assert report.speed_left_out == 1
    assert "1 cell whose timing was disturbed" in report_table(report)
    assert "(SpecSteer α=0.1 β=1: 1)" in report_table(report)
    document = report_json(report)
    assert document["speed_left_out"] == 1
    assert [row["speed_left_out"] for row in document["rows"]] == [1, 0]


def test_the_joined_report_leaves_it_out_of_tokens_per_second_and_keeps_its_rouge():
    config = {"data": "records.jsonl", "task": "review"}
    cells = run_cells()
    table = join_runs(
        [
            StoredRun("base", config, [c for c in cells if c.point == LLM]),
            StoredRun("steered", config, [c for c in cells if c.point == STEERED]),
        ],
        draws=200,
    )
    rows = {row.point.method: row for row in table.rows}
    assert rows["specsteer"].rouge["rougeL"].mean == pytest.approx(40.0) and rows["specsteer"].records == 3
    assert rows["specsteer"].tok_per_s == pytest.approx(100.0) and rows["specsteer"].speed_left_out == 1
    assert any("1 cell whose timing was disturbed" in note for note in table.notes)
    assert "1 cell whose timing was disturbed" in table_text(table)
    assert [row["speed_left_out"] for row in table_json(table)["rows"]] == [0, 1]


def test_the_deployment_rows_leave_the_paused_generation_out():
    rows = deployment_rows(run_cells(), "paper", (0.0, 50.0))
    steered = [row for row in rows if row["method"] == "specsteer"]
    assert steered and all(row["runs"] == 2 for row in steered)
    assert all(row["measured_tok_per_s"] == pytest.approx(100.0) for row in steered)
    assert all(row["runs"] == 3 for row in rows if row["method"] == "llm")


def test_a_traced_generation_carries_its_disturbed_timing_and_old_files_read_as_sound():
    paused = run_cells()[3]
    traced = TracedGeneration.of(paused.stats, 0.1, 1.0)
    assert traced.disturbed
    assert TracedGeneration.from_json(traced.to_json()) == traced
    old = {key: value for key, value in traced.to_json().items() if key != "disturbed"}
    assert not TracedGeneration.from_json(old).disturbed
    kept, left_out = timed_runs([traced, TracedGeneration.of(run_cells()[1].stats, 0.1, 1.0)])
    assert left_out == 1 and len(kept) == 1 and not kept[0].disturbed


def test_bench_speed_rows_count_a_disturbed_generation_and_leave_it_out_of_their_speeds():
    llm, steered = Tally(BenchCase(DecodeConfig(method="llm"))), Tally(BenchCase(DecodeConfig(method="specsteer")))
    for record_cell in run_cells():
        stats = record_cell.stats
        stats.drafted, stats.accepted, stats.verified, stats.rounds = 8, 6, 7, 2
        stats.step_seconds = {"specialist+": 0.01, "generalist": 0.04, "specialist0": 0.01}
        (steered if stats.method == "specsteer" else llm).add(stats)
    rows = rows_by_method(speed_rows([llm, steered]))
    assert rows["specsteer"]["left_out"] == 1 and rows["llm"]["left_out"] == 0
    assert rows["specsteer"]["tok_per_s"] == pytest.approx(100.0) and rows["specsteer"]["tokens"] == 200
    assert rows["specsteer"]["speedup"] == pytest.approx(2.0)
    assert rows["specsteer"]["acceptance"] == pytest.approx(18 / 24)  # every generation's drafts count
    only_paused, paused = Tally(BenchCase(DecodeConfig(method="specsteer"))), run_cells()[3].stats
    paused.drafted, paused.accepted, paused.verified, paused.rounds = 8, 6, 7, 2
    only_paused.add(paused)
    assert only_paused.tok_per_s == 0.0 and only_paused.bound() is None and only_paused.left_out == 1
    table = format_table({"rows": list(rows.values()), "machine": {"cpu": "test CPU", "flags": []}, "threads": 2})
    assert "1 generation whose timing was disturbed" in table


def test_bench_project_leaves_a_paused_generation_out_and_counts_it(url, capsys):
    import json

    import storage
    from specsteer.cli import bench as bench_cli

    run_id = storage.create_run("paused", {"task": "review"}, url=url)
    for stored in run_cells():
        storage.save_cell(run_id, stored, url=url)
    arguments = ["project", "--json", "--profile", "paper", "--database", url, "--run", "paused", "--rtt-ms", "0"]
    assert bench_cli.main(arguments) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["generations"] == 5 and document["left_out"] == 1
    assert {row["method"]: row["runs"] for row in document["rows"]} == {"llm": 3, "specsteer": 2}
    assert "1 generation whose timing was disturbed" in captured.err and "quality figures keep" not in captured.err
