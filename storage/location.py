"""Where the app's data lives and whether it outlives a restart: said once at start, in the server's log (with
the path) and on the page (without it).

What decides it (``storage.db``): ``DATABASE_URL`` (a database server keeps its data itself), else a SQLite
file in the data folder. On a Hugging Face Space the container's own disk is emptied whenever the Space
restarts or stops; only its persistent storage, mounted at /data when the owner adds it, survives
(https://huggingface.co/docs/hub/spaces-storage), and the data folder defaults to it there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import make_url

from storage import db


@dataclass(frozen=True)
class DataLocation:
    """Where the data is (``where``, for the operator: may name a path, never a password), whether it survives
    a restart of the app, and why, as one clause a visitor may read."""

    where: str
    survives_restart: bool
    why: str

    def log_line(self) -> str:
        return f"data: {self.where}; {self._verdict()}"

    def page_line(self) -> str:
        return f"Saved data (generations, comparisons, runs, judgements) is {self._verdict()}."

    def _verdict(self) -> str:
        kept = "kept across restarts" if self.survives_restart else "lost when the app restarts"
        return f"{kept} ({self.why})"


def _under(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def data_location(url: str | None = None) -> DataLocation:
    """Where ``url`` (default: the app's, ``DATABASE_URL`` or the data folder's SQLite file) keeps the data."""
    parsed = make_url(db.normalise_url(url) if url else db.database_url())
    if parsed.get_backend_name() != "sqlite":
        server = parsed.render_as_string(hide_password=True)
        return DataLocation(f"{parsed.get_backend_name()} database {server}", True, "a database server")
    if parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
        return DataLocation("SQLite in memory", False, "an in-memory database")
    file = Path(parsed.database or "").expanduser().resolve()
    where = f"SQLite file {file}"
    if not os.environ.get(db.SPACE_ENV):
        return DataLocation(where, True, "a file on this machine's disk")
    persistent = db.space_storage()
    if persistent is not None and _under(file, persistent.resolve()):
        return DataLocation(where, True, f"the Space's persistent storage, {persistent}")
    return DataLocation(
        where,
        False,
        f"the Space's own disk, emptied at every restart: add persistent storage (mounted at {db.SPACE_STORAGE}) "
        "or set DATABASE_URL",
    )
