"""What the library needs from wherever its outputs are kept: two small typed protocols, implemented in ``storage``.

The library never imports a database. Everything that crosses this boundary is a typed value defined here.

* The evaluation grid: ``specsteer.evaluation.grid`` runs a grid against any :class:`RunStore`;
  ``storage.SqlRunStore`` (SQLite, or ``DATABASE_URL``) is the one the app and the command line use,
  and a test can hand it a dictionary-backed fake. Values: :class:`GridPoint`, :class:`CellResult`,
  :data:`RunStatus`, :class:`StoredRun`.
* The application service: ``specsteer.service.app_service`` saves every generation and comparison, reads saved
  comparisons back, and saves and sums up annotators' judgements of them, all through a
  :class:`GenerationStore`; ``storage.SqlGenerationStore`` is the one the app uses, chosen in
  ``app.py``, and a test can hand the service an in-memory one. Values: :class:`NamedHistory`,
  :class:`NewGeneration`, :class:`NewComparison`, the stored comparisons and the annotators' judgements.

This module imports nothing heavy (no torch, no SQLAlchemy), so ``storage`` can implement the
protocols without loading the decoding library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from specsteer.data.history import History
from specsteer.engine.settings import GenerationSettings
from specsteer.method.events import GenerationStats, LinkMessage, TokenEvent

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
        """The :func:`cell_key` of every cell the run already has."""
        ...

    def save_cell(self, run_id: int, cell: CellResult) -> bool:
        """Keep ``cell`` at once; False when the run already had a cell of that key."""
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


# --------------------------------------------------------------------------- the application service's generations, comparisons and judgements


RATING_CRITERIA = ("personalization", "fluency")  # what an annotator scores each output on, 1-5
MAX_COMPARISON_OUTPUTS = 26  # one letter label each


def slot_label(slot: int) -> str:
    """Label shown for a slot of a comparison: 0 -> "A", 1 -> "B", ..."""
    if not 0 <= slot < MAX_COMPARISON_OUTPUTS:
        raise ValueError(f"slot {slot} out of range")
    return chr(ord("A") + slot)


@dataclass(frozen=True)
class NamedHistory:
    """A history with the name its owner knows it by (a sample's label, or the uploaded file's name)."""

    history: History
    name: str


@dataclass(frozen=True)
class NewGeneration:
    """One finished (or stopped) generation, to be saved with everything needed to reproduce it."""

    task: str
    input_text: str
    settings: GenerationSettings
    text: str
    tokens: tuple[TokenEvent, ...]  # every token shown, rejected drafts included
    stats: GenerationStats
    transcript: tuple[LinkMessage, ...]  # every message that crossed the link
    history_id: int | None  # from save_history; None without a history
    history_name: str | None


@dataclass(frozen=True)
class NewComparison:
    """Saved generations of one input shown side by side, in the order shown (labels A, B, …)."""

    task: str
    input_text: str
    settings: GenerationSettings  # shared by every output; each output's method is in ``methods``
    generation_ids: tuple[int, ...]
    methods: tuple[str, ...]  # the method of each generation, same order
    blind: bool
    history_id: int | None
    history_name: str | None


@dataclass(frozen=True)
class StoredOutput:
    """One output of a saved comparison."""

    generation_id: int
    method: str
    text: str
    stats: GenerationStats | None  # None for a row saved without readable statistics


@dataclass(frozen=True)
class StoredComparison:
    """A saved comparison; ``outputs`` in the order they are shown (slot 0 is label A)."""

    id: int
    task: str
    input_text: str
    blind: bool
    outputs: tuple[StoredOutput, ...]

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(output.method for output in self.outputs)


@dataclass(frozen=True)
class NewAnnotation:
    """One annotator's judgement of a comparison as they saw it (``display_order``: slot 0 is label A).

    ``preferred`` and the keys of ``ratings`` are labels ("B") or method names; ``preferred`` may also
    be "tie" or "all_bad". A None score is "not rated"."""

    comparison_id: int
    annotator: str
    preferred: str
    ratings: Mapping[str, Mapping[str, int | None]]  # label -> criterion -> score
    comment: str
    display_order: tuple[str, ...]


@dataclass(frozen=True)
class Judgement:
    """One annotator's stored judgement of one comparison, labels resolved to method names."""

    id: int
    comparison_id: int
    annotator: str
    preferred: str  # as given: a label ("B"), a method, "tie" or "all_bad"
    preferred_method: str  # resolved: a method name, "tie" or "all_bad"
    ratings: Mapping[str, Mapping[str, int]]  # method -> criterion -> score (1-5); unrated ones absent
    display_order: tuple[str, ...]  # methods in the order this annotator saw them (slot 0 = A)
    comment: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class MethodJudgements:
    """How one method fared over the judgements whose comparison showed it."""

    shown: int
    wins: int  # judgements that preferred it
    ties: int  # "tie" judgements while it was shown
    all_bad: int  # "all_bad" judgements while it was shown
    mean_ratings: Mapping[str, float]  # criterion -> mean score, for the criteria it was rated on

    @property
    def win_rate(self) -> float:
        return self.wins / self.shown


@dataclass(frozen=True)
class Agreement:
    """Agreement on the preferred output over the comparisons judged by two or more annotators.

    ``percent_agreement`` is the mean over those comparisons of the share of annotator pairs that
    agree (Fleiss' observed agreement P-bar); ``unanimous`` the share of comparisons where all agree.
    ``fleiss_kappa`` is Fleiss' kappa in its form for a varying number of raters per item, with the
    methods, "tie" and "all_bad" as categories; with two raters it equals Scott's pi (pooled
    marginals), not Cohen's kappa. Each is None where undefined (no such comparison, or a chance
    agreement of 1).
    """

    comparisons: int
    judgements: int
    percent_agreement: float | None
    unanimous: float | None
    fleiss_kappa: float | None


@dataclass(frozen=True)
class AnnotationSummary:
    judgements: int
    annotators: int
    methods: Mapping[str, MethodJudgements]  # in method-name order
    agreement: Agreement


ExportFormat = Literal["csv", "jsonl"]


class GenerationStore(Protocol):
    """Keeps histories, generations and comparisons; each call returns the new row's id."""

    def save_history(self, history: NamedHistory) -> int:
        """An identical history saved before is not saved twice: its id is returned."""
        ...

    def save_generation(self, generation: NewGeneration) -> int: ...

    def save_comparison(self, comparison: NewComparison) -> int:
        """ValueError when a generation id is unknown or a method appears twice."""
        ...

    def recent_comparisons(self, limit: int) -> list[StoredComparison]:
        """The newest ``limit`` comparisons, newest first."""
        ...

    def comparison(self, comparison_id: int) -> StoredComparison | None: ...

    def save_annotation(self, annotation: NewAnnotation) -> int:
        """ValueError, naming what is wrong, for an unknown comparison, label or score."""
        ...

    def annotation_summary(self) -> AnnotationSummary: ...

    def write_annotations(self, kind: ExportFormat, target: Path) -> int:
        """Every annotation as one row of a CSV or JSON-lines file at ``target``; how many. Writes
        nothing when there is none."""
        ...
