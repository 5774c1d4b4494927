"""Compare & annotate tab: one input through several methods side by side, judged blind.

The history, input, pairing and decoding settings come from the Generate tab. Outputs are shown
as A, B, C… (shuffled in blind mode); the methods behind the labels are revealed once the
annotator's judgement is saved. Anyone can reopen a saved comparison and judge it again, in their
own shuffled order (the service shuffles it), which is what the agreement statistics need. A page
holds one judgement per comparison (a re-submit replaces it) and the summary counts pages, not names,
labelled unverified: a study that counts people is a campaign (``specsteer.service.judging``).

Every saved comparison, judgement, summary and export comes from the service (``AppService``). The
handlers return named views (:class:`CompareView`, :class:`JudgedView`); Gradio gets them flat, one
value per output (:func:`flattened`).
"""

from __future__ import annotations

import logging
from functools import partial

import gradio as gr

from specsteer.method.catalog import CORE_METHODS, method_label
from specsteer.service.app_service import AppService
from specsteer.service.judging import COMPARED_METHODS, SUMMARY_HEADERS
from specsteer.stores.generations import RATING_CRITERIA, slot_label
from ui import pairs, render
from ui.compare_handlers import MAX_SLOTS, CompareTab, CompareView, JudgedView, flattened, preference_choices
from ui.wiring import QUIET, GenerateControls, PageRefresh, wire_run

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- views


# --------------------------------------------------------------------------- running a comparison


# --------------------------------------------------------------------------- layout


def build(service: AppService, controls: GenerateControls) -> PageRefresh:
    """Builds the tab; returns what a page that opens reads afresh (the saved comparisons, the summary)."""
    tab = CompareTab(service)
    gr.Markdown(
        "Runs the **history, input, pairing and decoding settings of the Generate tab** through several methods. "
        "In blind mode the outputs are labelled A, B, C… in a random order; the methods are revealed after "
        "your judgement is saved.",
        elem_classes="ss-note",
    )
    with gr.Row(equal_height=True):
        methods = gr.CheckboxGroup(
            choices=[(method_label(m), m) for m in COMPARED_METHODS], value=list(CORE_METHODS), label="Methods", scale=3
        )
        blind = gr.Checkbox(value=True, label="Blind (shuffle, hide names)", scale=1)
    with gr.Row():
        run = gr.Button("Run comparison", variant="primary", elem_id="compare-button")
        stop = gr.Button("Stop", variant="stop")
    with gr.Row(equal_height=False):
        # Custom values: API clients (and typists) may give a comparison id this page has not listed.
        saved = gr.Dropdown(
            choices=tab.comparison_choices(),
            value=None,
            label="…or reopen a saved comparison",
            scale=4,
            elem_id="comparison-picker",
            allow_custom_value=True,
        )
        refresh = gr.Button("Refresh list", scale=1, size="md")
        reopen = gr.Button("Open", scale=1, size="md")
    status = gr.HTML(render.message_box("Run a comparison or open a saved one.", "info"), elem_id="compare-status")
    view = gr.State(None)

    slot_html: list[gr.HTML] = []
    slot_columns: list[gr.Column] = []
    rating_inputs: list[gr.Radio] = []
    with gr.Row(equal_height=False, elem_classes="ss-slots"):
        for slot in range(MAX_SLOTS):
            with gr.Column(visible=False, min_width=300, elem_classes="ss-slot-column") as column:
                slot_html.append(
                    gr.HTML(render.comparison_slot_html(slot_label(slot), None), elem_id=f"slot-{slot_label(slot)}")
                )
                for criterion in RATING_CRITERIA:
                    rating_inputs.append(
                        gr.Radio(
                            [1, 2, 3, 4, 5],
                            value=None,
                            label=f"{criterion.capitalize()} of {slot_label(slot)} (1–5)",
                            elem_classes="ss-rating",
                            elem_id=f"rating-{slot_label(slot)}-{criterion}",
                        )
                    )
            slot_columns.append(column)

    with gr.Group(elem_classes="ss-judgement"):
        with gr.Row():
            annotator = gr.Textbox(label="Annotator", placeholder="your name", scale=1, elem_id="annotator")
            preferred = gr.Radio(preference_choices(0), label="Preferred output", scale=2, elem_id="preferred")
        comment = gr.Textbox(label="Comment (optional)", lines=2, elem_id="comment")
        submit = gr.Button("Submit judgement", variant="primary", elem_id="submit-judgement")
        gr.Markdown(
            "**Judgements on this tab are unverified**: one per browser page and comparison (a re-submit replaces "
            "it), whatever name is typed. Verified studies are campaigns, whose annotators join with a code "
            "(the Campaigns and Judge tabs).",
            elem_classes="ss-note",
            elem_id="compare-unverified",
        )

    with gr.Accordion("Annotation summary and export", open=True):
        rows, agreement_text = tab.summary_table()
        summary = gr.Dataframe(
            value=rows,
            headers=SUMMARY_HEADERS,
            interactive=False,
            label="Win rates and mean ratings per method",
            elem_id="annotation-summary",
        )
        agreement = gr.Markdown(agreement_text)
        # Public: the export needs the operator's token (the field is hidden locally, where anyone may export).
        admin_token = gr.Textbox(
            label="Operator token (exports every annotation)",
            type="password",
            value="",
            visible=service.exposure.public,
            elem_id="admin-token",
        )
        with gr.Row():
            export_csv = gr.Button("Export CSV")
            export_jsonl = gr.Button("Export JSONL")
            refresh_summary = gr.Button("Refresh summary")
        download = gr.File(label="Download", interactive=False, elem_id="annotation-download", visible=False)
        export_status = gr.HTML()

    outputs = list(
        CompareView(status, view, preferred, saved, tuple(slot_html), tuple(slot_columns), tuple(rating_inputs)).flat()
    )
    wire_run(
        run,
        stop,
        status,
        flattened(tab.compare),
        [controls.history, controls.task, controls.input_text, methods, blind],
        outputs,
        inputs_kwargs=controls.settings,
        api_name="compare",
        stop_work=flattened(tab.stop),
        stop_api_name="stop_compare",
    )
    reopen.click(flattened(tab.open_comparison), saved, outputs, api_name="open_comparison")
    refresh.click(lambda: gr.update(choices=tab.comparison_choices()), None, saved, **QUIET)
    pairing = controls.pairing  # the Generate tab's picker: Compare runs on its pairing
    offer = partial(pairs.offer_methods, COMPARED_METHODS, method_label)
    pairing.change(offer, [pairing, methods], methods, **QUIET)
    submit.click(
        flattened(tab.submit_annotation),
        [view, annotator, preferred, comment, *rating_inputs],
        list(JudgedView(status, view, tuple(slot_html), summary, agreement).flat()),
        api_name="annotate",
    )
    for kind, button in (("csv", export_csv), ("jsonl", export_jsonl)):
        button.click(
            partial(tab.export_annotations, kind), admin_token, [download, export_status], api_name=f"export_{kind}"
        )
    refresh_summary.click(tab.summary_table, None, [summary, agreement], api_name="annotation_summary")
    return PageRefresh(tab.refresh_on_load, [saved, summary, agreement])
