"""Generate tab: a personal history, one input, one method; the output streams token by token.

Layout: settings on the left (history, task and input, models and decoding), results on the right
(coloured token stream, live statistics, what the Specialist saw, what was sent to the cloud).

The tab is an adapter. Its settings widgets reach the handler as keyword arguments named after the
fields of ``specsteer.engine.settings.GenerationSettings`` (Gradio's ``inputs_kwargs``), which the
``AppService`` turns into one validated value; the service's events come back as ``render`` calls
(:func:`generation_frames`). The handlers are methods of :class:`GenerateTab`, so tests call them
with ``list(tab.generate(...))`` and no server.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

import gradio as gr

from specsteer.cloud.api import CLOUD_SECRET_ENV
from specsteer.data.datasets import sample_history_path
from specsteer.data.history import MAX_ITEMS, MAX_UPLOAD_BYTES, HistoryError, parse_history
from specsteer.data.tasks import TASK_FOR_SCHEMA, TASKS
from specsteer.engine.settings import MAX_RTT_MS, GenerationSettings, sentence
from specsteer.method.catalog import METHOD_INFO, METHODS, method_label
from specsteer.protocol.exposure import CLOUD_URL_ENV, IN_PROCESS, Exposure, cloud_address
from specsteer.service.app_service import (
    AppService,
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
from specsteer.service.stores import NamedHistory
from ui import pairs, render
from ui.streaming import RUNS, LiveStats, Throttle, Toast
from ui.uploads import NOT_AN_UPLOAD, UploadCheck, any_path, gradio_uploads
from ui.wiring import QUIET, wire_run

log = logging.getLogger(__name__)

PROMPT_STYLES = [("Paper (the paper's templates)", "paper"), ("Clean (the user's own text, no field labels)", "clean")]

# Bundled synthetic users (assets/samples), each with an input that suits their history.
SAMPLES: dict[str, tuple[str, str]] = {
    # CoGenesis personas (dev split): the profile and texts are private; the input is the record's task.
    "persona-hr": (
        "Gregory, HR manager (persona, CoGenesis)",
        'Write an article on balancing work and family life: Share personal insights and professional advice on how working remotely on Fridays has improved your work-life balance and family relationships.',
    ),
    "persona-principal": (
        "Martha, retired school principal (persona, CoGenesis)",
        'Heirloom Tomato Article: Prepare an informative article for your gardening club, detailing the process of cultivating heirloom tomatoes, your personal tips, and the emotional significance of this tradition.',
    ),
    "persona-developer": (
        "Ava, software developer (persona, CoGenesis)",
        'Write a Spanish language learning article: She can share her experience learning Spanish, the apps she uses, methodologies, study routine, and how it might help in her professional life, possibly for internal cultural diversification materials.',
    ),
    "persona-gamedev": (
        "Alex, indie game developer (persona, CoGenesis)",
        'Creative Patch Notes: Craft creative patch notes for your latest game update.',
    ),
    "review": (
        "Gadget reviewer (review, JSONL)",
        'Generate the review text written by a reviewer who has given an overall rating of "5.0" for a product '
        'with description "Portable power bank, 20000 mAh, two USB-C ports, 65 W fast charging.". '
        'The summary of the review text is "Charges my laptop twice!".',
    ),
    "writing": ("Home baker (writing, JSON)", "Generate the content for a reddit post first time making croissants"),
    "abstract": (
        "Sensor-network researcher (abstract, CSV)",
        'Generate an abstract for the title "Detecting Faulty Soil Sensors from Neighbour Agreement" using the '
        "following items: 1. sensor faults 2. spatial correlation 3. fault detection accuracy",
    ),
    "plain": (
        "Hiking club organiser (plain text)",
        "Write a short message to the club announcing Sunday's lake walk and what to bring.",
    ),
}
DEFAULT_SAMPLE = "persona-hr"
# SpecSteer first (the default), then the baselines in the engine's order.
METHOD_ORDER = ("specsteer", *(m for m in METHODS if m != "specsteer"))


def choice_label(method: str) -> str:
    return METHOD_INFO[method].choice_label


METHOD_CHOICES = [(choice_label(m), m) for m in METHOD_ORDER]
# The widgets start at the settings' defaults, except the prompt style: the app starts with the clean one,
# which does not invite the small Specialist to copy the history's layout (README, output hygiene).
DEFAULTS = GenerationSettings(pairing="", prompt_style="clean")
WAITING_FOR_TRANSCRIPT = "The transcript appears when the generation ends."


class GenerateView(NamedTuple):
    """The outputs of a generation, in the order the event lists them."""

    status: object
    output: object
    stats: object
    retrieved: object
    privacy: object


class SampleView(NamedTuple):
    """What choosing a sample user updates."""

    history: object
    summary: object
    task: object
    input_text: object
    upload: object  # cleared: the sample replaces an uploaded history


class UploadView(NamedTuple):
    """What uploading a history updates."""

    history: object
    summary: object
    task: object
    sample: object  # cleared after a good file: no sample names the history any more


def read_sample(sample: str) -> NamedHistory:
    path = sample_history_path(sample)
    return NamedHistory(parse_history(path.read_bytes(), filename=path.name), f"sample “{SAMPLES[sample][0]}”")


def environment_cloud() -> tuple[str, str | None]:
    """The Cloud setting's starting value from $SPECSTEER_CLOUD_URL, and why it was not usable (then the
    setting starts empty, in process: an address with a credential in it is never put on the page)."""
    try:
        return cloud_address(os.environ.get(CLOUD_URL_ENV, "")), None
    except ValueError as error:
        return "", sentence(f"${CLOUD_URL_ENV} is not used: {error} The Cloud runs in this process")


def cloud_widget(exposure: Exposure, address: str) -> gr.components.Component:
    """The Cloud setting: a free address field in a local run; in public, a choice among the operator's
    Clouds (specsteer.protocol.exposure), which the service enforces whatever a caller sends."""
    if not exposure.public:
        return gr.Textbox(
            value=address,
            label="Cloud",
            placeholder="empty: in this process · or http://HOST:PORT",
            scale=3,
            elem_id="cloud-url",
        )
    choices = [("In this process", IN_PROCESS), *((url, url) for url in exposure.cloud_urls)]
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


# --------------------------------------------------------------------------- events -> frames


def generation_frames(events: Iterable[GenerationEvent]) -> Iterator[GenerateView | Toast]:
    """The service's events of one generation as frames of this tab's outputs (unchanged ones skipped),
    with a toast for a failure."""
    skip = gr.skip()
    live: LiveStats | None = None
    settings: GenerationSettings | None = None
    tokens = render.TokenHtml()
    throttle = Throttle()
    running = skip
    for event in events:
        if isinstance(event, Failed):
            tokens.end()
            yield Toast(render.esc(event.message))
            status = render.message_box(event.message, "error")
            if event.partial is not None:  # the Cloud failed midway: what it had emitted is kept
                yield GenerateView(
                    status,
                    render.output_html(tokens.html),
                    _final_stats(event.partial, settings),
                    skip,
                    render.privacy_html(event.partial.privacy),
                )
                continue
            stats = render.stats_html(live.view("failed")) if live is not None else skip
            output = render.output_html(tokens.html) if live is not None else skip
            yield GenerateView(status, output, stats, skip, skip)
        elif isinstance(event, Started):
            settings = event.settings
            yield GenerateView(
                render.message_box("Starting…", "busy"),
                render.output_html(""),
                "",
                render.retrieved_html(event.preview),
                render.message_box(WAITING_FOR_TRANSCRIPT, "info"),
            )
        elif isinstance(event, Loading):
            yield GenerateView(render.message_box(event.message, "busy"), skip, skip, skip, skip)
        elif isinstance(event, Generating):
            live = LiveStats(
                event.method, event.runtime, event.precision, cloud=settings.cloud, link=settings.link_conditions()
            )
            running = render.message_box(f"Generating with {method_label(event.method)}…", "busy")
            yield GenerateView(running, skip, render.stats_html(live.view("running")), skip, skip)
        elif isinstance(event, (Token, Pending)):
            live.add(event.event)
            tokens.add(event.event)
            # Every draft is published: the last one of a round may be on screen for a whole verification.
            if isinstance(event, Pending) or throttle.due():
                yield GenerateView(
                    running, render.output_html(tokens.html), render.stats_html(live.view("running")), skip, skip
                )
        elif isinstance(event, Done):
            result = event.result
            tokens.end()
            yield GenerateView(
                _done_status(result),
                render.output_html(tokens.html),
                _final_stats(result, settings),
                skip,
                render.privacy_html(result.privacy),
            )


def _final_stats(result: GenerationResult, settings: GenerationSettings) -> str:
    return render.stats_html(
        render.StatsView.final(result.finished.stats, cloud=settings.cloud, link=settings.link_conditions())
    )


def _done_status(result: GenerationResult) -> str:
    done = "Stopped" if result.stopped else "Done"
    if result.saved_id is None:
        return render.message_box(f"{done}, but {result.save_error}", "warning")
    return render.message_box(
        f"{done}: {result.finished.stats.new_tokens} tokens, saved as generation #{result.saved_id}.",
        "warning" if result.stopped else "ok",
    )


# --------------------------------------------------------------------------- handlers


class GenerateTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService, uploads: UploadCheck = any_path) -> None:
        self.service = service
        self.uploads = uploads  # which paths load_upload may read (build() passes Gradio's own uploads)

    def load_sample(self, sample: str | None) -> SampleView:
        """Sample dropdown -> the sample's history, its summary, task and input; the upload box cleared."""
        if not sample or sample not in SAMPLES:
            return SampleView(*[gr.skip()] * len(SampleView._fields))
        loaded = read_sample(sample)
        task = TASK_FOR_SCHEMA.get(loaded.history.schema, "free")
        return SampleView(loaded, history_summary(loaded), task, SAMPLES[sample][1], None)

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
            gr.Warning(render.esc(message))
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
        self, history: NamedHistory | None, task: str, input_text: str, request: gr.Request = None, **settings: object
    ) -> Iterator[GenerateView]:
        """Stream one generation: status, coloured tokens and live stats, then the privacy report.

        ``settings``: the values of the settings widgets, by GenerationSettings field name.
        """

        def produce(flag):
            return generation_frames(self.service.generate(history, task, input_text, settings, cancel=flag))

        run = RUNS.start(request, "generate", produce, width=len(GenerateView._fields))
        for frame in run.frames():
            yield GenerateView(*frame)

    def test_cloud(self, cloud: str, pairing: str) -> str:
        """The "Test connection" button: what the Cloud at that address serves, or what is wrong."""
        return render.cloud_check_html(self.service.check_cloud(cloud or "", pairing or None))

    def stop(self, request: gr.Request = None) -> GenerateView:
        """The Stop button: end this page's generation and show where it ended (saved if it had begun)."""
        skip = gr.skip()
        run = RUNS.stop(request, "generate")
        if run is None:
            return GenerateView(render.message_box("Stopped.", "info"), skip, skip, skip, skip)
        if not run.done:  # still loading the models: it ends without generating once they are loaded
            return GenerateView(
                render.message_box("Stopped. The models finish loading in the background.", "warning"),
                skip,
                skip,
                skip,
                skip,
            )
        return GenerateView(*run.state)


# --------------------------------------------------------------------------- layout


@dataclass
class GenerateControls:
    """The components the Compare tab reuses: it runs on the same history, input and settings."""

    history: gr.State
    task: gr.Dropdown
    input_text: gr.Textbox
    settings: dict[str, gr.components.Component]  # GenerationSettings field name -> its widget


def build(service: AppService) -> GenerateControls:
    tab = GenerateTab(service, gradio_uploads())
    initial = read_sample(DEFAULT_SAMPLE)
    history_state = gr.State(initial)
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=340, elem_classes="ss-panel"):
            gr.Markdown("### 1 · Your history", elem_classes="ss-step")
            sample = gr.Dropdown(
                choices=[(label, key) for key, (label, _) in SAMPLES.items()],
                value=DEFAULT_SAMPLE,
                label="Sample user",
                info="CoGenesis personas (dev split) and synthetic users bundled with the app",
                elem_id="sample-user",
            )
            upload = gr.File(
                label="…or upload your own history",
                file_types=[".json", ".jsonl", ".csv", ".txt"],
                type="filepath",
                elem_id="history-upload",
                height=150,
            )
            gr.Markdown(
                f"JSON, JSONL or CSV in the LongLaMP schemas (review, abstract, writing), a CoGenesis record (a "
                f"persona: profile and texts), or plain text with one item per paragraph; UTF-8 or UTF-16. At most {MAX_UPLOAD_BYTES // (1024 * 1024)} MB and {MAX_ITEMS} "
                "items.",
                elem_classes="ss-note",
            )
            summary = gr.HTML(history_summary(initial), elem_id="history-summary")

            gr.Markdown("### 2 · Task and input", elem_classes="ss-step")
            initial_task = TASK_FOR_SCHEMA.get(initial.history.schema, "free")
            task = gr.Dropdown(
                choices=[(render.TASK_LABELS[t], t) for t in TASKS], value=initial_task, label="Task", elem_id="task"
            )
            input_text = gr.Textbox(
                value=SAMPLES[DEFAULT_SAMPLE][1], label="Input", lines=4, max_lines=12, elem_id="task-input"
            )

            gr.Markdown("### 3 · Models and decoding", elem_classes="ss-step")
            picker = pairs.pairing_picker(service.pairs, "Pairing (Specialist → Generalist)", runtime=DEFAULTS.runtime)
            method = gr.Dropdown(
                choices=METHOD_CHOICES,
                value=DEFAULTS.method,
                label="Method",
                info=METHOD_INFO[DEFAULTS.method].description,
            )
            with gr.Row():
                alpha = gr.Slider(
                    0,
                    2,
                    value=DEFAULTS.alpha,
                    step=0.01,
                    label="α (strictness)",
                    elem_id="alpha",
                    info="0 accepts every draft",
                )
                beta = gr.Slider(0, 3, value=DEFAULTS.beta, step=0.1, label="β (steering strength)")
            with gr.Row():
                draft_len = gr.Slider(1, 16, value=DEFAULTS.draft_len, step=1, label="Draft length k")
                max_new_tokens = gr.Slider(
                    1, 1024, value=DEFAULTS.max_new_tokens, step=1, label="Max new tokens", elem_id="max-new-tokens"
                )
            with gr.Row():
                decoding = gr.Radio(["greedy", "sampling"], value=DEFAULTS.decoding, label="Decoding")
                seed = gr.Number(value=DEFAULTS.seed, precision=0, label="Seed")
            prompt_style = gr.Radio(
                PROMPT_STYLES,
                value=DEFAULTS.prompt_style,
                label="Prompt style",
                elem_id="prompt-style",
                info="Clean shows your items as your own text and asks for the text alone: small models then "
                "copy the item layout (“Product: …”) less often",
            )
            with gr.Accordion("Sampling and advanced settings", open=False):
                with gr.Row():
                    temperature = gr.Slider(0.05, 2, value=DEFAULTS.temperature, step=0.05, label="Temperature")
                    top_p = gr.Slider(0.05, 1, value=DEFAULTS.top_p, step=0.05, label="Top-p")
                with gr.Row():
                    retrieval_k = gr.Slider(
                        0, 10, value=DEFAULTS.retrieval_k, step=1, label="History items retrieved (BM25 k)"
                    )
                    downlink_top_k = gr.Number(
                        value=DEFAULTS.downlink_top_k, precision=0, minimum=0, label="Downlink top-k (0 = all)"
                    )
                with gr.Row():
                    exact = gr.Checkbox(value=DEFAULTS.exact, label="Exact-target sampling (SpecSteer, sampling only)")
                    private_guard = gr.Number(
                        value=DEFAULTS.private_guard,
                        precision=0,
                        minimum=0,
                        maximum=64,
                        elem_id="private-guard",
                        label="Private-span guard n (0 = off)",
                        info="The device never sends a token that would copy n tokens of your history verbatim",
                    )
                    adaptive_draft = gr.Checkbox(
                        value=DEFAULTS.adaptive_draft,
                        label="Adaptive draft length",
                        info="Each round drafts the k (at most the slider's) that the measured speed favours",
                    )
                address, address_problem = environment_cloud()
                with gr.Row(equal_height=False, elem_classes="ss-bottom-row"):
                    cloud = cloud_widget(service.exposure, address)
                    test_cloud = gr.Button("Test connection", scale=1, min_width=120, size="md", elem_id="test-cloud")
                gr.Markdown(
                    "Empty: both models run in this process. An address of `python -m specsteer cloud`: "
                    "only the Specialist (and your history) stays here. Its shared secret is read from "
                    f"`${CLOUD_SECRET_ENV}`, never typed into the page.",
                    elem_classes="ss-note",
                )
                cloud_check = gr.HTML(
                    render.message_box(address_problem, "warning") if address_problem else "", elem_id="cloud-check"
                )
                with gr.Row():
                    rtt_ms = gr.Number(
                        value=DEFAULTS.rtt_ms,
                        minimum=0,
                        maximum=MAX_RTT_MS,
                        label="RTT (ms)",
                        min_width=90,
                        elem_id="rtt-ms",
                    )
                    uplink_kbps = gr.Number(
                        value=DEFAULTS.uplink_kbps,
                        minimum=0,
                        label="Uplink (kbps)",
                        min_width=90,
                        elem_id="uplink-kbps",
                    )
                    downlink_kbps = gr.Number(
                        value=DEFAULTS.downlink_kbps,
                        minimum=0,
                        label="Downlink (kbps)",
                        min_width=90,
                        elem_id="downlink-kbps",
                    )
                gr.Markdown(
                    "Link emulation: every message waits as it would on that network, in process or against "
                    "a remote Cloud. 0 kbps is unlimited; 0 ms and unlimited emulate nothing.",
                    elem_classes="ss-note",
                )

        with gr.Column(scale=3, min_width=420):
            with gr.Row():
                run = gr.Button("Generate", variant="primary", elem_id="generate-button")
                stop = gr.Button("Stop", variant="stop", elem_id="stop-button")
            status = gr.HTML(
                render.message_box("Ready. The models load when the app starts (see above), or on first use.", "info"),
                elem_id="generate-status",
            )
            gr.HTML(render.legend_html())
            output = gr.HTML(render.output_html(""), elem_id="generate-output")
            stats = gr.HTML(elem_id="generate-stats")
            with gr.Accordion("What the Specialist sees (on your device)", open=True):
                retrieved = gr.HTML(
                    tab.preview(
                        initial, initial_task, SAMPLES[DEFAULT_SAMPLE][1], DEFAULTS.retrieval_k, DEFAULTS.prompt_style
                    ),
                    elem_id="retrieved",
                )
            with gr.Accordion("Privacy: what was sent to the cloud", open=False, elem_id="privacy-accordion"):
                privacy = gr.HTML(render.message_box(WAITING_FOR_TRANSCRIPT, "info"), elem_id="privacy")

    settings = {
        "pairing": picker.pairing,
        "runtime": picker.runtime,
        "method": method,
        "alpha": alpha,
        "beta": beta,
        "draft_len": draft_len,
        "adaptive_draft": adaptive_draft,
        "max_new_tokens": max_new_tokens,
        "decoding": decoding,
        "seed": seed,
        "temperature": temperature,
        "top_p": top_p,
        "retrieval_k": retrieval_k,
        "downlink_top_k": downlink_top_k,
        "exact": exact,
        "prompt_style": prompt_style,
        "private_guard": private_guard,
        "cloud": cloud,
        "rtt_ms": rtt_ms,
        "uplink_kbps": uplink_kbps,
        "downlink_kbps": downlink_kbps,
    }
    preview_inputs = [history_state, task, input_text, retrieval_k, prompt_style]
    sample.input(
        tab.load_sample,
        sample,
        list(SampleView(history_state, summary, task, input_text, upload)),
        api_name="load_sample",
    )
    upload.upload(
        tab.load_upload,
        [upload, history_state],
        list(UploadView(history_state, summary, task, sample)),
        api_name="upload_history",
    )
    # .change, not .input: a paste, a cut, a cleared box, a sample or an upload change the values too, and
    # the preview must follow every one of them (.input fires on typed keys only).
    for trigger in (history_state.change, task.change, input_text.change, retrieval_k.change, prompt_style.change):
        trigger(tab.preview, preview_inputs, retrieved, trigger_mode="always_last", **QUIET)
    method.select(
        lambda chosen: gr.update(info=METHOD_INFO[chosen].description if chosen in METHOD_INFO else ""),
        method,
        method,
        **QUIET,
    )
    # .change: also after the picker sends an unavailable choice back to the pairing it had.
    picker.pairing.change(
        partial(pairs.offer_methods, METHOD_ORDER, choice_label), [picker.pairing, method], method, **QUIET
    )
    test_cloud.click(tab.test_cloud, [cloud, picker.pairing], cloud_check, api_name="test_cloud")
    # The settings widgets reach the handler by GenerationSettings field name; the service reads them
    # into one GenerationSettings (GenerationSettings.from_values).
    wire_run(
        run,
        stop,
        status,
        tab.generate,
        [history_state, task, input_text],
        list(GenerateView(status, output, stats, retrieved, privacy)),
        inputs_kwargs=settings,
        api_name="generate",
        stop_work=tab.stop,
        stop_api_name="stop_generate",
    )
    return GenerateControls(history_state, task, input_text, settings)
