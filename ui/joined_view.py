"""The Dashboard's joined view: the chosen stored runs over the same records as one table, as
``specsteer report`` prints it (``specsteer.evaluation.joined``): each row's ROUGE with its record
bootstrap interval, tokens/s, the share of the output chosen on the device, the facts audit, and the paired
differences of each steering method (P³, SpecSteer) against every other row.

This is how a method added later to another run's records is read, such as P³ beside a re-test's SLM+, LLM
and SpecSteer run (docs/research/P3_PLAN.md). Every number is ``join_stored``'s; this module only shows them.

Each steering row is bootstrapped against every other row, so the work grows with the square of the rows:
a table takes at most ``JOINED_MAX_ROWS`` methods and settings, and one table is computed at a time.

Hook (one line in ``ui/dashboard_tab.py``): ``joined_view.build(service, runs)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr
import pandas as pd

from specsteer.evaluation.joined import JoinedTable, join_stored, share_text
from specsteer.service.app_service import AppService
from specsteer.service.evaluation_runs import chosen_run_ids, joined_refusal
from ui import render
from ui.dashboard_figures import table_update
from ui.markup import esc

JOINED_MAX_ROWS = 8

CAPTION = (
    "Stored runs over the same records file and task, read as one table: a method added to another run's "
    "records pairs with it record by record. Only the records every row has are used. ROUGE is 0–100 with a "
    "95 % record bootstrap interval; “on device” is the share of the output's tokens the Specialist chose "
    "(P³'s corrections, SpecSteer's accepted drafts, all of SLM+). The same table: `specsteer report --run A "
    "--run B`."
)


class JoinedView(NamedTuple):
    status: Any
    table: Any
    differences: Any


def table_frame(table: JoinedTable) -> pd.DataFrame:
    """One line per row: the method and setting, its run, its intervals, speed, device share and facts."""
    has_facts = any(row.facts for row in table.rows)
    lines = []
    for row in table.rows:
        line = {
            "Method": row.label,
            "Run": row.run,
            "Records": row.records,
            "ROUGE-1 [95 %]": row.rouge["rouge1"].text(),
            "ROUGE-L [95 %]": row.rouge["rougeL"].text(),
            "tok/s": "—" if row.tok_per_s is None else f"{row.tok_per_s:.2f}",
            "On device": share_text(row.device_share),
        }
        if has_facts:
            line["Facts sent"] = share_text(row.facts.get("facts_sent"))
            line["Beyond the task"] = share_text(row.facts.get("facts_sent_beyond_task"))
            line["In the output"] = share_text(row.facts.get("facts_in_output"))
        lines.append(line)
    return pd.DataFrame(lines)


def differences_html(table: JoinedTable) -> str:
    """The paired differences and the notes, as a list (each line escaped: run names are the user's)."""
    items = "".join(f"<li>{esc(difference.text())}</li>" for difference in table.differences)
    notes = "".join(f"<li>{esc(note)}</li>" for note in table.notes)
    parts = []
    if items:
        parts.append(
            f"<p>Paired differences, record by record (95 % bootstrap over these records):</p><ul>{items}</ul>"
        )
    if notes:
        parts.append(f"<p>Notes:</p><ul>{notes}</ul>")
    return "".join(parts)


def joined_view(service: AppService, run_ids: Any) -> JoinedView:
    """The chosen runs joined (the table hidden and no differences when there is nothing to show). A refusal
    says what to choose instead (``evaluation_runs.joined_refusal``)."""
    ids = chosen_run_ids(run_ids)
    if ids is None:
        return _refused("Choose one or more stored runs above.", "info")
    if len(ids) > JOINED_MAX_ROWS:
        return _refused(f"{len(ids)} runs are chosen; a joined table takes at most {JOINED_MAX_ROWS}.")
    chosen = []
    for run_id in ids:
        stored = service.run_results(run_id)
        if stored is None:
            return _refused(f"Run #{run_id} does not exist.")
        chosen.append((stored.run, stored.cells))
    refusal = joined_refusal(chosen, service.stored_runs(), JOINED_MAX_ROWS)
    if refusal is not None:
        return _refused(refusal)
    runs = [(run.name, run.config, cells) for run, cells in chosen]
    try:
        table = join_stored(runs, max_rows=JOINED_MAX_ROWS)
    except ValueError as error:  # other records, a setting in two runs, no shared record, a missing file
        return _refused(f"These runs cannot be joined: {error}.")
    names = ", ".join(f"“{name}”" for name, _, _ in runs)
    status = f"{names}: {len(table.records)} records that every row has."
    return JoinedView(render.message_box(status, "ok"), table_update(table_frame(table)), differences_html(table))


def _refused(message: str, kind: str = "error") -> JoinedView:
    return JoinedView(render.message_box(message, kind), gr.update(value=None, visible=False), "")


def build(service: AppService, run_ids: gr.Dropdown) -> JoinedView:
    """An accordion with the view, drawn by its own button (its bootstrap is not free)."""
    with gr.Accordion("Runs joined: one table over the records they share", open=False, elem_id="joined-view"):
        gr.Markdown(CAPTION, elem_classes="ss-note")
        draw = gr.Button("Join the chosen runs", elem_id="joined-show")
        view = JoinedView(
            gr.HTML(render.message_box("Choose stored runs above.", "info"), elem_id="joined-status"),
            gr.Dataframe(
                interactive=False,
                wrap=True,
                label="Joined runs",
                elem_id="joined-table",
                elem_classes="ss-wide-table",
                pinned_columns=1,
                visible=False,
            ),
            gr.HTML("", elem_id="joined-differences"),
        )
    draw.click(
        lambda chosen: joined_view(service, chosen),
        run_ids,
        list(view),
        api_name="joined_view",
        concurrency_limit=1,
        concurrency_id="joined_view",
    )
    return view
