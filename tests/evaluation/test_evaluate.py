"""The evaluation grid on tiny random models: grid shape, stores, resume, cancel, noise, CLI contract."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import storage
from specsteer.cli import evaluate as evaluate_cli
from specsteer.data.crossing import CrossedPhrase, Crossing, HistoryCrossing
from specsteer.data.record_files import DataError
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation import result_table
from specsteer.evaluation.grid import (
    CROSSING_ROW_KEYS,
    JSON_ROW_KEYS,
    EvalResult,
    EvalSpec,
    GridProgress,
    RecordPair,
    grid_points,
    json_rows,
    load_evaluation_records,
    pending_cells,
    run_cell,
    run_grid,
    run_grid_events,
    summarize,
)
from specsteer.evaluation.metrics import ROUGE_KEYS
from specsteer.method.catalog import METHODS
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import CellResult, GridPoint

REPO = Path(__file__).resolve().parents[2]
SAMPLE = str(bundled_sample_path("review"))
# Short prompts and outputs keep every generation of the byte-level tiny models in milliseconds.
FAST = EvalSpec(data=SAMPLE, task="review", methods=("llm", "slm+"), alphas=(1.0,), max_new_tokens=3, retrieval_k=1)


pytestmark = pytest.mark.usefixtures("fresh_engines")


# --------------------------------------------------------------------------- grid


def test_alpha_and_beta_go_only_to_the_methods_that_read_them():
    points = grid_points(("slm", "llm", "lightcosteer", "specsteer"), (1.0, 0.5, 0.1), (0.5, 1.0, 2.0))
    assert [point for point in points if point.method == "slm"] == [GridPoint("slm")]
    assert [point.beta for point in points if point.method == "lightcosteer"] == [0.5, 1.0, 2.0]
    assert sum(point.method == "specsteer" for point in points) == 9
    assert len(points) == 1 + 1 + 3 + 9


def test_extra_points_add_beta_values_at_one_alpha_for_specsteer_only():
    points = grid_points(
        ("llm", "lightcosteer", "costeer", "specsteer"), (1.0, 0.5, 0.1), (1.0,), ((0.5, 0.5), (0.5, 2.0), (0.5, 1.0))
    )
    assert [(point.alpha, point.beta) for point in points if point.method == "specsteer"] == [
        (1.0, 1.0),
        (0.5, 1.0),
        (0.1, 1.0),
        (0.5, 0.5),
        (0.5, 2.0),  # the repeated (0.5, 1) runs once
    ]
    assert [point for point in points if point.method == "lightcosteer"] == [GridPoint("lightcosteer", None, 1.0)]
    # CoSteer's strength is its own lambda: beta changes nothing, so it runs once per record.
    assert [point for point in points if point.method == "costeer"] == [GridPoint("costeer")]


def test_invalid_specs_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="methods"):
        replace(FAST, methods=("gpt",)).validate()
    with pytest.raises(ValueError, match="alpha"):
        replace(FAST, methods=("specsteer",), alphas=(-1.0,)).validate()


# --------------------------------------------------------------------------- runs


class MemoryStore:
    """A RunStore in plain dictionaries: the grid must need nothing but the protocol."""

    def __init__(self) -> None:
        self.runs: dict[str, tuple[int, dict]] = {}
        self.status: dict[int, tuple[str, str | None]] = {}
        self.saved: dict[int, dict[str, CellResult]] = {}

    def open_run(self, name, config):
        run_id, stored = self.runs.setdefault(name, (len(self.runs) + 1, dict(config)))
        if stored != dict(config):
            raise ValueError(f"run {name!r} already exists with a different config")
        return run_id

    def finished_keys(self, run_id):
        return set(self.saved.get(run_id, {}))

    def save_cell(self, run_id, cell):
        cells = self.saved.setdefault(run_id, {})
        if cell.key in cells:
            return False
        cells[cell.key] = cell
        return True

    def set_status(self, run_id, status, error=None):
        self.status[run_id] = (status, error)

    def cells(self, run_id):
        return list(self.saved.get(run_id, {}).values())


def test_the_grid_needs_only_the_store_protocol(pair):
    store = MemoryStore()
    spec = replace(FAST, limit=2, run_name="in-memory")
    result = run_grid(spec, store, pair=pair)
    assert result.status == "finished" and result.computed == 2 * len(spec.points()) == len(result.cells)
    assert store.status[result.run_id] == ("finished", None)
    assert all(isinstance(cell, CellResult) and cell.stats.new_tokens >= 1 for cell in result.cells)
    assert [row["method"] for row in result.rows] == ["slm+", "llm"]
    again = run_grid(spec, store, pair=pair)  # resumed: nothing left to do
    assert again.run_id == result.run_id and again.computed == 0 and again.cells == result.cells


def test_pending_cells_are_the_grid_in_run_order_less_the_finished_and_other_shards():
    spec = replace(FAST, limit=3)
    records, _ = load_evaluation_records(spec)
    points = spec.points()
    everything = pending_cells(records, points, set())
    assert len(records) == 3 and [(cell.record.id, cell.point) for cell in everything] == [
        (record.id, point) for record in records for point in points
    ]
    assert pending_cells(records, points, {everything[0].key, everything[-1].key}) == everything[1:-1]
    first, second = (pending_cells(records, points, set(), shard=(index, 2)) for index in (0, 1))
    assert [cell.record.id for cell in second] == [records[1].id] * len(points)
    assert sorted(first + second, key=everything.index) == everything


def test_one_cell_run_alone_is_the_cell_the_grid_stored(pair):
    """Another executor runs the same cells: run_cell on the record's pair gives what the grid stored."""
    spec = replace(FAST, methods=("specsteer", "llm"), limit=2, run_name="cell-by-cell")
    stored = run_grid(spec, MemoryStore(), pair=pair).cells
    records, prepared = load_evaluation_records(spec)
    cells = pending_cells(records, spec.points(), set())
    alone = [run_cell(RecordPair(pair), cell, prepared[cell.record.id], spec, threading.Event()) for cell in cells]
    assert len(stored) == len(alone) == 4
    for mine, theirs in zip(alone, stored, strict=True):
        assert mine is not None and (mine.key, mine.output, mine.rouge) == (theirs.key, theirs.output, theirs.rouge)
        assert (mine.stats.new_tokens, mine.stats.drafted, mine.stats.accepted) == (
            theirs.stats.new_tokens,
            theirs.stats.drafted,
            theirs.stats.accepted,
        )
    cancelled = threading.Event()
    cancelled.set()
    assert run_cell(RecordPair(pair), cells[0], prepared[cells[0].record.id], spec, cancelled) is None


def test_end_to_end_batch_stores_every_cell_and_summarizes(pair, url):
    spec = replace(FAST, methods=METHODS, alphas=(1.0, 0.1), run_name="e2e")
    events = list(run_grid_events(spec, storage.SqlRunStore(url), pair=pair))
    result = events[-1]
    updates = events[:-1]
    assert isinstance(result, EvalResult) and all(isinstance(update, GridProgress) for update in updates)
    points = spec.points()
    assert result.status == "finished" and result.computed == 3 * len(points) == len(result.cells)
    assert storage.get_run_by_name("e2e", url=url).status == "finished"
    assert storage.run_cells(result.run_id, url=url) == result.cells
    for cell in result.cells:
        assert all(0.0 <= cell.rouge[key] <= 1.0 for key in ROUGE_KEYS)
        assert cell.stats.new_tokens >= 1 and cell.stats.seconds > 0
        # Every cell is audited for the history that crossed; a device-only one sent nothing.
        assert cell.history_crossed is not None
        assert cell.history_crossed.linked == (cell.point.method not in ("slm", "slm+"))
    assert all("history_crossed" in row and "history_phrases" in row for row in result.rows)
    assert [(row["method"], row["alpha"], row["beta"]) for row in result.rows] == [
        (point.method, point.alpha, point.beta) for point in points
    ]
    by_method = {row["method"]: row for row in result.rows}
    assert by_method["llm"]["speedup"] == pytest.approx(1.0)
    assert by_method["llm"]["acceptance"] is None and by_method["sd"]["acceptance"] is not None
    assert all(row["records"] == 3 for row in result.rows)
    assert [update.stage for update in updates[:2]] == ["loading", "warmup"]
    running = [update for update in updates if update.stage == "running"]
    assert [update.done for update in running] == list(range(len(result.cells)))
    # 10 points x 3 records (every method: llm+ and p3 among them)
    assert running[0].describe() == "[1/30] slm rec=sample-review-0"
    assert (updates[-1].stage, updates[-1].done, updates[-1].total) == ("finished", 30, 30)


def test_a_crashed_run_resumes_without_duplicates_or_lost_cells(pair, db_url):
    spec = replace(FAST, run_name="crash")
    total = 3 * len(spec.points())
    events = run_grid_events(spec, storage.SqlRunStore(db_url), pair=pair)
    for event in events:
        if event.stage == "running" and event.done == 3:
            with pytest.raises(RuntimeError, match="power cut"):
                events.throw(RuntimeError("power cut"))  # the crash happens where the grid is
            break
    run = storage.get_run_by_name("crash", url=db_url)
    assert run.status == "failed" and "power cut" in run.error and run.cell_count == 3
    before = storage.run_cells(run.id, url=db_url)

    result = run_grid(spec, storage.SqlRunStore(db_url), pair=pair)
    assert result.status == "finished" and result.computed == total - 3
    keys = [cell.key for cell in result.cells]
    assert len(keys) == len(set(keys)) == total
    assert result.cells[:3] == before  # the cells finished before the crash were kept, not redone


def test_a_consumer_that_stops_listening_leaves_the_run_cancelled_and_resumable(pair, url):
    spec = replace(FAST, run_name="abandoned")
    events = run_grid_events(spec, storage.SqlRunStore(url), pair=pair)
    for event in events:
        if event.stage == "running" and event.done == 2:
            break
    events.close()
    run = storage.get_run_by_name("abandoned", url=url)
    assert (run.status, run.cell_count) == ("cancelled", 2)
    assert run_grid(spec, storage.SqlRunStore(url), pair=pair).computed == 3 * len(spec.points()) - 2


def test_shards_split_one_run_between_workers(pair, db_url):
    spec = replace(FAST, run_name="shared")
    points = len(spec.points())
    store = storage.SqlRunStore(db_url)
    first = run_grid(spec, store, pair=pair, shard=(0, 2))
    assert first.status == "running" and first.computed == 2 * points  # records 0 and 2 of 3
    assert storage.get_run_by_name("shared", url=db_url).status == "running"
    second = run_grid(spec, store, pair=pair, shard=(1, 2))
    assert second.status == "finished" and second.computed == points
    keys = [cell.key for cell in second.cells]
    assert len(keys) == len(set(keys)) == 3 * points
    with pytest.raises(ValueError, match="shard"):
        run_grid(spec, store, pair=pair, shard=(2, 2))


def test_cancel_between_cells_and_inside_a_generation(pair, url):
    spec = replace(FAST, run_name="cancel")
    cancel = threading.Event()
    updates = []
    for event in run_grid_events(spec, storage.SqlRunStore(url), pair=pair, cancel=cancel):
        updates.append(event)
        if isinstance(event, GridProgress) and event.stage == "running" and event.done == 2:
            cancel.set()  # the third generation starts with the flag up: generate() must stop it
    result = updates.pop()
    assert result.status == "cancelled" and result.computed == 2 and len(result.cells) == 2
    assert (updates[-1].stage, updates[-1].done) == ("cancelled", 2)
    assert storage.get_run_by_name("cancel", url=url).status == "cancelled"
    resumed = run_grid(spec, storage.SqlRunStore(url), pair=pair)
    assert resumed.status == "finished" and resumed.computed == 3 * len(spec.points()) - 2


def test_a_run_name_is_never_reused_for_another_config(pair, url):
    store = storage.SqlRunStore(url)
    run_grid(replace(FAST, limit=1, run_name="same"), store, pair=pair)
    with pytest.raises(ValueError, match="different config"):
        run_grid(replace(FAST, limit=1, max_new_tokens=4, run_name="same"), store, pair=pair)


# --------------------------------------------------------------------------- summary


def _cell(record, method, tokens, seconds, alpha=None, beta=None, accepted=0, drafted=0):
    return CellResult(
        record,
        GridPoint(method, alpha, beta),
        "output",
        {"rouge1": 0.5, "rougeL": 0.25, "rouge1_stemmed": 0.5, "rougeL_stemmed": 0.25},
        GenerationStats(
            method=method,
            new_tokens=tokens,
            seconds=seconds,
            accepted=accepted,
            drafted=drafted,
            rounds=2,
            uplink_bytes=10,
            downlink_bytes=4,
        ),
    )


def test_speedup_is_measured_against_llm_on_the_same_records():
    cells = [
        _cell("r1", "llm", 10, 1.0),
        _cell("r2", "llm", 10, 4.0),
        # specsteer has only r1: compared with llm's r1 (10 tok/s), not llm's overall 4 tok/s.
        _cell("r1", "specsteer", 10, 0.5, alpha=0.1, beta=1.0, accepted=6, drafted=8),
    ]
    rows = {row["method"]: row for row in summarize(cells)}
    assert rows["llm"]["tok_per_s"] == pytest.approx(4.0) and rows["llm"]["speedup"] == pytest.approx(1.0)
    assert rows["specsteer"]["tok_per_s"] == pytest.approx(20.0)
    assert rows["specsteer"]["speedup"] == pytest.approx(2.0)
    assert rows["specsteer"]["acceptance"] == pytest.approx(0.75)
    assert rows["specsteer"]["rouge1"] == pytest.approx(50.0)
    slower_llm = [_cell("r1", "llm", 10, 2.0), cells[2]]
    assert summarize(slower_llm)[1]["speedup"] == pytest.approx(4.0)  # measured, never a constant


def test_the_history_that_crossed_is_summarized_over_the_audited_cells():
    phrase = CrossedPhrase("InnovTech Solutions", (Crossing(1, "rejected"),))
    audits = [HistoryCrossing((phrase, replace(phrase, text="Gregory Simmons"))), HistoryCrossing(), None]
    cells = [
        replace(_cell(record, "specsteer", 10, 1.0, alpha=0.1, beta=1.0), history_crossed=audit)
        for record, audit in zip(("r1", "r2", "r3"), audits, strict=True)
    ]
    (row,) = summarize(cells)
    # r3 was stored before the audit: left out, neither "crossed" nor "none crossed".
    assert row["history_crossed"] == pytest.approx(0.5) and row["history_phrases"] == pytest.approx(1.0)
    assert tuple(json_rows([row])[0]) == JSON_ROW_KEYS + CROSSING_ROW_KEYS
    assert "history_crossed" not in summarize(cells[2:])[0]
    shown = result_table.display_rows([row])[0]
    assert shown["history crossed"] == "50% (1.0)"


def test_without_llm_speedup_is_null():
    rows = summarize([_cell("r1", "slm", 10, 1.0)])
    assert rows[0]["speedup"] is None


# --------------------------------------------------------------------------- requests


def test_noise_appends_other_users_low_similarity_items_to_the_private_prompt():
    spec = replace(FAST, noise=2)
    records, prepared = load_evaluation_records(spec)
    record = records[0]  # user SAMPLE_R1; the file's only other user is SAMPLE_R2
    other_profile = [item.fields for other in records if other.user_id != record.user_id for item in other.profile]
    retrieved = prepared[record.id].retrieved
    assert len(retrieved) == spec.retrieval_k + 2
    noise = retrieved[spec.retrieval_k :]
    assert all(item.fields in other_profile for item in noise)
    private = prepared[record.id].prompts.private
    assert all(item.fields["reviewText"][:40] in private for item in noise)
    assert noise[0].fields["reviewText"][:40] not in prepared[record.id].prompts.plain
    clean = load_evaluation_records(FAST)[1][record.id]
    assert len(clean.retrieved) == spec.retrieval_k and len(private) > len(clean.prompts.private)


def test_noise_needs_another_user(tmp_path):
    single = tmp_path / "one.jsonl"
    single.write_text(Path(SAMPLE).read_text().splitlines()[0] + "\n")
    with pytest.raises(DataError, match="other users"):
        load_evaluation_records(replace(FAST, data=str(single), noise=1))


def test_retrieval_depth_sets_the_number_of_profile_items():
    _, prepared = load_evaluation_records(replace(FAST, retrieval_k=3))
    assert {len(item.retrieved) for item in prepared.values()} == {3}


# --------------------------------------------------------------------------- command line


@pytest.mark.slow  # a child process
def test_cli_json_contract_and_plot(tmp_path):
    plot = tmp_path / "plot.html"
    command = [
        sys.executable,
        "-m",
        "specsteer",
        "evaluate",
        "--data",
        SAMPLE,
        "--task",
        "review",
        "--limit",
        "2",
        "--methods",
        "llm,specsteer",
        "--alpha",
        "1,0.1",
        "--beta",
        "1",
        "--pairing",
        "tiny-test",
        "--max-new-tokens",
        "3",
        "--retrieval-k",
        "1",
        "--database",
        f"sqlite:///{tmp_path / 'cli.db'}",
        "--run-name",
        "cli",
        "--json",
        "--plot",
        str(plot),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert list(document) == ["rows"]
    assert [tuple(row) for row in document["rows"]] == [JSON_ROW_KEYS + CROSSING_ROW_KEYS] * 3
    assert [(row["method"], row["alpha"], row["beta"]) for row in document["rows"]] == [
        ("llm", None, None),
        ("specsteer", 1.0, 1.0),
        ("specsteer", 0.1, 1.0),
    ]
    assert document["rows"][0]["speedup"] == pytest.approx(1.0)
    assert all(0 <= row[key] <= 100 for row in document["rows"] for key in ROUGE_KEYS)
    assert "[1/6] llm rec=sample-review-0" in done.stderr
    assert not re.search(r"<script[^>]*\bsrc=", plot.read_text(encoding="utf-8"))


def test_cli_without_llm_warns_and_prints_null_speedup(pair, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(evaluate_cli, "shared_tiny_pair", lambda: pair)
    code = evaluate_cli.main(
        [
            "--data",
            "sample",
            "--task",
            "review",
            "--limit",
            "1",
            "--methods",
            "slm",
            "--pairing",
            "tiny-test",
            "--max-new-tokens",
            "2",
            "--json",
            "--database",
            f"sqlite:///{tmp_path / 'cli.db'}",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert "speedup is null" in err
    assert json.loads(out)["rows"][0]["speedup"] is None
    assert re.search(r'"speedup": null', out)


@pytest.mark.parametrize(
    "arguments, code, message",
    [
        (["--data", "missing.jsonl"], 2, "no such file"),
        (["--data", "sample", "--pairing", "no-such-pairing"], 2, "unknown pairing"),
        (
            ["--data", "sample", "--pairing", "offline-smollm2__gemma3", "--runtime", "transformers/llama.cpp"],
            1,
            "one runtime",
        ),
    ],
)
def test_cli_errors_are_one_line_without_traceback(arguments, code, message, tmp_path, capsys):
    base = ["--task", "review", "--limit", "1", "--database", f"sqlite:///{tmp_path / 'cli.db'}"]
    assert evaluate_cli.main(arguments + base) == code
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last and "Traceback" not in err


@pytest.mark.parametrize("shard", ["2/2", "1", "a/b", "0/0"])
def test_cli_refuses_a_bad_shard(shard, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate_cli.main(["--data", "sample", "--task", "review", "--shard", shard])
    assert exit_info.value.code == 2
    assert "--shard: expected I/N" in capsys.readouterr().err
