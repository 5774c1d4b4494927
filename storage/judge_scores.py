"""LLM judges' grades and pairwise verdicts of evaluation runs' cells (``storage.judge_store.SqlJudgeStore``
is ``specsteer.stores.protocols.JudgeStore`` over these functions).

A result is stored the moment the judge's answer is read, keyed by run, cell key(s), judge and criterion
(``judge_scores``, ``judge_verdicts``): a grade (a verdict) is kept and a later one of its key reported as not
stored; a row without one (a timeout, a malformed answer) is replaced by the next save of its key (a new answer,
or the stored answer read again by a better reader). Which results are *settled*, so that a run does not ask
again, is :attr:`JudgeScore.settled`'s rule: all but the failures on the way to the judge.

Reading a database that has no judge tables (an example runs' file, opened read-only and made before judges)
gives no results rather than an error. :func:`copy_judgements` copies a run's results as they are stored onto a
run of another database (the example runs' builder, after :func:`storage.runs.copy_run`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import delete, inspect, or_, select
from sqlalchemy.orm import Session

from specsteer.stores.judges import (
    TRANSIENT_REASONS,
    JudgeIdentity,
    JudgeKind,
    JudgeScore,
    PairVerdict,
    ReasonKind,
    Winner,
)
from specsteer.stores.runs import GridPoint
from storage.db import insert_unless_present, retry_on_locked, session_scope
from storage.models import EvalRun, JudgeScoreRow, JudgeVerdictRow
from storage.values import fitting, require_text

_JudgeTable = type[JudgeScoreRow] | type[JudgeVerdictRow]
_JUDGE_TABLES: tuple[_JudgeTable, ...] = (JudgeScoreRow, JudgeVerdictRow)
# What copy_judgements takes of a stored row: every column but the ids (the target gives its own, and its run's).
_COPIED_COLUMNS = {
    table: tuple(column.key for column in table.__table__.columns if column.key not in ("id", "run_id"))
    for table in _JUDGE_TABLES
}


def _has(session: Session, table: _JudgeTable) -> bool:
    return inspect(session.get_bind()).has_table(table.__tablename__)


def _answered(table: _JudgeTable) -> Any:
    return table.score.is_not(None) if table is JudgeScoreRow else table.winner.is_not(None)  # type: ignore[union-attr]


def _settled(table: _JudgeTable) -> Any:
    return or_(_answered(table), table.reason_kind.is_(None), table.reason_kind.not_in(sorted(TRANSIENT_REASONS)))


def _judge_columns(judge: JudgeIdentity, table: Any) -> dict[str, Any]:
    return {
        "judge_key": fitting(judge.key, "judge key", table.judge_key),
        "judge_model": require_text(judge.model, "judge model", table.judge_model),
        "judge_kind": judge.kind,
        "weak": judge.weak,
        "rubric": fitting(judge.rubric, "judge rubric", table.rubric),
    }


def _judge(row: JudgeScoreRow | JudgeVerdictRow) -> JudgeIdentity:
    return JudgeIdentity(row.judge_model, cast(JudgeKind, row.judge_kind), row.weak, row.rubric)


def _point(value: dict[str, Any]) -> GridPoint:
    return GridPoint(str(value.get("method", "")), value.get("alpha"), value.get("beta"))


def _point_value(point: GridPoint) -> dict[str, Any]:
    return {"method": point.method, "alpha": point.alpha, "beta": point.beta}


def _require_run(session: Session, run_id: int) -> None:
    if session.get(EvalRun, run_id) is None:
        raise ValueError(f"run {run_id} does not exist")


# --------------------------------------------------------------------------- grades


def settled_scores(run_id: int, judge_key: str, *, url: str | None = None) -> set[tuple[str, str]]:
    """(cell key, criterion) of the run's settled grades by this judge."""
    with session_scope(url) as session:
        if not _has(session, JudgeScoreRow):
            return set()
        query = select(JudgeScoreRow.cell_key, JudgeScoreRow.criterion).where(
            JudgeScoreRow.run_id == run_id, JudgeScoreRow.judge_key == judge_key, _settled(JudgeScoreRow)
        )
        return {(key, criterion) for key, criterion in session.execute(query)}


@retry_on_locked()
def save_score(run_id: int, score: JudgeScore, *, url: str | None = None) -> bool:
    """Store one grade (or its absence with the reason) in place of one without a grade; False when a grade of its
    key is there."""
    values = {
        "run_id": run_id,
        "cell_key": fitting(score.cell_key, "cell key", JudgeScoreRow.cell_key),
        "record_id": fitting(str(score.record_id), "record id", JudgeScoreRow.record_id),
        "method": require_text(score.point.method, "method", JudgeScoreRow.method),
        "alpha": score.point.alpha,
        "beta": score.point.beta,
        "criterion": fitting(score.criterion, "criterion", JudgeScoreRow.criterion),
        **_judge_columns(score.judge, JudgeScoreRow),
        "score": score.score,
        "reason_kind": score.reason_kind,
        "reason": score.reason,
        "prompt": score.prompt,
        "answer": score.answer,
    }
    with session_scope(url) as session:
        _require_run(session, run_id)
        same = (
            JudgeScoreRow.run_id == run_id,
            JudgeScoreRow.cell_key == values["cell_key"],
            JudgeScoreRow.judge_key == values["judge_key"],
            JudgeScoreRow.criterion == score.criterion,
        )
        session.execute(delete(JudgeScoreRow).where(*same, ~_answered(JudgeScoreRow)))
        return insert_unless_present(session, JudgeScoreRow, values, ("run_id", "cell_key", "judge_key", "criterion"))


def run_scores(run_id: int, *, url: str | None = None) -> list[JudgeScore]:
    """Every grade of the run, every judge's, in the order stored; [] where there is no judge table."""
    with session_scope(url) as session:
        if not _has(session, JudgeScoreRow):
            return []
        rows = session.scalars(select(JudgeScoreRow).where(JudgeScoreRow.run_id == run_id).order_by(JudgeScoreRow.id))
        return [
            JudgeScore(
                record_id=row.record_id,
                point=GridPoint(row.method, row.alpha, row.beta),
                criterion=row.criterion,
                judge=_judge(row),
                score=row.score,
                prompt=row.prompt,
                answer=row.answer,
                reason_kind=cast(ReasonKind | None, row.reason_kind),
                reason=row.reason,
                created_at=row.created_at,
            )
            for row in rows
        ]


# --------------------------------------------------------------------------- pairwise verdicts


def settled_verdicts(run_id: int, judge_key: str, *, url: str | None = None) -> set[tuple[str, str, str]]:
    """(first key, second key, criterion) of the run's settled verdicts by this judge."""
    with session_scope(url) as session:
        if not _has(session, JudgeVerdictRow):
            return set()
        query = select(JudgeVerdictRow.first_key, JudgeVerdictRow.second_key, JudgeVerdictRow.criterion).where(
            JudgeVerdictRow.run_id == run_id, JudgeVerdictRow.judge_key == judge_key, _settled(JudgeVerdictRow)
        )
        return {(first, second, criterion) for first, second, criterion in session.execute(query)}


@retry_on_locked()
def save_verdict(run_id: int, verdict: PairVerdict, *, url: str | None = None) -> bool:
    """Store one verdict (or its absence with the reason) in place of one without a verdict; False when a verdict
    of its key is there."""
    values = {
        "run_id": run_id,
        "record_id": fitting(str(verdict.record_id), "record id", JudgeVerdictRow.record_id),
        "first_key": fitting(verdict.first_key, "cell key", JudgeVerdictRow.first_key),
        "second_key": fitting(verdict.second_key, "cell key", JudgeVerdictRow.second_key),
        "first": _point_value(verdict.first),
        "second": _point_value(verdict.second),
        "criterion": fitting(verdict.criterion, "criterion", JudgeVerdictRow.criterion),
        **_judge_columns(verdict.judge, JudgeVerdictRow),
        "winner": verdict.winner,
        "reason_kind": verdict.reason_kind,
        "reason": verdict.reason,
        "prompt": verdict.prompt,
        "answer": verdict.answer,
    }
    unique = ("run_id", "first_key", "second_key", "judge_key", "criterion")
    with session_scope(url) as session:
        _require_run(session, run_id)
        same = [getattr(JudgeVerdictRow, column) == values[column] for column in unique]
        session.execute(delete(JudgeVerdictRow).where(*same, ~_answered(JudgeVerdictRow)))
        return insert_unless_present(session, JudgeVerdictRow, values, unique)


def run_verdicts(run_id: int, *, url: str | None = None) -> list[PairVerdict]:
    """Every pairwise verdict of the run, in the order stored; [] where there is no judge table."""
    with session_scope(url) as session:
        if not _has(session, JudgeVerdictRow):
            return []
        query = select(JudgeVerdictRow).where(JudgeVerdictRow.run_id == run_id).order_by(JudgeVerdictRow.id)
        return [
            PairVerdict(
                record_id=row.record_id,
                first=_point(row.first),
                second=_point(row.second),
                criterion=row.criterion,
                judge=_judge(row),
                winner=cast(Winner | None, row.winner),
                prompt=row.prompt,
                answer=row.answer,
                reason_kind=cast(ReasonKind | None, row.reason_kind),
                reason=row.reason,
                created_at=row.created_at,
            )
            for row in session.scalars(query)
        ]


# --------------------------------------------------------------------------- copying a run's results


@dataclass(frozen=True)
class CopiedJudgements:
    """How many grades and pairwise verdicts :func:`copy_judgements` copied."""

    scores: int
    verdicts: int


def _stored_rows(session: Session, table: _JudgeTable, run_id: int) -> list[dict[str, Any]]:
    if not _has(session, table):
        return []
    rows = session.scalars(select(table).where(table.run_id == run_id).order_by(table.id))
    return [{column: getattr(row, column) for column in _COPIED_COLUMNS[table]} for row in rows]


def copy_judgements(run_id: int, target_run_id: int, *, source: str | None, target: str) -> CopiedJudgements:
    """Copy every judge grade and pairwise verdict of run ``run_id`` of the database ``source`` onto run
    ``target_run_id`` of the database ``target``, as stored (judge, rubric, criterion, cell keys, prompt, answer,
    grade or verdict, reason, time), in order. ValueError when either run is missing or the target run has judge
    results already (its own would be mixed with the copies)."""
    with session_scope(source) as session:
        if session.get(EvalRun, run_id) is None:
            raise ValueError(f"run {run_id} does not exist in the source database")
        rows = {table: _stored_rows(session, table, run_id) for table in _JUDGE_TABLES}
    with session_scope(target) as session:
        if session.get(EvalRun, target_run_id) is None:
            raise ValueError(f"run {target_run_id} does not exist in the target database")
        for table in _JUDGE_TABLES:
            if session.scalar(select(table.id).where(table.run_id == target_run_id).limit(1)) is not None:
                raise ValueError(f"run {target_run_id} already has judge results ({table.__tablename__}); none copied")
        for table, stored in rows.items():
            session.add_all(table(**{**row, "run_id": target_run_id}) for row in stored)
    return CopiedJudgements(len(rows[JudgeScoreRow]), len(rows[JudgeVerdictRow]))
