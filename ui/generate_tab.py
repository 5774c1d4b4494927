"""Generate tab: a personal history, one input, one method; the output streams token by token.

Layout: settings on the left (history, task and input, models and decoding), results on the right
(coloured token stream, live statistics, what the Specialist saw, what was sent to the cloud).

This module only lays out and wires. Its settings widgets reach the handler as keyword arguments named
after the fields of ``specsteer.engine.settings.GenerationSettings`` (Gradio's ``inputs_kwargs``), which the
``AppService`` turns into one validated value; the handlers (``ui.generate_handlers.GenerateTab``) turn the
service's events into ``render`` calls, and tests call them with no server.
"""

from __future__ import annotations

from functools import partial

import gradio as gr

from specsteer.cloud.api import CLOUD_SECRET_ENV
from specsteer.data.history import MAX_ITEMS
from specsteer.data.history_upload import MAX_UPLOAD_BYTES
from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS
from specsteer.data.tasks import TASK_FOR_SCHEMA, TASKS
from specsteer.method.catalog import METHOD_INFO, METHODS
from specsteer.service.app_service import AppService
from specsteer.service.page import PAGE_DEFAULTS as DEFAULTS
from specsteer.service.page import environment_cloud, read_sample
from ui import lora_teach, pairs, render
from ui.generate_handlers import (
    WAITING_FOR_TRANSCRIPT,
    GenerateTab,
    GenerateView,
    SampleView,
    UploadView,
    cloud_widget,
    history_summary,
)
from ui.link_settings import link_widgets
from ui.p3_settings import p3_widgets
from ui.token_details import POPOVER_JS
from ui.token_html import legend_html, output_html
from ui.uploads import gradio_uploads
from ui.wiring import QUIET, GenerateControls, wire_run

PROMPT_STYLES = [("Paper (the paper's templates)", "paper"), ("Clean (the user's own text, no field labels)", "clean")]

# SpecSteer first (the default), then the baselines in the engine's order.
METHOD_ORDER = ("specsteer", *(m for m in METHODS if m != "specsteer"))


def choice_label(method: str) -> str:
    return METHOD_INFO[method].choice_label


METHOD_CHOICES = [(choice_label(m), m) for m in METHOD_ORDER]
ACCEPTANCE_CHOICES = [("Fixed α (the paper's)", "fixed"), ("CDA: α adapted to the cloud models' divergence", "cda")]
PRESS_GENERATE = "() => { document.querySelector('#generate-button').click(); }"


def build(service: AppService) -> GenerateControls:
    tab = GenerateTab(service, gradio_uploads())
    initial = read_sample(DEFAULT_SAMPLE)
    history_state = gr.State(initial)
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=340, elem_classes="ss-panel"):
            gr.Markdown("### 1 · Your history", elem_classes="ss-step")
            sample = gr.Dropdown(
                choices=[(user.label, key) for key, user in SAMPLE_USERS.items()],
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
                value=SAMPLE_USERS[DEFAULT_SAMPLE].input_text,
                label="Input",
                lines=4,
                max_lines=12,
                elem_id="task-input",
            )

            gr.Markdown("### 3 · Models and decoding", elem_classes="ss-step")
            picker = pairs.pairing_picker(service.pairs, "Pairing (Specialist → Generalist)", runtime=DEFAULTS.runtime)
            taught = lora_teach.build(service, history_state, task, picker.pairing, picker.runtime)
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
                acceptance = gr.Dropdown(
                    choices=ACCEPTANCE_CHOICES,
                    value=DEFAULTS.acceptance,
                    label="Acceptance (SpecSteer)",
                    elem_id="acceptance",
                    info="CDA lowers α per draft where the cloud's two models disagree",
                )
                cda_lambda = gr.Number(
                    value=DEFAULTS.cda_lambda,
                    minimum=0,
                    label="CDA λ",
                    elem_id="cda-lambda",
                    info="α·exp(−λ·JSD): at most halves α at λ = 1",
                )
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
                p3 = p3_widgets(DEFAULTS)
                address, address_problem = environment_cloud()
                with gr.Row(equal_height=False, elem_classes="ss-bottom-row"):
                    cloud = cloud_widget(service.exposure, address)
                    test_cloud = gr.Button("Test connection", scale=1, min_width=120, size="md", elem_id="test-cloud")
                gr.Markdown(
                    "Empty: both models run inside this app. An address of `python -m specsteer cloud`: "
                    "only the Specialist (and your history) stays here. Its shared secret is read from "
                    f"`${CLOUD_SECRET_ENV}`, never typed into the page.",
                    elem_classes="ss-note",
                )
                cloud_check = gr.HTML(
                    render.message_box(address_problem, "warning") if address_problem else "", elem_id="cloud-check"
                )
                link = link_widgets(DEFAULTS)

        with gr.Column(scale=3, min_width=420):
            with gr.Row():
                run = gr.Button("Generate", variant="primary", elem_id="generate-button")
                stop = gr.Button("Stop", variant="stop", elem_id="stop-button")
            status = gr.HTML(
                render.message_box("Ready. The models load when the app starts (see above), or on first use.", "info"),
                elem_id="generate-status",
            )
            gr.HTML(legend_html())
            output = gr.HTML(output_html(""), elem_id="generate-output")
            stats = gr.HTML(elem_id="generate-stats")
            with gr.Accordion("What the Specialist sees (on your device)", open=True):
                retrieved = gr.HTML(
                    tab.preview(
                        initial,
                        initial_task,
                        SAMPLE_USERS[DEFAULT_SAMPLE].input_text,
                        DEFAULTS.retrieval_k,
                        DEFAULTS.prompt_style,
                    ),
                    elem_id="retrieved",
                )
            with gr.Accordion("Privacy: what was sent to the cloud", open=False, elem_id="privacy-accordion") as panel:
                guard = gr.Button(visible=False, variant="primary", size="md", elem_id="guard-offer")
                privacy = gr.HTML(render.message_box(WAITING_FOR_TRANSCRIPT, "info"), elem_id="privacy")
    follow_up = gr.State(None)

    settings = {
        "pairing": picker.pairing,
        "runtime": picker.runtime,
        "method": method,
        "alpha": alpha,
        "beta": beta,
        "acceptance": acceptance,
        "cda_lambda": cda_lambda,
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
        **p3,
        "cloud": cloud,
        **link,
        "specialist_lora": taught.label,
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
    generated = wire_run(
        run,
        stop,
        status,
        tab.generate,
        [history_state, task, input_text],
        list(GenerateView(status, output, stats, retrieved, privacy, follow_up)),
        inputs_kwargs=settings,
        api_name="generate",
        stop_work=tab.stop,
        stop_api_name="stop_generate",
    )
    # The guard's one click: its widget set to the offered n, then Generate pressed with every setting as it is.
    generated.then(tab.follow_privacy, follow_up, [panel, guard], **QUIET)
    guard.click(tab.take_guard_offer, follow_up, private_guard, **QUIET).then(None, js=PRESS_GENERATE, **QUIET)
    return GenerateControls(history_state, task, input_text, settings, picker.pairing)


def on_load(page: gr.Blocks) -> None:
    """Install the token popovers' script (placing and Escape; ui.token_details) when a page opens."""
    page.load(None, None, None, js=POPOVER_JS, **QUIET)
