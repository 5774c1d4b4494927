"""Judging a stored evaluation run: every chosen cell graded by one judge on each criterion, and, when asked,
every pair of chosen grid points on each record compared in both orders; resumable, each result stored the
moment it is read.

* **What is judged** (:class:`JudgePlan`): the run's cells at the chosen grid points (default: all of the run's),
  on the first ``records`` records of the run's order that have a cell at every chosen point (so that every
  point is judged on the same records), on each criterion (``specsteer.evaluation.judge_rubric``).
* **Resumable**: a cell (or a pair in one order) whose result for this judge and criterion is settled (a score,
  a malformed answer, a refusal) is skipped; one that failed on the way (a timeout, an unreachable server, an
  HTTP error) is asked again. Work goes record by record, a record's single grades before its pairs, so that
  a local judge's prefix cache reads the record's context once.
* **Errors** never stop the run: the cell is stored without a score, with the reason's kind and a sentence.
  Every answer is stored, so a run first reads this judge's stored answers that gave no grade again with the
  current readers (:func:`reread_answers`): a reader made better later grades them without asking again.
* **Progress**: :func:`judge_run_events` yields a :class:`JudgeProgress` per item asked, then a
  :class:`JudgeDone`; a set ``cancel`` ends it after the item in flight (everything stored so far stays).

What the judge reads about a record (its task, the user's profile and texts) is rebuilt from the run's records
file (:func:`run_contexts`), as the run read it; nothing is loaded but the records.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from specsteer.data.datasets import Record, load_task_records
from specsteer.data.record_files import DataError
from specsteer.evaluation.grid import spec_from_config
from specsteer.evaluation.judge_rubric import (
    CRITERIA,
    SCORE_ANSWER_PATTERN,
    VERDICT_ANSWER_PATTERN,
    Criterion,
    JudgeContext,
    Reading,
    pair_prompt,
    read_score,
    read_verdict,
    score_prompt,
)
from specsteer.evaluation.judges import Judge, JudgeFailure
from specsteer.stores.judges import Exchange, Winner
from specsteer.stores.protocols import JudgeStore
from specsteer.stores.runs import CellResult, GridPoint, cell_key

MAX_PAIRWISE_POINTS = 8  # 8 points: 28 pairs, 56 verdicts a record and criterion


@dataclass(frozen=True)
class JudgePlan:
    """What to judge in one run: ``points`` () for all of the run's, ``records`` None for every complete record."""

    criteria: tuple[Criterion, ...] = CRITERIA
    points: tuple[GridPoint, ...] = ()
    records: int | None = None
    pairwise: bool = False

    def __post_init__(self) -> None:
        if not self.criteria or any(criterion not in CRITERIA for criterion in self.criteria):
            raise ValueError(f"judge criteria must be among {', '.join(CRITERIA)}")
        if self.records is not None and self.records < 1:
            raise ValueError("the number of records to judge must be at least 1")


def record_context(record: Record) -> JudgeContext:
    """What the judge reads about ``record``: its task, the user's profile text and earlier texts."""
    texts = []
    for item in record.profile:
        title, text = item.fields.get("title", ""), item.text
        if title and text.startswith(title):  # the title is shown as the text's heading, not twice
            text = text[len(title) :].lstrip("\n")
        texts.append((title, text))
    return JudgeContext(task=record.input, profile=record.user_profile or "", texts=tuple(texts))


def run_contexts(config: Mapping[str, Any]) -> tuple[list[str], dict[str, JudgeContext]]:
    """The run's record ids in its order and what the judge reads about each, from its records file; DataError
    when the file is not here."""
    spec = spec_from_config(config)
    try:
        records = load_task_records(spec.data, spec.task, limit=spec.limit)
    except OSError as error:
        raise DataError(f"the run's records file {spec.data} cannot be read ({error.strerror or error})") from None
    return [record.id for record in records], {record.id: record_context(record) for record in records}


def chosen_points(cells: Sequence[CellResult], wanted: Sequence[GridPoint]) -> list[GridPoint]:
    """The grid points to judge: ``wanted`` (each one the run must have) or all of the run's, in run order."""
    present = list(dict.fromkeys(cell.point for cell in cells))
    if not wanted:
        return present
    missing = [point.label for point in wanted if point not in present]
    if missing:
        have = ", ".join(point.label for point in present) or "none"
        raise ValueError(f"the run has no cells at {', '.join(missing)}; it has {have}")
    return list(dict.fromkeys(wanted))


def complete_records(
    order: Sequence[str], cells: Sequence[CellResult], points: Sequence[GridPoint], limit: int | None
) -> list[tuple[str, dict[GridPoint, CellResult]]]:
    """The first ``limit`` records of ``order`` with a cell at every point (the first cell of a key), with them."""
    by_key: dict[str, CellResult] = {}
    for cell in cells:
        by_key.setdefault(cell.key, cell)
    found = []
    for record_id in order:
        record_cells = {point: by_key.get(cell_key(record_id, point)) for point in points}
        if all(cell is not None for cell in record_cells.values()):
            found.append((record_id, {point: cell for point, cell in record_cells.items() if cell is not None}))
            if limit is not None and len(found) == limit:
                break
    return found


# --------------------------------------------------------------------------- the work


@dataclass(frozen=True)
class _Item:
    record_id: str
    criterion: Criterion
    cells: tuple[CellResult, ...]  # one (a grade) or two in the order shown (a verdict)

    @property
    def what(self) -> str:
        shown = " vs ".join(cell.point.label for cell in self.cells)
        return f"record {self.record_id}, {shown}, {self.criterion}"


def work_items(
    records: Sequence[tuple[str, Mapping[GridPoint, CellResult]]], plan: JudgePlan, points: Sequence[GridPoint]
) -> list[_Item]:
    """Every grade and verdict the plan asks for, record by record (a record's grades, then its pairs in both
    orders)."""
    items: list[_Item] = []
    for record_id, cells in records:
        for criterion in plan.criteria:
            items.extend(_Item(record_id, criterion, (cells[point],)) for point in points)
        if plan.pairwise:
            for criterion in plan.criteria:
                for a, b in itertools.combinations(points, 2):
                    items.append(_Item(record_id, criterion, (cells[a], cells[b])))
                    items.append(_Item(record_id, criterion, (cells[b], cells[a])))
    return items


@dataclass(frozen=True)
class JudgeProgress:
    """One item asked: ``done`` of ``total`` asked in this run (skipped ones not counted), what and the outcome."""

    done: int
    total: int
    what: str
    outcome: str
    seconds: float  # how long the judge took to answer (this machine's time under its load: a progress figure)


@dataclass(frozen=True)
class JudgeDone:
    """The end of a judging run: how many were asked, how many already settled, and the outcomes by kind."""

    asked: int
    skipped: int
    outcomes: Mapping[str, int] = field(default_factory=dict)  # "scored" / "verdict" / a reason kind -> count
    reread: int = 0  # stored answers without a grade (verdict) that the current readers read one from
    cancelled: bool = False


def _question(item: _Item, context: JudgeContext) -> tuple[str, str, Callable[[str], Reading]]:
    """The prompt for ``item``, the pattern its answer should match, and the reader of that answer."""
    if len(item.cells) == 1:
        return score_prompt(item.criterion, context, item.cells[0].output), SCORE_ANSWER_PATTERN, read_score
    first, second = item.cells
    return pair_prompt(item.criterion, context, first.output, second.output), VERDICT_ANSWER_PATTERN, read_verdict


def _reading(judge: Judge, prompt: str, pattern: str, read: Callable[[str], Reading]) -> tuple[str, Reading]:
    try:
        answer = judge.ask(prompt, pattern)
    except JudgeFailure as failure:
        return "", Reading(None, failure.kind, str(failure))
    return answer, read(answer)


def _stopped(done: int, items: int, pending: int, outcomes: Counter[str], reread: int) -> JudgeDone:
    return JudgeDone(done, items - pending, dict(outcomes), reread, cancelled=True)


def _outcome(reading: Reading) -> str:
    if reading.value is None:
        return f"{reading.reason_kind}: {reading.reason}"
    return f"grade {reading.value:g}" if isinstance(reading.value, float) else f"verdict {reading.value}"


def judge_run_events(
    run_id: int,
    cells: Sequence[CellResult],
    contexts: Mapping[str, JudgeContext],
    order: Sequence[str],
    judge: Judge,
    store: JudgeStore,
    plan: JudgePlan,
    cancel: threading.Event | None = None,
) -> Iterator[JudgeProgress | JudgeDone]:
    """Judge run ``run_id``'s cells as ``plan`` asks (see the module's text). ValueError before anything is asked
    for a plan the run cannot meet (a point it lacks, too many points to pair)."""
    cancel = cancel or threading.Event()
    points = chosen_points(cells, plan.points)
    if plan.pairwise and len(points) > MAX_PAIRWISE_POINTS:
        raise ValueError(f"pairwise judging compares at most {MAX_PAIRWISE_POINTS} grid points; choose some")
    if plan.pairwise and len(points) < 2:
        raise ValueError("pairwise judging needs at least two grid points")
    records = complete_records([r for r in order if r in contexts], cells, points, plan.records)
    identity = judge.identity
    reread = reread_answers(run_id, store, identity.key)
    scored = store.settled_scores(run_id, identity.key)
    compared = store.settled_verdicts(run_id, identity.key)
    items = work_items(records, plan, points)
    pending = [item for item in items if not _settled(item, scored, compared)]
    outcomes: Counter[str] = Counter()
    for done, item in enumerate(pending, start=1):
        if cancel.is_set():
            yield _stopped(done - 1, len(items), len(pending), outcomes, reread)
            return
        started = time.monotonic()
        prompt, pattern, read = _question(item, contexts[item.record_id])
        answer, reading = _reading(judge, prompt, pattern, read)
        if cancel.is_set():  # the answer was cut short by the stop: nothing of it is stored
            yield _stopped(done - 1, len(items), len(pending), outcomes, reread)
            return
        said = Exchange(prompt=prompt, answer=answer, reason_kind=reading.reason_kind, reason=reading.reason)
        if len(item.cells) == 1:
            cell = item.cells[0]
            score = reading.value if isinstance(reading.value, float) else None
            store.save_score(run_id, said.as_score(cell.record_id, cell.point, item.criterion, identity, score))
            outcomes["scored" if score is not None else str(reading.reason_kind)] += 1
        else:
            first, second = item.cells
            winner = cast(Winner, reading.value) if isinstance(reading.value, str) else None
            shown = (first.point, second.point)
            store.save_verdict(run_id, said.as_verdict(item.record_id, shown, item.criterion, identity, winner))
            outcomes["verdict" if winner is not None else str(reading.reason_kind)] += 1
        yield JudgeProgress(done, len(pending), item.what, _outcome(reading), time.monotonic() - started)
    yield JudgeDone(len(pending), len(items) - len(pending), dict(outcomes), reread)


def reread_answers(run_id: int, store: JudgeStore, judge_key: str) -> int:
    """Read this judge's stored answers that gave no grade (no verdict) again with the current readers, storing
    the grade (verdict) of each that now reads as one; how many. No judge is asked."""
    found = 0
    for score in store.scores(run_id):
        if score.judge.key == judge_key and score.score is None and score.answer:
            reading = read_score(score.answer)
            if isinstance(reading.value, float):
                found += store.save_score(run_id, replace(score, score=reading.value, reason_kind=None, reason=None))
    for verdict in store.verdicts(run_id):
        if verdict.judge.key == judge_key and verdict.winner is None and verdict.answer:
            reading = read_verdict(verdict.answer)
            if isinstance(reading.value, str):
                winner = cast(Winner, reading.value)
                found += store.save_verdict(run_id, replace(verdict, winner=winner, reason_kind=None, reason=None))
    return found


def _settled(item: _Item, scored: set[tuple[str, str]], compared: set[tuple[str, str, str]]) -> bool:
    if len(item.cells) == 1:
        return (item.cells[0].key, item.criterion) in scored
    return (item.cells[0].key, item.cells[1].key, item.criterion) in compared
