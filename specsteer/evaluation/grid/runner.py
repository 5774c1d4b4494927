"""Running a grid: every cell generated in order and kept in the run's store the moment it finishes.

One *cell* is one generation: (record, method, alpha, beta). Its output, ROUGE scores and
generation statistics are kept in the run's store (a ``specsteer.stores.protocols.RunStore``; the app and
the command line use ``storage.SqlRunStore``) the moment it finishes, so a run that crashes or is
cancelled loses at most the generation in flight, and running the same run name again continues
where it stopped. A cell whose timing was disturbed (the process stood still mid-generation:
``specsteer.method.timing``) counts as not finished: running the run again re-times it, the new cell
taking its place. :func:`run_grid_events` reports progress as a generator of
:class:`GridProgress` events ending with the :class:`EvalResult`; :func:`run_grid` just runs it.
Cells run record by record, every method on a record before the next record, so a partial run compares
methods on the same records.

Before the first timed cell one short SpecSteer generation (``WARMUP_TOKENS``, not stored) runs
all three streams once, so one-off start-up costs are not charged to the first method.

The steps, each usable by another executor (``ray_executor`` runs the cells on a Ray cluster with them):
:func:`open_grid_run` (the spec checked, the records prepared, the Specialist chosen, the run opened or resumed
and its pending cells listed, ``plan.pending_cells``), :func:`warm_up` on the pair, then for each cell the pair
serving its record (``specialists.RecordPairs``) and :func:`attempt_cell` (one generation, scored, or the cell's
failure; it stores nothing), :func:`keep_failures` as cells fail, then :func:`finish_grid_run` (the run's final
status and summary); :func:`status_kept_on_error` around them. The store is written here only: the run's status,
and each cell as it comes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from specsteer.data.crossing import history_texts
from specsteer.data.crossing_replay import history_crossing
from specsteer.data.datasets import Record
from specsteer.edge.lora import TrainingStopped
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Prepared
from specsteer.evaluation.grid.events import CellFailure, EvalResult, GridProgress, failures_text
from specsteer.evaluation.grid.plan import (
    GridCell,
    check_shard,
    loaded_plan_problem,
    open_or_resume,
    pending_cells,
    run_config,
)
from specsteer.evaluation.grid.records import load_evaluation_records
from specsteer.evaluation.grid.spec import EvalSpec, decode_config
from specsteer.evaluation.grid.specialists import RecordPair, RecordPairs, SpecialistChoice
from specsteer.evaluation.grid.summary import summarize
from specsteer.evaluation.metrics import rouge_scores
from specsteer.evaluation.record_lora import with_training
from specsteer.models.runtime_plan import RuntimePlan
from specsteer.runtimes.base import dtype_label
from specsteer.stores.protocols import RunStore
from specsteer.stores.runs import CellResult, RunStatus

if TYPE_CHECKING:
    from specsteer.models.pair import LoadedPair
    from specsteer.models.registry import Pairing

WARMUP_TOKENS = 8

Turn = Callable[[], AbstractContextManager[object]]


@dataclass(frozen=True)
class RunTarget:
    """What the run's cells run on, as its config stores it: the pairing, each stream's runtime and the
    precision; ``pairing`` is resolved here only when no loaded pair was given."""

    pairing_id: str
    runtime: str
    dtype: str | None
    plan: RuntimePlan | None
    pairing: Pairing | None = None

    @classmethod
    def of(cls, spec: EvalSpec, pair: LoadedPair | None, choice: SpecialistChoice) -> RunTarget:
        from specsteer.models.registry import resolve_pairing
        from specsteer.runtimes.hardware import resolve_dtype

        if pair is not None:
            return cls(pair.pairing_id, pair.runtime, pair.precision, pair.runtime_plan)
        pairing = resolve_pairing(spec.pairing)
        # The plan the pair is loaded by (each stream's runtime, and why), stored as the run's.
        plan = choice.runtime_plan(pairing, spec.runtime)
        dtype = dtype_label(resolve_dtype(spec.dtype)) if plan.runtime == "transformers" else None
        return cls(pairing.id, plan.runtime, dtype, plan, pairing)

    @property
    def specialist_name(self) -> str:
        return self.pairing.specialist.name if self.pairing is not None else ""


@dataclass(frozen=True)
class GridRun:
    """A run opened (or resumed) in the store, with what its cells need: the records' prepared prompts, the
    Specialist choice, what to load, and the cells left to run (``plan.pending_cells``)."""

    spec: EvalSpec
    run_id: int
    name: str
    records: list[Record]
    prepared: dict[str, Prepared]
    choice: SpecialistChoice
    target: RunTarget
    total: int  # every cell of the run, all shards together
    pending: list[GridCell]

    def load(self) -> LoadedPair:
        """The pair the run's config names, refused when it did not load as planned."""
        assert self.target.pairing is not None and self.target.plan is not None  # planned here, not given a pair
        pair = self.choice.load(self.target.pairing, self.target.plan, self.spec.dtype)
        problem = loaded_plan_problem(pair, self.target.runtime)
        if problem:
            raise ValueError(problem)
        return pair


def open_grid_run(
    spec: EvalSpec, store: RunStore, pair: LoadedPair | None = None, shard: tuple[int, int] = (0, 1)
) -> tuple[GridRun, LoadedPair | None]:
    """The run of ``spec`` opened (or resumed by name) in ``store``, marked running, with ``pair`` as the run
    uses it (None: to be loaded, :meth:`GridRun.load`). Refusals (the spec, the shard, the records, the adapter,
    a method the given pair cannot run, another config under the run's name) come before anything is stored."""
    spec.validate()
    check_shard(shard)
    if pair is not None:  # refused before a run is opened in the store (a pair loaded here: once loaded)
        _check_methods_run_on(pair, spec)
    records, prepared = load_evaluation_records(spec)
    choice = SpecialistChoice.of(spec)
    if pair is not None:
        pair = choice.adapt(pair)
    target = RunTarget.of(spec, pair, choice)
    points = spec.points()
    total = len(records) * len(points)
    name = spec.run_name or f"{spec.task}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    config = run_config(spec, target.pairing_id, target.runtime, target.dtype, total, choice.label(pair), target.plan)
    run_id = open_or_resume(store, name, config)
    pending = pending_cells(records, points, store.finished_keys(run_id), shard)
    store.set_status(run_id, "running")
    return GridRun(spec, run_id, name, records, prepared, choice, target, total, pending), pair


def grid_method_problem(pair: LoadedPair, spec: EvalSpec) -> str | None:
    """Why the grid holds a method the pair cannot run (a cross-tokenizer pair runs only some), or None."""
    from specsteer.engine.decode_config import cross_tokenizer_problem

    for point in spec.points():
        problem = cross_tokenizer_problem(pair, decode_config(point, spec))
        if problem:
            return problem
    return None


def _check_methods_run_on(pair: LoadedPair, spec: EvalSpec) -> None:
    """Refuse, before any cell runs, a grid with a method the pair cannot run."""
    problem = grid_method_problem(pair, spec)
    if problem:
        raise ValueError(problem)


def attempt_cell(
    serving: RecordPair | str, cell: GridCell, prepared: Prepared, spec: EvalSpec, cancel: threading.Event
) -> CellResult | CellFailure | None:
    """:func:`run_cell` on the pair serving the record, or the cell's failure: the record has no pair
    (``serving`` says why), or its generation raised. None when ``cancel`` cut it short."""
    if isinstance(serving, str):
        return CellFailure(cell.record.id, cell.point, serving)
    try:
        return run_cell(serving, cell, prepared, spec, cancel)
    except Exception as error:  # noqa: BLE001 -- one cell's failure, whatever it is, must not end the run
        return CellFailure(cell.record.id, cell.point, f"{type(error).__name__}: {error}")


def keep_failures(store: RunStore, run_id: int, failures: Sequence[CellFailure]) -> None:
    """The run's failed cells so far in its error text, at once (the run goes on)."""
    store.set_status(run_id, "running", error=failures_text(failures))


@contextmanager
def status_kept_on_error(store: RunStore, run_id: int) -> Iterator[None]:
    """An exception leaving the block marks the run failed; KeyboardInterrupt, or a consumer closing the
    generator the block is in, marks it cancelled. Either way the same run name resumes it."""
    try:
        yield
    except BaseException as error:
        status: RunStatus = "failed" if isinstance(error, Exception) else "cancelled"
        store.set_status(run_id, status, error=type(error).__name__ + (f": {error}" if str(error) else ""))
        raise


def run_cell(
    serving: RecordPair, cell: GridCell, prepared: Prepared, spec: EvalSpec, cancel: threading.Event
) -> CellResult | None:
    """One cell: its generation on the record's pair, scored against the record's reference, with the record's
    adapter training in its stats and the history-crossing audit (``specsteer.data.crossing``). None when ``cancel`` cut it short (not a result). Stores nothing."""
    config = decode_config(cell.point, spec)
    tokens, result = collect(generate(serving.pair, prepared, config, cancel))
    if result.stats.stop_reason == "cancelled":
        return None
    rouge = rouge_scores(result.text, cell.record.output)
    history = history_texts(cell.record.profile, cell.record.user_profile)
    crossed = history_crossing(
        result, tokens, serving.pair.tokenizer, history, prepared.prompts.plain, config.private_guard
    )
    stats = with_training(result.stats, serving.adapter)
    return CellResult(cell.record.id, cell.point, result.text, rouge, stats, crossed)


def finish_grid_run(run: GridRun, store: RunStore, computed: int, failures: list[CellFailure]) -> EvalResult:
    """The run's final status stored (finished, or running while other shards are at work; failed with failed
    cells, cancelled when cells were left), and its result with the summary of every stored cell."""
    stored = store.cells(run.run_id)
    status = _final_status(len(run.pending), computed, len(failures), len(stored), run.total)
    store.set_status(run.run_id, status, error=failures_text(failures) if failures else None)
    prompts = {record_id: item.prompts for record_id, item in run.prepared.items()}
    facts = {record.id: record.private_facts for record in run.records}
    summary = summarize(stored, run.spec.task, prompts, facts)
    return EvalResult(run.run_id, run.name, status, computed, stored, summary, failures)


def _final_status(pending: int, computed: int, failed: int, stored: int, total: int) -> RunStatus:
    if computed + failed < pending:
        return "cancelled"
    if failed:
        return "failed"  # resumable: the same run name runs the failed cells again
    return "finished" if stored == total else "running"  # other shards still at work


def run_grid_events(
    spec: EvalSpec,
    store: RunStore,
    pair: LoadedPair | None = None,
    cancel: threading.Event | None = None,
    shard: tuple[int, int] = (0, 1),
    turn: Turn = nullcontext,
) -> Iterator[GridProgress | EvalResult]:
    """Run (or resume) the grid of ``spec``, keeping every finished cell in ``store`` at once.

    Yields a :class:`GridProgress` at each stage and before each cell, and ends with the
    :class:`EvalResult`, the way ``engine.generate`` yields tokens and ends with ``Finished``.
    ``pair``: a loaded pair to use (tests, the UI); by default ``spec.pairing`` is loaded, and only
    if some cell is left to run. ``cancel`` stops the run between cells and the generation in flight
    within a token; the interrupted cell is not stored, and the run is marked cancelled. An exception
    (raised here, or thrown in by the consumer) marks it failed; a consumer that closes the generator
    early leaves it cancelled, so either way the same run name resumes it.
    ``shard = (i, n)``: this worker runs only the records i, i+n, i+2n, ... so that n workers (other
    processes, other machines on one database) share a run without doing a cell twice. The run is
    finished when every cell is stored; a worker done with its share while others are not yet done
    leaves it running.
    ``turn``: a fresh context manager held around each generation (``turns.ModelTurns.batch``: the app
    gives the models to a waiting interactive generation between cells).
    """
    cancel = cancel or threading.Event()
    run, pair = open_grid_run(spec, store, pair, shard)
    computed, failures = 0, list[CellFailure]()
    with status_kept_on_error(store, run.run_id):
        if run.pending:
            yield GridProgress(run.total - len(run.pending), run.total, "loading")
            pair = pair if pair is not None else run.load()
            _check_methods_run_on(pair, spec)
            pairs = run.choice.record_pairs(pair, run.target.specialist_name)
            computed, failures = yield from _run_cells(run, pairs, store, cancel, turn)
    result = finish_grid_run(run, store, computed, failures)
    yield GridProgress(len(result.cells), run.total, result.status)
    yield result


def _run_cells(
    run: GridRun, pairs: RecordPairs, store: RunStore, cancel: threading.Event, turn: Turn
) -> Generator[GridProgress, None, tuple[int, list[CellFailure]]]:
    """Generates and stores the pending cells in order; returns how many it stored and the cells that
    failed. A cell's failure (the Cloud went away, a model pass failed, its record has no pair) is kept in
    the run's error text at once and the run goes on with the next cell; a stopped training stops the run."""
    done = run.total - len(run.pending)
    computed = 0
    failures: list[CellFailure] = []
    if run.pending:
        yield GridProgress(done, run.total, "warmup")
        with turn():
            warm_up(pairs.base, run.prepared[run.pending[0].record.id], run.spec, cancel)
    for cell in run.pending:
        if cancel.is_set():
            break
        try:
            outcome = yield from _cell_outcome(run, pairs, cell, cancel, turn, done + computed)
        except TrainingStopped:
            break
        if outcome is None:
            break  # a cut-short generation is not a result
        if isinstance(outcome, CellFailure):
            failures.append(outcome)
            keep_failures(store, run.run_id, failures)
            yield GridProgress(done + computed, run.total, "cell-failed", cell.point, cell.record.id, outcome.message)
            continue
        store.save_cell(run.run_id, outcome)
        computed += 1
    return computed, failures


def _cell_outcome(
    run: GridRun, pairs: RecordPairs, cell: GridCell, cancel: threading.Event, turn: Turn, done: int
) -> Generator[GridProgress, None, CellResult | CellFailure | None]:
    """The cell's result, its failure, or None when cancelled mid-generation; the record's pair first."""

    def training(detail: str) -> GridProgress:
        return GridProgress(done, run.total, "training", record_id=cell.record.id, detail=detail)

    serving = yield from pairs.serve(cell.record, cancel, training)
    if isinstance(serving, str):
        return attempt_cell(serving, cell, run.prepared[cell.record.id], run.spec, cancel)
    yield GridProgress(done, run.total, "running", cell.point, cell.record.id)
    with turn():
        return attempt_cell(serving, cell, run.prepared[cell.record.id], run.spec, cancel)


def warm_up(pair: LoadedPair, prepared: Prepared, spec: EvalSpec, cancel: threading.Event) -> None:
    """One short SpecSteer generation (``WARMUP_TOKENS``, not stored): one-off start-up costs off the first cell."""
    warmup = DecodeConfig(method="specsteer", draft_len=spec.draft_len, max_new_tokens=WARMUP_TOKENS)
    collect(generate(pair, prepared, warmup, cancel))


def run_grid(
    spec: EvalSpec,
    store: RunStore,
    pair: LoadedPair | None = None,
    cancel: threading.Event | None = None,
    shard: tuple[int, int] = (0, 1),
) -> EvalResult:
    """:func:`run_grid_events` to its end, for callers that need no progress: the result."""
    for event in run_grid_events(spec, store, pair=pair, cancel=cancel, shard=shard):
        if isinstance(event, EvalResult):
            return event
    raise RuntimeError("the grid ended without a result")
