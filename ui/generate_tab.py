"""Generate tab: a personal history, one input, one method; the output streams token by token.

Layout: settings on the left (history, task and input, models and decoding), results on the right
(coloured token stream, live statistics, what the Specialist saw, what was sent to the cloud).
Handlers are plain generators over specsteer/storage objects, so tests call them directly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import gradio as gr

import storage
from specsteer.data import sample_history_path
from specsteer.engine import DecodeConfig, Prepared, Request, chat_ids, generate, prepare
from specsteer.events import Finished, TokenEvent
from specsteer.history import MAX_ITEMS, MAX_UPLOAD_BYTES, History, HistoryError, parse_history
from specsteer.methods import METHOD_INFO, METHODS, method_label
from specsteer.models import LoadedPair, ModelLoadError
from specsteer.privacy import audit_uplink
from specsteer.retrieval import retrieve_scored
from specsteer.tasks import TASK_FOR_SCHEMA, TASKS, build_prompts, render_item
from ui import pairs, render
from ui.streaming import RUNS, LiveStats, Throttle

log = logging.getLogger(__name__)

MODELS_CONCURRENCY_ID = "models"  # every event that runs a model shares one slot (memory, CPU)

TASK_LABELS = {
    "review": "Product review",
    "abstract": "Paper abstract",
    "writing": "Reddit-style post",
    "free": "Free text",
}

# Bundled synthetic users (assets/samples), each with an input that suits their history.
SAMPLES: dict[str, tuple[str, str]] = {
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
DEFAULT_SAMPLE = "review"
# SpecSteer first (the default), then the baselines in the engine's order.
METHOD_CHOICES = [(METHOD_INFO[m].choice_label, m) for m in ("specsteer", *(m for m in METHODS if m != "specsteer"))]


@dataclass(frozen=True)
class LoadedHistory:
    """The history a session uses, with the name it came under (file or sample)."""

    history: History
    name: str


class GenerateView(NamedTuple):
    """The outputs of a generation, in the order the event lists them."""

    status: object
    output: object
    stats: object
    retrieved: object
    privacy: object


# --------------------------------------------------------------------------- history


def read_sample(sample: str) -> LoadedHistory:
    path = sample_history_path(sample)
    return LoadedHistory(parse_history(path.read_bytes(), filename=path.name), f"sample “{SAMPLES[sample][0]}”")


def history_summary(loaded: LoadedHistory | None) -> str:
    if loaded is None:
        return render.message_box("No history loaded yet: upload a file or pick a sample user.", "info")
    history = loaded.history
    return render.history_summary_html(loaded.name, len(history), history.schema, history.user_id)


def load_sample(sample: str | None):
    """Sample dropdown -> (history state, summary, task, input)."""
    if not sample or sample not in SAMPLES:
        return gr.skip(), gr.skip(), gr.skip(), gr.skip()
    loaded = read_sample(sample)
    task = TASK_FOR_SCHEMA.get(loaded.history.schema, "free")
    return loaded, history_summary(loaded), task, SAMPLES[sample][1]


def load_upload(path: str | None, current: LoadedHistory | None):
    """Uploaded file -> (history state, summary, task). A bad file keeps the current history."""
    if not path:
        return gr.skip(), gr.skip(), gr.skip()
    name = Path(path).name
    try:
        size = os.path.getsize(path)
        if size > MAX_UPLOAD_BYTES:
            raise HistoryError(f"the file is {size / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
        with open(path, "rb") as handle:
            history = parse_history(handle.read(), filename=name)
    except (HistoryError, OSError) as error:
        message = f"Could not read {name}: {error}"
        gr.Warning(render.esc(message))
        keep = f" Still using {current.name} ({len(current.history)} items)." if current else ""
        return gr.skip(), render.message_box(message + keep, "error"), gr.skip()
    loaded = LoadedHistory(history, f"“{name}”")
    return loaded, history_summary(loaded), TASK_FOR_SCHEMA.get(history.schema, "free")


def retrieval_preview(loaded: LoadedHistory | None, task: str, input_text: str, retrieval_k: float) -> str:
    """What BM25 picks from the history for this input, exactly as the Specialist will see it."""
    items = loaded.history.items if loaded else ()
    if not items:
        return render.retrieved_html([], 0, task, None, None)
    if not (input_text or "").strip():
        return render.retrieved_html([], len(items), task, None, None)
    if int(retrieval_k) <= 0:
        return render.message_box("Retrieval is off (k = 0): the Specialist sees only your input.", "info")
    try:
        # The same ranking and prompt that engine.prepare() builds for the generation.
        scored = retrieve_scored(task, input_text, items, int(retrieval_k))
        prompts = build_prompts(task, input_text, [item for item, _ in scored])
    except ValueError as error:
        return render.message_box(str(error), "error")
    shown = [(render_item(task, item), score) for item, score in scored]
    return render.retrieved_html(shown, len(items), task, prompts.private, prompts.plain)


def pairing_changed(pairing_id: str) -> str:
    try:
        pairs.check_pairing(pairing_id)
    except pairs.PairingUnavailable as error:
        gr.Warning(render.esc(str(error)))
    return pairs.pairing_note(pairing_id)


# --------------------------------------------------------------------------- generation


def decode_config(method, alpha, beta, draft_len, max_new_tokens, decoding, seed, temperature=1.0, top_p=1.0,
                  downlink_top_k=64, exact=False, adaptive_draft=False) -> DecodeConfig:
    """The engine's config from the widgets' values; raises ValueError with the engine's message."""
    try:
        config = DecodeConfig(
            method=str(method), alpha=float(alpha), beta=float(beta), draft_len=int(draft_len),
            max_new_tokens=int(max_new_tokens), sample=decoding == "sampling", seed=int(seed or 0),
            temperature=float(temperature), top_p=float(top_p), downlink_top_k=int(downlink_top_k),
            exact=bool(exact) and decoding == "sampling", adaptive_draft=bool(adaptive_draft),
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"invalid setting: {error}") from None
    return config.validate()


def settings_record(config: DecodeConfig, pairing_id: str, retrieval_k: int, history_name: str | None) -> dict:
    """What is saved with a generation so that it can be reproduced."""
    return {**asdict(config), "pairing": pairing_id, "retrieval_k": retrieval_k, "history": history_name}


def prepare_request(loaded: LoadedHistory | None, task: str, input_text: str, retrieval_k: int) -> Prepared:
    if not (input_text or "").strip():
        raise ValueError("Enter a task input first.")
    if task not in TASKS:
        raise ValueError(f"Choose a task ({', '.join(TASKS)}).")
    items = loaded.history.items if loaded else ()
    return prepare(Request(task=task, input_text=input_text, history=items, retrieval_k=retrieval_k))


def save_history_row(loaded: LoadedHistory | None) -> int | None:
    if loaded is None:
        return None
    history = loaded.history
    return storage.save_history(name=loaded.name, schema=history.schema, items=history.items, user_id=history.user_id)


View = TypeVar("View")


def load_pair_with_status(pairing_id: str, frame: Callable[[str], View]) -> Generator[View, None, LoadedPair]:
    """For ``pair = yield from ...``: yields ``frame(status HTML)`` while the pair loads, returns the pair.

    Every loading error becomes a ValueError, so a handler has one thing to catch.
    """
    try:
        for step in pairs.load_with_progress(pairing_id):
            if not isinstance(step, str):
                return step
            yield frame(render.message_box(step, "busy"))
    except (pairs.PairingUnavailable, ModelLoadError) as error:
        raise ValueError(str(error)) from None
    raise ValueError(f"pairing {pairing_id!r} did not load")


def _live_stats(live: LiveStats, state: str) -> str:
    return render.stats_html(
        method=live.method, tokens=live.emitted, seconds=live.seconds, accepted=live.accepted,
        drafted=live.accepted + live.rejected, rounds=live.rounds, uplink_bytes=live.uplink_bytes,
        downlink_bytes=live.downlink_bytes,
        state=state,
    )


def _final_stats(finished: Finished) -> str:
    stats = finished.stats
    return render.stats_html(
        method=stats.method, tokens=stats.new_tokens, seconds=stats.seconds, accepted=stats.accepted,
        drafted=stats.drafted, rounds=stats.rounds, uplink_bytes=stats.uplink_bytes,
        downlink_bytes=stats.downlink_bytes, state=stats.stop_reason,
    )


def privacy_report(pair, prepared: Prepared, events: list[TokenEvent], finished: Finished) -> str:
    """The audit verdict and every message that crossed the link, with ids decoded for humans."""
    tokenizer = pair.tokenizer
    if not finished.transcript:  # device-only methods (SLM, SLM+): no message, nothing to audit
        return render.transcript_html([], None)
    audit = audit_uplink(finished.transcript, chat_ids(tokenizer, prepared.prompts.plain), events)
    decode = lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)  # noqa: E731
    return render.audit_html(audit.ok, audit.summary()) + render.transcript_html(finished.transcript, decode)


def generate_stream(loaded: LoadedHistory | None, task: str, input_text: str, pairing_id: str, method: str,
                    alpha: float, beta: float, draft_len: float, max_new_tokens: float, decoding: str, seed: float,
                    temperature: float, top_p: float, retrieval_k: float, downlink_top_k: float, exact: bool,
                    adaptive_draft: bool = False, request: gr.Request = None) -> Iterator[GenerateView]:
    """Stream one generation: status, coloured tokens and live stats, then the privacy report."""
    def produce(flag):
        return _generate(loaded, task, input_text, pairing_id, method, alpha, beta, draft_len, max_new_tokens,
                         decoding, seed, temperature, top_p, retrieval_k, downlink_top_k, exact, adaptive_draft, flag)

    run = RUNS.start(request, "generate", produce, width=len(GenerateView._fields))
    for frame in run.frames():
        yield GenerateView(*frame)


def _generate(loaded, task, input_text, pairing_id, method, alpha, beta, draft_len, max_new_tokens, decoding, seed,
              temperature, top_p, retrieval_k, downlink_top_k, exact, adaptive_draft, flag) -> Iterator[GenerateView]:
    skip = gr.skip()
    try:
        config = decode_config(method, alpha, beta, draft_len, max_new_tokens, decoding, seed, temperature, top_p,
                               downlink_top_k, exact, adaptive_draft)
        prepared = prepare_request(loaded, task, input_text, int(retrieval_k))
        pairs.check_pairing(pairing_id)
    except ValueError as error:  # PairingUnavailable is a ValueError too
        gr.Warning(render.esc(str(error)))
        yield GenerateView(render.message_box(str(error), "error"), skip, skip, skip, skip)
        return
    retrieved = retrieval_preview(loaded, task, input_text, retrieval_k)
    yield GenerateView(render.message_box("Starting…", "busy"), render.output_html(""),
                       skip, retrieved, render.message_box("The transcript appears when the generation ends.", "info"))
    try:
        pair = yield from load_pair_with_status(pairing_id,
                                                lambda status: GenerateView(status, skip, skip, skip, skip))
    except ValueError as error:
        gr.Warning(render.esc(str(error)))
        yield GenerateView(render.message_box(str(error), "error"), skip, skip, skip, skip)
        return

    live = LiveStats(config.method)
    tokens = render.TokenHtml()
    events: list[TokenEvent] = []
    throttle = Throttle()
    running = render.message_box(f"Generating with {method_label(config.method)}…", "busy")
    finished: Finished | None = None
    try:
        for event in generate(pair, prepared, config, cancel=flag):
            if isinstance(event, Finished):
                finished = event
                break
            events.append(event)
            live.add(event)
            tokens.add(event)
            if throttle.due():
                yield GenerateView(running, render.output_html(tokens.html), _live_stats(live, "running"), skip, skip)
    except Exception as error:  # a model failure must not reach the user as a stack trace
        log.exception("generation failed")
        message = f"Generation failed ({type(error).__name__}): {error}"
        yield GenerateView(render.message_box(message, "error"), render.output_html(tokens.html),
                           _live_stats(live, "failed"), skip, skip)
        return
    assert finished is not None
    status = _save_generation(loaded, task, input_text, pairing_id, config, int(retrieval_k), events, finished)
    yield GenerateView(status, render.output_html(tokens.html), _final_stats(finished), skip,
                       privacy_report(pair, prepared, events, finished))


def _save_generation(loaded, task, input_text, pairing_id, config, retrieval_k, events, finished) -> str:
    stopped = finished.stats.stop_reason == "cancelled"
    done = "Stopped" if stopped else "Done"
    try:
        generation_id = storage.save_generation(
            method=config.method, task=task, input_text=input_text, text=finished.text, pairing=pairing_id,
            settings=settings_record(config, pairing_id, retrieval_k, loaded.name if loaded else None),
            tokens=events, stats=finished.stats, transcript=finished.transcript, history_id=save_history_row(loaded),
        )
    except Exception as error:  # the output is still shown; say it was not saved
        log.exception("saving the generation failed")
        return render.message_box(f"{done}, but saving it failed: {error}", "warning")
    return render.message_box(f"{done}: {finished.stats.new_tokens} tokens, saved as generation #{generation_id}.",
                              "warning" if stopped else "ok")


def stop_generation(request: gr.Request = None) -> GenerateView:
    """The Stop button: end this page's generation and show where it ended (saved if it had begun)."""
    skip = gr.skip()
    run = RUNS.stop(request, "generate")
    if run is None:
        return GenerateView(render.message_box("Stopped.", "info"), skip, skip, skip, skip)
    if not run.done:  # still loading the models: it ends without generating once they are loaded
        return GenerateView(render.message_box("Stopped. The models finish loading in the background.", "warning"),
                            skip, skip, skip, skip)
    return GenerateView(*run.state)


# --------------------------------------------------------------------------- layout


@dataclass
class GenerateControls:
    """The components other tabs reuse (the Compare tab runs on the same history and settings)."""

    history: gr.State
    task: gr.Dropdown
    input_text: gr.Textbox
    pairing: gr.Dropdown
    alpha: gr.Slider
    beta: gr.Slider
    draft_len: gr.Slider
    max_new_tokens: gr.Slider
    decoding: gr.Radio
    seed: gr.Number
    temperature: gr.Slider
    top_p: gr.Slider
    retrieval_k: gr.Slider
    downlink_top_k: gr.Number
    adaptive_draft: gr.Checkbox
    history_summary: gr.HTML


def build() -> GenerateControls:
    initial = read_sample(DEFAULT_SAMPLE)
    history_state = gr.State(initial)
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=340, elem_classes="ss-panel"):
            gr.Markdown("### 1 · Your history", elem_classes="ss-step")
            sample = gr.Dropdown(
                choices=[(label, key) for key, (label, _) in SAMPLES.items()], value=DEFAULT_SAMPLE,
                label="Sample user", info="Synthetic users bundled with the app",
            )
            upload = gr.File(label="…or upload your own history", file_types=[".json", ".jsonl", ".csv", ".txt"],
                             type="filepath", elem_id="history-upload", height=150)
            gr.Markdown(
                f"JSON, JSONL or CSV in the LongLaMP schemas (review, abstract, writing), or plain text with one item "
                f"per paragraph. At most {MAX_UPLOAD_BYTES // (1024 * 1024)} MB and {MAX_ITEMS} items.",
                elem_classes="ss-note")
            summary = gr.HTML(history_summary(initial), elem_id="history-summary")

            gr.Markdown("### 2 · Task and input", elem_classes="ss-step")
            task = gr.Dropdown(choices=[(TASK_LABELS[t], t) for t in TASKS], value="review", label="Task")
            input_text = gr.Textbox(value=SAMPLES[DEFAULT_SAMPLE][1], label="Input", lines=4, max_lines=12,
                                    elem_id="task-input")

            gr.Markdown("### 3 · Models and decoding", elem_classes="ss-step")
            choices = pairs.pairing_choices()
            default_pairing = pairs.default_pairing_id()
            pairing = gr.Dropdown(choices=choices, value=default_pairing, label="Pairing (Specialist → Generalist)")
            pairing_info = gr.Markdown(pairs.pairing_note(default_pairing), elem_classes="ss-note")
            method = gr.Dropdown(choices=METHOD_CHOICES, value="specsteer", label="Method",
                                 info=METHOD_INFO["specsteer"].description)
            with gr.Row():
                alpha = gr.Slider(0, 2, value=0.1, step=0.01, label="α (strictness)", elem_id="alpha",
                                  info="0 accepts every draft")
                beta = gr.Slider(0, 3, value=1.0, step=0.1, label="β (steering strength)")
            with gr.Row():
                draft_len = gr.Slider(1, 16, value=4, step=1, label="Draft length k")
                max_new_tokens = gr.Slider(1, 1024, value=96, step=1, label="Max new tokens", elem_id="max-new-tokens")
            with gr.Row():
                decoding = gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding")
                seed = gr.Number(value=0, precision=0, label="Seed")
            with gr.Accordion("Sampling and advanced settings", open=False):
                with gr.Row():
                    temperature = gr.Slider(0.05, 2, value=1.0, step=0.05, label="Temperature")
                    top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="Top-p")
                with gr.Row():
                    retrieval_k = gr.Slider(0, 10, value=3, step=1, label="History items retrieved (BM25 k)")
                    downlink_top_k = gr.Number(value=64, precision=0, minimum=0, label="Downlink top-k (0 = all)")
                with gr.Row():
                    exact = gr.Checkbox(value=False, label="Exact-target sampling (SpecSteer, sampling only)")
                    adaptive_draft = gr.Checkbox(
                        value=False, label="Adaptive draft length",
                        info="Each round drafts the k (at most the slider's) that the measured speed favours")

        with gr.Column(scale=3, min_width=420):
            with gr.Row():
                run = gr.Button("Generate", variant="primary", elem_id="generate-button")
                stop = gr.Button("Stop", variant="stop", elem_id="stop-button")
            status = gr.HTML(render.message_box("Ready. The models load on first use.", "info"), elem_id="generate-status")
            gr.HTML(render.legend_html())
            output = gr.HTML(render.output_html(""), elem_id="generate-output")
            stats = gr.HTML(elem_id="generate-stats")
            with gr.Accordion("What the Specialist sees (on your device)", open=True):
                retrieved = gr.HTML(retrieval_preview(initial, "review", SAMPLES[DEFAULT_SAMPLE][1], 3),
                                    elem_id="retrieved")
            with gr.Accordion("Privacy: what was sent to the cloud", open=False, elem_id="privacy-accordion"):
                privacy = gr.HTML(render.message_box("The transcript appears when the generation ends.", "info"),
                                  elem_id="privacy")

    preview_inputs = [history_state, task, input_text, retrieval_k]
    sample.input(load_sample, sample, [history_state, summary, task, input_text], api_name="load_sample").then(
        retrieval_preview, preview_inputs, retrieved, api_visibility="private", show_progress="hidden")
    upload.upload(load_upload, [upload, history_state], [history_state, summary, task], api_name="upload_history").then(
        retrieval_preview, preview_inputs, retrieved, api_visibility="private", show_progress="hidden")
    for trigger in (task.input, input_text.input, retrieval_k.release):
        trigger(retrieval_preview, preview_inputs, retrieved, api_visibility="private", show_progress="hidden",
                trigger_mode="always_last")
    pairing.input(pairing_changed, pairing, pairing_info, api_visibility="private", show_progress="hidden")
    method.input(lambda chosen: gr.update(info=METHOD_INFO[chosen].description if chosen in METHOD_INFO else ""),
                 method, method,
                 api_visibility="private", show_progress="hidden")

    # Shown at once, before the queue: the queue position appears beside it while others run first.
    queued = run.click(render.queued_status, None, status, queue=False, api_visibility="private",
                       show_progress="hidden")
    generation = queued.then(
        generate_stream,
        [history_state, task, input_text, pairing, method, alpha, beta, draft_len, max_new_tokens, decoding, seed,
         temperature, top_p, retrieval_k, downlink_top_k, exact, adaptive_draft],
        [status, output, stats, retrieved, privacy],  # the order of GenerateView
        api_name="generate", concurrency_id=MODELS_CONCURRENCY_ID, concurrency_limit=1,
    )
    stop.click(stop_generation, None, [status, output, stats, retrieved, privacy], cancels=[generation],
               api_name="stop_generate", queue=False)
    return GenerateControls(history_state, task, input_text, pairing, alpha, beta, draft_len, max_new_tokens,
                            decoding, seed, temperature, top_p, retrieval_k, downlink_top_k, adaptive_draft, summary)
