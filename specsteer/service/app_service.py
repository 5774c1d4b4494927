"""The application: a generation, a comparison or an evaluation run, from settings to saved rows.

Every front end (the Gradio tabs, a test, a future HTTP API) runs the same workflow here and only
renders what it reports. A workflow is a generator of typed events, the way ``engine.generate``
yields tokens:

    generate: Started, Loading*, Generating, Token*, then Done or Failed
    compare:  ComparisonStarted, Loading*, then per output Generating, Token*, OutputDone;
              then ComparisonSaved, Stopped or Failed
    evaluate: Status, Loading*, GridProgress*, then EvalResult or Failed

``Failed`` carries a message for a person (a sentence naming what to change); nothing raises out of a
workflow for bad input, a model that cannot load, a Cloud that cannot be reached or a model that
fails. The steps are always: validate the settings → prepare the request (retrieval and prompts, on
the device) → reach the Cloud when the settings name a remote one (it must answer and serve the
chosen pairing before anything loads) → load the pair (with progress; only the Specialist for a
remote Cloud) → generate → audit what crossed the link → save through the :class:`GenerationStore`.
A remote Cloud that fails midway ends a generation with ``Failed(message, partial)``: what was
emitted before, audited and saved like a stopped generation.

Two queries serve the settings and the dashboard: :meth:`AppService.check_cloud` (what a Cloud
address serves) and :meth:`AppService.deployment` (a stored run projected onto a deployment profile).
Everything else a front end reads or writes goes through the service too, as typed values: saved
comparisons (reopened in a fresh blind order), annotators' judgements, their summary and export,
stored evaluation runs, and the records files a user uploads for an evaluation.

This module imports neither a GUI nor a database: the store, the run store, the pair catalog and a
remote Cloud's secret are handed in by the composition root (``app.py``). See docs/ARCHITECTURE.md,
"The application service".
"""

from __future__ import annotations

import hashlib
import logging
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from specsteer.cloud.client import RemoteCloud
from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD
from specsteer.data.crossing import HistoryCrossing, history_crossing, history_texts
from specsteer.data.datasets import DataError, load_records
from specsteer.data.facts import FactExposure, method_exposure, split_private_facts
from specsteer.data.history import MAX_UPLOAD_BYTES, HistoryError, parse_history
from specsteer.data.json_limits import RECORDS_LIMITS, JsonLimits
from specsteer.data.privacy import UplinkAudit, audit_uplink
from specsteer.data.tasks import TASKS, PromptPair, PromptStyle, as_prompt_style, render_item
from specsteer.engine.generate import Prepared, Request, chat_ids, cross_tokenizer_problem, generate, prepare
from specsteer.engine.settings import GenerationSettings, SettingsError, sentence
from specsteer.evaluation.deployment import DEFAULT_RTTS_MS, DeploymentProfile, deployment_rows, get_profile
from specsteer.evaluation.grid import EvalResult, EvalSpec, GridProgress, grid_method_problem, run_grid_events
from specsteer.evaluation.run_store import CellResult, RunStore, StoredRun
from specsteer.method.catalog import METHOD_INFO, METHODS, PRIVATE_METHODS, method_label
from specsteer.method.events import Finished, LinkMessage, TokenEvent
from specsteer.models.loading import LoadedPair, load_pair, lora_runtime_choice, runtime_plan, with_specialist_lora
from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS, Pairing, model_status, pairing_status
from specsteer.models.weights import ModelLoadError
from specsteer.protocol.exposure import ADMIN_TOKEN_ENV, Exposure, cloud_address
from specsteer.protocol.link import CloudEndpoint, CloudError, CloudRefused
from specsteer.protocol.wire import CloudInfo
from specsteer.runtimes.placement import Placement
from specsteer.service.limits import VisitorLimits, limits_for, stored_id, text_problem
from specsteer.service.lora_teaching import LoraTeacher, TeachEvent
from specsteer.service.stores import (
    AnnotationSummary,
    ExportFormat,
    GenerationStore,
    NamedHistory,
    NewAnnotation,
    NewComparison,
    NewGeneration,
    StoredComparison,
    StoredOutput,
)
from specsteer.service.warmup import Phase, WarmUp, WarmUpState
from specsteer.util.background import Background
from specsteer.util.turns import ModelTurns

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- values the events carry


@dataclass(frozen=True)
class ScoredItem:
    """A retrieved history item as the Specialist's prompt shows it, with its BM25 score."""

    text: str
    score: float


@dataclass(frozen=True)
class RetrievalPreview:
    """What the Specialist will see for an input: the items BM25 picks and both prompts."""

    task: str
    total: int  # items in the history
    retrieval_k: int
    items: tuple[ScoredItem, ...]
    prompts: PromptPair | None  # None while there is no input


@dataclass(frozen=True)
class PrivacyReport:
    """The audit of every uplink message, the messages themselves, and how to show their ids as text."""

    audit: UplinkAudit
    transcript: tuple[LinkMessage, ...]
    token_text: Callable[[Sequence[int]], str]
    # Which of the persona's private facts reached the cloud (specsteer.data.facts); None without a profile.
    facts: FactExposure | None = None
    # The phrases of the history that crossed, on any history (specsteer.data.crossing), and the settings to
    # generate again with the private-span guard on (the panel's one-click offer): None where none crossed
    # or the guard is on already or does not cover the method.
    crossing: HistoryCrossing | None = None
    guard_offer: GenerationSettings | None = None


@dataclass(frozen=True)
class GenerationResult:
    finished: Finished
    tokens: tuple[TokenEvent, ...]  # every token shown, rejected drafts included
    privacy: PrivacyReport | None  # None for a device-only method: nothing crossed the link
    saved_id: int | None  # None when saving failed (``save_error`` says why)
    save_error: str | None = None

    @property
    def stopped(self) -> bool:
        return self.finished.stats.stop_reason == "cancelled"


@dataclass(frozen=True)
class SavedComparison:
    comparison_id: int
    methods: tuple[str, ...]  # in the order shown: slot 0 is label A
    texts: tuple[str, ...]
    generation_ids: tuple[int, ...]
    blind: bool


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Status:
    """A step begins that takes a moment (reading records)."""

    message: str


@dataclass(frozen=True)
class Loading:
    """The pair is loading (first use): one line of the loader's progress."""

    message: str


@dataclass(frozen=True)
class Started:
    """Settings and request are valid; the preview is what this generation's Specialist sees."""

    settings: GenerationSettings
    preview: RetrievalPreview


@dataclass(frozen=True)
class ComparisonStarted:
    settings: GenerationSettings
    methods: tuple[str, ...]  # in the order they will be shown (shuffled when blind)
    blind: bool


@dataclass(frozen=True)
class Generating:
    """The pair is loaded and ``method`` starts (output ``slot`` of ``of`` in a comparison)."""

    method: str
    runtime: str
    precision: str
    slot: int = 0
    of: int = 1


@dataclass(frozen=True)
class Token:
    """A settled token (kept, saved, audited)."""

    event: TokenEvent
    slot: int = 0


@dataclass(frozen=True)
class Pending:
    """A draft on screen before its verdict (``event.kind`` "pending"): the Token events of the same
    round and position settle it; one still pending when the output ends was never sent."""

    event: TokenEvent
    slot: int = 0


@dataclass(frozen=True)
class OutputDone:
    slot: int
    method: str
    finished: Finished


@dataclass(frozen=True)
class Done:
    result: GenerationResult


@dataclass(frozen=True)
class ComparisonSaved:
    comparison: SavedComparison


@dataclass(frozen=True)
class Stopped:
    """A comparison was stopped before its last output; nothing of it was saved."""


@dataclass(frozen=True)
class Failed:
    message: str  # one or more sentences for a person
    # A generation whose Cloud failed midway: what it had emitted, audited and saved (stop reason
    # "cloud-error"), like a stopped one. None for every other failure.
    partial: GenerationResult | None = None


@dataclass(frozen=True)
class CloudCheck:
    """What "Test connection" found at a Cloud address: what it serves, or why it cannot be used."""

    address: str  # as the settings keep it (settings.cloud_address); "" in process
    ok: bool
    message: str  # a sentence or two for a person
    info: CloudInfo | None = None  # None when nothing (readable) answered


@dataclass(frozen=True)
class DeploymentReport:
    """One stored run's generations projected onto a deployment profile across round-trip times.

    ``rows`` are ``deployment.projection_rows``: one per (method, α, β) group and RTT, with the projected
    and the measured tokens/s and the projected speedup over ``llm``. Cells stored before generations
    kept their traces cannot be projected: ``traced`` says how many of ``cells`` could.
    """

    run_id: int
    profile: DeploymentProfile
    rtts_ms: tuple[float, ...]  # the sweep the rows cover
    table_rtts_ms: tuple[float, ...]  # the RTTs the speedup table shows
    rows: tuple[dict, ...]
    cells: int
    traced: int

    @property
    def untraced(self) -> int:
        return self.cells - self.traced


@dataclass(frozen=True)
class SavedAnnotation:
    """A judgement saved: its id, and the outputs it judged in the order the annotator saw them (with
    their statistics, which the page reveals with the methods)."""

    annotation_id: int
    outputs: tuple[StoredOutput, ...]
    replaced: bool = False  # it took the place of its page's earlier judgement of the comparison


@dataclass(frozen=True)
class AnnotationExport:
    """A fresh file of every annotation for download; ``path`` is None when there is none to export."""

    path: Path | None
    count: int


@dataclass(frozen=True)
class RunResults:
    """A stored evaluation run with its cells, in the order they were saved."""

    run: StoredRun
    cells: tuple[CellResult, ...]


class ExportRefused(ValueError):
    """This caller may not export every annotation (a public app without the operator's token)."""


MAX_RECORDS_UPLOAD_BYTES = 10 * MAX_UPLOAD_BYTES  # an evaluation's records file
MAX_RECORDS_UPLOAD_ITEMS = 100_000  # records in an uploaded file (a grid reads at most VisitorLimits.max_records)

# Projected every 10 ms from 0 to 200 ms: the curves are smooth in RTT, and a run of a few hundred
# generations replays in a second or two. The table shows the bundled sweep's RTTs.
DEPLOYMENT_RTTS_MS: tuple[float, ...] = tuple(float(rtt) for rtt in range(0, 201, 10))


GenerationEvent = Started | Loading | Generating | Token | Pending | Done | Failed
ComparisonEvent = (
    ComparisonStarted | Loading | Generating | Token | Pending | OutputDone | ComparisonSaved | Stopped | Failed
)
EvaluationEvent = Status | Loading | GridProgress | EvalResult | Failed


# --------------------------------------------------------------------------- pairings


class PairingUnavailable(ValueError):
    """The chosen pairing cannot load here; the message says why and what to choose instead."""


@dataclass(frozen=True)
class PairCatalog:
    """The pairings the service may load: the registry's, plus ``test_pairs`` (id -> builder) that
    tests and the app's test mode add; those run on transformers only. ``placement``: where the
    transformers runtime puts the registry's models (the CPU unless the app found a GPU: ``Placement.detect``);
    the test pairs stay fp32 on the CPU."""

    test_pairs: Mapping[str, Callable[[], LoadedPair]] = field(default_factory=dict)
    placement: Placement = Placement()

    def status(self, pairing_id: str, edge_only: bool = False) -> tuple[bool, str]:
        """(can load here, why or why not); ``edge_only``: only the Specialist is needed (a remote Cloud)."""
        if pairing_id in self.test_pairs:
            return True, "random test models, built in about a second"
        pairing = PAIRINGS.get(pairing_id)
        if pairing is None:
            return False, f"there is no pairing {pairing_id!r}"
        return _status(pairing, edge_only)

    def check(self, pairing_id: str, edge_only: bool = False) -> None:
        """Raise :class:`PairingUnavailable` with a message to act on unless the pairing can load now
        (``edge_only``: its Specialist, for an Edge whose Cloud runs elsewhere)."""
        if pairing_id in self.test_pairs:
            return
        pairing = PAIRINGS.get(pairing_id)
        if pairing is None:
            raise PairingUnavailable(f"Unknown pairing {pairing_id!r}. Choose one from the list.")
        available, reason = _status(pairing, edge_only)
        if not available:
            raise PairingUnavailable(
                sentence(
                    f"The pairing “{pairing.label}” is unavailable here: {reason}. "
                    f"Choose an available pairing, e.g. “{PAIRINGS[DEFAULT_PAIRING].label}”"
                )
            )

    def runtime_note(self, pairing_id: str) -> str:
        """Which runtime "auto" picks for the pairing on this machine, and why, in a sentence or two."""
        if pairing_id in self.test_pairs:
            return "Auto runs the test pair on transformers: its random models exist only as PyTorch weights."
        pairing = PAIRINGS.get(pairing_id)
        if pairing is None:
            return "Choose a pairing to see which runtime auto picks."
        reasons: list[str] = []
        plan = runtime_plan(pairing, "auto", progress=reasons.append)  # for SpecSteer, the app's method
        chosen = plan.runtime
        if plan.mixed:
            return sentence(
                f"Auto splits the streams here: the Specialist and its generic copy on {plan.specialist.runtime} "
                f"(one runtime and weights file for both, or their ratio would carry quantization noise), the "
                f"Generalist on {plan.generalist.runtime}. The Specialist pair {plan.specialist.reason}; the "
                f"Generalist {plan.generalist.reason}"
            )
        if chosen == "transformers" and self.placement.on_gpu:
            return (
                f"Auto picks transformers here: it runs the models on {self.placement.describe()}; this app's "
                "llama.cpp is the CPU build, so it is not used while a GPU is present."
            )
        measured = _measured_choice(pairing)
        if chosen == "llama.cpp":
            return (
                "Auto picks llama.cpp here: both models are GGUF files, there is no GPU and llama.cpp works on "
                "this machine, so it runs the 4-bit files as they are (transformers would run a dequantized "
                f"copy).{measured or f' ({plan.reason})'}"
            )
        if reasons:  # llama.cpp was wanted, but is not installed or does not work here
            return sentence(f"Auto picks transformers here: {reasons[0]}")
        if any(spec.kind not in ("offline", "gguf") for spec in (pairing.specialist, pairing.generalist)):
            return "Auto picks transformers: these models are not GGUF files, and llama.cpp reads only those."
        if measured:
            return f"Auto picks transformers here for SpecSteer.{measured}"
        return "Auto picks transformers here: a GPU is present, and transformers runs the models on it."

    def load(
        self,
        pairing_id: str,
        runtime: str,
        progress: Callable[[str], None],
        edge_only: bool = False,
        method: str = "specsteer",
    ) -> LoadedPair:
        """The pair, loaded once; ``edge_only``: the Specialist and its tokenizer alone (the test pairs are
        built whole either way: they are tiny)."""
        build = self.test_pairs.get(pairing_id)
        if build is None:
            return load_pair(
                pairing_id,
                progress=progress,
                runtime=runtime,
                edge_only=edge_only,
                method=method,
                device=self.placement.device,
                dtype=self.placement.dtype,
            )
        if runtime == "llama.cpp":
            raise ModelLoadError("The test pair runs on transformers only; choose auto or transformers.")
        return build()


def _measured_choice(pairing: Pairing) -> str:
    """ " Measured here: …" -- what this machine's calibration says of SpecSteer and of the large model
    alone, or "" when the pairing was not calibrated here."""
    from specsteer.models.calibration import choose, saved_calibration

    calibration = saved_calibration(pairing.id)
    if calibration is None:
        return ""
    usable = tuple(timing.runtime for timing in calibration.timings)
    picks = {method: choose(calibration, method, usable) for method in ("specsteer", "llm")}
    if picks["specsteer"] is None:
        return ""
    note = f" Measured here: {picks['specsteer'].reason}."
    if picks["llm"] is not None and picks["llm"].runtime != picks["specsteer"].runtime:
        note += f" For the large model alone, {picks['llm'].runtime} is faster, and auto uses it there."
    return note


def _cross_tokenizer_problems(pair: LoadedPair, settings: GenerationSettings, methods: Sequence[str]) -> str | None:
    """Why some of ``methods`` cannot run on ``pair`` (a cross-tokenizer pair runs only some), or None."""
    for method in methods:
        problem = cross_tokenizer_problem(pair, settings.for_method(method).decode_config())
        if problem:
            return problem
    return None


def _status(pairing: Pairing, edge_only: bool) -> tuple[bool, str]:
    if not edge_only or pairing.cross_tokenizer or pairing.separate_tokenizers:
        return pairing_status(pairing)
    return model_status(pairing.specialist)


def _preview_of(
    prepared: Prepared, task: str, total: int, retrieval_k: int, prompt_style: PromptStyle
) -> RetrievalPreview:
    """What a prepared request shows its user: each picked history item as the Specialist's prompt
    renders it, with its BM25 score, and both prompts."""
    shown = tuple(
        ScoredItem(render_item(task, item, style=prompt_style), score)
        for item, score in zip(prepared.retrieved, prepared.scores)
    )  # noise items carry no score
    return RetrievalPreview(task, total, retrieval_k, shown, prepared.prompts)


def pairing_name(pairing_id: str) -> str:
    """A pairing as a sentence names it: its label and id, or the id alone when it is not in the registry."""
    pairing = PAIRINGS.get(pairing_id)
    return f"“{pairing.label}” ({pairing_id})" if pairing is not None else f"“{pairing_id}”"


def pairing_mismatch(cloud: str, served: str, chosen: str) -> str | None:
    """Why a Cloud serving ``served`` cannot verify for ``chosen``, or None when they are the same."""
    if served == chosen:
        return None
    return (
        f"The Cloud at {cloud} serves the pairing {pairing_name(served)}, but the pairing chosen here is "
        f"{pairing_name(chosen)}: the Cloud must verify with the Specialist this Edge drafts with. Choose "
        f"{pairing_name(served)}, or start the Cloud with --pairing {chosen}."
    )


# --------------------------------------------------------------------------- the service


class AppService:
    """Generations, comparisons and evaluation runs, saved as they finish; thread-safe (holds no state
    of its own besides the stores and the catalog, which are)."""

    def __init__(
        self,
        store: GenerationStore,
        runs: RunStore,
        pairs: PairCatalog | None = None,
        loading_quiet_s: float = 0.3,
        cloud_secret: str | None = None,
        exposure: Exposure | None = None,
        uploads: Path | None = None,
        limits: VisitorLimits | None = None,
        turns: ModelTurns | None = None,
    ) -> None:
        self.store = store
        self.runs = runs
        # Where uploaded records files are kept, so that a resumed evaluation finds its file again
        # (the composition root puts it beside the database); None keeps none.
        self.uploads = uploads
        self.pairs = pairs or PairCatalog()
        self.loading_quiet_s = loading_quiet_s  # a pair loaded this fast reports no progress
        # The shared secret of remote Clouds (the composition root reads $SPECSTEER_CLOUD_SECRET): sent
        # as a header, never shown, stored or part of the settings.
        self._cloud_secret = cloud_secret or None
        # Local, or public with the operator's choices (which Clouds a visitor may use): app.py reads it
        # from the environment. A public service never connects to an address its operator did not list,
        # so the secret goes only there.
        self.exposure = exposure or Exposure()
        # What one request may ask for (grid size, tokens, text lengths): the public or local defaults.
        self.limits = limits or limits_for(self.exposure.public)
        # One model computation at a time; a waiting generation goes before an evaluation grid's next cell.
        self.turns = turns or ModelTurns()
        self._warm_up: WarmUp | None = None  # the start-up warm-up (warm_up), while one was asked for
        # "Teach the Specialist my history": LoRA adapters trained for pages, named by label in settings.
        self.teacher = LoraTeacher(max_steps=self.limits.max_lora_steps)

    # ----------------------------------------------------------------------- preview

    def preview(
        self, history: NamedHistory | None, task: str, input_text: str, retrieval_k: int, prompt_style: str = "paper"
    ) -> RetrievalPreview:
        """The items BM25 picks for ``input_text`` and both prompts: the engine's ``prepare``, which a
        generation runs too. ValueError for an unknown task or prompt style."""
        items = history.history.items if history is not None else ()
        if not (input_text or "").strip():
            return RetrievalPreview(task, len(items), retrieval_k, (), None)
        profile = history.history.profile if history is not None else None
        style = as_prompt_style(prompt_style)
        prepared = prepare(
            Request(
                task=task,
                input_text=input_text,
                history=items,
                retrieval_k=retrieval_k,
                prompt_style=style,
                profile=profile,
            )
        )
        return _preview_of(prepared, task, len(items), retrieval_k, style)

    @staticmethod
    def read_history(path: str | Path) -> NamedHistory:
        """An uploaded history file, named after the file (its own name: Gradio keeps it inside its
        temporary folder). HistoryError saying where it is wrong, or that it is too large; OSError."""
        name = Path(path).name
        size = Path(path).stat().st_size
        if size > MAX_UPLOAD_BYTES:
            raise HistoryError(f"the file is {size / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
        return NamedHistory(parse_history(Path(path).read_bytes(), filename=name), f"“{name}”")

    # ----------------------------------------------------------------------- one generation

    def generate(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
        cancel: threading.Event | None = None,
    ) -> Iterator[GenerationEvent]:
        """One generation from settings to a saved row. A set ``cancel`` stops it within a draft step;
        a stopped generation is saved too (its ``stop_reason`` is "cancelled"), and so is what a
        generation emitted before its remote Cloud failed (``Failed.partial``, "cloud-error")."""
        cancel = cancel or threading.Event()
        try:
            settings = self._valid(settings)
            self._check_input(input_text)
            prepared = self._prepare(history, task, input_text, settings)
            self.pairs.check(settings.pairing, edge_only=settings.remote)
        except ValueError as error:  # SettingsError and PairingUnavailable are ValueErrors
            yield Failed(sentence(str(error)))
            return
        total = len(history.history) if history is not None else 0
        yield Started(settings, _preview_of(prepared, task, total, settings.retrieval_k, settings.prompt_style))
        try:
            cloud = self._connect(settings, (settings.method,))
        except CloudError as error:
            yield Failed(sentence(str(error)))
            return
        try:
            yield from self._generation(history, task, input_text, settings, prepared, cloud, cancel)
        finally:
            if cloud is not None:
                cloud.close()

    def _generation(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings,
        prepared: Prepared,
        cloud: CloudEndpoint | None,
        cancel: threading.Event,
    ) -> Iterator[GenerationEvent]:
        try:
            pair = yield from self._settings_pair(settings, settings.method)
        except ModelLoadError as error:
            yield Failed(sentence(str(error)))
            return
        unavailable = _cross_tokenizer_problems(pair, settings, (settings.method,))
        if unavailable:
            yield Failed(sentence(unavailable))
            return
        yield Generating(settings.method, pair.runtime, pair.precision)
        tokens: list[TokenEvent] = []
        try:
            finished = yield from self._run(pair, prepared, settings, cancel, tokens, slot=0, cloud=cloud)
        except CloudError as error:  # what was emitted before is kept, audited and saved
            if error.partial is None:
                yield Failed(sentence(str(error)))
                return
            result = self._keep(history, task, input_text, settings, pair, prepared, tokens, error.partial)
            kept = f"The {result.finished.stats.new_tokens} tokens generated before it failed are kept"
            kept += (
                f" and saved as generation #{result.saved_id}"
                if result.saved_id is not None
                else f", but {result.save_error}"
            )
            yield Failed(sentence(str(error)) + " " + sentence(kept), result)
            return
        except Exception as error:  # a model failure reaches people as a message, the log keeps the trace
            log.exception("generation failed")
            yield Failed(sentence(f"Generation failed ({type(error).__name__}): {error}"))
            return
        yield Done(self._keep(history, task, input_text, settings, pair, prepared, tokens, finished))

    def _keep(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings,
        pair: LoadedPair,
        prepared: Prepared,
        tokens: Sequence[TokenEvent],
        finished: Finished,
    ) -> GenerationResult:
        """Audit a generation's uplink and save it; a failed save still returns the output."""
        facts = split_private_facts(history.history.profile or "") if history is not None else ()
        texts = history_texts(history.history.items, history.history.profile) if history is not None else []
        privacy = self._privacy(pair, prepared, tokens, finished, settings, facts, texts)
        saved_id, save_error = None, None
        try:
            history_id = self.store.save_history(history) if history is not None else None
            saved_id = self._save_generation(history, history_id, task, input_text, settings, finished, tokens)
        except Exception as error:  # the output is still shown; the result says it was not saved
            log.exception("saving the generation failed")
            save_error = sentence(f"saving it failed: {error}")
        return GenerationResult(finished, tuple(tokens), privacy, saved_id, save_error)

    # ----------------------------------------------------------------------- a comparison

    def compare(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
        methods: Sequence[str],
        blind: bool,
        cancel: threading.Event | None = None,
    ) -> Iterator[ComparisonEvent]:
        """One input through several methods with the same settings (the settings' own method is not
        used), saved as one comparison once every output is done. ``blind`` shuffles the order shown.
        A stop ends the output in progress and saves nothing."""
        cancel = cancel or threading.Event()
        # Blind comparisons judge the methods that keep the private context on the device; a caller of the
        # public endpoint may send llm+ or any text, and is told so rather than having it dropped.
        refused = [str(method) for method in methods or () if method not in PRIVATE_METHODS]
        if refused:
            offered = ", ".join(method_label(method) for method in PRIVATE_METHODS)
            yield Failed(
                f"Compare judges only methods that keep the private context on the device ({offered}); "
                f"not {', '.join(refused)}. LLM+ runs in the Generate tab and the Dashboard, labelled as sending it."
            )
            return
        chosen = [method for method in METHODS if method in set(methods or ())]
        if not chosen:
            yield Failed("Choose at least one method to compare.")
            return
        try:
            settings = self._valid(settings)
            self._check_input(input_text)
            prepared = self._prepare(history, task, input_text, settings)
            self.pairs.check(settings.pairing, edge_only=settings.remote)
        except ValueError as error:
            yield Failed(sentence(str(error)))
            return
        order = list(chosen)
        if blind:
            random.SystemRandom().shuffle(order)
        yield ComparisonStarted(settings, tuple(order), bool(blind))
        try:
            cloud = self._connect(settings, order)
        except CloudError as error:
            yield Failed(sentence(str(error)))
            return
        try:
            yield from self._comparison(
                history, task, input_text, settings, prepared, order, bool(blind), cloud, cancel
            )
        finally:
            if cloud is not None:
                cloud.close()

    def _comparison(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings,
        prepared: Prepared,
        order: Sequence[str],
        blind: bool,
        cloud: CloudEndpoint | None,
        cancel: threading.Event,
    ) -> Iterator[ComparisonEvent]:
        try:
            pair = yield from self._settings_pair(settings)
        except ModelLoadError as error:
            yield Failed(sentence(str(error)))
            return
        unavailable = _cross_tokenizer_problems(pair, settings, order)
        if unavailable:  # before any output runs: a comparison is saved whole or not at all
            yield Failed(sentence(unavailable))
            return
        finished: list[Finished] = []
        tokens: list[list[TokenEvent]] = []
        for slot, method in enumerate(order):
            yield Generating(method, pair.runtime, pair.precision, slot, len(order))
            tokens.append([])
            try:
                result = yield from self._run(
                    pair, prepared, settings.for_method(method), cancel, tokens[slot], slot, cloud=cloud
                )
            except CloudError as error:
                yield Failed(sentence(str(error)) + " Nothing of this comparison was saved.")
                return
            except Exception as error:
                log.exception("comparison generation failed")
                yield Failed(
                    sentence(
                        f"Generation of output {slot + 1} of {len(order)} failed ({type(error).__name__}): {error}"
                    )
                )
                return
            finished.append(result)
            yield OutputDone(slot, method, result)
            if cancel.is_set():
                yield Stopped()
                return
        try:
            saved = self._save_comparison(history, task, input_text, settings, order, finished, tokens, blind)
        except Exception as error:
            log.exception("saving the comparison failed")
            yield Failed(sentence(f"The outputs could not be saved: {error}"))
            return
        yield ComparisonSaved(saved)

    # ----------------------------------------------------------------------- an evaluation run

    def evaluate(
        self, spec: EvalSpec, cancel: threading.Event | None = None, operator_token: str = ""
    ) -> Iterator[EvaluationEvent]:
        """Run (or resume, by run name) an evaluation grid on the pair ``spec`` names, storing every cell
        in the run store as it finishes; a set ``cancel`` leaves the run cancelled and resumable. A grid
        beyond a visitor's cap (``self.limits``) needs the operator's token in public. Each cell takes
        its own turn of the models, so a visitor's generation waits for one cell, not for the grid."""
        refused = self._grid_problem(spec, operator_token)
        if refused:
            yield Failed(refused)
            return
        try:
            spec.validate()
            self.pairs.check(spec.pairing)
        except (ValueError, DataError, OSError) as error:
            yield Failed(sentence(str(error)))
            return
        try:
            pair = yield from self._load(spec.pairing, spec.runtime)
        except ModelLoadError as error:
            yield Failed(sentence(str(error)))
            return
        unavailable = grid_method_problem(pair, spec)
        if unavailable:  # before a run is opened: nothing is stored
            yield Failed(sentence(unavailable))
            return
        yield Status("Reading the records…")
        try:
            yield from run_grid_events(spec, self.runs, pair=pair, cancel=cancel, turn=self.turns.batch)
        except Exception as error:
            if not isinstance(error, (ValueError, DataError, OSError)):
                log.error("evaluation run failed", exc_info=error)
            yield Failed(sentence(f"The run failed ({type(error).__name__}): {error}"))

    def _grid_problem(self, spec: EvalSpec, operator_token: str) -> str | None:
        """Why this caller may not run ``spec`` here (its size, its run name), or None. Checked before
        anything else: a grid's points are counted only once its lists are known to be short."""
        records = spec.limit if spec.limit is not None else self.limits.max_records + 1
        return text_problem("run name", spec.run_name, self.limits.max_name_chars) or self.limits.grid_problem(
            spec.methods, spec.alphas, spec.betas, records, self.exposure.is_operator(operator_token)
        )

    # ----------------------------------------------------------------------- a remote Cloud

    def check_cloud(self, address: str, pairing: str | None = None) -> CloudCheck:
        """The settings' "Test connection": whether a Cloud answers at ``address``, what it serves (pairing,
        protocol version, runtime, limits) and whether that fits ``pairing``. Never raises for a bad
        address or an absent Cloud: the check says what is wrong."""
        try:
            address = cloud_address(address)
        except ValueError as error:
            return CloudCheck("", False, str(error))
        if not address:
            return CloudCheck("", True, "The Cloud runs in this process: there is no connection to test.")
        refused = self.exposure.cloud_problem(address)
        if refused:
            return CloudCheck(address, False, refused)
        try:
            with RemoteCloud(address, self._cloud_secret, timeout_s=10.0) as cloud:
                info = cloud.info()
        except CloudError as error:
            return CloudCheck(address, False, sentence(str(error)))
        problem = pairing_mismatch(address, info.pairing, pairing) if pairing else None
        if problem:
            return CloudCheck(address, False, problem, info)
        fits = ", the pairing chosen here" if pairing else ""
        return CloudCheck(
            address,
            True,
            f"The Cloud at {address} answers: it serves {pairing_name(info.pairing)}"
            f"{fits}, protocol version {info.protocol}.",
            info,
        )

    # ----------------------------------------------------------------------- the deployment projection

    def deployment(
        self,
        run_id: int,
        profile: str,
        rtts_ms: Sequence[float] = DEPLOYMENT_RTTS_MS,
        table_rtts_ms: Sequence[float] = DEFAULT_RTTS_MS,
    ) -> DeploymentReport:
        """A stored run's traced generations projected onto the bundled ``profile`` at each RTT
        (``deployment.deployment_rows``). ValueError, as a sentence, for an unknown profile."""
        try:
            chosen = get_profile(profile)
        except ValueError as error:
            raise ValueError(sentence(str(error))) from None
        cells = self.runs.cells(run_id)
        traced = sum(1 for cell in cells if cell.stats.trace)
        rows = deployment_rows(cells, chosen.name, rtts_ms) if traced else []
        shown = tuple(float(rtt) for rtt in table_rtts_ms if float(rtt) in {float(r) for r in rtts_ms})
        return DeploymentReport(
            run_id, chosen, tuple(float(rtt) for rtt in rtts_ms), shown, tuple(rows), len(cells), traced
        )

    # ----------------------------------------------------------------------- saved comparisons and judgements

    def saved_comparisons(self, limit: int = 100) -> list[StoredComparison]:
        """The newest saved comparisons, newest first."""
        return self.store.recent_comparisons(limit)

    def reopen_comparison(self, comparison_id: int) -> StoredComparison:
        """A saved comparison for a new judgement: a blind one in a fresh random order, so that each
        annotator sees their own. ValueError, as a sentence, when there is none of that id."""
        comparison = self.store.comparison(comparison_id) if stored_id(comparison_id) else None
        if comparison is None:
            raise ValueError(f"Comparison #{comparison_id} does not exist.")
        if not comparison.blind:
            return comparison
        outputs = list(comparison.outputs)
        random.SystemRandom().shuffle(outputs)
        return replace(comparison, outputs=tuple(outputs))

    def annotate(self, annotation: NewAnnotation) -> SavedAnnotation:
        """Save one judgement, in place of its page's earlier one of the comparison if any (``judging``); ValueError
        naming what is wrong (an unknown label, a score out of range, a name or comment longer than ``self.limits``
        allow)."""
        refused = text_problem("annotator's name", annotation.annotator, self.limits.max_name_chars) or text_problem(
            "comment", annotation.comment, self.limits.max_comment_chars
        )
        if refused:
            raise ValueError(refused)
        if not stored_id(annotation.comparison_id):
            raise ValueError(f"Comparison #{annotation.comparison_id} does not exist.")
        stored = self.store.save_annotation(annotation)
        saved = self.store.comparison(annotation.comparison_id)
        by_method = {output.method: output for output in saved.outputs} if saved is not None else {}
        return SavedAnnotation(
            stored.id,
            tuple(by_method[method] for method in annotation.display_order if method in by_method),
            stored.replaced,
        )

    def annotation_summary(self) -> AnnotationSummary:
        """Win rates, mean ratings and agreement over every saved judgement, one per page session and
        comparison (unverified: ``specsteer.service.judging``)."""
        return self.store.annotation_summary()

    def export_annotations(self, kind: ExportFormat, token: str = "") -> AnnotationExport:
        """Every annotation in a fresh CSV or JSON-lines file: for anyone in a local run, for the holder
        of the operator's token in public (annotator names and comments are not every visitor's).
        ExportRefused otherwise."""
        if kind not in ("csv", "jsonl"):
            raise ValueError(f"Unknown export format {kind!r}: choose csv or jsonl.")
        if not self.exposure.may_export_all(token):
            configured = (
                "" if self.exposure.admin_token else f" No token is configured (${ADMIN_TOKEN_ENV}), so none is."
            )
            raise ExportRefused(
                f"Exporting every annotation needs the operator's token on this public app.{configured}"
            )
        folder = Path(tempfile.mkdtemp(prefix="specsteer-export-"))
        path = folder / f"annotations-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
        count = self.store.write_annotations(kind, path)
        if count == 0:
            shutil.rmtree(folder, ignore_errors=True)
            return AnnotationExport(None, 0)
        return AnnotationExport(path, count)

    # ----------------------------------------------------------------------- stored evaluation runs

    def stored_runs(self) -> list[StoredRun]:
        """Every stored evaluation run, newest first."""
        return self.runs.runs()

    def stored_run(self, run_id: int) -> StoredRun | None:
        """A stored run (its name, config, status and cell count), or None when there is no run of that id."""
        return self.runs.run(run_id) if stored_id(run_id) else None

    def run_results(self, run_id: int) -> RunResults | None:
        """A stored run and its cells, or None when there is no run of that id."""
        run = self.runs.run(run_id) if stored_id(run_id) else None
        return RunResults(run, tuple(self.runs.cells(run.id))) if run is not None else None

    def keep_records(self, upload: str | Path, task: str) -> Path:
        """Keep an uploaded records file (so that a resumed run finds it) once it reads as ``task``'s records.

        The copy keeps the file's own name, in a folder named after its content's hash, so that every
        message about it names the user's file. A file that does not read is removed again (nothing
        rejected stays kept), and ValueError, as a sentence, says why.
        """
        if self.uploads is None:
            raise ValueError("This app keeps no uploaded files: choose the bundled or the shared records.")
        source = Path(upload)
        size = source.stat().st_size
        cap = min(MAX_RECORDS_UPLOAD_BYTES, self.limits.max_upload_bytes)
        if size > cap:
            raise ValueError(f"{source.name} is {size / 1e6:.1f} MB; the limit is {cap // (1024 * 1024)} MB.")
        try:  # read where it was uploaded, before anything is kept: a file that does not read leaves nothing
            load_records(source, task, json_limits=JsonLimits(RECORDS_LIMITS.max_depth, cap, MAX_RECORDS_UPLOAD_ITEMS))
        except (DataError, ValueError, OSError) as error:
            raise ValueError(sentence(str(error))) from None
        folder = self.uploads / hashlib.sha256(source.read_bytes()).hexdigest()[:16]
        target = folder / source.name
        if target.is_file():
            return target  # read before: the same content under the same name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, target)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return target

    # ----------------------------------------------------------------------- steps

    def _valid(self, settings: GenerationSettings | Mapping[str, object]) -> GenerationSettings:
        """Validated settings whose Cloud this deployment lets its callers use; SettingsError otherwise."""
        valid = (
            settings.validate()
            if isinstance(settings, GenerationSettings)
            else GenerationSettings.from_values(settings)
        )
        problem = self.exposure.cloud_problem(valid.cloud) or self.limits.tokens_problem(valid.max_new_tokens)
        if problem:
            raise SettingsError([problem])
        return valid

    def _check_input(self, input_text: object) -> None:
        """SettingsError when the task input is longer than a visitor may send."""
        problem = text_problem("task input", input_text, self.limits.max_input_chars)
        if problem:
            raise SettingsError([problem])

    @staticmethod
    def _prepare(history: NamedHistory | None, task: str, input_text: str, settings: GenerationSettings) -> Prepared:
        if task not in TASKS:
            raise SettingsError([f"Choose a task ({', '.join(TASKS)})."])
        if not (input_text or "").strip():
            raise SettingsError(["Enter a task input first."])
        items = history.history.items if history is not None else ()
        profile = history.history.profile if history is not None else None
        return prepare(
            Request(
                task=task,
                input_text=input_text,
                history=items,
                retrieval_k=settings.retrieval_k,
                prompt_style=settings.prompt_style,
                profile=profile,
            )
        )

    # ----------------------------------------------------------------------- warming up at start

    def warm_up(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
    ) -> WarmUp:
        """Load ``settings``' pairing in the background and read this request's prompts once (one token,
        nothing saved), so that the first generation of the same request finds every prompt in the
        prefix caches. The app calls it at start with its default request; no visitor can start one.
        Invalid settings or request raise here (SettingsError, a ValueError). A click meanwhile waits for it
        (``_load``)."""
        valid = self._valid(settings)
        prepared = self._prepare(history, task, input_text, valid)
        self.pairs.check(valid.pairing, edge_only=valid.remote)
        self._warm_up = WarmUp(partial(self._warm, valid, prepared), name="specsteer-warm-up")
        return self._warm_up

    def warm_up_state(self) -> WarmUpState | None:
        """How the start-up warm-up stands; None when none was started."""
        return self._warm_up.state if self._warm_up is not None else None

    def _warm(
        self,
        settings: GenerationSettings,
        prepared: Prepared,
        say: Callable[[Phase, str], None],
        cancel: threading.Event,
    ) -> str:
        started = time.monotonic()
        pair = self.pairs.load(
            settings.pairing,
            settings.runtime,
            lambda line: say("loading", f"Loading the models: {line}"),
            edge_only=settings.remote,
            method=settings.method,
        )
        loaded = time.monotonic() - started
        if settings.remote or cancel.is_set():  # a remote Cloud reads its own prompts; only the Edge is here
            return f"Models ready ({loaded:.0f} s)."
        say("reading", f"Models loaded in {loaded:.0f} s; reading the default sample's prompts…")
        config = replace(settings.decode_config(), max_new_tokens=1)
        for event in generate(
            pair, prepared, config, cancel=cancel, cloud=InProcessCloud(pair, read_ahead=DEFAULT_READ_AHEAD)
        ):
            if isinstance(event, Finished):
                break
        return f"Models ready ({time.monotonic() - started:.0f} s), the default sample's prompts read."

    def _load(
        self, pairing_id: str, runtime: str, edge_only: bool = False, method: str = "specsteer"
    ) -> Generator[Loading, None, LoadedPair]:
        """For ``pair = yield from ...``: loads in a worker thread, reporting the loader's progress.

        A pair already loaded comes back at once without a word. Every failure is a ModelLoadError.
        While the start-up warm-up runs, it waits for it first (saying so): it uses the same cores.
        """
        warm = self._warm_up
        if warm is not None and not warm.wait(self.loading_quiet_s):
            while True:
                state = warm.state
                yield Loading(
                    f"Waiting for the start-up warm-up ({state.seconds:.0f} s since the app started): {state.message}"
                )
                if warm.wait(1.0):
                    break
        loading: Background[str, LoadedPair] = Background(
            lambda emit, _cancel: self.pairs.load(pairing_id, runtime, emit, edge_only=edge_only, method=method),
            name="specsteer-load-pair",
        )
        started = time.monotonic()
        if not loading.wait(self.loading_quiet_s):
            yield Loading("Loading the models (first use; this takes a while once)…")
            for line in loading.items():
                yield Loading(f"Loading the models ({time.monotonic() - started:.0f} s): {line}")
        try:
            return loading.result()
        except ModelLoadError:
            raise
        except (ValueError, KeyError, OSError) as error:
            raise ModelLoadError(str(error.args[0]) if error.args else str(error)) from error

    def _settings_pair(
        self, settings: GenerationSettings, method: str = "specsteer"
    ) -> Generator[Loading, None, LoadedPair]:
        """For ``pair = yield from ...``: the pair ``settings`` run on, with the page's taught Specialist merged
        in when they name one (transformers only: "auto" loads it there, llama.cpp is refused; the Cloud's
        generic copy stays the base). Every failure is a ModelLoadError."""
        lora = self.teacher.adapter(settings.specialist_lora) if settings.specialist_lora else None
        runtime = lora_runtime_choice(settings.runtime).runtime if lora is not None else settings.runtime
        pair = yield from self._load(settings.pairing, runtime, edge_only=settings.remote, method=method)
        if lora is None:
            return pair
        adapted = with_specialist_lora(pair, lora)
        adapted.runtime_choice = lora_runtime_choice(settings.runtime).reason
        return adapted

    def teach_specialist(
        self,
        session: str,
        history: NamedHistory | None,
        task: str,
        pairing_id: str,
        runtime: str,
        cancel: threading.Event | None = None,
    ) -> Iterator[TeachEvent]:
        """Train a LoRA adapter on ``history`` for the pairing's Specialist (service.lora_teaching): one per
        ``session`` at a time, capped by the visitor limits; its label goes back in ``specialist_lora``."""
        return self.teacher.teach(
            session,
            history,
            task,
            pairing_id,
            runtime,
            lambda pairing, progress: self.pairs.load(pairing, "transformers", progress),
            cancel,
        )

    def _connect(self, settings: GenerationSettings, methods: Sequence[str]) -> RemoteCloud | None:
        """The Cloud service the settings name, checked to answer and to serve their pairing before any
        model loads; None when the Cloud runs in this process or no method needs one. Raises CloudError."""
        if not settings.remote or all(METHOD_INFO[method].device_only for method in methods):
            return None
        cloud = RemoteCloud(settings.cloud, self._cloud_secret)
        try:
            info = cloud.info()
            problem = pairing_mismatch(settings.cloud, info.pairing, settings.pairing)
            if problem:
                raise CloudRefused(problem, "pairing")
        except BaseException:
            cloud.close()
            raise
        return cloud

    def _run(
        self,
        pair: LoadedPair,
        prepared: Prepared,
        settings: GenerationSettings,
        cancel: threading.Event,
        tokens: list[TokenEvent],
        slot: int,
        cloud: CloudEndpoint | None = None,
    ) -> Generator[Token | Pending, None, Finished]:
        """For ``finished = yield from ...``: one method's tokens as events (the settled ones kept in
        ``tokens``; drafts awaiting their verdict as Pending). A remote Cloud that fails raises its
        CloudError, with what was emitted before in ``partial``."""
        events = generate(
            pair,
            prepared,
            settings.decode_config(),
            cancel=cancel,
            # In process the Cloud reads its prompts when DEFAULT_READ_AHEAD says (specsteer.cloud.read_ahead).
            cloud=cloud or InProcessCloud(pair, read_ahead=DEFAULT_READ_AHEAD),
            conditions=settings.link_conditions(),
        )
        with self.turns.interactive():  # before an evaluation grid's next cell (specsteer.util.turns)
            for event in events:
                if isinstance(event, Finished):
                    return event
                if event.pending:
                    yield Pending(event, slot)
                    continue
                tokens.append(event)
                yield Token(event, slot)
        raise RuntimeError("the generation ended without its statistics")

    @staticmethod
    def _privacy(
        pair: LoadedPair,
        prepared: Prepared,
        tokens: Sequence[TokenEvent],
        finished: Finished,
        settings: GenerationSettings,
        facts: Sequence[str] = (),
        history: Sequence[str] = (),
    ) -> PrivacyReport | None:
        if METHOD_INFO[finished.stats.method].device_only:
            return None
        tokenizer = pair.tokenizer
        sends_private = METHOD_INFO[finished.stats.method].sends_private_context
        # The prompt the Cloud should have been given (llm+: the private one), in each model's ids.
        expected = prepared.prompts.private if sends_private else prepared.prompts.plain
        large_ids = chat_ids(pair.cross.tokenizer, expected, pair.cross.chat) if pair.cross else None
        private = chat_ids(tokenizer, prepared.prompts.private, pair.chat) if sends_private else None
        audit = audit_uplink(
            finished.transcript,
            chat_ids(tokenizer, prepared.prompts.plain, pair.chat),
            tokens,
            large_ids,
            private_prompt_ids=private,
        )
        exposure = (
            method_exposure(finished.stats.method, facts, prepared.prompts, finished.stats.sent_text, finished.text)
            if facts
            else None
        )
        crossing = history_crossing(
            finished, tokens, tokenizer, history, prepared.prompts.plain, settings.private_guard
        )
        return PrivacyReport(
            audit,
            tuple(finished.transcript),
            lambda ids: str(tokenizer.decode(list(ids), skip_special_tokens=False)),
            exposure,
            crossing,
            settings.guarded() if crossing.crossed else None,
        )

    def _save_generation(
        self,
        history: NamedHistory | None,
        history_id: int | None,
        task: str,
        input_text: str,
        settings: GenerationSettings,
        finished: Finished,
        tokens: Sequence[TokenEvent],
    ) -> int:
        """One output saved with what reproduces it (``history_id`` from ``save_history``); its new id."""
        return self.store.save_generation(
            NewGeneration(
                task=task,
                input_text=input_text,
                settings=settings,
                text=finished.text,
                tokens=tuple(tokens),
                stats=finished.stats,
                transcript=tuple(finished.transcript),
                history_id=history_id,
                history_name=history.name if history is not None else None,
            )
        )

    def _save_comparison(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings,
        order: Sequence[str],
        finished: Sequence[Finished],
        tokens: Sequence[Sequence[TokenEvent]],
        blind: bool,
    ) -> SavedComparison:
        history_id = self.store.save_history(history) if history is not None else None
        generation_ids = tuple(
            self._save_generation(history, history_id, task, input_text, settings.for_method(method), result, shown)
            for method, result, shown in zip(order, finished, tokens, strict=True)
        )
        comparison_id = self.store.save_comparison(
            NewComparison(
                task=task,
                input_text=input_text,
                settings=settings,
                generation_ids=generation_ids,
                methods=tuple(order),
                blind=blind,
                history_id=history_id,
                history_name=history.name if history is not None else None,
            )
        )
        return SavedComparison(
            comparison_id, tuple(order), tuple(result.text for result in finished), generation_ids, blind
        )
