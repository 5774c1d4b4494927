"""What a run store keeps (``protocols.RunStore``): evaluation runs and their cells, as typed values
(:class:`GridPoint`, :class:`CellResult`, :data:`RunStatus`, :class:`StoredRun`), and the key that names a cell.

``specsteer.evaluation.grid`` stores every cell the moment it is computed; everything that reads runs back
(summaries, claims, sweeps, joined runs) reads these values. ``storage.SqlRunStore`` turns them into rows.
Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from specsteer.data.crossing import HistoryCrossing
from specsteer.method.catalog import METHOD_INFO, acceptance_label, method_label
from specsteer.method.events import GenerationStats

# --------------------------------------------------------------------------- the evaluation grid's results

RunStatus = Literal["pending", "running", "finished", "cancelled", "failed"]
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)


@dataclass(frozen=True)
class GridPoint:
    """A method with the alpha and beta it reads (None for a parameter it does not use), and the acceptance rule
    of its ratio test: ``cda_lambda``, CDA's λ (``specsteer.method.acceptance``), None for the fixed α (the paper's,
    and every method without α)."""

    method: str
    alpha: float | None = None
    beta: float | None = None
    cda_lambda: float | None = None

    @property
    def label(self) -> str:
        values = (("a", self.alpha), ("b", self.beta), ("cda", self.cda_lambda))
        return " ".join([self.method, *(f"{name}={value:g}" for name, value in values if value is not None)])

    @property
    def setting(self) -> str:
        """How people read its settings: "α=0.1 β=1", "α=1 β=1 CDA λ=1", "" for a method with none."""
        values = (("α", self.alpha), ("β", self.beta))
        parameters = [f"{name}={value:g}" for name, value in values if value is not None]
        return " ".join(filter(None, [*parameters, acceptance_label(self.cda_lambda)]))

    @property
    def display(self) -> str:
        """The method's label and its setting: "SpecSteer α=1 β=1 CDA λ=1", "LLM"."""
        return " ".join(filter(None, [method_label(self.method), self.setting]))


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
    """Canonical key of a grid cell, e.g. ``"rec42|specsteer|a=0.1|b=1"`` (``-`` for no value), and
    ``"rec42|specsteer|a=0.1|b=1|cda=1"`` under CDA (the fixed α's keys stay as they were before CDA).

    A run holds at most one cell per key: it is how a resumed run knows what is already done.
    """
    key = f"{_key_text(record_id)}|{_key_text(point.method)}|a={_key_number(point.alpha)}|b={_key_number(point.beta)}"
    return key if point.cda_lambda is None else f"{key}|cda={_key_number(point.cda_lambda)}"


@dataclass(frozen=True)
class CellResult:
    """One finished cell: a record's output under one grid point, its ROUGE scores, the generation's statistics."""

    record_id: str
    point: GridPoint
    output: str
    # F-measures in [0, 1] keyed by ``specsteer.evaluation.metrics.ROUGE_KEYS``; None where a score is missing.
    rouge: Mapping[str, float | None]
    stats: GenerationStats
    # The history that crossed (specsteer.data.crossing; phrases and where they crossed, without spans); None for
    # a cell stored before the audit existed (not audited, which is not "none crossed").
    history_crossed: HistoryCrossing | None = None

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
