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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from specsteer.data.datasets import Record
from specsteer.edge.lora import LoraSettings, TrainingStopped
from specsteer.engine.generate import DecodeConfig, Prepared, collect, generate
from specsteer.evaluation.grid.events import CellFailure, EvalResult, GridProgress, failures_text
from specsteer.evaluation.grid.plan import GridCell, loaded_plan_problem, open_or_resume, run_config
from specsteer.evaluation.grid.records import load_evaluation_records
from specsteer.evaluation.grid.spec import EvalSpec, decode_config
from specsteer.evaluation.grid.summary import summarize
from specsteer.evaluation.metrics import rouge_scores
from specsteer.evaluation.record_lora import RecordAdapter, RecordAdapters, with_training
from specsteer.models.runtime_plan import RuntimePlan
from specsteer.runtimes.base import dtype_label
from specsteer.stores.protocols import RunStore
from specsteer.stores.runs import CellResult, RunStatus

if TYPE_CHECKING:
    from specsteer.models.loading import LoadedPair
    from specsteer.models.registry import Pairing

WARMUP_TOKENS = 8


def run_grid_events(
    spec: EvalSpec,
    store: RunStore,
    pair: LoadedPair | None = None,
    cancel: threading.Event | None = None,
    shard: tuple[int, int] = (0, 1),
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
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
    from specsteer.models.loading import load_pair, lora_runtime_choice, runtime_plan, with_specialist_lora
    from specsteer.models.lora import read_lora
    from specsteer.models.registry import resolve_pairing
    from specsteer.runtimes.hardware import resolve_dtype

    spec.validate()
    shard_index, shard_count = shard
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard must be i/n with 0 <= i < n (got {shard_index}/{shard_count})")
    cancel = cancel or threading.Event()
    if pair is not None:  # refused before a run is opened in the store (a pair loaded here: once loaded)
        _check_methods_run_on(pair, spec)
    records, prepared = load_evaluation_records(spec)
    per_record = spec.per_record_lora()
    if per_record is not None and per_record.exists() and not per_record.is_dir():
        raise ValueError(f"{per_record} is a file; per-record LoRA adapters need a directory")
    lora = read_lora(spec.specialist_lora) if spec.specialist_lora and per_record is None else None
    if lora is not None or per_record is not None:
        lora_runtime_choice(spec.runtime)  # a refusal on llama.cpp, before a run is opened
    if lora is not None and pair is not None:
        pair = with_specialist_lora(pair, lora)
    if per_record is not None and pair is not None:
        pair = _per_record_base(pair)
    pairing: Pairing | None = None
    dtype: str | None
    plan: RuntimePlan | None
    if pair is not None:
        pairing_id, runtime, dtype, plan = pair.pairing_id, pair.runtime, pair.precision, pair.runtime_plan
    else:
        pairing = resolve_pairing(spec.pairing)
        pairing_id = pairing.id
        # The plan load_pair follows (each stream's runtime, and why), stored as the run's; an adapter (one for
        # the run or one per record) runs on transformers only.
        if lora or per_record:
            plan = RuntimePlan.uniform(lora_runtime_choice(spec.runtime))
        else:
            plan = runtime_plan(pairing, spec.runtime)
        runtime = plan.runtime
        dtype = dtype_label(resolve_dtype(spec.dtype)) if runtime == "transformers" else None
    cells = [GridCell(record, point) for record in records for point in spec.points()]
    name = spec.run_name or f"{spec.task}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    label = lora.label if lora is not None else (pair.lora.label if pair is not None and pair.lora else "")
    config = run_config(spec, pairing_id, runtime, dtype, len(cells), label, plan)
    run_id = open_or_resume(store, name, config)
    finished = store.finished_keys(run_id)
    mine = {record.id for position, record in enumerate(records) if position % shard_count == shard_index}
    pending = [cell for cell in cells if cell.key not in finished and cell.record.id in mine]
    store.set_status(run_id, "running")
    computed, failures = 0, list[CellFailure]()
    try:
        if pending:
            yield GridProgress(len(cells) - len(pending), len(cells), "loading")
            if pair is None:
                # per-record adapters are merged later, into a base Specialist that must be on transformers already
                asked = runtime if per_record is not None else spec.runtime
                pair = load_pair(pairing or pairing_id, dtype=spec.dtype, runtime=asked, specialist_lora=lora)
                problem = loaded_plan_problem(pair, runtime)
                if problem:
                    raise ValueError(problem)
            _check_methods_run_on(pair, spec)
            adapters = None
            if per_record is not None:
                pair = _per_record_base(pair)
                base_name = pairing.specialist.name if pairing is not None else ""
                adapters = RecordAdapters(per_record, spec.lora_settings or LoraSettings(), pair, base_name)
            computed, failures = yield from _run_cells(
                pair, pending, prepared, spec, len(cells), cancel, run_id, store, turn, adapters
            )
    except BaseException as error:
        # Exceptions are failures; KeyboardInterrupt, or a consumer closing the generator, a stop.
        status: RunStatus = "failed" if isinstance(error, Exception) else "cancelled"
        store.set_status(run_id, status, error=type(error).__name__ + (f": {error}" if str(error) else ""))
        raise
    stored = store.cells(run_id)
    if computed + len(failures) < len(pending):
        status = "cancelled"
    elif failures:
        status = "failed"  # resumable: the same run name runs the failed cells again
    else:
        status = "finished" if len(stored) == len(cells) else "running"  # other shards still at work
    store.set_status(run_id, status, error=failures_text(failures) if failures else None)
    yield GridProgress(len(stored), len(cells), status)
    prompts = {record_id: item.prompts for record_id, item in prepared.items()}
    facts = {record.id: record.private_facts for record in records}
    summary = summarize(stored, spec.task, prompts, facts)
    yield EvalResult(run_id, name, status, computed, stored, summary, failures)


def grid_method_problem(pair: LoadedPair, spec: EvalSpec) -> str | None:
    """Why the grid holds a method the pair cannot run (a cross-tokenizer pair runs only some), or None."""
    from specsteer.engine.generate import cross_tokenizer_problem

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


def _per_record_base(pair: LoadedPair) -> LoadedPair:
    """The pair per-record adapters are trained on and merged into: its base Specialist on transformers."""
    from specsteer.models.lora import LORA_RUNTIME_MESSAGE, LoraError
    from specsteer.runtimes.base import TransformersModel

    base = pair.cloud_side() if pair.lora is not None else pair
    if not isinstance(base.specialist, TransformersModel):
        raise LoraError(LORA_RUNTIME_MESSAGE)
    return base


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


def _run_cells(
    pair: LoadedPair,
    pending: list[GridCell],
    prepared: Mapping[str, Prepared],
    spec: EvalSpec,
    total: int,
    cancel: threading.Event,
    run_id: int,
    store: RunStore,
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    adapters: RecordAdapters | None = None,
) -> Generator[GridProgress, None, tuple[int, list[CellFailure]]]:
    """Generates and stores the pending cells in order; returns how many it stored and the cells that
    failed. A cell's failure (the Cloud went away, a model pass failed) is kept in the run's error text
    at once and the run goes on with the next cell. ``adapters``: before a record's first pending cell, its
    adapter is trained (or read back) and the record's cells run with it; a failed training fails the
    record's cells, a stopped one stops the run."""
    done = total - len(pending)
    computed = 0
    failures: list[CellFailure] = []
    if pending:
        yield GridProgress(done, total, "warmup")
        warmup = DecodeConfig(method="specsteer", draft_len=spec.draft_len, max_new_tokens=WARMUP_TOKENS)
        with turn():
            collect(generate(pair, prepared[pending[0].record.id], warmup, cancel))
    adapted: dict[str, tuple[LoadedPair, RecordAdapter] | str] = {}  # the current record's pair, or why not
    for cell in pending:
        if cancel.is_set():
            break
        cell_pair, adapter = pair, None
        if adapters is not None:
            found = adapted.get(cell.record.id)  # (rebinding lets the previous record's merged copy go)
            if found is None:
                try:
                    found = yield from _record_entry(adapters, adapted, cell.record, cancel, done + computed, total)
                except TrainingStopped:
                    break
            if isinstance(found, str):
                failures.append(CellFailure(cell.record.id, cell.point, found))
                store.set_status(run_id, "running", error=failures_text(failures))
                yield GridProgress(done + computed, total, "cell-failed", cell.point, cell.record.id, found)
                continue
            cell_pair, adapter = found
        yield GridProgress(done + computed, total, "running", cell.point, cell.record.id)
        try:
            with turn():
                _, result = collect(
                    generate(cell_pair, prepared[cell.record.id], decode_config(cell.point, spec), cancel)
                )
        except Exception as error:  # noqa: BLE001 -- one cell's failure, whatever it is, must not end the run
            failures.append(CellFailure(cell.record.id, cell.point, f"{type(error).__name__}: {error}"))
            store.set_status(run_id, "running", error=failures_text(failures))
            yield GridProgress(done + computed, total, "cell-failed", cell.point, cell.record.id, failures[-1].message)
            continue
        if result.stats.stop_reason == "cancelled":
            break  # a cut-short generation is not a result
        store.save_cell(
            run_id,
            CellResult(
                cell.record.id,
                cell.point,
                result.text,
                rouge_scores(result.text, cell.record.output),
                with_training(result.stats, adapter),
            ),
        )
        computed += 1
    return computed, failures


def _record_entry(
    adapters: RecordAdapters,
    adapted: dict[str, tuple[LoadedPair, RecordAdapter] | str],
    record: Record,
    cancel: threading.Event,
    done: int,
    total: int,
) -> Generator[GridProgress, None, tuple[LoadedPair, RecordAdapter] | str]:
    """The record's pair with its adapter merged in (trained or read back), or why there is none, kept in
    ``adapted`` in place of the previous record's (whose merged copy is let go before the training)."""
    _release(adapters, adapted)
    entry: tuple[LoadedPair, RecordAdapter] | str
    try:
        adapter = yield from _record_adapter(adapters, record, cancel, done, total)
        entry = (adapters.pair_for(adapter), adapter)
    except TrainingStopped:
        raise
    except Exception as error:  # noqa: BLE001 -- the record's cells fail; the run goes on
        entry = f"its LoRA adapter: {type(error).__name__}: {error}"
    adapted[record.id] = entry
    return entry


def _release(adapters: RecordAdapters, adapted: dict[str, tuple[LoadedPair, RecordAdapter] | str]) -> None:
    for entry in adapted.values():
        if not isinstance(entry, str):
            adapters.release(entry[0])
    adapted.clear()


def _record_adapter(
    adapters: RecordAdapters, record: Record, cancel: threading.Event, done: int, total: int
) -> Generator[GridProgress, None, RecordAdapter]:
    """The record's adapter (:mod:`specsteer.evaluation.record_lora`), its training steps as progress."""
    yield GridProgress(done, total, "training", record_id=record.id, detail="the record's adapter…")
    steps = adapters.events(record, cancel)
    try:
        while True:
            try:
                step = next(steps)
            except StopIteration as finished:
                adapter: RecordAdapter = finished.value
                break
            detail = (
                f"step {step.step}/{step.total_steps} (epoch {step.epoch}) loss {step.loss:.4f} {step.elapsed_s:.1f} s"
            )
            yield GridProgress(done, total, "training", record_id=record.id, detail=detail)
    finally:
        steps.close()  # a consumer that stops listening stops the training
    how = "read back" if adapter.reused else "trained"
    detail = f"{how}: {adapter.lora.label}, {adapter.steps} steps, {adapter.seconds:.1f} s of training"
    yield GridProgress(done, total, "training", record_id=record.id, detail=detail)
    return adapter
