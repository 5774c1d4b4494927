"""A SQLite file opened for reading only (storage.read_only_url): it reads, refuses every write, and is left byte for
byte as it was, with nothing created beside it; and a run copied from one database to another (storage.runs.copy_run)."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import make_url
from sqlalchemy.exc import OperationalError

import storage
from specsteer.method.events import GenerationStats, TraceStep
from specsteer.stores.runs import CellResult, GridPoint
from storage.runs import copy_run


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_run(path: Path) -> int:
    """A database file holding one finished run of one cell, checkpointed and in rollback-journal mode."""
    url = f"sqlite:///{path}"
    run_id = storage.create_run("kept", {"task": "review"}, url=url)
    storage.save_cell(run_id, CellResult("rec", GridPoint("llm"), "out", {}, GenerationStats("llm")), url=url)
    storage.set_run_status(run_id, "finished", url=url)
    storage.reset_engines()
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode = DELETE")
    return run_id


@pytest.mark.parametrize("immutable", [False, True])
def test_a_read_only_file_reads_refuses_writes_and_is_left_as_it_was(tmp_path, fresh_engines, immutable):
    path = tmp_path / "runs folder" / "kept #1.db"  # a space and a '#' in the path: the URI escapes them
    path.parent.mkdir()
    run_id = _one_run(path)
    before = _digest(path)
    url = storage.read_only_url(path, immutable=immutable)
    assert make_url(url).database.startswith("file:") and make_url(url).query["mode"] == "ro"
    assert ("immutable" in make_url(url).query) == immutable
    assert storage.read_only_url(url) == url  # already read-only: unchanged
    assert [run.name for run in storage.list_runs(url=url)] == ["kept"]
    assert [cell.output for cell in storage.run_cells(run_id, url=url)] == ["out"]
    assert storage.missing_sqlite_file(url) is None
    with pytest.raises(OperationalError, match="readonly"):
        storage.create_run("new", {"task": "review"}, url=url)
    with pytest.raises(OperationalError, match="readonly"):
        storage.set_run_status(run_id, "failed", url=url)
    storage.reset_engines()
    assert _digest(path) == before
    assert sorted(item.name for item in path.parent.iterdir()) == ["kept #1.db"]  # no -wal, no -shm, no journal


def test_a_missing_read_only_file_is_named_and_not_created(tmp_path, fresh_engines):
    path = tmp_path / "absent.db"
    url = storage.read_only_url(path)
    assert storage.missing_sqlite_file(url) == str(path)
    with pytest.raises(OperationalError):
        storage.list_runs(url=url)
    assert not path.exists()


def test_a_server_database_url_is_returned_as_it_is():
    assert storage.read_only_url("postgresql://user@host/db") == "postgresql+psycopg://user@host/db"  # its driver named


def test_a_copied_run_keeps_its_config_status_times_and_cells_in_order(tmp_path, fresh_engines):
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    run_id = storage.create_run("grid", {"task": "review", "alphas": (0.1,)}, url=source)
    traced = GenerationStats("specsteer", new_tokens=3, trace=[TraceStep("forward", "generalist", 5, 0.25)])
    cells = [
        CellResult("r2", GridPoint("specsteer", 0.1, 1.0), "two", {"rougeL": 0.5}, traced),
        CellResult("r1", GridPoint("llm"), "one", {"rougeL": 0.25}, GenerationStats("llm", new_tokens=2)),
    ]
    for cell in cells:
        storage.save_cell(run_id, cell, url=source)
    storage.set_run_status(run_id, "cancelled", error="stopped", url=source)
    run = storage.get_run(run_id, url=source)
    assert run is not None and run.created_at < datetime.now(UTC)

    copied_id = copy_run(run_id, source=source, target=target, name="renamed")
    copied = storage.get_run(copied_id, url=target)
    assert copied is not None and copied.name == "renamed" and copied.cell_count == 2
    assert (copied.config, copied.status, copied.error) == (run.config, "cancelled", "stopped")
    assert (copied.created_at, copied.updated_at) == (run.created_at, run.updated_at)
    assert storage.run_cells(copied_id, url=target) == storage.run_cells(run_id, url=source)
    with pytest.raises(ValueError, match="already exists"):
        copy_run(run_id, source=source, target=target, name="renamed")
    with pytest.raises(ValueError, match="does not exist"):
        copy_run(run_id + 1, source=source, target=target)

    untraced = copy_run(run_id, source=source, target=target, cell_stats=lambda stats: {**stats, "trace": []})
    assert [cell.stats.trace for cell in storage.run_cells(untraced, url=target)] == [[], []]
    assert storage.get_run(untraced, url=target).name == "grid"
