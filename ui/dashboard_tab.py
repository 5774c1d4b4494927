"""Dashboard tab: run an evaluation grid on LongLaMP records and look at quality against speed.

The batch itself is the service's ``evaluate`` (the grid of ``specsteer.evaluation.grid.run_grid_events``
on the run store ``app.py`` chose, ``storage.SqlRunStore``); it stores every finished cell at once,
so a run survives an app restart and can be reopened (or resumed under the same run name) later.
Stored runs are read, and an uploaded records file kept, through the service too. This module only
collects the grid's choices (:class:`GridForm`, turned into one ``EvalSpec``), turns the service's
events into frames (streamed from a ``ui.streaming.BackgroundRun``, which
Cancel stops), and draws the figures of ``specsteer.evaluation.plots`` and the table.

The Deployment view projects a stored run onto a bundled deployment profile: the service's
``deployment`` (the run's traces replayed at RTT 0–200 ms), ``plots.deployment_figure`` and
``plots.speedup_rows``, and the profile's sources (``render.profile_html``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import gradio as gr
import pandas as pd

from specsteer.data.datasets import (
    EVALUATION_TASKS,
    LONGLAMP_TASKS,
    DataError,
    resolve_data_source,
    shared_cogenesis_path,
    shared_data_path,
)
from specsteer.engine.settings import sentence
from specsteer.evaluation import plots
from specsteer.evaluation.deployment import PROFILES
from specsteer.evaluation.grid import (
    EvalResult,
    EvalSpec,
    GridProgress,
    paired_difference,
    run_facts,
    run_prompts,
    stronger_baseline,
    summarize,
)
from specsteer.evaluation.run_store import StoredRun
from specsteer.method.catalog import CORE_METHODS, METHODS, method_label
from specsteer.service.app_service import AppService, EvaluationEvent, Failed, Loading, Status
from ui import pairs, render
from ui.streaming import RUNS, Toast
from ui.uploads import NOT_AN_UPLOAD, UploadCheck, any_path, gradio_uploads
from ui.wiring import QUIET, PageRefresh, wire_run

log = logging.getLogger(__name__)

SOURCES = {
    "sample": "Bundled sample (synthetic, 3 records per task)",
    "shared": "Real records (../shared/data: LongLaMP; CoGenesis's test split)",
    "upload": "Uploaded LongLaMP file",
}
TABLE_HEADERS = list(plots.display_rows([{"method": "x"}])[0])


_V = TypeVar("_V")  # a view's fields: its components when an event is wired, their new values when it fires


class DashboardView(NamedTuple, Generic[_V]):
    status: _V
    quality: _V
    acceptance: _V
    table: _V
    runs: _V


class DeploymentView(NamedTuple):
    status: object
    figure: object
    table: object
    profile: object  # the profile's label, link and sources


DEFAULT_PROFILE = "phone-4g"
PROFILE_CHOICES = [(profile.label, name) for name, profile in PROFILES.items()]


# --------------------------------------------------------------------------- inputs


def parse_numbers(text: str, what: str) -> tuple[float, ...]:
    """ "1, 0.5, 0.1" -> (1.0, 0.5, 0.1); raises ValueError naming the bad entry."""
    values = []
    for part in (text or "").replace(";", ",").split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{what}: {part.strip()!r} is not a number.") from None
        if math.isnan(value):
            raise ValueError(f"{what}: NaN is not a grid value.")
        values.append(value)
    if not values:
        raise ValueError(f"{what}: give at least one number (comma-separated).")
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class GridForm:
    """The grid's widgets' values, by the /evaluate endpoint's parameter names."""

    source: str  # "sample", "shared" or "upload" (SOURCES)
    upload: str | None
    task: str
    records: float
    methods: Sequence[str]
    alphas: str  # comma-separated
    betas: str
    pairing: str
    runtime: str
    max_new_tokens: float
    draft_len: float
    run_name: str

    @staticmethod
    def widgets(**widgets: gr.components.Component) -> dict[str, gr.components.Component]:
        """The grid's widgets by field name; a TypeError unless they name exactly the fields."""
        names = [field.name for field in fields(GridForm)]
        if sorted(widgets) != sorted(names):
            raise TypeError(f"the grid's widgets {sorted(widgets)} are not the form's fields {sorted(names)}")
        return widgets

    def spec(self, keep_upload: Callable[[str, str], Path]) -> EvalSpec:
        """The one EvalSpec these values name; ``keep_upload`` keeps an uploaded records file (the service's
        ``keep_records``). ValueError (or DataError, OSError) saying what to change."""
        if self.source in ("sample", "shared"):
            data = resolve_data_source(self.source, self.task)
        elif self.upload:
            data = str(keep_upload(self.upload, self.task))
        else:
            raise ValueError("Upload a LongLaMP records file (JSONL or JSON) first.")
        return EvalSpec(
            data=data,
            task=self.task,
            methods=tuple(method for method in METHODS if method in set(self.methods or [])),
            alphas=parse_numbers(self.alphas, "α list"),
            betas=parse_numbers(self.betas, "β list"),
            limit=int(self.records),
            pairing=self.pairing,
            runtime=self.runtime,
            max_new_tokens=int(self.max_new_tokens),
            draft_len=int(self.draft_len),
            run_name=(self.run_name or "").strip() or None,
        )


def source_choices() -> list[tuple[str, str]]:
    has_shared = any(shared_data_path(task) for task in LONGLAMP_TASKS) or shared_cogenesis_path() is not None
    return [(label, key) for key, label in SOURCES.items() if key != "shared" or has_shared]


# --------------------------------------------------------------------------- figures and tables


def _speed_key(rows: Sequence[dict]) -> str:
    return "speedup" if any(row.get("speedup") is not None for row in rows) else "tok_per_s"


# Sizing the results table's columns. Left to itself, Gradio gives the columns widths that broke
# "acceptance" into "accep / tance", and a long run name took the width that speedup, rounds and the
# byte columns needed. Every column but the run's is as wide as its longest word or value (the
# table's monospace font: 8.4 px a character in Chromium, plus the cell's 16 px of padding); the run
# column has a fixed width and wraps its names between words.
_CHAR_PX = 8.5
_CELL_PADDING_PX = 24
_RUN_COLUMN = "run"
_RUN_COLUMN_WIDTH = "240px"


def table_update(table: pd.DataFrame) -> dict:
    """The results table with column widths that keep every header word whole and every column in view."""
    widths = []
    for column in table.columns:
        if column == _RUN_COLUMN:
            widths.append(_RUN_COLUMN_WIDTH)
            continue
        words = [*str(column).split(), *(str(value) for value in table[column])]
        widths.append(f"{round(max(map(len, words)) * _CHAR_PX + _CELL_PADDING_PX)}px")
    return gr.update(value=table, column_widths=widths)


def table_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """The rows as the results table: the standard columns, and the privacy columns where rows have them."""
    shown = plots.display_rows(rows)
    return pd.DataFrame(shown, columns=list(shown[0]) if shown else TABLE_HEADERS)


def figures(rows: Sequence[dict]):
    """(quality-vs-speed figure, acceptance-vs-alpha figure, table) of one run's summary rows."""
    table = table_frame(rows)
    quality = plots.quality_speed_figure(rows, "rougeL", _speed_key(rows))
    return quality, plots.acceptance_figure(rows), table


def compared_figures(runs: Sequence[tuple[str, list[dict]]]):
    """Several runs in one view: traces and table rows named after their run.

    Run names are the user's text: plotly would read ``<b>`` or ``<a href>`` in a trace name as
    markup, so they are escaped for it. The legend goes under the plot, where long names take
    the page's width instead of squeezing the plot.
    """
    if len(runs) == 1:
        return figures(runs[0][1])
    everything = [row for _, rows in runs for row in rows]
    speed = _speed_key(everything)
    quality = plots.quality_speed_figure([], "rougeL", speed)
    acceptance = plots.acceptance_figure([])
    tables = []
    for name, rows in runs:
        for source, target in (
            (plots.quality_speed_figure(rows, "rougeL", speed), quality),
            (plots.acceptance_figure(rows), acceptance),
        ):
            for trace in source.data:
                trace.name = f"{plots.plot_text(name)}: {trace.name}"
                target.add_trace(trace)
        shown = table_frame(rows)
        shown.insert(0, "run", name)
        tables.append(shown)
    quality.update_layout(title="ROUGE-L against speed — runs compared")
    for figure in (quality, acceptance):
        figure.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0})
    return quality, acceptance, pd.concat(tables, ignore_index=True)


def stored_rows(config: Mapping[str, object], cells: Sequence) -> list[dict]:
    """A stored run's summary rows; a run over records with private facts (CoGenesis) also gets the
    privacy audit's shares, when its records file is here to rebuild its prompts from."""
    if config.get("task") != "cogenesis":
        return summarize(cells)
    try:
        return summarize(cells, "cogenesis", run_prompts(config), run_facts(config))
    except (ValueError, OSError):  # the records file moved or is unreadable: the rows without privacy
        return summarize(cells)


def claim_notes(cells: Sequence) -> list[str]:
    """Each SpecSteer setting against the stronger of SLM+ and LLM, record by record on ROUGE-L and
    ROUGE-1, with 95 % bootstrap intervals (sentences for the status line)."""
    notes: list[str] = []
    for metric, name in (("rougeL", "R-L"), ("rouge1", "R-1")):
        baseline = stronger_baseline(cells, metric)
        if baseline is None:
            return notes
        steered = sorted(
            {cell.point for cell in cells if cell.point.method == "specsteer"},
            key=lambda point: (-(point.alpha or 0), point.beta or 0),
        )
        for point in steered:
            difference = paired_difference(cells, point, baseline, metric)
            if difference is not None:
                notes.append(
                    f"{plots.point_label(vars(point))} − {method_label(baseline.method)} (the stronger "
                    f"baseline) on {name}: {difference.describe()} (95 % bootstrap)."
                )
    return notes


def run_label(run: StoredRun) -> str:
    """How the run picker names a stored run (rendered as text, not HTML)."""
    config = run.config or {}
    return (
        f"#{run.id} {run.name} · {config.get('task', '?')} · {run.status} · "
        f"{run.cell_count}/{config.get('cells_total', '?')} cells"
    )


def chosen_run_ids(run_ids: Sequence[int] | int | None) -> list[int] | None:
    """The run picker's value as run ids; None when nothing (or something that is not an id) is chosen."""
    ids = [run_ids] if isinstance(run_ids, (int, str)) else list(run_ids or [])
    if not ids or not all(str(run_id).strip().isdigit() for run_id in ids):
        return None
    return [int(str(run_id).strip()) for run_id in ids]


# --------------------------------------------------------------------------- running a batch


def _progress_box(update: GridProgress) -> str:
    text = {"loading": "loading the models", "warmup": "warming up", "done": "finishing"}.get(update.stage)
    if update.stage == "running" and update.point is not None:
        point = {"method": update.point.method, "alpha": update.point.alpha, "beta": update.point.beta}
        text = f"{plots.point_label(point)} on record {update.record_id}"
    return render.progress_html(update.done, update.total, text or update.stage)


def _fail(message: str) -> DashboardView[object]:
    gr.Warning(render.esc(message))
    return _failed_view(message)


def _failed_view(message: str) -> DashboardView[object]:
    return DashboardView(render.message_box(message, "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip())


def evaluation_frames(
    events: Iterable[EvaluationEvent], run_choices: Callable[[], list[tuple[str, int]]]
) -> Iterator[DashboardView[object] | Toast]:
    """The service's events of one evaluation run as frames of this tab's outputs, with a toast for a failure;
    ``run_choices`` lists the stored runs afresh."""
    skip = gr.skip()
    for event in events:
        if isinstance(event, Failed):
            yield Toast(render.esc(event.message))
            yield _failed_view(event.message)._replace(runs=gr.update(choices=run_choices()))
        elif isinstance(event, (Status, Loading)):
            yield DashboardView(render.message_box(event.message, "busy"), skip, skip, skip, skip)
        elif isinstance(event, GridProgress):
            yield DashboardView(_progress_box(event), skip, skip, skip, skip)
        elif isinstance(event, EvalResult):
            quality, acceptance, table = figures(event.rows)
            cancelled = event.status == "cancelled"
            message = (
                f"Run “{event.run_name}” (#{event.run_id}) {event.status}: {event.computed} cells computed "
                f"now, {len(event.cells)} stored."
            )
            if cancelled:
                message += " Run it again under the same name to resume."
            yield DashboardView(
                render.message_box(message, "warning" if cancelled else "ok"),
                quality,
                acceptance,
                table_update(table),
                gr.update(choices=run_choices(), value=[event.run_id]),
            )


class DashboardTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService, uploads: UploadCheck = any_path) -> None:
        self.service = service
        self.uploads = uploads  # which paths run_batch may read (build() passes Gradio's own uploads)

    def run_choices(self) -> list[tuple[str, int]]:
        """Stored runs for the run picker, newest first."""
        return [(run_label(run), run.id) for run in self.service.stored_runs()]

    def open_runs(self, run_ids: Sequence[int] | int | None) -> DashboardView[object]:
        """Reopen stored runs (one, or several to compare them)."""
        ids = chosen_run_ids(run_ids)
        if ids is None:
            message = "Choose one or more stored runs."
            gr.Warning(message)
            return DashboardView(render.message_box(message, "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip())
        runs = []
        for run_id in ids:
            stored = self.service.run_results(run_id)
            if stored is None:
                return DashboardView(
                    render.message_box(f"Run #{run_id} does not exist.", "error"),
                    gr.skip(),
                    gr.skip(),
                    gr.skip(),
                    gr.skip(),
                )
            run, cells = stored.run, stored.cells
            runs.append((f"#{run.id} {run.name}", stored_rows(run.config, cells)))
            claims = claim_notes(cells) if len(ids) == 1 else []
        quality, acceptance, table = compared_figures(runs)
        names = ", ".join(name for name, _ in runs)
        status = render.message_box(" ".join([f"Showing {names}.", *claims]), "ok")
        return DashboardView(status, quality, acceptance, table_update(table), gr.skip())

    def deployment(self, run_ids: Sequence[int] | int | None, profile: str) -> DeploymentView:
        """The Deployment view: the first chosen run projected onto ``profile`` at RTT 0–200 ms."""
        skip = gr.skip()
        sources = render.profile_html(PROFILES[profile]) if profile in PROFILES else skip
        ids = chosen_run_ids(run_ids)
        if ids is None:
            return DeploymentView(
                render.message_box("Choose a stored run above to project it.", "info"), None, None, sources
            )
        run = self.service.stored_run(ids[0])
        if run is None:
            return DeploymentView(render.message_box(f"Run #{ids[0]} does not exist.", "error"), None, None, sources)
        name = f"#{run.id} {run.name}"
        try:
            report = self.service.deployment(run.id, profile)
        except ValueError as error:
            return DeploymentView(render.message_box(str(error), "error"), None, None, sources)
        if report.traced == 0:
            message = (
                f"Run “{name}” has no finished cells yet: there is nothing to project."
                if not report.cells
                else f"Run “{name}” was stored before generations kept their traces (each model pass and "
                "link message with its time), so none of its "
                f"{report.cells} cells can be projected. Run the same grid again under a new name to "
                "see its deployment."
            )
            return DeploymentView(render.message_box(message, "warning"), None, None, sources)
        notes = [f"Projected {report.traced} traced generations of run “{name}” onto “{report.profile.label}”."]
        if report.untraced:
            notes.append(f"{report.untraced} cells stored without a trace are left out.")
        methods = {row["method"] for row in report.rows}
        if "llm" not in methods:
            notes.append("The run has no LLM cells, so there is no speedup over the cloud-streamed LLM to show.")
        elif "specsteer" not in methods:
            notes.append("The run has no SpecSteer cells: the table shows LLM alone.")
        if len(ids) > 1:
            notes.append("The view projects one run at a time: the first one chosen.")
        table = pd.DataFrame(plots.speedup_rows(report.rows, report.table_rtts_ms))
        return DeploymentView(
            render.message_box(" ".join(notes), "ok"),
            plots.deployment_figure(report.rows, report.profile.label, name),
            table,
            sources,
        )

    def run_batch(self, request: gr.Request | None = None, **values: object) -> Iterator[DashboardView[object]]:
        """Run (or resume) an evaluation grid, streaming progress, then show its figures and table.

        ``values``: the grid's widgets, by :class:`GridForm` field name.
        """
        try:
            form = GridForm(**values)  # type: ignore[arg-type]
            if form.source not in ("sample", "shared") and form.upload and not self.uploads(form.upload):
                raise ValueError(f"{Path(form.upload).name}: {NOT_AN_UPLOAD}")
            spec = form.spec(self.service.keep_records)
        except (ValueError, DataError, OSError) as error:
            yield _fail(sentence(str(error)))
            return

        def produce(flag):
            return evaluation_frames(self.service.evaluate(spec, cancel=flag), self.run_choices)

        for frame in RUNS.start(request, "dashboard", produce, width=len(DashboardView._fields)).frames():
            yield DashboardView(*frame)

    def cancel(self, request: gr.Request | None = None) -> DashboardView[object]:
        """The Cancel button: stop after the current token; finished cells stay stored (and resumable)."""
        skip = gr.skip()
        run = RUNS.stop(request, "dashboard", timeout=30.0)
        if run is not None and run.done:
            return DashboardView(*run.state)
        message = "Cancelled. Finished cells stay stored; run again under the same name to resume."
        return DashboardView(
            render.message_box(message, "warning"), skip, skip, skip, gr.update(choices=self.run_choices())
        )


# --------------------------------------------------------------------------- layout


def build(service: AppService) -> PageRefresh:
    """Builds the tab; returns what a page that opens reads afresh (the stored runs)."""
    tab = DashboardTab(service, gradio_uploads())
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
            run_name = gr.Textbox(label="Run name (optional; the same name resumes)", elem_id="run-name")
            with gr.Row():
                run = gr.Button("Run evaluation", variant="primary", elem_id="dashboard-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="dashboard-cancel")
        with gr.Column(scale=3, min_width=420):
            status = gr.HTML(
                render.message_box("Choose the data and the grid, then run.", "info"), elem_id="dashboard-status"
            )
            with gr.Row(equal_height=False):
                # Custom values: API clients may name a run id this page has not listed yet.
                runs = gr.Dropdown(
                    tab.run_choices(),
                    value=[],
                    multiselect=True,
                    scale=4,
                    allow_custom_value=True,
                    label="Stored runs (choose several to compare)",
                    elem_id="run-picker",
                )
                show = gr.Button("Show", scale=1, elem_id="show-runs")
            quality = gr.Plot(label="Quality against speed", elem_id="quality-plot")
            acceptance = gr.Plot(label="Acceptance against α", elem_id="acceptance-plot")
    # The table spans the page: next to the settings its 14 columns (15 when runs are compared)
    # had a few dozen pixels each, and the speed, round and byte columns scrolled out of sight.
    table = gr.Dataframe(headers=TABLE_HEADERS, interactive=False, label="Results", elem_id="results-table", wrap=True)
    gr.Markdown(plots.TABLE_NOTE, elem_classes="ss-note")

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
        deployment_plot = gr.Plot(label="Projected tokens/s against round-trip time", elem_id="deployment-plot")
        with gr.Row():
            speedups = gr.Dataframe(
                interactive=False,
                label="SpecSteer's projected speedup over the cloud-streamed LLM, by round-trip time",
                elem_id="deployment-table",
                wrap=True,
            )
        gr.Markdown(plots.PROJECTION_CAPTION, elem_classes="ss-note")
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
    )
    outputs = list(DashboardView(status, quality, acceptance, table, runs))
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
    )
    shown = show.click(tab.open_runs, runs, outputs, api_name="open_runs")
    deployment_outputs = [deployment_status, deployment_plot, speedups, profile_sources]  # DeploymentView
    project.click(tab.deployment, [runs, profile], deployment_outputs, api_name="deployment")
    shown.then(tab.deployment, [runs, profile], deployment_outputs, **QUIET)
    profile.select(tab.deployment, [runs, profile], deployment_outputs, **QUIET)
    upload.upload(lambda: "upload", None, source, **QUIET)
    return PageRefresh(lambda: gr.update(choices=tab.run_choices()), [runs])
