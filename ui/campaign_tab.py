"""The operator's campaign panel: create a campaign (records, task, methods, pairing and decoding settings, its
annotators or "open to anyone"), watch its comparisons being generated in the background, stop it, read its
results (leaderboard with intervals, win matrix, position bias, agreement, annotators' counts and times)
for one campaign or all, and export every judgement. On a public app creating, stopping and exporting need
the operator's token; reading results does not. Decisions are ``specsteer.service.campaigns``'."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import gradio as gr

from specsteer.data.datasets import EVALUATION_TASKS
from specsteer.method.catalog import PRIVATE_METHODS, method_label
from specsteer.service.app_service import AppService
from specsteer.service.campaign_values import CampaignError, CampaignRequest
from specsteer.service.campaigns import CampaignService
from specsteer.service.events import ExportRefused, Failed
from ui import campaign_render, pairs
from ui.gpu_space import on_gpu
from ui.render import esc, message_box
from ui.streaming import MODELS_CONCURRENCY_ID
from ui.wiring import QUIET

ALL = "All campaigns"
MODELS_SLOT: dict[str, Any] = {"concurrency_id": MODELS_CONCURRENCY_ID, "concurrency_limit": 1}
DATA_CHOICES = [
    ("Bundled sample", "sample"),
    ("Shared records", "shared"),
    ("CoGenesis dev", "shared:dev"),
    ("Uploaded file", "upload"),
]


def _whole(value: object, what: str) -> int | None:
    """A number box's value as a whole number (None when empty); CampaignError for text, NaN, ∞ or a fraction."""
    if value is None or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CampaignError(f"{what} must be a number.") from None
    if not math.isfinite(number) or number != int(number):
        raise CampaignError(f"{what} must be a whole number.")
    return int(number)


class CampaignHandlers:
    """The panel's handlers over the campaigns and the app's service (which keeps an uploaded records file)."""

    def __init__(self, service: CampaignService, app: AppService) -> None:
        self.service = service
        self.app = app

    def names(self) -> list[str]:
        return [campaign.name for campaign in self.service.campaigns()]

    def refresh_choices(self, current: str | None = None) -> Any:
        names = self.names()
        value = current if current in names or current == ALL else (names[0] if names else ALL)
        return gr.update(choices=[*names, ALL], value=value)

    def create(
        self,
        name: str,
        task: str,
        data: str,
        upload: str | None,
        limit: float | None,
        methods: list[str],
        pairing: str,
        runtime: str,
        alpha: float,
        beta: float,
        max_new_tokens: float,
        annotators: str,
        open_to_anyone: bool,
        token: str,
    ) -> tuple[str, Any, str]:
        """Store a campaign; its name for :meth:`generate_created` ("" when refused: nothing is generated).
        In public, the operator's token is checked first: a refused call reads no upload (up to 16 MiB)."""
        try:
            self.service.check_operator(token or "", "Creating a campaign")
            if data == "upload":
                if not upload:
                    raise CampaignError("Upload a records file, or choose the bundled sample or the shared records.")
                data = str(self.app.keep_records(upload, task))
            request = CampaignRequest(
                name=name or "",
                task=task,
                data=data,
                methods=tuple(methods or ()),
                settings={
                    "pairing": pairing,
                    "runtime": runtime,
                    "alpha": alpha,
                    "beta": beta,
                    "max_new_tokens": _whole(max_new_tokens, "Max new tokens") or 0,
                },
                limit=_whole(limit, "The number of records"),
                annotators=tuple(part.strip() for part in (annotators or "").split(",") if part.strip()),
                open_to_anyone=bool(open_to_anyone),
            )
            created = self.service.create(request, token or "")
        except (CampaignError, ExportRefused, ValueError) as error:
            return message_box(str(error), "error"), gr.skip(), ""
        codes = "".join(f"<li>{esc(who)}: <code>{esc(code)}</code></li>" for who, code in created.codes.items())
        shown = f"<p>Join codes (shown once; hand each to its annotator):</p><ul>{codes}</ul>" if codes else ""
        note = message_box(
            f"Campaign “{created.campaign.name}” stored: its {created.campaign.planned} comparison(s) are generated "
            "next, one by one (Stop ends it; Generate resumes it).",
            "ok",
        )
        return note + shown, self.refresh_choices(created.campaign.name), created.campaign.name

    def show(self, name: str | None) -> tuple[str, str]:
        """The campaign's status line and its results (or every campaign's results)."""
        try:
            status = "" if not name or name == ALL else campaign_render.status_html(self.service.status(name))
            report = self.service.report(None if not name or name == ALL else name)
        except (CampaignError, ValueError) as error:
            return message_box(str(error), "error"), ""
        return status, campaign_render.results_html(report)

    def generate(self, name: str | None, token: str) -> Iterator[str]:
        """Generate (or resume) the campaign's comparisons, its status line after each one. A queued event in
        the models' slot: it never runs beside a visitor's generation; Stop or a closed page ends it."""
        try:
            self.service.check_operator(token or "")
            campaign = self.service.campaign(name or "")
        except (CampaignError, ExportRefused) as error:
            yield message_box(str(error), "error")
            return
        for event in self.service.generate(campaign.name):
            if isinstance(event, Failed):
                yield message_box(event.message, "error")
                return
            yield campaign_render.status_html(self.service.status(campaign.name))

    def generate_created(self, name: str, token: str) -> Iterator[str]:
        """After Create: generate the campaign just stored, nothing when it was refused."""
        if name:
            yield from self.generate(name, token)

    def stopped(self, name: str | None) -> str:
        note = message_box("Stopped: the comparisons done stay stored; Generate resumes the campaign.", "info")
        try:
            return campaign_render.status_html(self.service.status(name or "")) + note
        except CampaignError:
            return note

    def export(self, name: str | None, kind: str, token: str) -> tuple[Any, str]:
        hidden = gr.update(value=None, visible=False)
        try:
            exported = self.service.export(
                "csv" if kind == "csv" else "jsonl", None if name in (None, "", ALL) else name, token or ""
            )
        except (CampaignError, ExportRefused, ValueError) as error:
            return hidden, message_box(str(error), "error")
        if exported.path is None:
            return hidden, message_box("No judgement yet: nothing to export.", "info")
        return gr.update(value=str(exported.path), visible=True), message_box(
            f"{exported.count} judgement(s) exported.", "ok"
        )


def build(service: CampaignService, app: AppService) -> CampaignHandlers:
    handlers = CampaignHandlers(service, app)
    with gr.Accordion("New campaign", open=False, elem_id="campaign-create"):
        with gr.Row():
            name = gr.Textbox(label="Name", max_length=64, elem_id="campaign-name")
            task = gr.Dropdown(list(EVALUATION_TASKS), value="review", label="Task", elem_id="campaign-task")
            data = gr.Radio(DATA_CHOICES, value="sample", label="Records", elem_id="campaign-data")
            limit = gr.Number(
                value=10, precision=0, minimum=1, maximum=500, label="Records (at most)", elem_id="campaign-limit"
            )
        upload = gr.File(label="Records file (JSONL / JSON / parquet)", type="filepath", elem_id="campaign-upload")
        methods = gr.CheckboxGroup(
            [(method_label(m), m) for m in PRIVATE_METHODS],
            value=list(PRIVATE_METHODS),
            label="Methods",
            elem_id="campaign-methods",
        )
        picker = pairs.pairing_picker(app.pairs, "Pairing", "campaign-")
        with gr.Row():
            alpha = gr.Number(value=0.1, label="SpecSteer α", elem_id="campaign-alpha")
            beta = gr.Number(value=1.0, label="β", elem_id="campaign-beta")
            max_new_tokens = gr.Number(
                value=96, precision=0, minimum=1, label="Max new tokens", elem_id="campaign-max-new"
            )
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
    created_event = create.click(
        handlers.create,
        [name, task, data, upload, limit, methods, picker.pairing, picker.runtime]
        + [alpha, beta, max_new_tokens, annotators, open_to_anyone, token],
        [created, chosen, just_created],
        api_name="campaign_create",
    )
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
    handlers.refresh_outputs = [chosen]  # type: ignore[attr-defined]
    return handlers


def on_load(handlers: CampaignHandlers, page: gr.Blocks) -> None:
    """List the campaigns afresh when a page opens."""
    page.load(handlers.refresh_choices, None, handlers.refresh_outputs, **QUIET)  # type: ignore[attr-defined]
