"""The user's evaluation runs and the example runs that ship with the app, as one run store.

The composition root (app.py) hands the service a :class:`RunsWithExamples`: the user's own store, where every
new run and cell goes, and a read-only store of example runs (``assets/example_runs.db``, which
``benchmarks/build_example_runs.py`` builds). Both are listed, the user's first; an example run is marked
(``StoredRun.example``) and numbered from :data:`EXAMPLE_IDS_FROM` up, so that one id never names two runs
and the pickers, the service and its checks take an example's id as they take any other. Nothing is ever
written to the examples: a write aimed at one is refused before it reaches the store. :class:`JudgesWithExamples`
reads the judge grades of those runs by the same ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from specsteer.stores.judges import JudgeScore, PairVerdict
from specsteer.stores.protocols import JudgeStore, RunStore
from specsteer.stores.runs import CellResult, RunStatus, StoredRun

# Example runs' ids start here: far beyond what a user's database numbers its runs (one a grid), below the
# largest integer a page's JavaScript holds exactly (2**53), which the run picker's values pass through.
EXAMPLE_IDS_FROM = 10**12
# The example the Dashboard opens on: the CoGenesis re-test (120 records; SLM+, LLM and SpecSteer), the run the
# research logs' headline comparison cites, read in seconds (three points, two paired differences).
DEFAULT_EXAMPLE = "cogenesis-retest"


class ExampleRunsAreReadOnly(ValueError):
    """A write aimed at one of the example runs."""


class RunsWithExamples:
    """A ``RunStore``: ``own`` (reads and writes) with the runs of ``examples`` listed after them (reads only)."""

    def __init__(self, own: RunStore, examples: RunStore) -> None:
        self.own = own
        self.examples = examples

    @staticmethod
    def is_example(run_id: int) -> bool:
        return run_id >= EXAMPLE_IDS_FROM

    @staticmethod
    def _shown(run: StoredRun) -> StoredRun:
        return replace(run, id=EXAMPLE_IDS_FROM + run.id, example=True)

    def _own_id(self, run_id: int, doing: str) -> int:
        if self.is_example(run_id):
            raise ExampleRunsAreReadOnly(
                f"Run #{run_id} is an example that ships with the app: it is read-only, so it cannot be {doing}. "
                "Run the same grid under a name of your own."
            )
        return run_id

    # ----------------------------------------------------------------------- writes: the user's store only

    def open_run(self, name: str, config: Mapping[str, Any]) -> int:
        return self.own.open_run(name, config)

    def finished_keys(self, run_id: int) -> set[str]:
        return self.own.finished_keys(self._own_id(run_id, "resumed"))

    def save_cell(self, run_id: int, cell: CellResult) -> bool:
        return self.own.save_cell(self._own_id(run_id, "added to"), cell)

    def set_status(self, run_id: int, status: RunStatus, error: str | None = None) -> None:
        self.own.set_status(self._own_id(run_id, "changed"), status, error)

    # ----------------------------------------------------------------------- reads: both

    def runs(self) -> list[StoredRun]:
        return [*self.own.runs(), *(self._shown(run) for run in self.examples.runs())]

    def run(self, run_id: int) -> StoredRun | None:
        if not self.is_example(run_id):
            return self.own.run(run_id)
        run = self.examples.run(run_id - EXAMPLE_IDS_FROM)
        return self._shown(run) if run is not None else None

    def cells(self, run_id: int) -> list[CellResult]:
        if not self.is_example(run_id):
            return self.own.cells(run_id)
        return self.examples.cells(run_id - EXAMPLE_IDS_FROM)


class JudgesWithExamples:
    """The judge grades and verdicts of :class:`RunsWithExamples`' runs, by the same ids: an example's from the
    examples' store (none, where that read-only file has no judge tables), every other run's from ``own``."""

    def __init__(self, own: JudgeStore, examples: JudgeStore) -> None:
        self.own = own
        self.examples = examples

    def _source(self, run_id: int) -> tuple[JudgeStore, int]:
        if RunsWithExamples.is_example(run_id):
            return self.examples, run_id - EXAMPLE_IDS_FROM
        return self.own, run_id

    def scores(self, run_id: int) -> list[JudgeScore]:
        store, stored_id = self._source(run_id)
        return store.scores(stored_id)

    def verdicts(self, run_id: int) -> list[PairVerdict]:
        store, stored_id = self._source(run_id)
        return store.verdicts(stored_id)
