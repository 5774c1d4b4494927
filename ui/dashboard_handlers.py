"""The Dashboard tab's handlers over the service: each takes a few widget values and returns one typed view
(testable without a server); the layout and wiring are in ui/dashboard_tab.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import gradio as gr
import pandas as pd

from specsteer.data.record_files import DataError
from specsteer.engine.settings import sentence
from specsteer.evaluation import deployment_plots
from specsteer.evaluation.deployment_profiles import PROFILES
from specsteer.evaluation.grid import EvalResult, GridProgress
from specsteer.evaluation.timing import left_out_sentence
from specsteer.service.app_service import AppService
from specsteer.service.evaluation_runs import (
    EMPTY_STORE,
    GridForm,
    chosen_run_ids,
    chosen_series,
    default_run_ids,
    deployment_takeaway,
    numbers_of,
    run_label,
    run_numbers,
    run_title,
    runtime_note,
    series_label,
    series_labels,
    timing_note,
)
from specsteer.service.events import EvaluationEvent, Failed, Loading, Status
from specsteer.service.judge_report import JudgeReader, run_table
from ui import render
from ui.dashboard_figures import compared_figures, differences_frame, figures, table_update
from ui.markup import esc
from ui.streaming import NOT_YOURS, RUNS, Toast
from ui.uploads import NOT_AN_UPLOAD, UploadCheck, any_path

_V = TypeVar("_V")  # a view's fields: its components when an event is wired, their new values when it fires


class DashboardView(NamedTuple, Generic[_V]):
    status: _V
    quality: _V
    acceptance: _V
    table: _V
    differences: _V  # the paired differences, one row per SpecSteer setting and baseline
    runs: _V


class DeploymentView(NamedTuple, Generic[_V]):
    status: _V
    figure: _V
    table: _V
    profile: _V  # the profile's label, link and sources
    series: _V  # the series drawn (at most six) and those there are to choose from
    takeaway: _V  # one line read off the numbers


DEFAULT_PROFILE = "phone-4g"


PROFILE_CHOICES = [(profile.label, name) for name, profile in PROFILES.items()]


def _progress_box(update: GridProgress) -> str:
    text = {"loading": "loading the models", "warmup": "warming up", "done": "finishing"}.get(update.stage)
    if update.stage == "running" and update.point is not None:
        text = f"{update.point.display} on record {update.record_id}"
    return render.progress_html(update.done, update.total, text or update.stage)


def _fail(message: str) -> DashboardView:
    gr.Warning(esc(message))
    return _failed_view(message)


def _failed_view(message: str) -> DashboardView:
    return _status_only(render.message_box(message, "error"))


def _status_only(status: str) -> DashboardView:
    skip = gr.skip()
    return DashboardView(status, skip, skip, skip, skip, skip)


def _shown(figure: object) -> dict:
    """A figure (or table) shown: every output starts hidden, so that an empty page holds no blank plot."""
    return gr.update(value=figure, visible=True)


def _differences(frame: pd.DataFrame | None) -> dict:
    return table_update(frame) if frame is not None else gr.update(value=None, visible=False)


def _status(lines: Sequence[str], kind: str = "ok") -> str:
    return render.message_box(" ".join(filter(None, lines)), kind)


def evaluation_frames(
    events: Iterable[EvaluationEvent], run_choices: Callable[[], list[tuple[str, int]]]
) -> Iterator[DashboardView | Toast]:
    """The service's events of one evaluation run as frames of this tab's outputs, with a toast for a failure;
    ``run_choices`` lists the stored runs afresh."""
    for event in events:
        if isinstance(event, Failed):
            yield Toast(esc(event.message))
            yield _failed_view(event.message)._replace(runs=gr.update(choices=run_choices()))
        elif isinstance(event, (Status, Loading)):
            yield _status_only(render.message_box(event.message, "busy"))
        elif isinstance(event, GridProgress):
            yield _status_only(_progress_box(event))
        elif isinstance(event, EvalResult):
            numbers = numbers_of(event.rows, event.cells)
            quality, acceptance, table = figures(list(numbers.rows))
            cancelled = event.status == "cancelled"
            message = (
                f"Run “{event.run_name}” (#{event.run_id}) {event.status}: {event.computed} cells computed "
                f"now, {len(event.cells)} stored."
            )
            if cancelled:
                message += " Run it again under the same name to resume."
            yield DashboardView(
                _status([message, *numbers.counts, timing_note(event.cells)], "warning" if cancelled else "ok"),
                _shown(quality),
                _shown(acceptance),
                table_update(table),
                _differences(differences_frame([(event.run_name, numbers.differences)])),
                gr.update(choices=run_choices(), value=[event.run_id]),
            )


def _unprojected(status: str, sources: object) -> DeploymentView:
    """The Deployment view with nothing to draw: its figure, table and series picker hidden."""
    hidden = gr.update(value=None, visible=False)
    return DeploymentView(status, hidden, hidden, sources, gr.update(visible=False), "")


class DashboardTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService, uploads: UploadCheck = any_path, judges: JudgeReader | None = None) -> None:
        self.service = service
        self.uploads = uploads  # which paths run_batch may read (build() passes Gradio's own uploads)
        self.judges = judges  # the runs' LLM-judge grades, shown beside ROUGE (None: no judge column)

    def run_choices(self) -> list[tuple[str, int]]:
        """Stored runs for the run picker, newest first."""
        return [(run_label(run), run.id) for run in self.service.stored_runs()]

    def opening_view(self) -> DashboardView:
        """What a page opens on: the stored runs listed with the default one chosen (``default_run_ids``: an
        example run), and its view; a sentence, and nothing drawn, when there is no stored run at all."""
        stored = self.service.stored_runs()
        chosen = default_run_ids(stored)
        picker = gr.update(choices=[(run_label(run), run.id) for run in stored], value=chosen)
        if not chosen:
            return _status_only(render.message_box(EMPTY_STORE, "info"))._replace(runs=picker)
        return self.open_runs(chosen)._replace(runs=picker)

    def open_runs(self, run_ids: Sequence[int] | int | None) -> DashboardView:
        """Reopen stored runs (one, or several to compare them)."""
        ids = chosen_run_ids(run_ids)
        if ids is None:
            message = "Choose one or more stored runs." if self.service.stored_runs() else EMPTY_STORE
            gr.Warning(message)
            return _status_only(render.message_box(message, "error"))
        runs, differences, notes, timings = [], [], [], []
        for run_id in ids:
            stored = self.service.run_results(run_id)
            if stored is None:
                return _status_only(render.message_box(f"Run #{run_id} does not exist.", "error"))
            run, cells = stored.run, stored.cells
            numbers = run_numbers(run, cells)
            rows, judged = list(numbers.rows), list[str]()
            if self.judges is not None:
                rows, judged = run_table(self.judges, run.id, rows)
            runs.append((run_title(run), rows))
            differences.append((run_title(run), numbers.differences))
            notes = [runtime_note(run.config), *numbers.counts, *judged] if len(ids) == 1 else []
            timing = timing_note(cells)
            if timing:
                timings.append(f"#{run.id}: {timing}" if len(ids) > 1 else timing)
        quality, acceptance, table = compared_figures(runs)
        names = ", ".join(name for name, _ in runs)
        paired = " The paired differences are in the table under the results." if any(d for _, d in differences) else ""
        return DashboardView(
            _status([f"Showing {names}.", *notes, *timings, paired]),
            _shown(quality),
            _shown(acceptance),
            table_update(table),
            _differences(differences_frame(differences)),
            gr.skip(),
        )

    def deployment(
        self, run_ids: Sequence[int] | int | None, profile: str, series: Sequence[str] | None = None
    ) -> DeploymentView:
        """The Deployment view: the first chosen run projected onto ``profile`` at RTT 0–200 ms, at most six of
        its series drawn (``series``, else the default ones: ``evaluation_runs.default_series``), with a line
        read off the numbers."""
        skip = gr.skip()
        profile = profile if isinstance(profile, str) else ""  # an API caller may send any JSON value
        sources = render.profile_html(PROFILES[profile]) if profile in PROFILES else skip
        ids = chosen_run_ids(run_ids)
        if ids is None:
            return _unprojected(render.message_box("Choose a stored run above to project it.", "info"), sources)
        run = self.service.stored_run(ids[0])
        if run is None:
            return _unprojected(render.message_box(f"Run #{ids[0]} does not exist.", "error"), sources)
        name = run_title(run)
        try:
            report = self.service.deployment(run.id, profile)
        except ValueError as error:
            return _unprojected(render.message_box(str(error), "error"), sources)
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
            return _unprojected(render.message_box(message, "warning"), sources)
        if report.projected == 0:
            message = (
                f"Run “{name}”: {left_out_sentence(report.disturbed, quality_kept=False)} Nothing is left to project."
            )
            return _unprojected(render.message_box(message, "warning"), sources)
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
        rtt = report.profile.link.rtt_ms
        shown = chosen_series(report.rows, series, rtt)
        rows = [row for row in report.rows if series_label(row) in shown]
        every = series_labels(report.rows)
        if len(every) > len(shown):
            notes.append(f"{len(shown)} of its {len(every)} series are drawn; choose others under the table.")
        takeaway = deployment_takeaway(report.rows, shown, report.profile.label, rtt)
        return DeploymentView(
            render.message_box(" ".join(notes), "ok"),
            _shown(deployment_plots.deployment_figure(rows, report.profile.label, name)),
            table_update(pd.DataFrame(deployment_plots.speedup_rows(rows, report.table_rtts_ms))),
            sources,
            gr.update(choices=every, value=shown, visible=len(every) > 1),
            render.message_box(takeaway, "info") if takeaway else "",
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
        run = RUNS.stop(request, "dashboard", timeout=30.0)
        if run is None:  # another session's run (or none): never claim to have cancelled it
            return _status_only(render.message_box(NOT_YOURS, "warning"))
        if run.done:
            return DashboardView(*run.state)
        message = "Cancelled. Finished cells stay stored; run again under the same name to resume."
        return _status_only(render.message_box(message, "warning"))._replace(runs=gr.update(choices=self.run_choices()))
