"""A grid's cells on a Ray cluster: one actor per worker loads the pair once and runs the cells it is given.

The run is the sequential runner's (:mod:`~specsteer.evaluation.grid.runner`): the driver opens or resumes it
(``open_grid_run``: the same pending cells, in the same order), each worker warms its pair up (``warm_up``) and
runs a cell as ``attempt_cell`` does, and the driver stores each result the moment it arrives and finishes the
run (``finish_grid_run``). Only the driver writes to the store, so the workers need no database: SQLite serves a
cluster on one machine, and PostgreSQL (``DATABASE_URL``) one whose driver runs elsewhere.

Scheduling: each worker has at most one cell in flight, and a worker takes a record's cells one after another
before its next record (a per-record adapter, or a cache of the record's prompt, serves them all); an idle
worker takes the next record in run order. Progress is reported as the sequential runner reports it, a
``running`` event as a cell is handed to a worker.

Failures: a worker process that dies mid-cell (killed, out of memory, its machine gone) is restarted by Ray
(``WORKER_RESTARTS``), which loads the pair again and runs the cell again (``CELL_RETRIES``); its one result is
stored once. A worker lost for good fails its cell (kept in the run's error text; a resume runs it again) and
its record's other cells go to the remaining workers. ``cancel`` stops every worker's generation in flight
within a token (a concurrency group of its own lets the stop through while a cell runs); those cells are not
stored and the run is marked cancelled, resumable by name like any other.

``ray`` is imported here only (an import-linter contract), and only when a grid runs on it: it is an optional
extra (requirements-ray.txt), not in the Space's requirements.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from specsteer.edge.lora import TrainingStopped
from specsteer.engine.request import Prepared
from specsteer.evaluation.grid.events import CellFailure, EvalResult, GridProgress
from specsteer.evaluation.grid.plan import GridCell
from specsteer.evaluation.grid.runner import (
    GridRun,
    attempt_cell,
    finish_grid_run,
    grid_method_problem,
    keep_failures,
    open_grid_run,
    status_kept_on_error,
    warm_up,
)
from specsteer.evaluation.grid.spec import EvalSpec
from specsteer.evaluation.grid.specialists import RecordPairs
from specsteer.stores.protocols import RunStore
from specsteer.stores.runs import CellResult

if TYPE_CHECKING:
    from specsteer.models.pair import LoadedPair

LOCAL = "auto"  # --ray auto: ray.init()'s own search (RAY_ADDRESS, a `ray start` on this machine), else a new local one
WORKER_RESTARTS = 3  # a worker process that dies is started again this many times, then is lost for good
CELL_RETRIES = 3  # a cell whose worker died mid-cell runs again on the restarted worker this many times
_POLL_S = 0.25  # how often the driver looks at ``cancel`` while cells run
_STOP_GROUP = "stop"  # the workers' concurrency group for a stop, beside the cell running in the default one

Outcome = CellResult | CellFailure | None
Step = TypeVar("Step")


@dataclass(frozen=True)
class RayCluster:
    """Where a grid's cells run: ``address`` a Ray cluster's address (``ray.init``'s: ``HOST:PORT``, or
    ``ray://HOST:PORT`` for Ray Client) or :data:`LOCAL`; ``workers``, how many workers (each loads its own pair;
    None: one per node of the cluster); ``worker_cpus``, the CPUs each reserves and computes on (None: the
    smallest node's CPUs shared among the workers a node holds)."""

    address: str = LOCAL
    workers: int | None = None
    worker_cpus: int | None = None

    def check(self) -> None:
        if not self.address.strip():
            raise ValueError("--ray needs a cluster's address, or 'auto' for a local cluster")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--ray-workers must be at least 1 (got {self.workers})")
        if self.worker_cpus is not None and self.worker_cpus < 1:
            raise ValueError(f"--ray-worker-cpus must be at least 1 (got {self.worker_cpus})")


def ray_status() -> tuple[bool, str]:
    """Whether Ray can be imported here, and if not why (it is an optional extra)."""
    try:
        import ray  # noqa: F401 -- only its presence is asked
    except ImportError as error:
        return False, f"Ray is not installed ({error}); install the extra: pip install -r requirements-ray.txt"
    return True, ""


@contextmanager
def connected(cluster: RayCluster) -> Iterator[None]:
    """This process connected to ``cluster`` for the block: joined (or, for :data:`LOCAL` with no cluster to
    find, started) here and let go after; a connection made already by the caller is used as it is and kept.
    Enter it before installing signal handlers: ``ray.init`` installs its own for SIGTERM."""
    cluster.check()
    available, reason = ray_status()
    if not available:
        raise ValueError(reason)
    import ray

    if ray.is_initialized():
        yield
        return
    ray.init(address=None if cluster.address == LOCAL else cluster.address, logging_level=logging.WARNING)
    try:
        yield
    finally:
        ray.shutdown()


class GridWorker:
    """What a Ray actor holds: the run's pair, loaded on its first call (and again after a restart), warmed
    up, and the pairs serving each record; :meth:`run` runs one cell as the sequential runner does. A plain
    class: Ray makes it an actor (:func:`run_grid_on_ray`), and it runs without Ray as well."""

    def __init__(self, run: GridRun, threads: int | None = None) -> None:
        self._run = run  # the run without its records and prompts: each cell brings its own
        self._threads = threads
        self._pairs: RecordPairs | None = None
        self._stop = threading.Event()

    def open(self, prepared: Prepared) -> None:
        """The pair loaded and warmed up on ``prepared`` (a record's prompts), before the first cell."""
        self._serving(prepared)

    def run(self, cell: GridCell, prepared: Prepared) -> Outcome:
        """One cell: its result, its failure, or None when stopped (:meth:`stop`) before or during it."""
        if self._stop.is_set():
            return None
        pairs = self._serving(prepared)
        try:
            serving = _last(pairs.serve(cell.record, self._stop, str))  # training steps: not reported from here
        except TrainingStopped:
            return None
        return attempt_cell(serving, cell, prepared, self._run.spec, self._stop)

    def stop(self) -> None:
        """Cut the cell in flight short within a token, and refuse the cells after it."""
        self._stop.set()

    def _serving(self, prepared: Prepared) -> RecordPairs:
        if self._pairs is None:
            if self._threads is not None:
                import torch

                torch.set_num_threads(self._threads)
            pair = _worker_pair(self._run)
            warm_up(pair, prepared, self._run.spec, self._stop)
            self._pairs = self._run.choice.record_pairs(pair, self._run.target.specialist_name)
        return self._pairs


def _worker_pair(run: GridRun) -> LoadedPair:
    """The pair a worker runs: the run's pairing loaded as planned, or a test pairing's pair built here (the
    driver was given it, as the command line gives it to the sequential runner); refused when the grid holds a
    method it cannot run."""
    from specsteer.models.tiny import shared_test_pair

    given = shared_test_pair(run.spec.pairing)
    pair = run.choice.adapt(given) if given is not None else run.load()
    problem = grid_method_problem(pair, run.spec)
    if problem:
        raise ValueError(problem)
    return pair


def _last(steps: Generator[Step, None, Any]) -> Any:
    """The value a generator returns, its steps let by."""
    while True:
        try:
            next(steps)
        except StopIteration as finished:
            return finished.value


def run_grid_on_ray(
    spec: EvalSpec,
    store: RunStore,
    cluster: RayCluster,
    pair: LoadedPair | None = None,
    cancel: threading.Event | None = None,
    shard: tuple[int, int] = (0, 1),
) -> Iterator[GridProgress | EvalResult]:
    """``runner.run_grid_events`` with the cells run by workers on ``cluster``: the same events, the same
    stored cells, the same result. ``pair``: given only for a test pairing (its workers build it themselves);
    a real pairing is loaded by each worker. Connects to the cluster unless the caller has (:func:`connected`)."""
    if pair is not None and spec.pairing != pair.pairing_id:
        raise ValueError("the pair given must be the spec's pairing")
    cancel = cancel or threading.Event()
    with connected(cluster):
        run, _ = open_grid_run(spec, store, pair, shard)
        computed, failures = 0, list[CellFailure]()
        with status_kept_on_error(store, run.run_id):
            if run.pending:
                yield GridProgress(run.total - len(run.pending), run.total, "loading")
                workers = _Workers.start(run, cluster)
                try:
                    yield GridProgress(run.total - len(run.pending), run.total, "warmup")
                    workers.open(run.prepared[run.pending[0].record.id])
                    computed, failures = yield from _dispatch(run, workers, store, cancel)
                finally:
                    workers.close()
        result = finish_grid_run(run, store, computed, failures)
    yield GridProgress(len(result.cells), run.total, result.status)
    yield result


class _Workers:
    """The run's actors on the cluster: started, opened, handed cells, stopped, let go."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors
        self.lost: set[int] = set()

    @classmethod
    def start(cls, run: GridRun, cluster: RayCluster) -> _Workers:
        import ray

        count, cpus = _worker_shape(cluster, ray.nodes())
        remote: Any = ray.remote  # (its stubs leave out the class options, concurrency_groups among them)
        actor = remote(concurrency_groups={_STOP_GROUP: 1})(GridWorker).options(
            num_cpus=cpus, max_restarts=WORKER_RESTARTS, max_task_retries=CELL_RETRIES, scheduling_strategy="SPREAD"
        )
        light = replace(run, records=[], prepared={}, pending=[])  # each cell brings its own record and prompts
        return cls([actor.remote(light, cpus) for _ in range(count)])

    def open(self, prepared: Prepared) -> None:
        import ray

        ray.get([actor.open.remote(prepared) for actor in self.actors])

    def submit(self, index: int, cell: GridCell, prepared: Any) -> Any:
        return self.actors[index].run.remote(cell, prepared)

    def idle(self, busy: set[int]) -> list[int]:
        return [index for index in range(len(self.actors)) if index not in busy and index not in self.lost]

    def outcome(self, reference: Any, index: int, cell: GridCell) -> Outcome:
        """The cell's outcome; a failure when its worker is lost for good (then no more cells go to it)."""
        import ray

        try:
            outcome: Outcome = ray.get(reference)
        except ray.exceptions.RayActorError as error:
            self.lost.add(index)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            return CellFailure(cell.record.id, cell.point, f"its Ray worker was lost: {reason}")
        return outcome

    def stop(self, busy: set[int]) -> None:
        for index in busy:
            self.actors[index].stop.options(concurrency_group=_STOP_GROUP).remote()

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)


def _worker_shape(cluster: RayCluster, nodes: list[dict[str, Any]]) -> tuple[int, int]:
    """How many workers, and the CPUs of each: refused when the cluster cannot hold them (they would wait
    for ever)."""
    alive = [node for node in nodes if node.get("Alive")]
    node_cpus = [int(node.get("Resources", {}).get("CPU", 0)) for node in alive]
    if not node_cpus or max(node_cpus) < 1:
        raise ValueError("the Ray cluster has no node with a CPU")
    count = cluster.workers or len(alive)
    per_node = -(-count // len(alive))
    cpus = cluster.worker_cpus or max(1, min(node_cpus) // per_node)
    if sum(node // cpus for node in node_cpus) < count:
        raise ValueError(
            f"the Ray cluster cannot hold {count} worker(s) of {cpus} CPU(s) each (its nodes have "
            f"{', '.join(map(str, node_cpus))} CPUs); ask for fewer with --ray-workers or --ray-worker-cpus"
        )
    return count, cpus


def _dispatch(
    run: GridRun, workers: _Workers, store: RunStore, cancel: threading.Event
) -> Generator[GridProgress, None, tuple[int, list[CellFailure]]]:
    """Hands the pending cells to the workers, a record's cells to one worker in turn, one cell in flight per
    worker, and stores each result as it arrives; returns how many it stored and the cells that failed."""
    import ray

    records = deque(_by_record(run.pending))
    owned: dict[int, deque[GridCell]] = {}  # a worker's record: its cells not yet handed out
    prompts: dict[str, Any] = {}  # each record's prepared prompts, in the object store once
    in_flight: dict[Any, tuple[int, GridCell]] = {}
    done, computed, failures = run.total - len(run.pending), 0, list[CellFailure]()
    stopped = False
    while True:
        if not cancel.is_set():
            for index in workers.idle({index for index, _ in in_flight.values()}):
                cell = _next_cell(index, owned, records)
                if cell is None:
                    continue
                record_id = cell.record.id
                if record_id not in prompts:
                    prompts[record_id] = ray.put(run.prepared[record_id])
                in_flight[workers.submit(index, cell, prompts[record_id])] = (index, cell)
                yield GridProgress(done + computed, run.total, "running", cell.point, record_id)
        if not in_flight:
            if not cancel.is_set() and (records or any(owned.values())):
                raise RuntimeError("every Ray worker was lost; run again with the same run name to resume")
            break
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=_POLL_S)
        if cancel.is_set() and not stopped:
            workers.stop({index for index, _ in in_flight.values()})
            stopped = True
        for reference in ready:
            index, cell = in_flight.pop(reference)
            outcome = workers.outcome(reference, index, cell)
            if index in workers.lost and index in owned:
                records.appendleft(list(owned.pop(index)))  # the record's other cells, to a worker still there
            if outcome is None:
                continue  # cut short by the stop: not a result
            if isinstance(outcome, CellFailure):
                failures.append(outcome)
                keep_failures(store, run.run_id, failures)
                yield GridProgress(
                    done + computed, run.total, "cell-failed", cell.point, cell.record.id, outcome.message
                )
                continue
            store.save_cell(run.run_id, outcome)
            computed += 1
    return computed, failures


def _by_record(cells: list[GridCell]) -> list[list[GridCell]]:
    """The cells in run order, grouped by record (``pending_cells`` lists a record's cells together)."""
    groups: list[list[GridCell]] = []
    for cell in cells:
        if groups and groups[-1][0].record.id == cell.record.id:
            groups[-1].append(cell)
        else:
            groups.append([cell])
    return groups


def _next_cell(index: int, owned: dict[int, deque[GridCell]], records: deque[list[GridCell]]) -> GridCell | None:
    """The worker's next cell: its record's next one, else the first cell of the next record in run order."""
    if not owned.get(index):
        if not records:
            owned.pop(index, None)
            return None
        owned[index] = deque(records.popleft())
    return owned[index].popleft()
