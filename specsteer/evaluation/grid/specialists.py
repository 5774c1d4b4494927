"""Which pair serves each record of a grid, decided in one place.

A grid's Edge runs the pairing's own Specialist, one LoRA adapter for every record (``specialist_lora = DIR``),
or an adapter per record (``specialist_lora = "per-record:DIR"``, ``specsteer.evaluation.record_lora``).
:meth:`SpecialistChoice.of` reads that from the spec once (refusing llama.cpp, which serves no adapter, before a
run is opened); the choice gives the run's stored adapter label and runtime plan, loads or adapts the pair, and
hands the runner a :class:`RecordPairs`: asked for a record, it answers the :class:`RecordPair` that serves the
record's cells, or why there is none. With per-record adapters the record's adapter is trained (or read back)
before its first cell, each training step reported; the previous record's merged copy is let go first. The
runner's loop is the same for all three.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from specsteer.data.datasets import Record
from specsteer.edge.lora import LoraSettings, TrainingStopped
from specsteer.evaluation.grid.spec import EvalSpec
from specsteer.evaluation.record_lora import RecordAdapter, RecordAdapters
from specsteer.models.loading import load_planned, with_specialist_lora
from specsteer.models.lora import LORA_RUNTIME_MESSAGE, LoraError, SpecialistLora, read_lora
from specsteer.models.pair import LoadedPair
from specsteer.models.planning import lora_plan, runtime_plan
from specsteer.models.runtime_plan import RuntimePlan
from specsteer.runtimes.base import TransformersModel

if TYPE_CHECKING:
    from specsteer.models.registry import Pairing

Note = TypeVar("Note")


@dataclass(frozen=True)
class RecordPair:
    """The pair that serves a record's cells, and the record's own adapter (per-record adapters: its training
    seconds and steps go into each of the record's cells' stats)."""

    pair: LoadedPair
    adapter: RecordAdapter | None = None


class RecordPairs(Protocol):
    """The pair for each record of a run, asked record by record in run order."""

    @property
    def base(self) -> LoadedPair:
        """The pair without any record's adapter (what the warm-up runs on)."""
        ...

    def serve(
        self, record: Record, cancel: threading.Event, note: Callable[[str], Note]
    ) -> Generator[Note, None, RecordPair | str]:
        """The record's pair, or why it has none (its cells fail; the run goes on), yielding ``note`` of each
        step of the work it takes. TrainingStopped when ``cancel`` stops that work."""
        ...


@dataclass(frozen=True)
class SharedPair:
    """One pair for every record: the pairing's Specialist, or one adapter merged into it."""

    base: LoadedPair

    def serve(
        self, record: Record, cancel: threading.Event, note: Callable[[str], Note]
    ) -> Generator[Note, None, RecordPair | str]:
        return RecordPair(self.base)
        yield  # nothing to report: a generator, as PerRecordPairs.serve is


@dataclass
class PerRecordPairs:
    """A pair per record: the base pair with the record's adapter merged into the Edge's Specialist, kept for
    the record's cells (run record by record) and let go before the next record's training."""

    adapters: RecordAdapters
    _current: tuple[str, RecordPair | str] | None = field(default=None, init=False, repr=False)

    @property
    def base(self) -> LoadedPair:
        return self.adapters.pair

    def serve(
        self, record: Record, cancel: threading.Event, note: Callable[[str], Note]
    ) -> Generator[Note, None, RecordPair | str]:
        if self._current is not None and self._current[0] == record.id:
            return self._current[1]
        self._release()
        entry: RecordPair | str
        try:
            adapter = yield from _record_adapter(self.adapters, record, cancel, note)
            entry = RecordPair(self.adapters.pair_for(adapter), adapter)
        except TrainingStopped:
            raise
        except Exception as error:  # noqa: BLE001 -- the record's cells fail; the run goes on
            entry = f"its LoRA adapter: {type(error).__name__}: {error}"
        self._current = (record.id, entry)
        return entry

    def _release(self) -> None:
        if self._current is not None and isinstance(self._current[1], RecordPair):
            self.adapters.release(self._current[1].pair)
        self._current = None  # (rebinding lets the previous record's merged copy go)


def _record_adapter(
    adapters: RecordAdapters, record: Record, cancel: threading.Event, note: Callable[[str], Note]
) -> Generator[Note, None, RecordAdapter]:
    """The record's adapter (:mod:`specsteer.evaluation.record_lora`), its training steps as notes."""
    yield note("the record's adapter…")
    steps = adapters.events(record, cancel)
    try:
        while True:
            try:
                step = next(steps)
            except StopIteration as finished:
                adapter: RecordAdapter = finished.value
                break
            yield note(
                f"step {step.step}/{step.total_steps} (epoch {step.epoch}) loss {step.loss:.4f} {step.elapsed_s:.1f} s"
            )
    finally:
        steps.close()  # a consumer that stops listening stops the training
    how = "read back" if adapter.reused else "trained"
    yield note(f"{how}: {adapter.lora.label}, {adapter.steps} steps, {adapter.seconds:.1f} s of training")
    return adapter


def per_record_base(pair: LoadedPair) -> LoadedPair:
    """The pair per-record adapters are trained on and merged into: its base Specialist on transformers."""
    base = pair.cloud_side() if pair.lora is not None else pair
    if not isinstance(base.specialist, TransformersModel):
        raise LoraError(LORA_RUNTIME_MESSAGE)
    return base


@dataclass(frozen=True)
class SpecialistChoice:
    """The grid's Specialist: the pairing's own (neither field), one adapter for every record (``lora``), or an
    adapter per record trained into ``per_record`` with ``settings``."""

    lora: SpecialistLora | None = None
    per_record: Path | None = None
    settings: LoraSettings = field(default_factory=LoraSettings)

    @classmethod
    def of(cls, spec: EvalSpec) -> SpecialistChoice:
        """The spec's choice; LoraError for a runtime that serves no adapter, before a run is opened."""
        per_record = spec.per_record_lora()
        if per_record is not None and per_record.exists() and not per_record.is_dir():
            raise ValueError(f"{per_record} is a file; per-record LoRA adapters need a directory")
        lora = read_lora(spec.specialist_lora) if spec.specialist_lora and per_record is None else None
        if lora is not None or per_record is not None:
            lora_plan(spec.runtime)  # a refusal on llama.cpp, before a run is opened
        return cls(lora, per_record, spec.lora_settings or LoraSettings())

    @property
    def adapted(self) -> bool:
        return self.lora is not None or self.per_record is not None

    def label(self, pair: LoadedPair | None) -> str:
        """The adapter's label the run is stored with (one adapter's; per-record runs say so in the config)."""
        if self.lora is not None:
            return self.lora.label
        return pair.lora.label if pair is not None and pair.lora else ""

    def runtime_plan(self, pairing: Pairing, requested: str) -> RuntimePlan:
        """The plan :meth:`load` follows (each stream's runtime, and why): an adapter runs on transformers only."""
        return runtime_plan(pairing, requested, lora=self.adapted)

    def adapt(self, pair: LoadedPair) -> LoadedPair:
        """A given pair as the choice runs it: with the adapter merged in, or as the per-record adapters' base."""
        if self.per_record is not None:
            return per_record_base(pair)
        if self.lora is not None:
            return with_specialist_lora(pair, self.lora)
        return pair

    def load(self, pairing: Pairing, plan: RuntimePlan, dtype: str | None) -> LoadedPair:
        """The pair ``plan`` (:meth:`runtime_plan`) loads, as the choice runs it. Per-record adapters are merged
        later, into the base Specialist this plan puts on transformers."""
        pair = load_planned(pairing, plan, dtype=dtype, specialist_lora=self.lora)
        return per_record_base(pair) if self.per_record is not None else pair

    def record_pairs(self, pair: LoadedPair, base_name: str = "") -> RecordPairs:
        """Who serves each record, over the pair :meth:`adapt` or :meth:`load` gave."""
        if self.per_record is None:
            return SharedPair(pair)
        return PerRecordPairs(RecordAdapters(self.per_record, self.settings, pair, base_name))
