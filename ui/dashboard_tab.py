"""Dashboard tab: run an evaluation grid on LongLaMP records and look at quality against speed.

The batch itself is ``specsteer.evaluate.run_grid_events`` on ``storage.SqlRunStore``; it stores
every finished cell at once, so a run survives an app restart and can be reopened (or resumed under
the same run name) later. This module only collects the choices, turns the grid's progress events
into frames (streamed from a ``ui.streaming.BackgroundRun``, which Cancel stops), and draws the
figures of ``specsteer.plots``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import gradio as gr
import pandas as pd

import storage
from specsteer import plots
from specsteer.data import LONGLAMP_TASKS, DataError, resolve_data_source, shared_data_path
from specsteer.evaluate import EvalResult, EvalSpec, GridProgress, run_grid_events, summarize
from specsteer.history import MAX_UPLOAD_BYTES
from specsteer.methods import CORE_METHODS, METHODS, method_label
from storage.db import data_dir
from ui import pairs, render
from ui.generate_tab import MODELS_CONCURRENCY_ID, TASK_LABELS, load_pair_with_status
from ui.streaming import RUNS

log = logging.getLogger(__name__)

SOURCES = {
    "sample": "Bundled sample (synthetic, 3 records per task)",
    "shared": "Real LongLaMP records (../shared/data/longlamp)",
    "upload": "Uploaded LongLaMP file",
}
MAX_DATA_UPLOAD_BYTES = 10 * MAX_UPLOAD_BYTES
TABLE_HEADERS = list(plots.display_rows([{"method": "x"}])[0])


class DashboardView(NamedTuple):
    status: object
    quality: object
    acceptance: object
    table: object
    runs: object


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
            raise ValueError(f"{what}: {part.strip()!r} is not a number") from None
        if math.isnan(value):
            raise ValueError(f"{what}: NaN is not a grid value")
        values.append(value)
    if not values:
        raise ValueError(f"{what}: give at least one number (comma-separated)")
    return tuple(dict.fromkeys(values))


def data_path(source: str, task: str, upload: str | None) -> str:
    """The records file for the chosen source; uploads are copied into the data folder so resumes find them."""
    if source in ("sample", "shared"):
        return resolve_data_source(source, task)
    if not upload:
        raise ValueError("Upload a LongLaMP records file (JSONL or JSON) first.")
    source_path = Path(upload)
    size = source_path.stat().st_size
    if size > MAX_DATA_UPLOAD_BYTES:
        raise ValueError(f"The file is {size / 1e6:.1f} MB; the limit is {MAX_DATA_UPLOAD_BYTES // (1024 * 1024)} MB.")
    digest = hashlib.sha256(source_path.read_bytes()).hexdigest()[:16]
    target = data_dir() / "uploads" / f"{digest}{source_path.suffix.lower() or '.jsonl'}"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        shutil.copyfile(source_path, target)
    return str(target)


def source_choices() -> list[tuple[str, str]]:
    has_shared = any(shared_data_path(task) for task in LONGLAMP_TASKS)
    return [(label, key) for key, label in SOURCES.items() if key != "shared" or has_shared]


# --------------------------------------------------------------------------- figures and tables


def _speed_key(rows: Sequence[dict]) -> str:
    return "speedup" if any(row.get("speedup") is not None for row in rows) else "tok_per_s"


def figures(rows: Sequence[dict]):
    """(quality-vs-speed figure, acceptance-vs-alpha figure, table) of one run's summary rows."""
    table = pd.DataFrame(plots.display_rows(rows), columns=TABLE_HEADERS)
    quality = plots.quality_speed_figure(rows, "rougeL", _speed_key(rows))
    return quality, plots.acceptance_figure(rows), table


def compared_figures(runs: Sequence[tuple[str, list[dict]]]):
    """Several runs in one view: traces and table rows prefixed with the run's name."""
    if len(runs) == 1:
        return figures(runs[0][1])
    everything = [row for _, rows in runs for row in rows]
    speed = _speed_key(everything)
    quality = plots.quality_speed_figure([], "rougeL", speed)
    acceptance = plots.acceptance_figure([])
    tables = []
    for name, rows in runs:
        for source, target in ((plots.quality_speed_figure(rows, "rougeL", speed), quality),
                               (plots.acceptance_figure(rows), acceptance)):
            for trace in source.data:
                trace.name = f"{name}: {trace.name}"
                target.add_trace(trace)
        shown = pd.DataFrame(plots.display_rows(rows), columns=TABLE_HEADERS)
        shown.insert(0, "run", name)
        tables.append(shown)
    quality.update_layout(title="ROUGE-L against speed — runs compared")
    return quality, acceptance, pd.concat(tables, ignore_index=True)


def run_choices() -> list[tuple[str, int]]:
    """Stored runs, newest first (labels are rendered as text, not HTML)."""
    choices = []
    for run in storage.list_runs():
        config = run.config or {}
        total = config.get("cells_total", "?")
        choices.append((f"#{run.id} {run.name} · {config.get('task', '?')} · {run.status} · "
                        f"{run.cell_count}/{total} cells", run.id))
    return choices


def open_runs(run_ids: Sequence[int] | int | None) -> DashboardView:
    """Reopen stored runs (one, or several to compare them)."""
    ids = [run_ids] if isinstance(run_ids, (int, str)) else list(run_ids or [])
    if not ids or not all(str(run_id).strip().isdigit() for run_id in ids):
        message = "Choose one or more stored runs."
        gr.Warning(message)
        return DashboardView(render.message_box(message, "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip())
    runs = []
    for run_id in ids:
        run = storage.get_run(int(run_id))
        if run is None:
            return DashboardView(render.message_box(f"Run #{run_id} does not exist.", "error"),
                                 gr.skip(), gr.skip(), gr.skip(), gr.skip())
        runs.append((f"#{run.id} {run.name}", summarize(storage.run_cells(run.id))))
    quality, acceptance, table = compared_figures(runs)
    names = ", ".join(name for name, _ in runs)
    status = render.message_box(f"Showing {names}.", "ok")
    return DashboardView(status, quality, acceptance, table, gr.skip())


# --------------------------------------------------------------------------- running a batch


def _progress_box(update: GridProgress) -> str:
    text = {"loading": "loading the models", "warmup": "warming up", "done": "finishing"}.get(update.stage)
    if update.stage == "running" and update.point is not None:
        text = f"{plots.point_label({'method': update.point.method, 'alpha': update.point.alpha, 'beta': update.point.beta})}" \
               f" on record {update.record_id}"
    return render.progress_html(update.done, update.total, text or update.stage)


def run_batch(source: str, upload: str | None, task: str, records: float, methods: Sequence[str], alphas: str,
              betas: str, pairing_id: str, max_new_tokens: float, draft_len: float, run_name: str,
              request: gr.Request = None) -> Iterator[DashboardView]:
    """Run (or resume) an evaluation grid, streaming progress, then show its figures and table."""
    def produce(flag):
        return _run_batch(source, upload, task, records, methods, alphas, betas, pairing_id, max_new_tokens,
                          draft_len, run_name, flag)

    for frame in RUNS.start(request, "dashboard", produce, width=len(DashboardView._fields)).frames():
        yield DashboardView(*frame)


def _fail(message: str) -> DashboardView:
    gr.Warning(render.esc(message))
    return DashboardView(render.message_box(message, "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip())


def _run_batch(source, upload, task, records, methods, alphas, betas, pairing_id, max_new_tokens, draft_len,
               run_name, flag) -> Iterator[DashboardView]:
    skip = gr.skip()
    try:
        spec = EvalSpec(
            data=data_path(source, task, upload), task=task,
            methods=tuple(method for method in METHODS if method in set(methods or [])),
            alphas=parse_numbers(alphas, "α list"), betas=parse_numbers(betas, "β list"), limit=int(records),
            pairing=pairing_id, max_new_tokens=int(max_new_tokens), draft_len=int(draft_len),
            run_name=(run_name or "").strip() or None,
        ).validate()
        pairs.check_pairing(pairing_id)
    except (ValueError, DataError, OSError) as error:
        yield _fail(str(error))
        return

    try:
        pair = yield from load_pair_with_status(pairing_id,
                                                lambda status: DashboardView(status, skip, skip, skip, skip))
    except ValueError as error:
        yield _fail(str(error))
        return

    yield DashboardView(render.progress_html(0, 1, "reading the records"), skip, skip, skip, skip)
    result: EvalResult | None = None
    try:
        for event in run_grid_events(spec, storage.SqlRunStore(), pair=pair, cancel=flag):
            if isinstance(event, EvalResult):
                result = event
            else:
                yield DashboardView(_progress_box(event), skip, skip, skip, skip)
    except Exception as error:  # shown to the user, never as a traceback
        if not isinstance(error, (ValueError, DataError, OSError)):
            log.error("evaluation run failed", exc_info=error)
        yield DashboardView(render.message_box(f"The run failed ({type(error).__name__}): {error}", "error"),
                            skip, skip, skip, gr.update(choices=run_choices()))
        return
    assert result is not None  # run_grid_events always ends with its result
    quality, acceptance, table = figures(result.rows)
    cancelled = result.status == "cancelled"
    message = (f"Run “{result.run_name}” (#{result.run_id}) {result.status}: {result.computed} cells computed now, "
               f"{len(result.cells)} stored.")
    if cancelled:
        message += " Run it again under the same name to resume."
    yield DashboardView(render.message_box(message, "warning" if cancelled else "ok"), quality, acceptance, table,
                        gr.update(choices=run_choices(), value=[result.run_id]))


def cancel_batch(request: gr.Request = None) -> DashboardView:
    """The Cancel button: stop after the current token; finished cells stay stored (and resumable)."""
    skip = gr.skip()
    run = RUNS.stop(request, "dashboard", timeout=30.0)
    if run is not None and run.done:
        return DashboardView(*run.state)
    message = "Cancelled. Finished cells stay stored; run again under the same name to resume."
    return DashboardView(render.message_box(message, "warning"), skip, skip, skip, gr.update(choices=run_choices()))


# --------------------------------------------------------------------------- layout


def build() -> gr.Dropdown:
    """Builds the tab; returns the stored-runs dropdown (refreshed when the page loads)."""
    gr.Markdown(
        "Runs a grid of methods × α × β over LongLaMP records and stores every result as it finishes. "
        "ROUGE is the F-measure × 100; speed is measured in this run, so compare methods within a run. "
        "Use the same run name to resume an interrupted run.", elem_classes="ss-note")
    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320, elem_classes="ss-panel"):
            source = gr.Radio(source_choices(), value="sample", label="Data")
            upload = gr.File(label="LongLaMP records file (JSONL or JSON)", file_types=[".jsonl", ".json"],
                             type="filepath", height=150, elem_id="dashboard-upload")
            with gr.Row():
                task = gr.Dropdown([(TASK_LABELS[t], t) for t in LONGLAMP_TASKS], value="review", label="Task")
                records = gr.Slider(1, 50, value=1, step=1, label="Records", elem_id="dashboard-records")
            methods = gr.CheckboxGroup([(method_label(m), m) for m in METHODS], value=list(CORE_METHODS),
                                       label="Methods")
            with gr.Row():
                alphas = gr.Textbox(value="1.0, 0.1", label="α list (SpecSteer)", elem_id="dashboard-alphas")
                betas = gr.Textbox(value="1.0", label="β list")
            pairing = gr.Dropdown(pairs.pairing_choices(), value=pairs.default_pairing_id(), label="Pairing")
            with gr.Row():
                max_new_tokens = gr.Slider(1, 512, value=48, step=1, label="Max new tokens",
                                           elem_id="dashboard-max-new-tokens")
                draft_len = gr.Slider(1, 16, value=4, step=1, label="Draft length k")
            run_name = gr.Textbox(label="Run name (optional; the same name resumes)", elem_id="run-name")
            with gr.Row():
                run = gr.Button("Run evaluation", variant="primary", elem_id="dashboard-run")
                cancel = gr.Button("Cancel", variant="stop", elem_id="dashboard-cancel")
        with gr.Column(scale=3, min_width=420):
            status = gr.HTML(render.message_box("Choose the data and the grid, then run.", "info"),
                             elem_id="dashboard-status")
            with gr.Row(equal_height=False):
                # Custom values: API clients may name a run id this page has not listed yet.
                runs = gr.Dropdown(run_choices(), value=[], multiselect=True, scale=4, allow_custom_value=True,
                                   label="Stored runs (choose several to compare)", elem_id="run-picker")
                show = gr.Button("Show", scale=1)
            quality = gr.Plot(label="Quality against speed", elem_id="quality-plot")
            acceptance = gr.Plot(label="Acceptance against α", elem_id="acceptance-plot")
            table = gr.Dataframe(headers=TABLE_HEADERS, interactive=False, label="Results", elem_id="results-table",
                                 wrap=True)
            gr.Markdown(plots.TABLE_NOTE, elem_classes="ss-note")

    # Shown at once, before the queue: the queue position appears beside it while others run first.
    queued = run.click(render.queued_status, None, status, queue=False, api_visibility="private",
                       show_progress="hidden")
    batch = queued.then(
        run_batch,
        [source, upload, task, records, methods, alphas, betas, pairing, max_new_tokens, draft_len, run_name],
        [status, quality, acceptance, table, runs],
        api_name="evaluate", concurrency_id=MODELS_CONCURRENCY_ID, concurrency_limit=1,
    )
    cancel.click(cancel_batch, None, [status, quality, acceptance, table, runs], cancels=[batch],
                 api_name="cancel_evaluate", queue=False)
    show.click(open_runs, runs, [status, quality, acceptance, table, runs], api_name="open_runs")
    upload.upload(lambda: "upload", None, source, api_visibility="private", show_progress="hidden")
    return runs
