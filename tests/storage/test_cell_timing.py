"""Cells whose timing was disturbed in storage: a typed column, added to databases made before it when they are
opened; a resume runs such a cell again and the new cell takes its place."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest
from sqlalchemy import text, update

import storage
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.grid import EvalSpec, run_grid
from specsteer.method.events import GenerationStats
from specsteer.models.tiny import tiny_pair
from specsteer.stores.runs import CellResult, GridPoint
from storage import db
from storage.models import EvalCell

CONFIG = {"task": "review"}


def cell(record: str, paused: bool = False, output: str = "text") -> CellResult:
    stats = GenerationStats("llm", new_tokens=10, seconds=401.0 if paused else 1.0, pauses=int(paused))
    return CellResult(record, GridPoint("llm"), output, {"rougeL": 0.2}, stats)


def column_names(path: str) -> set[str]:
    with sqlite3.connect(path) as connection:
        return {row[1] for row in connection.execute("PRAGMA table_info(eval_cells)")}


def test_a_database_made_before_the_column_opens_and_gets_it(tmp_path, fresh_engines):
    path = str(tmp_path / "old.db")
    url = f"sqlite:///{path}"
    run_id = storage.create_run("old", CONFIG, url=url)
    storage.save_cell(run_id, cell("r1"), url=url)
    db.reset_engines()
    with sqlite3.connect(path) as connection:  # the table as an earlier version made it
        connection.execute("ALTER TABLE eval_cells DROP COLUMN timing_disturbed")
        stats = json.dumps({"method": "llm", "new_tokens": 3, "seconds": 0.5})
        connection.execute(
            "INSERT INTO eval_cells (run_id, cell_key, record_id, method, output, stats, created_at) "
            f"VALUES ({run_id}, 'r2|llm|a=-|b=-', 'r2', 'llm', 'x', ?, '2024-01-01')",
            (stats,),
        )
    assert "timing_disturbed" not in column_names(path)
    cells = storage.run_cells(run_id, url=url)
    assert [c.record_id for c in cells] == ["r1", "r2"] and not any(c.stats.timing_disturbed for c in cells)
    assert storage.finished_cell_keys(run_id, url=url) == {"r1|llm|a=-|b=-", "r2|llm|a=-|b=-"}
    assert "timing_disturbed" in column_names(path)
    db.reset_engines()  # a second opening finds the column there and adds nothing
    assert len(storage.run_cells(run_id, url=url)) == 2


def test_a_disturbed_cell_is_not_finished_and_a_new_one_takes_its_place(url):
    run_id = storage.create_run("grid", CONFIG, url=url)
    assert storage.save_cell(run_id, cell("r1", paused=True, output="first"), url=url) is True
    assert storage.save_cell(run_id, cell("r2"), url=url) is True
    [paused, _] = storage.run_cells(run_id, url=url)
    assert paused.stats.timing_disturbed and paused.stats.pauses == 1
    assert storage.finished_cell_keys(run_id, url=url) == {"r2|llm|a=-|b=-"}
    assert storage.save_cell(run_id, cell("r1", output="again"), url=url) is True  # replaces the disturbed one
    assert storage.save_cell(run_id, cell("r1", output="third"), url=url) is False  # a sound one stays
    assert storage.save_cell(run_id, cell("r2", paused=True), url=url) is False
    stored = {c.record_id: c for c in storage.run_cells(run_id, url=url)}
    assert len(stored) == 2 and stored["r1"].output == "again" and not stored["r1"].stats.timing_disturbed
    assert storage.finished_cell_keys(run_id, url=url) == {"r1|llm|a=-|b=-", "r2|llm|a=-|b=-"}
    assert storage.get_run(run_id, url=url).cell_count == 2


def test_running_a_run_again_re_times_its_disturbed_cell(url):
    spec = EvalSpec(
        data=str(bundled_sample_path("review")),
        task="review",
        methods=("llm", "slm+"),
        max_new_tokens=3,
        retrieval_k=1,
        limit=2,
        run_name="re-time",
    )
    store, pair = storage.SqlRunStore(url), tiny_pair()
    first = run_grid(spec, store, pair=pair)
    assert first.status == "finished" and first.computed == 4
    victim = first.cells[1]
    stats = json.loads(json.dumps({**victim.stats.to_dict(), "pauses": 1, "paused_s": 400.0}))
    with db.session_scope(url) as session:  # as if the process had been stopped during this cell
        session.execute(
            update(EvalCell)
            .where(EvalCell.run_id == first.run_id, EvalCell.cell_key == victim.key)
            .values(timing_disturbed=True, stats=stats)
        )
    stored = {c.key: c for c in store.cells(first.run_id)}
    assert stored[victim.key].stats.timing_disturbed
    again = run_grid(spec, store, pair=pair)
    assert again.status == "finished" and again.computed == 1
    cells = {c.key: c for c in again.cells}
    assert len(cells) == 4 and not any(c.stats.timing_disturbed for c in cells.values())
    assert cells[victim.key].output == victim.output  # greedy: the same output, now timed honestly
    assert all(row["speed_left_out"] == 0 for row in again.rows)
    assert run_grid(replace(spec), store, pair=pair).computed == 0
    with db.session_scope(url) as session:
        assert session.execute(text("SELECT COUNT(*) FROM eval_cells")).scalar() == 4


def test_a_column_added_without_a_value_for_old_rows_is_refused(tmp_path):
    from sqlalchemy import Boolean, Column, Integer, MetaData, Table, create_engine

    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    old = MetaData()
    Table("things", old, Column("id", Integer, primary_key=True))
    old.create_all(engine)
    new = MetaData()
    Table("things", new, Column("id", Integer, primary_key=True), Column("flag", Boolean, nullable=False))
    with pytest.raises(RuntimeError, match="things.flag was added without a value for existing rows"):
        db.add_missing_columns(engine, new)
    newer = MetaData()
    Table("things", newer, Column("id", Integer, primary_key=True), Column("note", Integer, nullable=True))
    assert db.add_missing_columns(engine, newer) == ["things.note"]
    assert db.add_missing_columns(engine, newer) == []
