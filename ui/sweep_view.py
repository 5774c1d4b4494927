"""The Dashboard's α × β view: a stored run's SpecSteer settings as quality against speed, with bootstrap error
bars, SLM+ and LLM as references and the Pareto front marked (``plots.sweep_figure``), and the choice rule of
``docs/research/SWEEP_PLAN.md`` applied. The numbers are the service's (``evaluation_runs.run_sweep``); this module only
shows them.

Hook (one line in ``ui/dashboard_tab.py``, under the results table): ``sweep_view.build(service, runs, show)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr

from specsteer.evaluation import plots
from specsteer.service.app_service import AppService
from specsteer.service.evaluation_runs import chosen_run_ids, run_sweep
from ui import render
from ui.wiring import QUIET


class SweepView(NamedTuple):
    status: Any
    figure: Any


def sweep_view(service: AppService, run_ids: Any) -> SweepView:
    """The first chosen run's α × β view (None figure when there is nothing to draw)."""
    ids = chosen_run_ids(run_ids)
    if ids is None:
        return SweepView(render.message_box("Choose a stored run above to see its α × β view.", "info"), None)
    stored = service.run_results(ids[0])
    if stored is None:
        return SweepView(render.message_box(f"Run #{ids[0]} does not exist.", "error"), None)
    report = run_sweep(stored.run.config, stored.cells)
    if report is None:
        return SweepView(render.message_box("This run has no SpecSteer setting: there is no α × β view.", "info"), None)
    notes = [f"Run “{stored.run.name}”: {report.coverage()}", report.speed_note()]
    if report.choice is not None:
        notes.append("docs/research/SWEEP_PLAN.md's rule: " + report.choice.statement())
    elif not report.has_reference:
        notes.append("The run has no LLM cells, so the choice rule (SpecSteer − LLM) cannot be applied.")
    if len(ids) > 1:
        notes.append("The view shows one run at a time: the first one chosen.")
    return SweepView(render.message_box(" ".join(filter(None, notes)), "ok"), plots.sweep_figure(report))


def build(service: AppService, run_ids: gr.Dropdown, show: gr.Button) -> SweepView:
    """An accordion with the view, drawn when the page's ``show`` button shows stored runs, and on its own."""
    with gr.Accordion("α × β: quality against speed, with intervals", open=True, elem_id="sweep-view"):
        gr.Markdown(plots.SWEEP_CAPTION, elem_classes="ss-note")
        draw = gr.Button("Show the α × β view of the chosen run", elem_id="sweep-show")
        view = SweepView(
            gr.HTML(render.message_box("Choose a stored run above.", "info"), elem_id="sweep-status"),
            gr.Plot(label="α × β: quality against speed", elem_id="sweep-plot"),
        )
    handler = lambda chosen: sweep_view(service, chosen)  # noqa: E731
    draw.click(handler, run_ids, list(view), api_name="sweep_view")
    show.click(handler, run_ids, list(view), **QUIET)
    return view
