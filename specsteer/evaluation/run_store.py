"""What the evaluation grid needs from wherever its results are kept: the :class:`RunStore` protocol and its
typed values (:class:`GridPoint`, :class:`CellResult`, :data:`RunStatus`, :class:`StoredRun`).

``specsteer.evaluation.grid`` runs a grid against any RunStore; ``storage.SqlRunStore`` (SQLite, or
``DATABASE_URL``) is the one the app and the command line use, and a test can hand it a dictionary-backed
fake. Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, get_args

from specsteer.method.catalog import METHOD_INFO
from specsteer.method.events import GenerationStats

# --------------------------------------------------------------------------- the evaluation grid's results

RunStatus = Literal["pending", "running", "finished", "cancelled", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)


@dataclass(frozen=True)
class GridPoint:
    """A method with the alpha and beta it reads (None for a parameter it does not use)."""

    method: str
    alpha: float | None = None
    beta: float | None = None

    @property
    def label(self) -> str:
        parameters = [f"{name}={value:g}" for name, value in (("a", self.alpha), ("b", self.beta)) if value is not None]
        return " ".join([self.method, *parameters])


def grid_point(method: str, alpha: float | None, beta: float | None) -> GridPoint:
    """The grid point of ``method`` at the setting (α, β): each kept only where the method reads it."""
    info = METHOD_INFO[method]
    return GridPoint(method, alpha if info.takes_alpha else None, beta if info.takes_beta else None)


def _key_number(value: float | None) -> str:
    # 12 significant digits: 0.1 and 0.1000000000001 (float noise from a grid) share a key.
    return "-" if value is None else format(float(value), ".12g")


def _key_text(value: str) -> str:
    # Escape the separator so that no record id can forge another cell's key.
    return str(value).replace("%", "%25").replace("|", "%7C")


def cell_key(record_id: str, point: GridPoint) -> str:
    """Canonical key of a grid cell, e.g. ``"rec42|specsteer|a=0.1|b=1"`` (``-`` for no value).

    A run holds at most one cell per key: it is how a resumed run knows what is already done.
    """
    return f"{_key_text(record_id)}|{_key_text(point.method)}|a={_key_number(point.alpha)}|b={_key_number(point.beta)}"


@dataclass(frozen=True)
class CellResult:
    """One finished cell: a record's output under one grid point, its ROUGE scores, the generation's statistics."""

    record_id: str
    point: GridPoint
    output: str
    # F-measures in [0, 1] keyed by ``specsteer.evaluation.metrics.ROUGE_KEYS``; None where a score is missing.
    rouge: Mapping[str, float | None]
    stats: GenerationStats

    @property
    def key(self) -> str:
        return cell_key(self.record_id, self.point)


@dataclass(frozen=True)
class StoredRun:
    """A run as stored, with the number of cells it has so far."""

    id: int
    name: str
    config: Mapping[str, Any]
    status: RunStatus
    error: str | None
    created_at: datetime
    updated_at: datetime
    cell_count: int
    # One of the example runs that ship with the app (read-only, beside the user's own: the service's
    # RunsWithExamples), not one of the user's.
    example: bool = False


class RunStore(Protocol):
    """Runs by name, each with a config, a status and the cells computed so far.

    Several workers (threads, processes, machines) may share one store and one run: ``save_cell``
    must keep the first cell of a key and report a later one as not stored, never fail on it.
    """

    def open_run(self, name: str, config: Mapping[str, Any]) -> int:
        """The id of the run called ``name``: a new one, or the existing one when its config is the same
        (a resume). ValueError when a run of that name exists with another config."""
        ...

    def finished_keys(self, run_id: int) -> set[str]:
        """The :func:`cell_key` of every cell the run already has, except those whose timing was disturbed
        (``stats.timing_disturbed``), which a resume runs again. (A store may also call those finished.)"""
        ...

    def save_cell(self, run_id: int, cell: CellResult) -> bool:
        """Keep ``cell`` at once; False when the run already had a cell of that key, unless that one's timing
        was disturbed: the new cell then takes its place."""
        ...

    def set_status(self, run_id: int, status: RunStatus, error: str | None = None) -> None:
        """Record the run's status and its error text (None clears it)."""
        ...

    def cells(self, run_id: int) -> list[CellResult]:
        """The run's cells in the order they were saved."""
        ...

    def runs(self) -> list[StoredRun]:
        """Every run, newest first (what the dashboard lists)."""
        ...

    def run(self, run_id: int) -> StoredRun | None: ...
