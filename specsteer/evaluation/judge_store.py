"""What an LLM judge's results need from wherever they are kept: the :class:`JudgeStore` protocol and its typed
values (:class:`JudgeIdentity`, :class:`JudgeScore`, :class:`PairVerdict`).

A score belongs to one cell of a stored evaluation run (``specsteer.evaluation.run_store``), one judge and one
criterion (``specsteer.evaluation.judge_rubric``); a verdict to two cells of one record shown in one order.
Each keeps the prompt the judge was sent and its answer, and, where it has no score, why
(``reason_kind`` and a sentence). ``storage.SqlJudgeStore`` keeps them beside the run's cells; a test can hand
``specsteer.evaluation.judge_run`` a dictionary-backed one. Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal, Protocol

from specsteer.evaluation.judge_rubric import RUBRIC_VERSION, TRANSIENT_REASONS, ReasonKind, Winner
from specsteer.evaluation.run_store import GridPoint, cell_key

JudgeKind = Literal["endpoint", "local"]
WEAK_JUDGE = "weak judge"  # how a local fallback judge's scores are labelled wherever they appear


@dataclass(frozen=True)
class JudgeIdentity:
    """Who judged: the model that answered, reached how, under which rubric. ``weak``: the local fallback (the
    offline Generalist), labelled a weak judge wherever its scores appear."""

    model: str
    kind: JudgeKind
    weak: bool = False
    rubric: str = RUBRIC_VERSION

    @property
    def key(self) -> str:
        """What scores are stored under: one judge's scores of one cell never mix with another's."""
        return f"{self.kind}:{self.model}|{self.rubric}"

    @property
    def label(self) -> str:
        """E.g. ``gpt-4o (endpoint)`` or ``qwen2.5-coder-1.5b-instruct-q4_k_m (local, weak judge)``."""
        return f"{self.model} ({self.kind}, {WEAK_JUDGE})" if self.weak else f"{self.model} ({self.kind})"


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """What the judge was sent and answered, and, where the answer gave nothing, why (``reason_kind``: a
    ``judge_rubric.ReasonKind``, and a sentence)."""

    prompt: str = ""
    answer: str = ""
    reason_kind: ReasonKind | None = None
    reason: str | None = None
    created_at: datetime | None = None

    def _settled(self, value: object) -> bool:
        # A result, or a failure asking again would not change (a malformed answer, a refusal).
        return value is not None or self.reason_kind not in TRANSIENT_REASONS

    def _said(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in fields(Exchange)}

    def as_score(
        self, record_id: str, point: GridPoint, criterion: str, judge: JudgeIdentity, score: float | None
    ) -> JudgeScore:
        """This exchange as one cell's grade."""
        return JudgeScore(record_id, point, criterion, judge, score, **self._said())

    def as_verdict(
        self,
        record_id: str,
        shown: tuple[GridPoint, GridPoint],
        criterion: str,
        judge: JudgeIdentity,
        winner: Winner | None,
    ) -> PairVerdict:
        """This exchange as the verdict on two cells shown in this order."""
        return PairVerdict(record_id, shown[0], shown[1], criterion, judge, winner, **self._said())


@dataclass(frozen=True)
class JudgeScore(Exchange):
    """One cell's grade on one criterion by one judge: ``score`` 1-10, or None with the reason."""

    record_id: str
    point: GridPoint
    criterion: str
    judge: JudgeIdentity
    score: float | None

    @property
    def cell_key(self) -> str:
        return cell_key(self.record_id, self.point)

    @property
    def settled(self) -> bool:
        return self._settled(self.score)


@dataclass(frozen=True)
class PairVerdict(Exchange):
    """One judge's verdict on two cells of one record, ``first`` shown as A and ``second`` as B."""

    record_id: str
    first: GridPoint
    second: GridPoint
    criterion: str
    judge: JudgeIdentity
    winner: Winner | None

    @property
    def first_key(self) -> str:
        return cell_key(self.record_id, self.first)

    @property
    def second_key(self) -> str:
        return cell_key(self.record_id, self.second)

    @property
    def settled(self) -> bool:
        return self._settled(self.winner)

    @property
    def preferred(self) -> GridPoint | None:
        """The point the verdict prefers; None for a tie or no verdict."""
        return {"first": self.first, "second": self.second}.get(self.winner or "")


class JudgeStore(Protocol):
    """Judge scores and pairwise verdicts of stored runs' cells.

    Several processes may judge one run: a save keeps the first grade (verdict) of its key and reports a later
    one as not stored; a result without one (a timeout, a malformed answer) is replaced by the next save of its
    key: a new answer, or the stored answer read again."""

    def settled_scores(self, run_id: int, judge_key: str) -> set[tuple[str, str]]:
        """(cell key, criterion) of every settled score of this judge (:attr:`JudgeScore.settled`)."""
        ...

    def save_score(self, run_id: int, score: JudgeScore) -> bool: ...

    def scores(self, run_id: int) -> list[JudgeScore]:
        """Every score of the run, every judge's; empty where the store keeps none (or has no place for any:
        a read-only database made before judges)."""
        ...

    def settled_verdicts(self, run_id: int, judge_key: str) -> set[tuple[str, str, str]]:
        """(first key, second key, criterion) of every settled verdict of this judge."""
        ...

    def save_verdict(self, run_id: int, verdict: PairVerdict) -> bool: ...

    def verdicts(self, run_id: int) -> list[PairVerdict]:
        """Every pairwise verdict of the run (empty as :meth:`scores` is)."""
        ...
