"""Dashboard tab: run an evaluation grid on LongLaMP records and look at quality against speed.

The batch itself is the service's ``evaluate`` (the grid of ``specsteer.evaluation.grid.run_grid_events``
on the run store ``app.py`` chose: the user's ``storage.SqlRunStore`` with the example runs beside it, read-only,
``specsteer.service.example_runs``); it stores every finished cell at once, so a run survives an app restart
and can be reopened (or resumed under the same run name) later. Stored runs are read, and an uploaded records
file kept, through the service too. This module only
collects the grid's choices (:class:`GridForm`, turned into one ``EvalSpec``), turns the service's
events into frames (streamed from a ``ui.streaming.BackgroundRun``, which
Cancel stops), and draws the figures of ``specsteer.evaluation.plots`` and the table.

The Deployment view projects a stored run onto a bundled deployment profile: the service's
``deployment`` (the run's traces replayed at RTT 0–200 ms), ``deployment_plots.deployment_figure`` and
``deployment_plots.speedup_rows`` for at most six series at a time, a line read off the numbers, and the profile's sources
(``render.profile_html``).

A page opens on one of the example runs that ship with the app (``evaluation_runs.default_run_ids``), shown;
every figure and table stays hidden until it has something to show, so an empty database gets a sentence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import gradio as gr

from specsteer.data.datasets import EVALUATION_TASKS
from specsteer.engine.settings import GenerationSettings
from specsteer.evaluation import deployment_plots, result_table
from specsteer.evaluation.deployment_profiles import PROFILES
from specsteer.method.catalog import CORE_METHODS, METHODS, method_label
from specsteer.service.app_service import AppService
from specsteer.service.campaigns import CampaignService
from specsteer.service.evaluation_runs import MAX_SERIES, GridForm, source_choices
from specsteer.service.judge_report import JudgeReader
from ui import campaign_beside_run, joined_view, pairs, render, sweep_view
from ui.dashboard_figures import TABLE_HEADERS
from ui.dashboard_handlers import DEFAULT_PROFILE, PROFILE_CHOICES, DashboardTab, DashboardView, DeploymentView
from ui.p3_settings import p3_widgets
from ui.streaming import GRID_CONCURRENCY_ID
from ui.uploads import gradio_uploads
from ui.wiring import QUIET, wire_run

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- figures and tables


# --------------------------------------------------------------------------- running a batch


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class DashboardOpening:
    """What a page that opens does: list the stored runs with the default one chosen and show it, its α × β
    view and its deployment."""

    tab: DashboardTab
    view: DashboardView
    sweep: sweep_view.SweepView
    sweep_handler: Callable[[object], sweep_view.SweepView]
    deployment_inputs: list
    deployment: DeploymentView

    def on_load(self, page: gr.Blocks) -> None:
        opened = page.load(self.tab.opening_view, None, list(self.view), **QUIET)
        opened = opened.then(self.sweep_handler, self.view.runs, list(self.sweep), **QUIET)
        opened.then(self.tab.deployment, self.deployment_inputs, list(self.deployment), **QUIET)


def build(
    service: AppService, campaigns: CampaignService | None = None, judges: JudgeReader | None = None
) -> DashboardOpening:
    """Builds the tab (``judges``: the runs' LLM-judge grades, a column beside ROUGE); returns what a page that
    opens does (lists the stored runs and shows the default one)."""
    tab = DashboardTab(service, gradio_uploads(), judges)
    gr.Markdown(
        "Runs a grid of methods × α × β over LongLaMP records and stores every result as it finishes. "
        "ROUGE is the F-measure × 100; speed is measured in this run, so compare methods within a run. "
        "Use the same run name to resume an interrupted run.",
        elem_classes="ss-note",
    )
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320, elem_classes="ss-panel"):
            source = gr.Radio(source_choices(), value="sample", label="Data")
            upload = gr.File(
                label="LongLaMP records file (JSONL or JSON)",
                file_types=[".jsonl", ".json"],
                type="filepath",
                height=150,
                elem_id="dashboard-upload",
            )
            with gr.Row():
                task = gr.Dropdown([(render.TASK_LABELS[t], t) for t in EVALUATION_TASKS], value="review", label="Task")
                records = gr.Slider(1, 50, value=1, step=1, label="Records", elem_id="dashboard-records")
            methods = gr.CheckboxGroup(
                [(method_label(m), m) for m in METHODS], value=list(CORE_METHODS), label="Methods"
            )
            with gr.Row():
                alphas = gr.Textbox(value="1.0, 0.1", label="α list (SpecSteer)", elem_id="dashboard-alphas")
                betas = gr.Textbox(value="1.0", label="β list")
            picker = pairs.pairing_picker(service.pairs, "Pairing", elem_prefix="dashboard-")
            with gr.Row():
                max_new_tokens = gr.Slider(
                    1, 512, value=48, step=1, label="Max new tokens", elem_id="dashboard-max-new-tokens"
                )
                draft_len = gr.Slider(1, 16, value=4, step=1, label="Draft length k")
            p3 = p3_widgets(GenerationSettings(pairing=""), elem_prefix="dashboard-")  # method p3's k and τ
            run_name = gr.Textbox(label="Run name (optional; the same name resumes)", elem_id="run-name")
            # Public: a grid beyond a visitor's cap needs the operator's token (hidden locally: no cap to lift).
            operator_token = gr.Textbox(
                label="Operator token (larger grids)",
                type="password",
                value="",
                visible=service.exposure.public,
                elem_id="grid-operator-token",
            )
            with gr.Row():
                run = gr.Button("Run evaluation", variant="primary", elem_id="dashboard-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="dashboard-cancel")
        with gr.Column(scale=3, min_width=420):
            status = gr.HTML(render.message_box("Opening the stored runs…", "info"), elem_id="dashboard-status")
            with gr.Row(equal_height=False):
                # Custom values: API clients may name a run id this page has not listed yet.
                runs = gr.Dropdown(
                    tab.run_choices(),
                    value=[],
                    multiselect=True,
                    scale=4,
                    allow_custom_value=True,
                    label="Stored runs: yours, then the examples that ship with the app (choose several to compare)",
                    elem_id="run-picker",
                )
                show = gr.Button("Show", scale=1, elem_id="show-runs")
            quality = gr.Plot(label="Quality against speed", elem_id="quality-plot", visible=False)
            acceptance = gr.Plot(label="Acceptance against α", elem_id="acceptance-plot", visible=False)
    # The table spans the page: next to the settings its 14 columns (15 when runs are compared)
    # had a few dozen pixels each, and the speed, round and byte columns scrolled out of sight.
    if campaigns is not None:  # the human judgement of the same records, beside the run's ROUGE
        campaign_beside_run.build(campaigns, runs)
    table = gr.Dataframe(
        headers=TABLE_HEADERS,
        interactive=False,
        label="Results",
        elem_id="results-table",
        elem_classes="ss-wide-table",
        wrap=True,
        pinned_columns=1,
        visible=False,
    )
    gr.Markdown(result_table.TABLE_NOTE, elem_classes="ss-note")
    differences = gr.Dataframe(
        interactive=False,
        label="Paired differences, record by record: each SpecSteer setting against SLM+ and LLM on the records "
        "both have (95 % bootstrap over the run's records, 10,000 resamples, seed 0)",
        elem_id="paired-table",
        elem_classes="ss-wide-table",
        wrap=True,
        pinned_columns=1,
        visible=False,
    )
    sweep, sweep_handler = sweep_view.build(service, runs, show)  # the α × β view of the chosen run
    joined_view.build(service, runs)  # several runs over the same records as one table (specsteer report's)

    with gr.Accordion("Deployment: projected speed on a device and a cloud GPU", open=True, elem_id="deployment-view"):
        gr.Markdown(
            "Speed measured here is two models on this machine's CPU. This view replays the chosen run's "
            "recorded passes and messages under a deployment profile (a device Specialist, a cloud Generalist "
            "and the network between them, every number with its source) for round-trip times of 0–200 ms. "
            "It is a projection from traces, not a measurement on that hardware.",
            elem_classes="ss-note",
        )
        with gr.Row(equal_height=False, elem_classes="ss-bottom-row"):
            profile = gr.Dropdown(
                PROFILE_CHOICES,
                value=DEFAULT_PROFILE,
                label="Deployment profile",
                scale=4,
                elem_id="deployment-profile",
            )
            project = gr.Button("Project the chosen run", scale=1, variant="primary", elem_id="deployment-project")
        deployment_status = gr.HTML(
            render.message_box("Choose a stored run above, then project it.", "info"), elem_id="deployment-status"
        )
        takeaway = gr.HTML(elem_id="deployment-takeaway")
        deployment_plot = gr.Plot(
            label="Projected tokens/s against round-trip time", elem_id="deployment-plot", visible=False
        )
        with gr.Row():
            speedups = gr.Dataframe(
                interactive=False,
                label="Projected tokens/s and speedup over the cloud-streamed LLM, by round-trip time",
                elem_id="deployment-table",
                elem_classes="ss-wide-table",
                wrap=True,
                pinned_columns=1,
                visible=False,
            )
        series = gr.Dropdown(
            [],
            multiselect=True,
            max_choices=MAX_SERIES,
            label=f"Series drawn (at most {MAX_SERIES})",
            visible=False,
            elem_id="deployment-series",
        )
        gr.Markdown(deployment_plots.PROJECTION_CAPTION, elem_classes="ss-note")
        with gr.Accordion("The profile's numbers and their sources", open=False, elem_id="deployment-sources"):
            profile_sources = gr.HTML(render.profile_html(PROFILES[DEFAULT_PROFILE]), elem_id="deployment-profile-note")

    # The grid's widgets by GridForm field name (checked here): run_batch gets their values as keyword
    # arguments, the /evaluate endpoint's parameters.
    grid = GridForm.widgets(
        source=source,
        upload=upload,
        task=task,
        records=records,
        methods=methods,
        alphas=alphas,
        betas=betas,
        pairing=picker.pairing,
        runtime=picker.runtime,
        max_new_tokens=max_new_tokens,
        draft_len=draft_len,
        run_name=run_name,
        operator_token=operator_token,
        **p3,
    )
    view = DashboardView(status, quality, acceptance, table, differences, runs)
    outputs = list(view)
    offer = partial(pairs.offer_methods, METHODS, method_label)
    picker.pairing.change(offer, [picker.pairing, methods], methods, **QUIET)
    wire_run(
        run,
        cancel,
        status,
        tab.run_batch,
        [],
        outputs,
        inputs_kwargs=grid,
        api_name="evaluate",
        stop_work=tab.cancel,
        stop_api_name="cancel_evaluate",
        concurrency_id=GRID_CONCURRENCY_ID,
    )
    shown = show.click(tab.open_runs, runs, outputs, api_name="open_runs")
    deployment = DeploymentView(deployment_status, deployment_plot, speedups, profile_sources, series, takeaway)
    deployment_inputs = [runs, profile, series]
    project.click(tab.deployment, deployment_inputs, list(deployment), api_name="deployment")
    shown.then(tab.deployment, deployment_inputs, list(deployment), **QUIET)
    profile.select(tab.deployment, deployment_inputs, list(deployment), **QUIET)
    series.input(tab.deployment, deployment_inputs, list(deployment), **QUIET)
    upload.upload(lambda: "upload", None, source, **QUIET)
    return DashboardOpening(tab, view, sweep, sweep_handler, deployment_inputs, deployment)
