"""What a judge store keeps (``protocols.JudgeStore``): an LLM judge's grades and pairwise verdicts of stored
runs' cells, as typed values (:class:`JudgeIdentity`, :class:`JudgeScore`, :class:`PairVerdict`), and the
vocabulary they are stored in (the rubric's version, why a result is missing, a verdict's winner).

A score belongs to one cell of a stored evaluation run (``runs``), one judge and one criterion
(``specsteer.evaluation.judge_rubric``); a verdict to two cells of one record shown in one order.
Each keeps the prompt the judge was sent and its answer, and, where it has no score, why
(``reason_kind`` and a sentence). ``storage.SqlJudgeStore`` keeps them beside the run's cells; a test can hand
``specsteer.evaluation.judge_run`` a dictionary-backed store. Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal, get_args

from specsteer.stores.runs import GridPoint, cell_key

# Bumped whenever a prompt's wording changes (``specsteer.evaluation.judge_rubric``): stored scores name the
# rubric they were given under.
RUBRIC_VERSION = "cogenesis-1"

ReasonKind = Literal["timeout", "unreachable", "http", "malformed", "refusal"]
REASON_KINDS: tuple[ReasonKind, ...] = get_args(ReasonKind)
# Failures of the way to the judge, not of its answer: a later run asks again.
TRANSIENT_REASONS: frozenset[str] = frozenset({"timeout", "unreachable", "http"})

Winner = Literal["first", "second", "tie"]

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
    ``ReasonKind``, and a sentence)."""

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
