"""The Dashboard tab's handlers over the service: each takes a few widget values and returns one typed view
(testable without a server); the layout and wiring are in ui/dashboard_tab.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import gradio as gr
import pandas as pd

from specsteer.data.datasets import DataError
from specsteer.engine.settings import sentence
from specsteer.evaluation import plots
from specsteer.evaluation.deployment_profiles import PROFILES
from specsteer.evaluation.grid import EvalResult, GridProgress
from specsteer.evaluation.timing import left_out_sentence
from specsteer.service.app_service import AppService
from specsteer.service.evaluation_runs import (
    GridForm,
    chosen_run_ids,
    claim_notes,
    run_label,
    run_title,
    runtime_note,
    stored_rows,
    timing_note,
)
from specsteer.service.events import EvaluationEvent, Failed, Loading, Status
from specsteer.service.judge_report import JudgeReader, run_table
from ui import render
from ui.dashboard_figures import compared_figures, figures, table_update
from ui.streaming import NOT_YOURS, RUNS, Toast
from ui.uploads import NOT_AN_UPLOAD, UploadCheck, any_path

_V = TypeVar("_V")  # a view's fields: its components when an event is wired, their new values when it fires


class DashboardView(NamedTuple, Generic[_V]):
    status: _V
    quality: _V
    acceptance: _V
    table: _V
    runs: _V


class DeploymentView(NamedTuple, Generic[_V]):
    status: _V
    figure: _V
    table: _V
    profile: _V  # the profile's label, link and sources


DEFAULT_PROFILE = "phone-4g"


PROFILE_CHOICES = [(profile.label, name) for name, profile in PROFILES.items()]


def _progress_box(update: GridProgress) -> str:
    text = {"loading": "loading the models", "warmup": "warming up", "done": "finishing"}.get(update.stage)
    if update.stage == "running" and update.point is not None:
        point = {"method": update.point.method, "alpha": update.point.alpha, "beta": update.point.beta}
        text = f"{plots.point_label(point)} on record {update.record_id}"
    return render.progress_html(update.done, update.total, text or update.stage)


def _fail(message: str) -> DashboardView:
    gr.Warning(render.esc(message))
    return _failed_view(message)


def _failed_view(message: str) -> DashboardView:
    return DashboardView(render.message_box(message, "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip())


def evaluation_frames(
    events: Iterable[EvaluationEvent], run_choices: Callable[[], list[tuple[str, int]]]
) -> Iterator[DashboardView | Toast]:
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
            message = " ".join(filter(None, [message, timing_note(event.cells)]))
            yield DashboardView(
                render.message_box(message, "warning" if cancelled else "ok"),
                quality,
                acceptance,
                table_update(table),
                gr.update(choices=run_choices(), value=[event.run_id]),
            )


class DashboardTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService, uploads: UploadCheck = any_path, judges: JudgeReader | None = None) -> None:
        self.service = service
        self.uploads = uploads  # which paths run_batch may read (build() passes Gradio's own uploads)
        self.judges = judges  # the runs' LLM-judge grades, shown beside ROUGE (None: no judge column)

    def run_choices(self) -> list[tuple[str, int]]:
        """Stored runs for the run picker, newest first."""
        return [(run_label(run), run.id) for run in self.service.stored_runs()]

    def open_runs(self, run_ids: Sequence[int] | int | None) -> DashboardView:
        """Reopen stored runs (one, or several to compare them)."""
        ids = chosen_run_ids(run_ids)
        if ids is None:
            message = "Choose one or more stored runs."
            gr.Warning(message)
            return DashboardView(render.message_box(message, "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip())
        runs, timings = [], []
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
            rows, judged = stored_rows(run.config, cells), list[str]()
            if self.judges is not None:
                rows, judged = run_table(self.judges, run.id, rows)
            runs.append((run_title(run), rows))
            claims = [runtime_note(run.config), *claim_notes(cells), *judged] if len(ids) == 1 else []
            timing = timing_note(cells)
            if timing:
                timings.append(f"#{run.id}: {timing}" if len(ids) > 1 else timing)
        quality, acceptance, table = compared_figures(runs)
        names = ", ".join(name for name, _ in runs)
        status = render.message_box(" ".join([f"Showing {names}.", *claims, *timings]), "ok")
        return DashboardView(status, quality, acceptance, table_update(table), gr.skip())

    def deployment(self, run_ids: Sequence[int] | int | None, profile: str) -> DeploymentView:
        """The Deployment view: the first chosen run projected onto ``profile`` at RTT 0–200 ms."""
        skip = gr.skip()
        profile = profile if isinstance(profile, str) else ""  # an API caller may send any JSON value
        sources = render.profile_html(PROFILES[profile]) if profile in PROFILES else skip
        ids = chosen_run_ids(run_ids)
        if ids is None:
            return DeploymentView(
                render.message_box("Choose a stored run above to project it.", "info"), None, None, sources
            )
        run = self.service.stored_run(ids[0])
        if run is None:
            return DeploymentView(render.message_box(f"Run #{ids[0]} does not exist.", "error"), None, None, sources)
        name = run_title(run)
        try:
            report = self.service.deployment(run.id, profile)
        except ValueError as error:
            return DeploymentView(render.message_box(str(error), "error"), None, None, sources)
        if report.traced == 0:
            if not report.cells:
                message = f"Run “{name}” has no finished cells yet: there is nothing to project."
            elif run.example:
                message = (
                    f"The example run “{name}” keeps its cells' outputs and statistics but not their traces (each "
                    "model pass and link message with its time), so that the examples stay small: none of its "
                    f"{report.cells} cells can be projected. Choose an example that keeps them (a LongLaMP grid), "
                    "or run a grid of your own."
                )
            else:
                message = (
                    f"Run “{name}” was stored before generations kept their traces (each model pass and link "
                    f"message with its time), so none of its {report.cells} cells can be projected. Run the same "
                    "grid again under a new name to see its deployment."
                )
            return DeploymentView(render.message_box(message, "warning"), None, None, sources)
        if report.projected == 0:
            message = (
                f"Run “{name}”: {left_out_sentence(report.disturbed, quality_kept=False)} Nothing is left to project."
            )
            return DeploymentView(render.message_box(message, "warning"), None, None, sources)
        notes = [
            f"Projected {report.projected} traced generations of run “{name}” onto “{report.profile.label}”, "
            "each read as a fresh request (every prompt token, none taken from the recorded run's cache) and "
            "charged each side's host overhead per round (sources below)."
        ]
        first_rtt = report.rows[0]["rtt_ms"] if report.rows else None
        unrecorded = sum(row["reuse_unrecorded"] for row in report.rows if row["rtt_ms"] == first_rtt)
        if unrecorded:
            notes.append(
                f"{unrecorded} generations were stored before their prompt-cache hits were recorded: their prompts "
                "are charged as recorded, which may leave part of them out."
            )
        if report.untraced:
            notes.append(f"{report.untraced} cells stored without a trace are left out.")
        if report.disturbed:
            notes.append(left_out_sentence(report.disturbed, quality_kept=False))
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

    def run_batch(self, request: gr.Request | None = None, **values: object) -> Iterator[DashboardView]:
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
            events = self.service.evaluate(spec, cancel=flag, operator_token=form.operator_token or "")
            return evaluation_frames(events, self.run_choices)

        for frame in RUNS.start(request, "dashboard", produce, width=len(DashboardView._fields)).frames():
            yield DashboardView(*frame)

    def cancel(self, request: gr.Request | None = None) -> DashboardView:
        """The Cancel button: stop after the current token; finished cells stay stored (and resumable)."""
        skip = gr.skip()
        run = RUNS.stop(request, "dashboard", timeout=30.0)
        if run is None:  # another session's run (or none): never claim to have cancelled it
            return DashboardView(render.message_box(NOT_YOURS, "warning"), skip, skip, skip, skip)
        if run.done:
            return DashboardView(*run.state)
        message = "Cancelled. Finished cells stay stored; run again under the same name to resume."
        return DashboardView(
            render.message_box(message, "warning"), skip, skip, skip, gr.update(choices=self.run_choices())
        )
