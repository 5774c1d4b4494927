"""The app's "Teach the Specialist my history": a LoRA adapter trained on a page's history (``specsteer.edge.lora``)
in the background, bounded per caller, and the adapters this service made, by label.

GUI-free. A page starts a training with :meth:`LoraTeacher.teach` and follows its events; the last one names
the adapter's label, which the page sends back as the ``specialist_lora`` setting of its generations. Only
adapters this process trained can be named that way (a label is never a path): :meth:`LoraTeacher.adapter`
refuses any other. Bounds: one training per page session at a time, one on the machine at a time (training
uses every core), and at most ``VisitorLimits.max_lora_steps`` steps where the limits set one (public mode).
Adapters live in a private temporary directory and go with the process; at most MAX_ADAPTERS are kept.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from specsteer.edge.lora import (
    ITEM_INPUTS,
    LoraSettings,
    LoraTrainingError,
    TrainingProgress,
    TrainingStopped,
    train_lora,
)
from specsteer.models.lora import LoraError, SpecialistLora
from specsteer.models.pair import LoadedPair
from specsteer.models.weights import ModelLoadError
from specsteer.stores.generations import NamedHistory
from specsteer.util.background import Background


@dataclass(frozen=True)
class TeachProgress:
    message: str
    fraction: float  # 0..1


@dataclass(frozen=True)
class TeachDone:
    label: str  # what the page sends back as the ``specialist_lora`` setting
    message: str


@dataclass(frozen=True)
class TeachFailed:
    message: str


TeachEvent = TeachProgress | TeachDone | TeachFailed
MAX_ADAPTERS = 32  # adapters kept at once (tens of MB each for a 0.5B Specialist); the oldest goes first
LoadSpecialist = Callable[
    [str, Callable[[str], None]], LoadedPair
]  # (pairing id, progress) -> the pair on transformers


class LoraTeacher:
    """Trains adapters for pages and keeps them by label (see the module doc)."""

    def __init__(self, max_steps: int = 0, settings: LoraSettings | None = None, root: Path | None = None):
        self.max_steps = max_steps  # 0: no cap (local use)
        self.settings = settings or LoraSettings()
        self._root = root
        self._lock = threading.Lock()
        self._machine = threading.Lock()  # one training on the machine at a time
        self._busy: set[str] = set()
        self._adapters: dict[str, SpecialistLora] = {}

    def adapter(self, label: str) -> SpecialistLora:
        """The adapter this service trained under ``label``; LoraError (a ModelLoadError) for any other."""
        with self._lock:
            found = self._adapters.get(label)
        if found is None:
            raise LoraError(
                "The taught Specialist is not known here (the app restarted, or it was never taught): "
                "teach it again, or generate without it."
            )
        return found

    def teach(
        self,
        session: str,
        history: NamedHistory | None,
        task: str,
        pairing_id: str,
        runtime: str,
        load: LoadSpecialist,
        cancel: threading.Event | None = None,
    ) -> Iterator[TeachEvent]:
        """Train on ``history`` for ``pairing_id``'s Specialist; progress events, then TeachDone or TeachFailed."""
        problem = self._problem(history, task, pairing_id, runtime)
        if problem:
            yield TeachFailed(problem)
            return
        assert history is not None
        with self._lock:
            if session in self._busy:
                yield TeachFailed("This page is already teaching the Specialist; wait for it to finish.")
                return
            self._busy.add(session)
        try:
            yield from self._run(history, task, pairing_id, load, cancel or threading.Event())
        finally:
            with self._lock:
                self._busy.discard(session)

    def _problem(self, history: NamedHistory | None, task: str, pairing_id: str, runtime: str) -> str | None:
        if not all(isinstance(value, str) for value in (task, pairing_id, runtime)):  # a public caller sends anything
            return "The task, the pairing and the runtime must each be one of the names the page offers."
        if history is None or not history.history.items:
            return "Choose a sample user or upload a history first: the Specialist learns from its items."
        if task not in ITEM_INPUTS:
            return f"Teaching works for the tasks {', '.join(ITEM_INPUTS)}; choose one of them."
        if runtime == "llama.cpp":
            return (
                "A taught (LoRA) Specialist runs on the transformers runtime only, and so does its training: "
                "choose auto or transformers as the runtime."
            )
        return None

    def _run(
        self, history: NamedHistory, task: str, pairing_id: str, load: LoadSpecialist, cancel: threading.Event
    ) -> Iterator[TeachEvent]:
        settings = self.settings
        if self.max_steps:
            capped = min(settings.max_steps or self.max_steps, self.max_steps)
            settings = replace(settings, max_steps=capped)
        if not self._machine.acquire(blocking=False):
            yield TeachProgress("Another page is teaching its Specialist; this one waits for it…", 0.0)
            while not self._machine.acquire(timeout=1.0):
                if cancel.is_set():
                    yield TeachFailed("Stopped before it started; nothing was trained.")
                    return
        try:
            work: Background[TeachProgress, SpecialistLora] = Background(
                lambda emit, stop: self._train(history, task, pairing_id, load, settings, emit, stop, cancel),
                name="specsteer-lora-teach",
                merge=lambda _older, newer: newer,
            )
            yield from work.items()
            lora = work.result()
        except TrainingStopped:
            yield TeachFailed("Stopped; nothing was kept.")
            return
        except (LoraTrainingError, ModelLoadError, ValueError, OSError) as error:
            yield TeachFailed(f"The Specialist could not be taught: {error}")
            return
        finally:
            self._machine.release()
        with self._lock:
            self._adapters[lora.label] = lora
            while len(self._adapters) > MAX_ADAPTERS:  # the oldest page's adapter goes (its files too)
                oldest = self._adapters.pop(next(iter(self._adapters)))
                shutil.rmtree(oldest.path, ignore_errors=True)
        details = lora.details()
        yield TeachDone(
            lora.label,
            f"The Specialist learned {details['items_used']} items of {history.name} in {details['steps']} steps "
            f"({details['training_seconds']:.0f} s; loss {details['losses'][0]:.2f} → {details['losses'][-1]:.2f}). "
            "SpecSteer, SLM+ and the other methods that run the Specialist on this page now use it, on the "
            "transformers runtime (auto picks it for a taught Specialist); the cloud keeps the base model and "
            "never receives the adapter.",
        )

    def _train(
        self,
        history: NamedHistory,
        task: str,
        pairing_id: str,
        load: LoadSpecialist,
        settings: LoraSettings,
        emit: Callable[[TeachProgress], None],
        stop: threading.Event,
        cancel: threading.Event,
    ) -> SpecialistLora:
        pair = load(pairing_id, lambda line: emit(TeachProgress(f"Loading the Specialist: {line}", 0.0)))
        stopping = _Either(stop, cancel)

        def report(step: TrainingProgress) -> None:
            emit(
                TeachProgress(
                    f"Teaching the Specialist: step {step.step} of {step.total_steps} (epoch {step.epoch}), "
                    f"loss {step.loss:.3f}, {step.elapsed_s:.0f} s",
                    step.step / step.total_steps,
                )
            )

        out = self._directory() / secrets.token_hex(8)
        try:
            return train_lora(pair, task, history.history.items, out, settings, progress=report, cancel=stopping).lora
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise

    def _directory(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="specsteer-lora-"))
            return self._root


class _Either(threading.Event):
    """Set when either of two events is (what train_lora polls between steps)."""

    def __init__(self, first: threading.Event, second: threading.Event) -> None:
        super().__init__()
        self._events = (first, second)

    def is_set(self) -> bool:
        return any(event.is_set() for event in self._events)
