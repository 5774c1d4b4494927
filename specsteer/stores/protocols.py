"""What the library needs from wherever things are kept: one ``Protocol`` per concept, every one of them here.

* :class:`GenerationStore`: histories, generations, comparisons and annotators' judgements of them (the
  application service, ``specsteer.service``);
* :class:`CampaignStore`: annotation campaigns, their annotators and judgements (``specsteer.service.campaigns``);
* :class:`RunStore`: evaluation runs and their cells (the grid, ``specsteer.evaluation.grid``, and the service);
* :class:`JudgeStore`: an LLM judge's grades and verdicts of runs' cells (``specsteer.evaluation.judge_run``).

The values that cross them are frozen dataclasses beside this module (``generations``, ``campaigns``,
``runs``, ``judges``). ``storage`` implements each as ``Sql<Concept>Store`` in ``storage/<concept>_store.py``; a test hands
the service or the grid a dictionary-backed fake. Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from specsteer.stores.campaigns import (
    Annotator,
    CampaignItemRef,
    CampaignStatus,
    NewCampaign,
    NewCampaignJudgement,
    StoredCampaign,
    StoredCampaignJudgement,
)
from specsteer.stores.generations import (
    AnnotationSaved,
    AnnotationSummary,
    ExportFormat,
    NamedHistory,
    NewAnnotation,
    NewComparison,
    NewGeneration,
    StoredComparison,
)
from specsteer.stores.judges import JudgeScore, PairVerdict
from specsteer.stores.runs import CellResult, RunStatus, StoredRun


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

    def save_annotation(self, annotation: NewAnnotation) -> AnnotationSaved:
        """Stores it, or replaces its page's earlier judgement of the comparison; ValueError, naming what is
        wrong, for an unknown comparison, label or score."""
        ...

    def annotation_summary(self) -> AnnotationSummary: ...

    def write_annotations(self, kind: ExportFormat, target: Path) -> int:
        """Every annotation as one row of a CSV or JSON-lines file at ``target``; how many. Writes
        nothing when there is none."""
        ...


class CampaignStore(Protocol):
    def create_campaign(self, campaign: NewCampaign) -> StoredCampaign:
        """DuplicateCampaign when the name is taken."""
        ...

    def campaign(self, name: str) -> StoredCampaign | None: ...

    def campaign_by_id(self, campaign_id: int) -> StoredCampaign | None: ...

    def campaigns(self) -> list[StoredCampaign]:
        """Newest first."""
        ...

    def set_status(self, campaign_id: int, status: CampaignStatus, error: str | None = None) -> None: ...

    def items(self, campaign_id: int) -> list[CampaignItemRef]:
        """In record order."""
        ...

    def add_item(
        self, campaign_id: int, position: int, record_key: str, comparison_id: int, similarity: float | None = None
    ) -> bool:
        """False (and nothing stored) when the record already has its comparison; ``similarity``: how alike
        its outputs are (``CampaignItemRef.similarity``)."""
        ...

    def annotator(self, campaign_id: int, name: str) -> Annotator | None: ...

    def annotator_count(self, campaign_id: int) -> int: ...

    def add_annotator(self, campaign_id: int, name: str, code_hash: str | None) -> Annotator:
        """The existing one when the name is taken."""
        ...

    def set_code_hash(self, annotator_id: int, code_hash: str) -> None:
        """Keep another stored form of the annotator's join code (the same code, hashed anew)."""
        ...

    def save_judgement(self, judgement: NewCampaignJudgement) -> int:
        """Inserts, or replaces the annotator's earlier judgement of the comparison; the row's id."""
        ...

    def judgements(self, campaign_id: int | None, annotator_id: int | None = None) -> list[StoredCampaignJudgement]:
        """Oldest first; of one campaign (None: every campaign), optionally of one annotator."""
        ...

    def write_export(self, kind: Literal["csv", "jsonl"], rows: Sequence[Mapping[str, Any]], target: Path) -> int: ...


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


class JudgeReader(Protocol):
    """The reading half of :class:`JudgeStore` (what reports, the Dashboard and exports need)."""

    def scores(self, run_id: int) -> list[JudgeScore]:
        """Every score of the run, every judge's; empty where the store keeps none (or has no place for any:
        a read-only database made before judges)."""
        ...

    def verdicts(self, run_id: int) -> list[PairVerdict]:
        """Every pairwise verdict of the run (empty as :meth:`scores` is)."""
        ...


class JudgeStore(JudgeReader, Protocol):
    """Judge scores and pairwise verdicts of stored runs' cells.

    Several processes may judge one run: a save keeps the first grade (verdict) of its key and reports a later
    one as not stored; a result without one (a timeout, a malformed answer) is replaced by the next save of its
    key: a new answer, or the stored answer read again."""

    def settled_scores(self, run_id: int, judge_key: str) -> set[tuple[str, str]]:
        """(cell key, criterion) of every settled score of this judge (:attr:`JudgeScore.settled`)."""
        ...

    def save_score(self, run_id: int, score: JudgeScore) -> bool: ...

    def settled_verdicts(self, run_id: int, judge_key: str) -> set[tuple[str, str, str]]:
        """(first key, second key, criterion) of every settled verdict of this judge."""
        ...

    def save_verdict(self, run_id: int, verdict: PairVerdict) -> bool: ...
