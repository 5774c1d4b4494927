"""One generation, or one input through several methods, from settings to saved rows; the preview of what the
Specialist sees; the start-up warm-up.

The steps are always: validate the settings (``specsteer.service.checks``) → prepare the request (retrieval
and prompts, on the device) → reach the Cloud when the settings name a remote one (it must answer and serve
the chosen pairing before anything loads: ``specsteer.service.remote_clouds``) → load the pair (with
progress; only the Specialist for a remote Cloud: ``specsteer.service.pair_loading``) → generate → audit what
crossed the link (``specsteer.service.privacy_report``) → save through the :class:`GenerationStore`. Nothing
raises out of a workflow for bad input, a model that cannot load, a Cloud that cannot be reached or a model that
fails: each ends with one ``Failed`` event (``specsteer.service.events``). A remote Cloud that fails midway ends
a generation with ``Failed(message, partial)``: what was emitted before, audited and saved like a stopped
generation.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD
from specsteer.data.history import HistoryError
from specsteer.data.history_upload import MAX_UPLOAD_BYTES, parse_history
from specsteer.data.tasks import PromptStyle, as_prompt_style, render_item
from specsteer.engine.decode_config import cross_tokenizer_problem
from specsteer.engine.generate import generate
from specsteer.engine.request import Prepared, Request, prepare
from specsteer.engine.settings import GenerationSettings, sentence
from specsteer.method.catalog import METHODS, PRIVATE_METHODS, method_label
from specsteer.method.events import Finished, TokenEvent
from specsteer.models.pair import LoadedPair
from specsteer.models.weights import ModelLoadError
from specsteer.protocol.link import CloudEndpoint, CloudError
from specsteer.service.checks import RequestChecks
from specsteer.service.events import (
    ComparisonEvent,
    ComparisonSaved,
    ComparisonStarted,
    Done,
    Failed,
    Generating,
    GenerationEvent,
    GenerationResult,
    Loading,
    OutputDone,
    Pending,
    RetrievalPreview,
    SavedComparison,
    ScoredItem,
    Started,
    Stopped,
    Token,
)
from specsteer.service.pair_catalog import PairCatalog
from specsteer.service.pair_loading import PairLoader
from specsteer.service.privacy_report import privacy_report
from specsteer.service.remote_clouds import RemoteClouds
from specsteer.service.warmup import WarmUp, warm
from specsteer.stores.generations import NamedHistory, NewComparison, NewGeneration
from specsteer.stores.protocols import GenerationStore
from specsteer.util.turns import ModelTurns

log = logging.getLogger(__name__)

Event = TypeVar("Event")  # a generation's or a comparison's events


@dataclass(frozen=True)
class _CheckedRequest:
    """A generation's or a comparison's request once it passed the checks: what was asked, the valid settings
    and the prompts prepared from them."""

    history: NamedHistory | None
    task: str
    input_text: str
    settings: GenerationSettings
    prepared: Prepared


def _cross_tokenizer_problems(pair: LoadedPair, settings: GenerationSettings, methods: Sequence[str]) -> str | None:
    """Why some of ``methods`` cannot run on ``pair`` (a cross-tokenizer pair runs only some), or None."""
    for method in methods:
        problem = cross_tokenizer_problem(pair, settings.for_method(method).decode_config())
        if problem:
            return problem
    return None


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


class GenerationService:
    """Generations and comparisons, saved as they finish; thread-safe (holds no state of its own besides its
    collaborators, which are)."""

    def __init__(
        self,
        store: GenerationStore,
        pairs: PairCatalog,
        checks: RequestChecks,
        clouds: RemoteClouds,
        loader: PairLoader,
        turns: ModelTurns,
    ) -> None:
        self.store = store
        self.pairs = pairs
        self.checks = checks
        self.clouds = clouds
        self.loader = loader
        # One model computation at a time; a waiting generation goes before an evaluation grid's next cell.
        self.turns = turns

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
            request = self._checked(history, task, input_text, settings)
        except ValueError as error:  # SettingsError and PairingUnavailable are ValueErrors
            yield Failed(sentence(str(error)))
            return
        valid, total = request.settings, len(history.history) if history is not None else 0
        yield Started(valid, _preview_of(request.prepared, task, total, valid.retrieval_k, valid.prompt_style))
        yield from self._over_cloud(valid, (valid.method,), lambda cloud: self._generation(request, cloud, cancel))

    def _generation(
        self, request: _CheckedRequest, cloud: CloudEndpoint | None, cancel: threading.Event
    ) -> Iterator[GenerationEvent]:
        settings = request.settings
        pair = yield from self._usable_pair(
            self.loader.for_settings(settings, settings.method), settings, (settings.method,)
        )
        if pair is None:
            return
        yield Generating(settings.method, pair.runtime, pair.precision)
        tokens: list[TokenEvent] = []
        try:
            finished = yield from self._run(pair, request.prepared, settings, cancel, tokens, slot=0, cloud=cloud)
        except CloudError as error:  # what was emitted before is kept, audited and saved
            if error.partial is None:
                yield Failed(sentence(str(error)))
                return
            result = self._keep(request, pair, tokens, error.partial)
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
        yield Done(self._keep(request, pair, tokens, finished))

    def _keep(
        self, request: _CheckedRequest, pair: LoadedPair, tokens: Sequence[TokenEvent], finished: Finished
    ) -> GenerationResult:
        """Audit a generation's uplink and save it; a failed save still returns the output."""
        history = request.history
        privacy = privacy_report(history, pair, request.prepared, tokens, finished, request.settings)
        saved_id, save_error = None, None
        try:
            history_id = self.store.save_history(history) if history is not None else None
            saved_id = self._save_generation(request, history_id, finished, tokens)
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
            request = self._checked(history, task, input_text, settings)
        except ValueError as error:
            yield Failed(sentence(str(error)))
            return
        order = list(chosen)
        if blind:
            random.SystemRandom().shuffle(order)
        yield ComparisonStarted(request.settings, tuple(order), bool(blind))
        yield from self._over_cloud(
            request.settings, order, lambda cloud: self._comparison(request, order, bool(blind), cloud, cancel)
        )

    def _comparison(
        self,
        request: _CheckedRequest,
        order: Sequence[str],
        blind: bool,
        cloud: CloudEndpoint | None,
        cancel: threading.Event,
    ) -> Iterator[ComparisonEvent]:
        settings = request.settings
        # Checked before any output runs: a comparison is saved whole or not at all.
        pair = yield from self._usable_pair(self.loader.for_settings(settings), settings, order)
        if pair is None:
            return
        finished: list[Finished] = []
        tokens: list[list[TokenEvent]] = []
        estimate_s = _comparison_estimate(settings, pair.runtime, order)
        for slot, method in enumerate(order):
            yield Generating(method, pair.runtime, pair.precision, slot, len(order), estimate_s)
            tokens.append([])
            try:
                result = yield from self._run(
                    pair, request.prepared, settings.for_method(method), cancel, tokens[slot], slot, cloud=cloud
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
            saved = self._save_comparison(request, order, finished, tokens, blind)
        except Exception as error:
            log.exception("saving the comparison failed")
            yield Failed(sentence(f"The outputs could not be saved: {error}"))
            return
        yield ComparisonSaved(saved)

    # ----------------------------------------------------------------------- the steps both share

    def _checked(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
    ) -> _CheckedRequest:
        """The request with valid settings and its prompts prepared, its pairing one this service offers;
        a ValueError (SettingsError, PairingUnavailable) saying what is wrong otherwise."""
        valid = self.checks.valid(settings)
        self.checks.check_input(input_text)
        prepared = self.checks.prepare(history, task, input_text, valid)
        self.pairs.check(valid.pairing, edge_only=valid.remote)
        return _CheckedRequest(history, task, input_text, valid, prepared)

    def _over_cloud(
        self,
        settings: GenerationSettings,
        methods: Sequence[str],
        work: Callable[[CloudEndpoint | None], Iterator[Event]],
    ) -> Iterator[Event | Failed]:
        """``work``'s events, given the remote Cloud ``settings`` name (None: in process), closed after it; one
        Failed when that Cloud cannot be reached or does not serve ``methods``."""
        try:
            cloud = self.clouds.connect(settings, methods)
        except CloudError as error:
            yield Failed(sentence(str(error)))
            return
        try:
            yield from work(cloud)
        finally:
            if cloud is not None:
                cloud.close()

    @staticmethod
    def _usable_pair(
        loading: Generator[Loading, None, LoadedPair], settings: GenerationSettings, methods: Sequence[str]
    ) -> Generator[Loading | Failed, None, LoadedPair | None]:
        """For ``pair = yield from ...``: the pair ``loading`` loads, or None after a Failed when it cannot load
        or cannot run ``methods``."""
        try:
            pair = yield from loading
        except ModelLoadError as error:
            yield Failed(sentence(str(error)))
            return None
        unavailable = _cross_tokenizer_problems(pair, settings, methods)
        if unavailable:
            yield Failed(sentence(unavailable))
            return None
        return pair

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
        (``PairLoader.load``)."""
        valid = self.checks.valid(settings)
        prepared = self.checks.prepare(history, task, input_text, valid)
        self.pairs.check(valid.pairing, edge_only=valid.remote)
        return self.loader.hold_warm_up(WarmUp(partial(warm, self.pairs, valid, prepared), name="specsteer-warm-up"))

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

    def _save_generation(
        self, request: _CheckedRequest, history_id: int | None, finished: Finished, tokens: Sequence[TokenEvent]
    ) -> int:
        """One output saved with what reproduces it (``history_id`` from ``save_history``); its new id."""
        history = request.history
        return self.store.save_generation(
            NewGeneration(
                task=request.task,
                input_text=request.input_text,
                settings=request.settings,
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
        request: _CheckedRequest,
        order: Sequence[str],
        finished: Sequence[Finished],
        tokens: Sequence[Sequence[TokenEvent]],
        blind: bool,
    ) -> SavedComparison:
        history, settings = request.history, request.settings
        history_id = self.store.save_history(history) if history is not None else None
        generation_ids = tuple(
            self._save_generation(replace(request, settings=settings.for_method(method)), history_id, result, shown)
            for method, result, shown in zip(order, finished, tokens, strict=True)
        )
        comparison_id = self.store.save_comparison(
            NewComparison(
                task=request.task,
                input_text=request.input_text,
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


def _comparison_estimate(settings: GenerationSettings, runtime: str, methods: Sequence[str]) -> float | None:
    """Seconds this machine's calibration estimates for every output of a comparison (None unless each has one)."""
    from specsteer.models.calibration import request_estimate

    seconds = [request_estimate(settings.pairing, runtime, method, settings.max_new_tokens) for method in methods]
    return None if any(value is None for value in seconds) else sum(value or 0.0 for value in seconds)
