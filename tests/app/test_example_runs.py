"""The example runs that ship with the app (assets/example_runs.db): the Dashboard lists and opens them on first
start with no environment variable, read-only beside the user's own runs; what the file holds, that the docs
cite each run, and the builder that makes it (benchmarks/build_example_runs.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import sqlite3
import sys
from pathlib import Path

import pytest

import app
import storage
from specsteer.data.sources import EXAMPLE_RUNS_DB
from specsteer.method.events import GenerationStats, RoundStep, TraceStep
from specsteer.stores.judges import JudgeIdentity, JudgeScore, PairVerdict
from specsteer.stores.runs import CellResult, GridPoint
from storage.judge_scores import CopiedJudgements
from ui import dashboard_handlers, sweep_view

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "benchmarks" / "build_example_runs.py"


def _builder():
    if "build_example_runs" not in sys.modules:  # dataclasses look their module up by name
        spec = importlib.util.spec_from_file_location("build_example_runs", BUILDER)
        module = importlib.util.module_from_spec(spec)
        sys.modules["build_example_runs"] = module
        spec.loader.exec_module(module)
    return sys.modules["build_example_runs"]


EXAMPLES = _builder().EXAMPLES
JUDGE = JudgeIdentity("small-judge", "local", weak=True)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _choice(tab: dashboard_handlers.DashboardTab, name: str) -> int:
    return next(run_id for label, run_id in tab.run_choices() if label.startswith(f"example: {name} · "))


# --------------------------------------------------------------------------- the Dashboard


@pytest.mark.usefixtures("tiny_app")  # a fresh data folder, no DATABASE_URL: the app's first start
def test_the_dashboard_lists_and_opens_the_example_runs_on_first_start():
    before = _digest(EXAMPLE_RUNS_DB)
    tab = dashboard_handlers.DashboardTab(app.build_service())
    labels = [label for label, _ in tab.run_choices()]
    assert [label.split(" · ")[0] for label in labels] == [f"example: {example.name}" for example in EXAMPLES]
    assert "example: cogenesis-sweep-dev40 · cogenesis · llama.cpp · finished · 560/560 cells" in labels

    view = tab.open_runs([_choice(tab, "longlamp-review-llamacpp-256")])
    assert "Showing example: longlamp-review-llamacpp-256." in view.status and "ss-box-ok" in view.status
    assert len(view.table["value"]) == 11  # 7 methods, SpecSteer at 5 settings

    untraced = tab.deployment([_choice(tab, "cogenesis-retest")], "phone-4g")
    assert "outputs and statistics but not their traces" in untraced.status
    assert "stored before" not in untraced.status
    storage.reset_engines()
    assert _digest(EXAMPLE_RUNS_DB) == before
    assert not list(EXAMPLE_RUNS_DB.parent.glob(EXAMPLE_RUNS_DB.name + "-*"))  # no -wal or -shm beside it


@pytest.mark.slow  # 132 generations replayed at every RTT of the view
@pytest.mark.usefixtures("tiny_app")
def test_the_example_longlamp_grid_projects_onto_a_deployment_profile():
    tab = dashboard_handlers.DashboardTab(app.build_service())
    projected = tab.deployment([_choice(tab, "longlamp-review-llamacpp-256")], "phone-4g")
    assert "Projected 132 traced generations" in projected.status and projected.figure["value"] is not None
    assert len(projected.table["value"]) > 0


@pytest.mark.slow  # 10,000 bootstrap resamples for each of the 12 settings
@pytest.mark.usefixtures("tiny_app")
def test_the_sweep_example_gives_the_choice_the_sweep_plan_reports():
    """docs/research/SWEEP_PLAN.md: on the default pair's 40 dev records the rule chose α = 1, β = 1."""
    service = app.build_service()
    tab = dashboard_handlers.DashboardTab(service)
    view = sweep_view.sweep_view(service, [_choice(tab, "cogenesis-sweep-dev40")])
    assert "40 of 40 records" in view.status and "α=1 β=1" in view.status and view.figure["value"] is not None


@pytest.mark.usefixtures("tiny_app")
def test_a_grid_of_the_users_goes_to_their_database_and_is_listed_before_the_examples():
    before = _digest(EXAMPLE_RUNS_DB)
    tab = dashboard_handlers.DashboardTab(app.build_service())
    values = dict(
        source="sample",
        upload=None,
        task="review",
        records=1,
        methods=["llm"],
        alphas="1.0",
        betas="1.0",
        pairing="tiny-test",
        runtime="auto",
        max_new_tokens=2,
        draft_len=2,
        run_name="mine",
    )
    final = list(tab.run_batch(**values))[-1]
    assert "finished" in final.status
    labels = [label for label, _ in tab.run_choices()]
    assert labels[0].startswith("#1 mine · ") and labels[1].startswith("example: ")
    assert storage.get_run_by_name("mine") is not None  # the user's own database
    storage.reset_engines()
    assert _digest(EXAMPLE_RUNS_DB) == before


def test_without_the_file_the_app_lists_the_users_runs_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSTEER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert isinstance(app.run_store(tmp_path / "absent.db"), storage.SqlRunStore)


# --------------------------------------------------------------------------- the committed file


def test_the_committed_file_holds_every_example_whole_and_the_docs_cite_each():
    assert EXAMPLE_RUNS_DB.stat().st_size < 12_000_000  # the judge's prompts (~8 kB a grade) are most of the growth
    with sqlite3.connect(f"file:{EXAMPLE_RUNS_DB}?mode=ro&immutable=1", uri=True) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # reads with no -wal/-shm
    url = storage.read_only_url(EXAMPLE_RUNS_DB, immutable=True)
    research = "".join(path.read_text() for path in (REPO / "docs" / "research").glob("*.md"))
    assert sorted(run.name for run in storage.list_runs(url=url)) == sorted(example.name for example in EXAMPLES)
    for example in EXAMPLES:
        run = storage.get_run_by_name(example.name, url=url)
        assert run.status == "finished" and run.cell_count == run.config["cells_total"], example.name
        traced = sum(1 for cell in storage.run_cells(run.id, url=url) if cell.stats.trace)
        assert traced == (run.cell_count if example.traces else 0), example.name
        assert f"`{example.name}`" in research, f"no research log cites {example.name}"
    for judged in _builder().JUDGED:  # the judge's grades came with the run
        assert storage.run_scores(storage.get_run_by_name(judged.run, url=url).id, url=url), judged.run


# --------------------------------------------------------------------------- the builder


def _sources(builder, folder: Path) -> None:
    """Tiny hand-made source databases: each example's run of one cell (a CDA setting's in a CDA run), and each judged
    run's file, a copy of its run with a judge's grade and verdict stored."""
    traced = GenerationStats("llm", new_tokens=1, trace=[TraceStep("forward", "generalist", 1, 0.5)])
    cda = GenerationStats(
        "specsteer", new_tokens=2, round_log=[RoundStep(2, 1, 0.5, 0.1, 0.3, 0.0)], trace=traced.trace
    )
    judged = {judged.run: judged.database for judged in builder.JUDGED}
    for example in builder.EXAMPLES:
        cell = CellResult("r", GridPoint("llm"), example.name, {}, traced)
        if example.database == "cda.db":
            cell = CellResult("r", GridPoint("specsteer", 0.1, 1.0, 1.0), example.name, {"rougeL": 0.5}, cda)
        for database in (example.database, judged.get(example.name)):
            if database is not None:
                url = f"sqlite:///{folder / database}"
                run_id = storage.create_run(example.name, {"task": "review", "cells_total": 1}, url=url)
                storage.save_cell(run_id, cell, url=url)
                storage.set_run_status(run_id, "finished", url=url)
    for run, database in judged.items():
        url = f"sqlite:///{folder / database}"
        run_id = storage.get_run_by_name(run, url=url).id
        store, point = storage.SqlJudgeStore(url), GridPoint("llm")
        store.save_score(run_id, JudgeScore("r", point, "overall", JUDGE, 6.0, prompt="grade it", answer="[[6]]"))
        store.save_verdict(run_id, PairVerdict("r", point, point, "overall", JUDGE, None, reason_kind="malformed"))
    storage.reset_engines()


def test_the_builder_copies_each_run_its_judge_results_keeps_traces_where_asked_and_is_repeatable(
    tmp_path, fresh_engines
):
    builder = _builder()
    sources = tmp_path / "results"
    _sources(builder, sources)
    older = sources / builder.EXAMPLES[-1].database  # made before the cells' crossing audit: its snapshot gains it
    with sqlite3.connect(older) as connection:
        connection.execute("ALTER TABLE eval_cells DROP COLUMN history_crossed")
    written = {path.name: _digest(path) for path in sources.glob("*.db")}
    out = tmp_path / "examples.db"
    copied = builder.build(sources, out)
    assert [name for name, *_ in copied] == [example.name for example in builder.EXAMPLES]
    assert {path.name: _digest(path) for path in sources.glob("*.db")} == written  # the sources read, never written

    def contents() -> list:
        url = storage.read_only_url(out, immutable=True)
        runs = storage.list_runs(url=url)  # newest first: the examples in their order
        found = [
            (run.name, run.config, run.created_at, storage.run_cells(run.id, url=url), storage.run_scores(run.id, url=url))
            for run in runs
        ]  # fmt: skip
        storage.reset_engines()
        return found

    first = contents()
    assert [name for name, *_ in first] == [example.name for example in builder.EXAMPLES]
    judged = {judged.run for judged in builder.JUDGED}
    assert judged and {name for name, *_, scores in first if scores} == judged
    for example, (_, _, _, cells, scores), (_, _, _, judgements) in zip(builder.EXAMPLES, first, copied, strict=True):
        assert [cell.output for cell in cells] == [example.name]
        assert bool(cells[0].stats.trace) == example.traces
        if example.database == "cda.db":  # the CDA setting and its rounds read back
            assert cells[0].point.cda_lambda == 1.0 and cells[0].stats.round_log == [(2, 1, 0.5, 0.1, 0.3, 0.0)]
        if example.name in judged:
            assert [(score.score, score.prompt, score.answer, score.judge) for score in scores] == [
                (6.0, "grade it", "[[6]]", JUDGE)
            ]
            assert judgements == CopiedJudgements(1, 1)
        else:
            assert judgements is None
    with sqlite3.connect(f"file:{out}?mode=ro", uri=True) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["examples.db", "results"]
    builder.build(sources, out)
    assert contents() == first  # built again from the same sources: the same runs, cells and grades

    built = _digest(out)
    judged_source = builder.JUDGED[0]
    with sqlite3.connect(sources / judged_source.database) as connection:  # the graded run is not the example's
        connection.execute("UPDATE eval_runs SET config = '{}' WHERE name = ?", (judged_source.run,))
    storage.reset_engines()
    with pytest.raises(SystemExit, match="is not the example's"):
        builder.build(sources, out)
    for missing in (judged_source.database, builder.EXAMPLES[0].database):
        (sources / missing).unlink()
        with pytest.raises(SystemExit, match=f"no {sources / missing}"):
            builder.build(sources, out)
    assert _digest(out) == built  # a failed build leaves the file as it was
