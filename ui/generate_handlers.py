"""The Generate tab's handlers over the service: each takes a few widget values and returns one typed view
(testable without a server); the layout and wiring are in ui/generate_tab.py."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import gradio as gr

from specsteer.data.history import HistoryError
from specsteer.data.sources import SAMPLE_USERS
from specsteer.data.tasks import TASK_FOR_SCHEMA
from specsteer.engine.settings import GenerationSettings, sentence
from specsteer.method.catalog import method_label
from specsteer.protocol.exposure import IN_PROCESS, Exposure
from specsteer.service.app_service import AppService
from specsteer.service.events import (
    Done,
    Failed,
    Generating,
    GenerationEvent,
    GenerationResult,
    Loading,
    Pending,
    Started,
    Token,
)
from specsteer.service.page import read_sample
from specsteer.stores.generations import NamedHistory
from ui import render
from ui.markup import esc
from ui.privacy_html import privacy_html
from ui.stats_html import StatsView, stats_html
from ui.streaming import NOT_YOURS, RUNS, LiveStats, Throttle, Toast
from ui.token_html import TokenHtml, marked_tokens_html, output_html
from ui.uploads import NOT_AN_UPLOAD, UploadCheck, any_path

WAITING_FOR_TRANSCRIPT = "The transcript appears when the generation ends."


_V = TypeVar("_V")  # a view's fields: its components when an event is wired, their new values when it fires


class GenerateView(NamedTuple, Generic[_V]):
    """The outputs of a generation, in the order the event lists them."""

    status: _V
    output: _V
    stats: _V
    retrieved: _V
    privacy: _V
    follow_up: _V  # a gr.State: what the privacy panel does once the generation ends (PrivacyFollowUp)


@dataclass(frozen=True)
class PrivacyFollowUp:
    """What a generation's end asks of the privacy panel: open where phrases of the history crossed (the
    service's verdict), and the private-span guard's n where the service offers it (None: no offer)."""

    crossed: bool
    guard: int | None


def privacy_follow_up(result: GenerationResult | None) -> PrivacyFollowUp | None:
    report = result.privacy if result is not None else None
    if report is None:
        return None
    offer = report.guard_offer.private_guard if report.guard_offer is not None else None
    return PrivacyFollowUp(report.verdict == "history crossed", offer)


class SampleView(NamedTuple, Generic[_V]):
    """What choosing a sample user updates."""

    history: _V
    summary: _V
    task: _V
    input_text: _V
    upload: _V  # cleared: the sample replaces an uploaded history


class UploadView(NamedTuple, Generic[_V]):
    """What uploading a history updates."""

    history: _V
    summary: _V
    task: _V
    sample: _V  # cleared after a good file: no sample names the history any more


def cloud_widget(exposure: Exposure, address: str) -> gr.components.Component:
    """The Cloud setting: a free address field in a local run; in public, a choice among the operator's
    Clouds (specsteer.protocol.exposure), which the service enforces whatever a caller sends."""
    if not exposure.public:
        return gr.Textbox(
            value=address,
            label="Cloud",
            placeholder="empty: inside this app · or http://HOST:PORT",
            scale=3,
            elem_id="cloud-url",
        )
    choices = [("Inside this app", IN_PROCESS), *((url, url) for url in exposure.cloud_urls)]
    return gr.Dropdown(
        choices=choices,
        value=address if address in exposure.cloud_urls else IN_PROCESS,
        label="Cloud (the operator's choices)",
        scale=3,
        elem_id="cloud-url",
    )


def history_summary(loaded: NamedHistory | None) -> str:
    if loaded is None:
        return render.message_box("No history loaded yet: upload a file or pick a sample user.", "info")
    history = loaded.history
    titles = [item.fields.get("title", "") for item in history.items] if history.profile else []
    return render.history_summary_html(
        loaded.name, len(history), history.schema, history.user_id, history.profile, titles
    )


def generation_frames(events: Iterable[GenerationEvent]) -> Iterator[GenerateView | Toast]:
    """The service's events of one generation as frames of this tab's outputs (unchanged ones skipped),
    with a toast for a failure."""
    skip = gr.skip()
    live: LiveStats | None = None
    settings: GenerationSettings | None = None
    tokens = TokenHtml()
    throttle = Throttle()
    running = skip
    for event in events:
        if isinstance(event, Failed):
            tokens.end()
            yield Toast(esc(event.message))
            status = render.message_box(event.message, "error")
            if event.partial is not None:  # the Cloud failed midway: what it had emitted is kept
                yield GenerateView(
                    status,
                    output_html(marked_tokens_html(event.partial.tokens, event.partial.privacy)),
                    _final_stats(event.partial, _after_start(settings)),
                    skip,
                    privacy_html(event.partial.privacy),
                    privacy_follow_up(event.partial),
                )
                continue
            stats = stats_html(live.view("failed")) if live is not None else skip
            output = output_html(tokens.html) if live is not None else skip
            yield GenerateView(status, output, stats, skip, skip, skip)
        elif isinstance(event, Started):
            settings = event.settings
            yield GenerateView(
                render.message_box("Starting…", "busy"),
                output_html(""),
                "",
                render.retrieved_html(event.preview),
                render.message_box(WAITING_FOR_TRANSCRIPT, "info"),
                None,
            )
        elif isinstance(event, Loading):
            yield GenerateView(render.message_box(event.message, "busy"), *[skip] * (len(GenerateView._fields) - 1))
        elif isinstance(event, Generating):
            started = _after_start(settings)
            live = LiveStats(
                event.method, event.runtime, event.precision, cloud=started.cloud, link=started.link_conditions()
            )
            running = render.message_box(f"Generating with {method_label(event.method)}…", "busy")
            yield GenerateView(running, skip, stats_html(live.view("running")), skip, skip, skip)
        elif isinstance(event, (Token, Pending)):
            live = _after_start(live)
            live.add(event.event)
            tokens.add(event.event)
            # Every draft is published: the last one of a round may be on screen for a whole verification.
            if isinstance(event, Pending) or throttle.due():
                live_stats = stats_html(live.view("running"))
                yield GenerateView(running, output_html(tokens.html), live_stats, skip, skip, skip)
        elif isinstance(event, Done):
            result = event.result
            tokens.end()
            yield GenerateView(
                _done_status(result),
                output_html(marked_tokens_html(result.tokens, result.privacy)),
                _final_stats(result, _after_start(settings)),
                skip,
                privacy_html(result.privacy),
                privacy_follow_up(result),
            )


def _after_start(value: _V | None) -> _V:
    """What the Started (settings) or Generating (live stats) event set: every later event follows it."""
    if value is None:
        raise RuntimeError("a generation's events came out of order")
    return value


def _final_stats(result: GenerationResult, settings: GenerationSettings) -> str:
    return stats_html(StatsView.final(result.finished.stats, cloud=settings.cloud, link=settings.link_conditions()))


def _done_status(result: GenerationResult) -> str:
    done = "Stopped" if result.stopped else "Done"
    if result.saved_id is None:
        return render.message_box(f"{done}, but {result.save_error}", "warning")
    return render.message_box(
        f"{done}: {result.finished.stats.new_tokens} tokens, saved as generation #{result.saved_id}.",
        "warning" if result.stopped else "ok",
    )


class GenerateTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService, uploads: UploadCheck = any_path) -> None:
        self.service = service
        self.uploads = uploads  # which paths load_upload may read (build() passes Gradio's own uploads)

    def load_sample(self, sample: str | None) -> SampleView:
        """Sample dropdown -> the sample's history, its summary, task and input; the upload box cleared."""
        if not sample or sample not in SAMPLE_USERS:
            return SampleView(*[gr.skip()] * len(SampleView._fields))
        loaded = read_sample(sample)
        task = TASK_FOR_SCHEMA.get(loaded.history.schema, "free")
        return SampleView(loaded, history_summary(loaded), task, SAMPLE_USERS[sample].input_text, None)

    def load_upload(self, path: str | None, current: NamedHistory | None) -> UploadView:
        """Uploaded file -> its history, summary and task, the sample dropdown cleared. A bad file keeps the
        current history (and the sample dropdown naming it)."""
        skip = gr.skip()
        if not path:
            return UploadView(skip, skip, skip, skip)
        name = Path(path).name  # Gradio keeps the uploaded file's own name inside its temporary folder
        try:
            if not self.uploads(path):
                raise HistoryError(NOT_AN_UPLOAD)
            loaded = self.service.read_history(path)
        except (HistoryError, OSError) as error:
            message = sentence(f"Could not read {name}: {error}")
            gr.Warning(esc(message))
            keep = f" Still using {current.name} ({len(current.history)} items)." if current else ""
            return UploadView(skip, render.message_box(message + keep, "error"), skip, skip)
        return UploadView(loaded, history_summary(loaded), TASK_FOR_SCHEMA.get(loaded.history.schema, "free"), None)

    def preview(
        self, loaded: NamedHistory | None, task: str, input_text: str, retrieval_k: float, prompt_style: str
    ) -> str:
        """What BM25 picks from the history for this input, exactly as the Specialist will see it."""
        try:
            return render.retrieved_html(
                self.service.preview(loaded, task, input_text, int(retrieval_k or 0), prompt_style)
            )
        except ValueError as error:
            return render.message_box(sentence(str(error)), "error")

    def generate(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        request: gr.Request | None = None,
        **settings: object,
    ) -> Iterator[GenerateView]:
        """Stream one generation: status, coloured tokens and live stats, then the privacy report.

        ``settings``: the values of the settings widgets, by GenerationSettings field name.
        """

        # The Generate tab shows each token's numbers in a popover (ui.token_details): the one view that asks.
        detailed = {**settings, "token_details": True}

        def produce(flag):
            return generation_frames(self.service.generate(history, task, input_text, detailed, cancel=flag))

        run = RUNS.start(request, "generate", produce, width=len(GenerateView._fields))
        for frame in run.frames():
            yield GenerateView(*frame)

    def test_cloud(self, cloud: str, pairing: str) -> str:
        """The "Test connection" button: what the Cloud at that address serves, or what is wrong."""
        return render.cloud_check_html(self.service.check_cloud(cloud or "", pairing or None))

    def stop(self, request: gr.Request | None = None) -> GenerateView:
        """The Stop button: end this page's generation and show where it ended (saved if it had begun)."""
        skip = gr.skip()
        rest = [skip] * (len(GenerateView._fields) - 1)
        run = RUNS.stop(request, "generate")
        if run is None:
            return GenerateView(render.message_box(NOT_YOURS, "warning"), *rest)
        if not run.done:  # still loading the models: it ends without generating once they are loaded
            return GenerateView(
                render.message_box("Stopped. The models finish loading in the background.", "warning"), *rest
            )
        return GenerateView(*run.state)

    @staticmethod
    def follow_privacy(follow_up: PrivacyFollowUp | None) -> tuple[object, object]:
        """(the privacy accordion, the guard button) once a generation ended: the panel opened where phrases of
        the history crossed, the guard offered where the service offers it."""
        opened = gr.update(open=True) if follow_up is not None and follow_up.crossed else gr.skip()
        if follow_up is None or follow_up.guard is None:
            return opened, gr.update(visible=False)
        return opened, gr.update(
            visible=True, value=f"Generate again with the private-span guard (n = {follow_up.guard})"
        )

    @staticmethod
    def take_guard_offer(follow_up: PrivacyFollowUp | None) -> object:
        """The guard button: the private-span guard widget set to the n the service offered (the page then
        presses Generate, so the one click re-runs with the guard on)."""
        return follow_up.guard if follow_up is not None and follow_up.guard else gr.skip()
