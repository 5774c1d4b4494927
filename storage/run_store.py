"""``SqlRunStore``: the evaluation grid's and the service's ``RunStore`` on this package's run repository
(``storage.runs``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specsteer.stores.runs import CellResult, RunStatus, StoredRun
from storage.runs import create_run, finished_cell_keys, get_run, list_runs, run_cells, save_cell, set_run_status


class SqlRunStore:
    """The evaluation grid's ``RunStore`` on one database (default: ``DATABASE_URL`` / the SQLite file)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def open_run(self, name: str, config: Mapping[str, Any]) -> int:
        return create_run(name, config, url=self.url)

    def finished_keys(self, run_id: int) -> set[str]:
        return finished_cell_keys(run_id, url=self.url)

    def save_cell(self, run_id: int, cell: CellResult) -> bool:
        return save_cell(run_id, cell, url=self.url)

    def set_status(self, run_id: int, status: RunStatus, error: str | None = None) -> None:
        set_run_status(run_id, status, error=error, url=self.url)

    def cells(self, run_id: int) -> list[CellResult]:
        return run_cells(run_id, url=self.url)

    def runs(self) -> list[StoredRun]:
        return list_runs(url=self.url)

    def run(self, run_id: int) -> StoredRun | None:
        return get_run(run_id, url=self.url)
