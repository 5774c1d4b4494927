"""A run before its cells: the config it is stored with (the runtime plan included), opening or resuming it
under its name, and the cells left to run.

Running the same run name again continues where it stopped: finished cells are skipped, and a different
config under the same name is refused, so two runs never mix. A plan's reasons are words about the machine
when the run started, so a resume compares the runtimes, not the reasons (:func:`resumable_config`).

:func:`pending_cells` is the order every executor runs a grid in: record by record, every grid point of a
record before the next record (so a partial run compares methods on the same records), finished cells left out,
a shard's records only.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsteer.data.datasets import Record
from specsteer.edge.lora import LoraSettings
from specsteer.evaluation.grid.spec import EvalSpec
from specsteer.evaluation.record_lora import PER_RECORD_LABEL, settings_document
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU
from specsteer.models.runtime_plan import PLAN_KEY, RuntimePlan, StoredPlan, plan_record
from specsteer.stores.protocols import RunStore
from specsteer.stores.runs import GridPoint, cell_key
from specsteer.util.jsonable import to_jsonable

if TYPE_CHECKING:
    from specsteer.models.pair import LoadedPair


@dataclass(frozen=True)
class GridCell:
    """One generation of the grid: a record at a grid point."""

    record: Record
    point: GridPoint

    @property
    def key(self) -> str:
        return cell_key(self.record.id, self.point)


def check_shard(shard: tuple[int, int]) -> None:
    """ValueError unless ``shard = (i, n)`` names one of n shares (0 <= i < n)."""
    shard_index, shard_count = shard
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard must be i/n with 0 <= i < n (got {shard_index}/{shard_count})")


def pending_cells(
    records: Sequence[Record], points: Sequence[GridPoint], finished: Collection[str], shard: tuple[int, int] = (0, 1)
) -> list[GridCell]:
    """The cells left to run, in run order: each record's grid points before the next record's, the cells whose
    keys are in ``finished`` left out. ``shard = (i, n)``: only the records i, i+n, i+2n, ... (n workers share a
    run without doing a cell twice)."""
    shard_index, shard_count = shard
    return [
        GridCell(record, point)
        for position, record in enumerate(records)
        if position % shard_count == shard_index
        for point in points
        if cell_key(record.id, point) not in finished
    ]


def run_config(
    spec: EvalSpec,
    pairing_id: str,
    runtime: str,
    dtype: str | None,
    cells_total: int,
    lora_label: str = "",
    plan: RuntimePlan | None = None,
) -> dict[str, Any]:
    """The stored config: the runtime as resolved here, so that a resume on another runtime is refused
    (and the adapter's label, so that a resume with another adapter is); ``plan``, the plan loaded (each
    stream's runtime and the reasons), under ``runtime_plan`` (read back by models.runtime_plan.StoredPlan)."""
    config = asdict(spec)
    del config["run_name"]
    if not spec.private_guard:
        del config["private_guard"]  # so that runs stored before the guard existed still resume
    del config["specialist_lora"], config["lora_settings"]
    if lora_label:
        config["specialist_lora"] = lora_label
    if spec.per_record_lora() is not None:  # per-record adapters: a distinct run, with their training settings
        config["specialist_lora"] = PER_RECORD_LABEL
        config["lora_settings"] = settings_document(spec.lora_settings or LoraSettings())
    if (spec.p3_draft_len, spec.p3_tau) == (DEFAULT_DRAFT_LEN, DEFAULT_TAU):
        del config["p3_draft_len"], config["p3_tau"]  # likewise for runs stored before P³
    if spec.acceptance == "fixed":
        del config["acceptance"], config["cda_lambdas"]  # likewise for runs stored before CDA
    elif "cda" not in spec.acceptance.split(","):
        del config["cda_lambdas"]
    config.update(
        data=str(Path(spec.data).resolve()), pairing=pairing_id, runtime=runtime, dtype=dtype, cells_total=cells_total
    )
    if plan is not None:
        config[PLAN_KEY] = plan_record(plan)
    return config


def open_or_resume(store: RunStore, name: str, config: dict[str, Any]) -> int:
    """``store.open_run`` of ``config``, or of the config of the stored run called ``name`` where the two
    differ only in the plan's record (:func:`resumable_config`); the store's ValueError otherwise."""
    try:
        return store.open_run(name, config)
    except ValueError:
        resumed = resumable_config(store, name, config)
        if resumed == config:
            raise
        return store.open_run(name, resumed)


def resumable_config(store: RunStore, name: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as a resume of the run called ``name`` stores it. A plan's reasons are words about this
    machine's measurements when the run started (and runs stored before plans have none), so a resume
    compares the runtimes (``runtime``), not the reasons: the stored run's plan record is kept as it is."""
    existing = next((run for run in store.runs() if run.name == name), None)
    if existing is None:
        return config
    mine = {key: value for key, value in config.items() if key != PLAN_KEY}
    theirs = {key: value for key, value in existing.config.items() if key != PLAN_KEY}
    if _canonical(mine) != _canonical(theirs):
        return config  # another config: the store refuses it, saying so
    if PLAN_KEY not in existing.config:
        return mine
    # The runtime's spelling is the same, but who reads the Specialist's long prompts (the hand-off) follows
    # this machine's calibration: a resume whose reader differs would mix two kinds of cells in one run.
    stored, planned = StoredPlan.read(existing.config).reader, StoredPlan.read(config).reader
    if stored != planned:
        advice = "or resume it with --runtime llama.cpp (llama.cpp alone, as it ran)" if not stored else ""
        raise ValueError(
            f"run {name!r} ran with {_reader_words(stored)}, and this machine's plan now runs "
            f"{_reader_words(planned)} (the calibration changed): its cells would differ in more than the "
            f"method. Run it under a new name{', ' + advice if advice else ''}"
        )
    return {**mine, PLAN_KEY: existing.config[PLAN_KEY]}


def _reader_words(reader: str) -> str:
    return f"the Specialist's long prompts read by {reader} (the hand-off)" if reader else "no prompt hand-off"


def _canonical(config: Mapping[str, Any]) -> Any:
    return json.loads(json.dumps(to_jsonable(dict(config)), sort_keys=True))


def loaded_plan_problem(pair: LoadedPair, runtime: str) -> str | None:
    """Why the pair loaded is not the plan the run stored (auto's split refused at load, each model then on
    one runtime), or None: the run's cells must run on the runtime its config names."""
    if pair.runtime == runtime:
        return None
    reason = pair.runtime_plan.reason if pair.runtime_plan is not None else ""
    return (
        f"the models loaded on {pair.runtime}, not on {runtime} as planned when the run was opened ({reason}); "
        f"run it under a new name, or ask for --runtime {pair.runtime}"
    )
