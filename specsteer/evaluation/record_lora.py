"""Per-record LoRA Specialists for the evaluation grid (paper Appendix A.2 on CoGenesis: one adapter per user).

``evaluate --specialist-lora per-record:DIR``: before a record's first cell, the grid gets that record's
adapter from :func:`record_adapter_events` -- trained on the record's own texts (its profile items, each the
target of its own prompt, ``specsteer.edge.lora``; the record's task and reference left out), or read back
from ``DIR/record-<id>-<hash>/`` when an earlier attempt wrote a complete one with the same training settings,
items and base model. The record's cells then run with it merged into the Edge's Specialist only (the Cloud's
generic copy stays the base model, ``loading.with_specialist_lora``), and each cell's stats carry the
training seconds and steps (:func:`with_training`), so a summary can report training time per user.

An adapter is written whole or not at all (``train_lora`` renames a finished temporary directory into
place), and :func:`reusable_adapter` checks its weights' sha256, so a half-written or changed adapter is
never used: it is trained again. Training runs in a worker thread so that its steps can be reported as
events; a set ``cancel`` (or the consumer closing the events) stops it after the current step, and nothing
is written then.
"""

from __future__ import annotations

import hashlib
import json
import queue
import re
import threading
from collections.abc import Generator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specsteer.data.datasets import Record
from specsteer.edge.lora import LoraSettings, TrainingProgress, TrainingResult, train_lora, training_items
from specsteer.method.events import GenerationStats
from specsteer.models.loading import release_specialist_lora, with_specialist_lora
from specsteer.models.lora import LORA_RUNTIME_MESSAGE, MANIFEST, LoraError, SpecialistLora, base_fingerprint, read_lora
from specsteer.models.pair import LoadedPair
from specsteer.runtimes.base import TransformersModel

PER_RECORD_PREFIX = "per-record:"
PER_RECORD_LABEL = "per-record"  # what a run's stored config says in place of one adapter's label
_QUEUE_POLL_S = 0.2


def per_record_root(specialist_lora: str) -> Path | None:
    """The adapters' directory of ``per-record:DIR``, or None for one adapter (or none). ValueError for
    ``per-record:`` without a directory."""
    if not specialist_lora.startswith(PER_RECORD_PREFIX):
        return None
    directory = specialist_lora.removeprefix(PER_RECORD_PREFIX).strip()
    if not directory:
        raise ValueError("--specialist-lora per-record:DIR needs the directory that keeps the per-record adapters")
    return Path(directory).expanduser()


def settings_document(settings: LoraSettings) -> dict[str, Any]:
    """The settings as an adapter's manifest and a run's config hold them (JSON values)."""
    return {**asdict(settings), "target_modules": list(settings.target_modules)}


def settings_from_document(document: Mapping[str, Any]) -> LoraSettings:
    values = dict(document)
    values["target_modules"] = tuple(values.get("target_modules", LoraSettings().target_modules))
    return LoraSettings(**values)


def record_exclusions(record: Record) -> tuple[str, ...]:
    """What training on a record's texts leaves out: the task it asks and the reference it is scored on."""
    return (record.input, record.output)


def record_training_items(record: Record) -> list[tuple[str, str]]:
    """The (prompt, target) pairs a record's adapter learns: each of its profile texts (CoGenesis: the
    user's 4 texts) as the target of its own prompt, never the record's task or reference."""
    return training_items(record.task, record.profile, exclude=record_exclusions(record))


def items_digest(taught: list[tuple[str, str]]) -> str:
    """A hash of the training pairs: an adapter is reused only for the texts it was trained on."""
    return hashlib.sha256(json.dumps(taught, ensure_ascii=False).encode("utf-8")).hexdigest()


def adapter_path(root: Path, record_id: str) -> Path:
    """``root/record-<id, filesystem-safe>-<hash of the id>``: one directory per record, never shared."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", record_id)[:48]
    return root / f"record-{safe}-{hashlib.sha256(record_id.encode('utf-8')).hexdigest()[:10]}"


@dataclass(frozen=True)
class RecordAdapter:
    """A record's adapter and what its training cost (as its manifest says, also when read back)."""

    record_id: str
    lora: SpecialistLora
    seconds: float
    steps: int
    reused: bool  # read back from an earlier attempt, not trained by this one


def reusable_adapter(
    path: Path, record: Record, settings: LoraSettings, fingerprint: str, digest: str
) -> SpecialistLora | None:
    """The complete adapter at ``path`` if it was trained for this record's texts with ``settings`` on the base
    whose fingerprint is ``fingerprint``; None otherwise (absent, partial, changed, or trained otherwise)."""
    if not (path / MANIFEST).is_file():
        return None
    try:
        lora = read_lora(path)
    except LoraError:
        return None
    details = lora.details()
    same = (
        details.get("settings") == settings_document(settings)
        and details.get("items_sha256") == digest
        and details.get("record_id") == record.id
        and lora.task == record.task
        and lora.base_fingerprint == fingerprint
    )
    return lora if same else None


def _from_manifest(record_id: str, lora: SpecialistLora, reused: bool) -> RecordAdapter:
    details = lora.details()
    return RecordAdapter(record_id, lora, float(details["training_seconds"]), int(details["steps"]), reused)


@dataclass
class RecordAdapters:
    """The per-record adapters of one run: where they live, how they are trained, on which base pair."""

    root: Path
    settings: LoraSettings
    pair: LoadedPair  # the base pair (its Specialist on transformers)
    base_name: str = ""
    _fingerprint: str = field(default="", init=False, repr=False)

    @property
    def fingerprint(self) -> str:
        if not self._fingerprint:
            specialist = self.pair.specialist
            if not isinstance(specialist, TransformersModel):
                raise LoraError(LORA_RUNTIME_MESSAGE)
            self._fingerprint = base_fingerprint(specialist.model)
        return self._fingerprint

    def events(self, record: Record, cancel: threading.Event) -> Generator[TrainingProgress, None, RecordAdapter]:
        """The record's adapter: read back when complete and trained the same way, else trained now,
        yielding each training step. TrainingStopped when ``cancel`` is set during training."""
        return record_adapter_events(self, record, cancel)

    def pair_for(self, adapter: RecordAdapter) -> LoadedPair:
        """The base pair with the adapter merged into the Edge's Specialist (the Cloud's copy stays the base)."""
        return with_specialist_lora(self.pair, adapter.lora)

    def release(self, adapted: LoadedPair) -> None:
        """Let a record's merged Specialist go (before the next record's training and merge)."""
        release_specialist_lora(adapted)


def record_adapter_events(
    adapters: RecordAdapters, record: Record, cancel: threading.Event
) -> Generator[TrainingProgress, None, RecordAdapter]:
    """See :meth:`RecordAdapters.events`."""
    path = adapter_path(adapters.root, record.id)
    digest = items_digest(record_training_items(record))
    found = reusable_adapter(path, record, adapters.settings, adapters.fingerprint, digest)
    if found is not None:
        return _from_manifest(record.id, found, reused=True)
    adapters.root.mkdir(parents=True, exist_ok=True)
    updates: queue.Queue[TrainingProgress | None] = queue.Queue()
    stop = threading.Event()
    outcome: dict[str, TrainingResult | BaseException] = {}

    def work() -> None:
        try:
            outcome["result"] = train_lora(
                adapters.pair,
                record.task,
                record.profile,
                path,
                adapters.settings,
                exclude=record_exclusions(record),
                base_name=adapters.base_name,
                progress=updates.put,
                cancel=stop,
                notes={"record_id": record.id, "items_sha256": digest},
            )
        except BaseException as error:  # noqa: BLE001 -- handed to the caller's thread below
            outcome["error"] = error
        finally:
            updates.put(None)

    worker = threading.Thread(target=work, name=f"lora-record-{record.id}", daemon=True)
    worker.start()
    try:
        while True:
            if cancel.is_set():
                stop.set()
            try:
                update = updates.get(timeout=_QUEUE_POLL_S)
            except queue.Empty:
                continue
            if update is None:
                break
            yield update
    finally:
        if worker.is_alive():  # the consumer stopped listening: stop training, write nothing
            stop.set()
        worker.join()
    error = outcome.get("error")
    if isinstance(error, BaseException):
        raise error
    result = outcome["result"]
    assert isinstance(result, TrainingResult)
    return _from_manifest(record.id, result.lora, reused=False)


def with_training(stats: GenerationStats, adapter: RecordAdapter | None) -> GenerationStats:
    """A cell's stats with its record's adapter training seconds and steps (unchanged without one)."""
    if adapter is None:
        return stats
    return replace(stats, lora_training_seconds=adapter.seconds, lora_training_steps=adapter.steps)
