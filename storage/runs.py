"""Evaluation runs and their cells.

``specsteer.evaluation.grid`` runs a grid against the ``specsteer.stores.protocols.RunStore`` protocol;
``storage.run_store.SqlRunStore`` implements it over the functions below for one database URL. The dashboard
and the scripts read runs back with :func:`get_run`, :func:`list_runs` and :func:`run_cells`;
:func:`copy_run` copies a run as it is stored from one database into another (the example runs' builder).

Cells arrive one at a time, the moment each is computed, possibly from several processes working
on one run (``--shard``): :func:`save_cell` inserts a cell unless the run already has its key,
without failing and without ending the transaction, so two workers never store a cell twice. A cell
whose timing was disturbed (the process stood still mid-generation) is stored but not finished: a resume
runs it again, and the new cell takes its place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from specsteer.data.crossing import HistoryCrossing
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import RUN_STATUSES, CellResult, GridPoint, RunStatus, StoredRun
from specsteer.util.jsonable import to_jsonable
from storage.db import insert_unless_present, retry_on_locked, session_scope
from storage.models import ROUGE_KEYS, EvalCell, EvalRun
from storage.values import fitting, require_text

# What copy_run takes of a stored row: every column but the ids, which the target database gives afresh.
_RUN_COLUMNS = tuple(column.key for column in EvalRun.__table__.columns if column.key != "id")
_CELL_COLUMNS = tuple(column.key for column in EvalCell.__table__.columns if column.key not in ("id", "run_id"))


def _canonical_config(config: Mapping[str, Any]) -> dict[str, Any]:
    # Round-trip through JSON so that tuples/lists and key order compare equal.
    return json.loads(json.dumps(to_jsonable(dict(config)), sort_keys=True))


def _stored_run(row: EvalRun, cell_count: int) -> StoredRun:
    return StoredRun(
        row.id, row.name, row.config, cast(RunStatus, row.status), row.error, row.created_at, row.updated_at, cell_count
    )


def _existing_run_id(name: str, config: dict[str, Any], url: str | None) -> int | None:
    with session_scope(url) as session:
        row = session.scalar(select(EvalRun).where(EvalRun.name == name))
        if row is None:
            return None
        if _canonical_config(row.config) != config:
            raise ValueError(
                f"run {name!r} already exists with a different config; choose another name to start a new run"
            )
        return row.id


@retry_on_locked()
def create_run(name: str, config: Mapping[str, Any], *, url: str | None = None) -> int:
    """Create a run, or return the id of the run of that name if its config is the same (resume).

    Raises ValueError if a run of that name exists with a different config.
    """
    name = require_text(name, "run name", EvalRun.name)
    canonical = _canonical_config(config)
    existing = _existing_run_id(name, canonical, url)
    if existing is not None:
        return existing
    try:
        with session_scope(url) as session:
            row = EvalRun(name=name, config=canonical, status="pending")
            session.add(row)
            session.flush()
            return row.id
    except IntegrityError:
        # Created by another process meanwhile: resume it (or refuse, if configs differ).
        existing = _existing_run_id(name, canonical, url)
        if existing is None:
            raise
        return existing


def get_run(run_id: int, *, url: str | None = None) -> StoredRun | None:
    """One run, or None."""
    with session_scope(url) as session:
        row = session.get(EvalRun, run_id)
        if row is None:
            return None
        count = session.scalar(select(func.count()).select_from(EvalCell).where(EvalCell.run_id == run_id))
        return _stored_run(row, count or 0)


def get_run_by_name(name: str, *, url: str | None = None) -> StoredRun | None:
    """The run of that name, or None."""
    with session_scope(url) as session:
        run_id = session.scalar(select(EvalRun.id).where(EvalRun.name == name))
    return get_run(run_id, url=url) if run_id is not None else None


def list_runs(*, url: str | None = None) -> list[StoredRun]:
    """All runs, newest first."""
    with session_scope(url) as session:
        counts = select(EvalCell.run_id, func.count().label("cells")).group_by(EvalCell.run_id).subquery()
        query = (
            select(EvalRun, func.coalesce(counts.c.cells, 0))
            .outerjoin(counts, counts.c.run_id == EvalRun.id)
            .order_by(EvalRun.id.desc())
        )
        return [_stored_run(row, count) for row, count in session.execute(query)]


@retry_on_locked()
def set_run_status(run_id: int, status: RunStatus, *, error: str | None = None, url: str | None = None) -> None:
    """Set a run's status (one of RUN_STATUSES) and error text (None clears it)."""
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
    with session_scope(url) as session:
        row = session.get(EvalRun, run_id)
        if row is None:
            raise ValueError(f"run {run_id} does not exist")
        row.status = status
        row.error = error


def finished_cell_keys(run_id: int, *, url: str | None = None) -> set[str]:
    """Keys of the cells a run already has with sound timing (skip these when resuming): a cell whose
    timing was disturbed is run again."""
    with session_scope(url) as session:
        query = select(EvalCell.cell_key).where(EvalCell.run_id == run_id, EvalCell.timing_disturbed.is_(False))
        return set(session.scalars(query))


def _rouge_columns(rouge: Mapping[str, float | None]) -> dict[str, float | None]:
    unknown = set(rouge) - set(ROUGE_KEYS)
    if unknown:
        raise ValueError(f"unknown ROUGE key(s) {sorted(unknown)}; expected {ROUGE_KEYS}")
    return {key: (None if (value := rouge.get(key)) is None else float(value)) for key in ROUGE_KEYS}


@retry_on_locked()
def save_cell(run_id: int, cell: CellResult, *, url: str | None = None) -> bool:
    """Persist one cell at once; True if stored, False if the run already had it (never raises for that).
    A stored cell of that key whose timing was disturbed is replaced (in the same transaction, so two workers
    re-timing it store one cell)."""
    point = cell.point
    values = {
        "run_id": run_id,
        "cell_key": fitting(cell.key, "cell key", EvalCell.cell_key),
        "record_id": fitting(str(cell.record_id), "record id", EvalCell.record_id),
        "method": require_text(point.method, "method", EvalCell.method),
        "alpha": None if point.alpha is None else float(point.alpha),
        "beta": None if point.beta is None else float(point.beta),
        "history_crossed": None if cell.history_crossed is None else cell.history_crossed.to_dict(spans=False),
        "output": cell.output or "",
        # The point's acceptance rule travels in the stats (read back by _cell_result): no column, so databases made
        # before it (the example runs' read-only file among them) read as ever.
        "stats": {**to_jsonable(cell.stats), "cda_lambda": point.cda_lambda},
        "timing_disturbed": cell.stats.timing_disturbed,
        **_rouge_columns(cell.rouge),
    }
    with session_scope(url) as session:
        if session.get(EvalRun, run_id) is None:
            raise ValueError(f"run {run_id} does not exist")
        disturbed = (EvalCell.run_id == run_id, EvalCell.cell_key == cell.key, EvalCell.timing_disturbed.is_(True))
        session.execute(delete(EvalCell).where(*disturbed))
        return insert_unless_present(session, EvalCell, values, ("run_id", "cell_key"))


def copy_run(
    run_id: int,
    *,
    source: str | None,
    target: str,
    name: str | None = None,
    cell_stats: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> int:
    """Copy run ``run_id`` of the database ``source`` into the database ``target`` as it is stored (its config,
    status, error and times; every cell's columns, its time included, in order), under ``name`` (default its
    own), each cell's stats passed through ``cell_stats`` when given; the new run's id. ValueError when there
    is no such run, or ``target`` has a run of that name already."""
    with session_scope(source) as session:
        run = session.get(EvalRun, run_id)
        if run is None:
            raise ValueError(f"run {run_id} does not exist")
        copied = {column: getattr(run, column) for column in _RUN_COLUMNS}
        cells = [
            {column: getattr(cell, column) for column in _CELL_COLUMNS}
            for cell in session.scalars(select(EvalCell).where(EvalCell.run_id == run_id).order_by(EvalCell.id))
        ]
    copied["name"] = require_text(name or copied["name"], "run name")
    with session_scope(target) as session:
        if session.scalar(select(EvalRun.id).where(EvalRun.name == copied["name"])) is not None:
            raise ValueError(f"run {copied['name']!r} already exists in this database")
        row = EvalRun(**copied)
        session.add(row)
        session.flush()
        for cell in cells:
            stats = cell_stats(cell["stats"]) if cell_stats is not None else cell["stats"]
            session.add(EvalCell(**{**cell, "run_id": row.id, "stats": stats}))
        return row.id


def _cell_result(row: EvalCell) -> CellResult:
    return CellResult(
        record_id=row.record_id,
        # The acceptance rule is not a column: the cell's stats say it (None, the fixed α, for rows stored before CDA).
        point=GridPoint(row.method, row.alpha, row.beta, row.stats.get("cda_lambda")),
        output=row.output,
        rouge={key: getattr(row, key) for key in ROUGE_KEYS},
        # Rows stored before the stats carried their method still say it in their own column.
        stats=GenerationStats.from_dict({"method": row.method, **row.stats}),
        history_crossed=None if row.history_crossed is None else HistoryCrossing.from_dict(row.history_crossed),
    )


def run_cells(run_id: int, *, url: str | None = None) -> list[CellResult]:
    """A run's cells in the order they were saved."""
    with session_scope(url) as session:
        rows = session.scalars(select(EvalCell).where(EvalCell.run_id == run_id).order_by(EvalCell.id))
        return [_cell_result(row) for row in rows]
