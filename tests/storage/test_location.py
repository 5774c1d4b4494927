"""Where the app's data lives and whether a restart keeps it: locally, on a Hugging Face Space with and
without persistent storage, and on a database server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import db
from storage.location import data_location

pytestmark = pytest.mark.usefixtures("fresh_engines")


@pytest.fixture
def space(tmp_path, monkeypatch):
    """A Space (SPACE_ID set) whose persistent storage would be mounted at tmp_path/data: not mounted until
    the test says so (``mount()``)."""
    persistent = tmp_path / "data"
    persistent.mkdir()
    monkeypatch.setattr(db, "SPACE_STORAGE", persistent)
    monkeypatch.setenv(db.SPACE_ENV, "someone/specsteer")
    monkeypatch.delenv(db.DATA_DIR_ENV, raising=False)
    monkeypatch.delenv(db.DATABASE_URL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    real_ismount = os.path.ismount

    def mount() -> None:
        monkeypatch.setattr(os.path, "ismount", lambda path: str(path) == str(persistent) or real_ismount(path))

    return persistent, mount


def test_a_local_run_keeps_its_sqlite_file_on_this_machine(tmp_path, monkeypatch):
    monkeypatch.delenv(db.SPACE_ENV, raising=False)
    monkeypatch.delenv(db.DATABASE_URL_ENV, raising=False)
    monkeypatch.setenv(db.DATA_DIR_ENV, str(tmp_path / "here"))
    location = data_location()
    assert location.survives_restart and location.where == f"SQLite file {(tmp_path / 'here' / 'specsteer.db')}"
    assert location.log_line().startswith("data: SQLite file ") and str(tmp_path) not in location.page_line()


def test_a_space_without_persistent_storage_says_its_data_is_lost_at_restart(space):
    persistent, _mount = space
    assert db.data_dir() == Path("data")  # the container's own disk
    location = data_location()
    assert not location.survives_restart
    assert "lost when the app restarts" in location.page_line() and "persistent storage" in location.page_line()
    assert "specsteer.db" in location.log_line() and "specsteer.db" not in location.page_line()


def test_a_space_with_persistent_storage_keeps_its_data_there(space):
    persistent, mount = space
    mount()
    assert db.data_dir() == persistent / "specsteer"
    location = data_location()
    assert location.survives_restart and str(persistent / "specsteer" / "specsteer.db") in location.where
    assert "kept across restarts" in location.page_line()


def test_a_data_folder_set_beside_the_persistent_storage_is_lost(space, tmp_path, monkeypatch):
    _persistent, mount = space
    mount()
    monkeypatch.setenv(db.DATA_DIR_ENV, str(tmp_path / "app" / "data"))  # the Docker image's setting
    assert not data_location().survives_restart


def test_a_database_server_keeps_the_data_and_its_password_is_never_shown(space, monkeypatch):
    monkeypatch.setenv(db.DATABASE_URL_ENV, "postgres://annotations:s3cret@db.example:5432/specsteer")
    location = data_location()
    assert location.survives_restart and "s3cret" not in location.log_line() + location.page_line()
    assert "db.example:5432/specsteer" in location.where and "a database server" in location.page_line()
    assert not data_location("sqlite://").survives_restart  # in memory
