"""The operator's campaign panel: create a campaign (records, a stored run's outputs, task, methods, pairing and
decoding settings, its annotators or "open to anyone") with its estimated time, watch its comparisons being
generated in the background, stop it, read its results (leaderboard with intervals, win matrix, position bias,
agreement, annotators' counts and times) for one campaign or all, and export every judgement. On a public app
creating, stopping and exporting need the operator's token; reading results does not. Handlers:
``ui.campaign_handlers``; decisions: ``specsteer.service.campaign_form`` and ``specsteer.service.campaigns``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
from gradio.blocks import Block

from specsteer.data.datasets import EVALUATION_TASKS
from specsteer.method.catalog import PRIVATE_METHODS, method_label
from specsteer.service.app_service import AppService
from specsteer.service.campaign_form import (
    DATA_CHOICES,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_METHODS,
    DEFAULT_RECORDS,
    CampaignForm,
)
from specsteer.service.campaigns import CampaignService
from ui import pairs
from ui.campaign_handlers import ALL, CampaignHandlers
from ui.gpu_space import on_gpu
from ui.streaming import MODELS_CONCURRENCY_ID
from ui.wiring import QUIET

MODELS_SLOT: dict[str, Any] = {"concurrency_id": MODELS_CONCURRENCY_ID, "concurrency_limit": 1}
# The estimate reads stored runs (cached) and the records file: cheap, but one at a time.
ESTIMATE: dict[str, Any] = {**QUIET, "concurrency_id": "campaign_estimate", "concurrency_limit": 1}


@dataclass(frozen=True)
class CampaignPanel:
    """What a page that opens reads afresh: the campaigns, the stored runs, the form's estimate."""

    handlers: CampaignHandlers
    form: dict[str, Block]  # the form's widgets by CampaignForm field name
    estimate: gr.HTML
    run: gr.Dropdown
    chosen: gr.Dropdown


def build(service: CampaignService, app: AppService) -> CampaignPanel:
    handlers = CampaignHandlers(service, app)
    with gr.Accordion("New campaign", open=False, elem_id="campaign-create"):
        with gr.Row():
            name = gr.Textbox(label="Name", max_length=64, elem_id="campaign-name")
            task = gr.Dropdown(list(EVALUATION_TASKS), value="review", label="Task", elem_id="campaign-task")
            data = gr.Radio(list(DATA_CHOICES), value="sample", label="Records", elem_id="campaign-data")
            limit = gr.Number(
                value=DEFAULT_RECORDS,
                precision=0,
                minimum=1,
                maximum=500,
                label="Records (at most)",
                elem_id="campaign-limit",
            )
        upload = gr.File(
            label="Records file (JSONL / JSON / parquet)", type="filepath", visible=False, elem_id="campaign-upload"
        )
        run = gr.Dropdown(
            choices=[],
            label="Stored run whose outputs the campaign compares (nothing is generated)",
            visible=False,
            allow_custom_value=True,
            elem_id="campaign-run",
        )
        methods = gr.CheckboxGroup(
            [(method_label(m), m) for m in PRIVATE_METHODS],
            value=list(DEFAULT_METHODS),
            label="Methods",
            elem_id="campaign-methods",
        )
        picker = pairs.pairing_picker(app.pairs, "Pairing", "campaign-")
        with gr.Row():
            alpha = gr.Number(value=0.1, label="SpecSteer α", elem_id="campaign-alpha")
            beta = gr.Number(value=1.0, label="β", elem_id="campaign-beta")
            max_new_tokens = gr.Number(
                value=DEFAULT_MAX_NEW_TOKENS, precision=0, minimum=1, label="Max new tokens", elem_id="campaign-max-new"
            )
        estimate = gr.HTML(elem_id="campaign-estimate")
        with gr.Row():
            annotators = gr.Textbox(
                label="Annotators (comma-separated; each gets a join code)", elem_id="campaign-annotators"
            )
            open_to_anyone = gr.Checkbox(label="Open to anyone (names are not checked)", elem_id="campaign-open")
            token = gr.Textbox(label="Operator's token (public app)", type="password", elem_id="campaign-token")
        create = gr.Button("Create and generate", variant="primary", elem_id="campaign-create-button")
        created = gr.HTML(elem_id="campaign-created")
    with gr.Row():
        chosen = gr.Dropdown(
            choices=[ALL], value=ALL, label="Campaign", elem_id="campaign-pick", scale=3, allow_custom_value=True
        )
        refresh = gr.Button("Refresh", elem_id="campaign-refresh", scale=1)
        generate = gr.Button("Generate / resume", elem_id="campaign-generate", scale=1)
        stop = gr.Button("Stop generating", variant="stop", elem_id="campaign-stop", scale=1)
    status = gr.HTML(elem_id="campaign-status")
    results = gr.HTML(elem_id="campaign-results")
    with gr.Row():
        kind = gr.Radio(["jsonl", "csv"], value="jsonl", label="Export format", elem_id="campaign-export-kind")
        export = gr.Button("Export judgements", elem_id="campaign-export")
    exported = gr.File(label="Export", visible=False, elem_id="campaign-export-file")
    export_note = gr.HTML()
    just_created = gr.State("")
    # The form's widgets by CampaignForm field name (checked here): the handlers get their values as keyword
    # arguments, the /campaign_create endpoint's parameters.
    form: dict[str, Block] = CampaignForm.widgets(
        name=name,
        task=task,
        data=data,
        upload=upload,
        run=run,
        limit=limit,
        methods=methods,
        pairing=picker.pairing,
        runtime=picker.runtime,
        alpha=alpha,
        beta=beta,
        max_new_tokens=max_new_tokens,
        annotators=annotators,
        open_to_anyone=open_to_anyone,
        token=token,
    )
    created_event = create.click(
        handlers.create, None, [created, chosen, just_created], inputs_kwargs=form, api_name="campaign_create"
    )
    data.change(handlers.source_shown, data, [upload, run], **QUIET)
    run.change(handlers.run_chosen, run, [methods, alpha, beta], **QUIET)
    for widget in (data, task, limit, run, methods, picker.pairing, max_new_tokens):
        widget.change(handlers.estimate, None, estimate, inputs_kwargs=form, **ESTIMATE)
    generating = [
        # On ZeroGPU both are GPU tasks (ui.gpu_space.on_gpu); anywhere else the handlers as they are.
        created_event.then(
            on_gpu(handlers.generate_created, "campaign_generate"),
            [just_created, token],
            status,
            **MODELS_SLOT,
            api_name=False,
        ),
        generate.click(
            on_gpu(handlers.generate, "campaign_generate"),
            [chosen, token],
            status,
            **MODELS_SLOT,
            api_name="campaign_generate",
        ),
    ]
    chosen.change(handlers.show, chosen, [status, results], **QUIET)
    refresh.click(handlers.refresh_choices, chosen, chosen, **QUIET).then(
        handlers.show, chosen, [status, results], **QUIET
    )
    stop.click(handlers.stopped, chosen, status, cancels=generating, queue=False, api_name="campaign_stop")
    export.click(handlers.export, [chosen, kind, token], [exported, export_note], api_name="campaign_export")
    return CampaignPanel(handlers, form, estimate, run, chosen)


def on_load(panel: CampaignPanel, page: gr.Blocks) -> None:
    """List the campaigns and the stored runs afresh, and estimate the form's time, when a page opens."""
    page.load(panel.handlers.refresh_choices, None, [panel.chosen], **QUIET)
    page.load(panel.handlers.run_choices, None, [panel.run], **QUIET)
    page.load(panel.handlers.estimate, None, panel.estimate, inputs_kwargs=panel.form, **ESTIMATE)
