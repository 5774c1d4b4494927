"""Compare & annotate tab: one input through several methods side by side, judged blind.

The history, input, pairing and decoding settings come from the Generate tab. Outputs are shown
as A, B, C… (shuffled in blind mode); the methods behind the labels are revealed once the
annotator's judgement is saved. Anyone can reopen a saved comparison and judge it again, in their
own shuffled order, which is what the agreement statistics need.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import gradio as gr

import storage
from specsteer.events import GenerationStats
from specsteer.exposure import ADMIN_TOKEN_ENV, Exposure
from specsteer.methods import CORE_METHODS, PRIVATE_METHODS, method_label
from specsteer.service import (
    AppService,
    ComparisonEvent,
    ComparisonSaved,
    ComparisonStarted,
    Failed,
    Generating,
    Loading,
    OutputDone,
    Stopped,
    Token,
)
from specsteer.stores import NamedHistory
from storage import slot_label
from ui import render
from ui.generate_tab import GenerateControls
from ui.streaming import MODELS_CONCURRENCY_ID, RUNS, Throttle, Toast

log = logging.getLogger(__name__)

# Blind comparisons judge the methods that keep the private context on the device; llm+ (which sends it)
# is offered by the Generate tab and the evaluation, where it is labelled as sending it.
COMPARED_METHODS = PRIVATE_METHODS
MAX_SLOTS = len(COMPARED_METHODS)
PREFERENCE_EXTRAS = [("Tie", "tie"), ("All bad", "all_bad")]
SUMMARY_HEADERS = ["method", "shown", "wins", "win rate", "ties", "all bad", "personalization", "fluency"]


@dataclass
class ComparisonView:
    """What one annotator is looking at: a saved comparison in the order shown to them."""

    comparison_id: int
    order: list[str]  # methods, slot 0 = label A
    texts: list[str]
    generation_ids: list[int]
    blind: bool
    revealed: bool = False
    stats: list[GenerationStats | None] = field(default_factory=list)  # filled when revealed


# --------------------------------------------------------------------------- frames


class Frame:
    """Builds the tuple of outputs of the comparison events (fixed slots, most left unchanged)."""

    def __init__(self) -> None:
        self.status = self.view = self.preferred = self.choices = gr.skip()
        self.slots: list[object] = [gr.skip()] * MAX_SLOTS
        self.visible: list[object] = [gr.skip()] * MAX_SLOTS
        self.ratings: list[object] = [gr.skip()] * (2 * MAX_SLOTS)

    def show_slots(self, count: int) -> Frame:
        self.visible = [gr.update(visible=slot < count) for slot in range(MAX_SLOTS)]
        self.ratings = [None] * (2 * MAX_SLOTS)  # a new set of outputs starts unrated
        self.preferred = gr.update(choices=preference_choices(count), value=None)
        return self

    def values(self) -> tuple:
        return (self.status, self.view, self.preferred, self.choices, *self.slots, *self.visible, *self.ratings)


def preference_choices(count: int) -> list[tuple[str, str]]:
    return [(f"Output {slot_label(slot)}", slot_label(slot)) for slot in range(count)] + PREFERENCE_EXTRAS


def comparison_choices() -> list[tuple[str, int]]:
    """Saved comparisons for the reopen dropdown (labels are rendered as text, not HTML)."""
    choices = []
    for comparison in storage.list_comparisons(limit=100):
        snippet = " ".join(comparison["input_text"].split())[:60]
        blind = "blind, " if comparison["blind"] else ""
        choices.append((f"#{comparison['id']} · {comparison['task']} · {blind}{len(comparison['outputs'])} outputs · "
                        f"{snippet}", comparison["id"]))
    return choices


def _slot_views(view: ComparisonView) -> list[object]:
    slots: list[object] = []
    for slot in range(MAX_SLOTS):
        if slot >= len(view.order):
            slots.append(gr.skip())
            continue
        method = view.order[slot] if (view.revealed or not view.blind) else None
        stats = view.stats[slot] if view.revealed and slot < len(view.stats) else None
        slots.append(render.comparison_slot_html(slot_label(slot), view.texts[slot], method, stats))
    return slots


# --------------------------------------------------------------------------- running a comparison

STOPPED_UNSAVED = "Stopped. The incomplete comparison was not saved."


def _error(message: str) -> tuple:
    gr.Warning(render.esc(message))
    return _error_frame(message)


def _error_frame(message: str) -> tuple:
    frame = Frame()
    frame.status = render.message_box(message, "error")
    return frame.values()


def comparison_frames(events: Iterable[ComparisonEvent]) -> Iterator[tuple | Toast]:
    """The service's events of one comparison as frames of this tab's outputs, with a toast for a failure."""
    blind = True
    order: tuple[str, ...] = ()
    pieces: list[str] = []
    throttle = Throttle()
    for event in events:
        if isinstance(event, Failed):
            yield Toast(render.esc(event.message))
            yield _error_frame(event.message)
        elif isinstance(event, ComparisonStarted):
            blind, order = event.blind, event.methods
            frame = Frame().show_slots(len(order))
            frame.view = None  # nothing to judge until every output is saved
            frame.status = render.message_box("Starting…", "busy")
            frame.slots = [render.comparison_slot_html(slot_label(slot), None) if slot < len(order) else gr.skip()
                           for slot in range(MAX_SLOTS)]
            yield frame.values()
        elif isinstance(event, Loading):
            frame = Frame()
            frame.status = render.message_box(event.message, "busy")
            yield frame.values()
        elif isinstance(event, Generating):
            pieces = []
            frame = Frame()
            frame.status = render.message_box(
                f"Generating output {slot_label(event.slot)} ({event.slot + 1} of {event.of})…", "busy")
            yield frame.values()
        elif isinstance(event, Token):
            if event.event.emitted:
                pieces.append(event.event.text)
                if throttle.due():
                    frame = Frame()
                    frame.slots[event.slot] = render.comparison_slot_html(
                        slot_label(event.slot), "".join(pieces), None if blind else order[event.slot],
                        state="generating…")
                    yield frame.values()
        elif isinstance(event, OutputDone):
            frame = Frame()
            frame.slots[event.slot] = render.comparison_slot_html(slot_label(event.slot), event.finished.text,
                                                                  None if blind else event.method)
            yield frame.values()
        elif isinstance(event, Stopped):
            frame = Frame()
            frame.status = render.message_box(STOPPED_UNSAVED, "warning")
            yield frame.values()
        elif isinstance(event, ComparisonSaved):
            saved = event.comparison
            view = ComparisonView(saved.comparison_id, list(saved.methods), list(saved.texts),
                                  list(saved.generation_ids), saved.blind)
            final = Frame()
            final.view = view
            final.choices = gr.update(choices=comparison_choices(), value=view.comparison_id)
            final.slots = _slot_views(view)
            final.status = render.message_box(
                f"Saved as comparison #{view.comparison_id}. Read the outputs, rate them and pick the one you prefer"
                + (". The methods are revealed after you submit." if view.blind else "."), "ok")
            yield final.values()


class CompareTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService) -> None:
        self.service = service

    def compare(self, history: NamedHistory | None, task: str, input_text: str, methods: Sequence[str], blind: bool,
                request: gr.Request = None, **settings: object) -> Iterator[tuple]:
        """Generate with every chosen method (streaming each into its slot), then save the comparison.

        ``settings``: the Generate tab's settings widgets, by GenerationSettings field name.
        """
        def produce(flag):
            compared = [method for method in methods or () if method in COMPARED_METHODS]
            return comparison_frames(self.service.compare(history, task, input_text, settings, compared, blind,
                                                          cancel=flag))

        yield from RUNS.start(request, "compare", produce, width=len(Frame().values())).frames()

    @staticmethod
    def stop(request: gr.Request = None) -> tuple:
        """The Stop button: end this page's comparison run (an incomplete comparison is not saved)."""
        run = RUNS.stop(request, "compare")
        if run is not None and run.done:
            return run.state
        frame = Frame()
        frame.status = render.message_box(STOPPED_UNSAVED, "warning")
        return frame.values()


# --------------------------------------------------------------------------- reopening and judging


def open_comparison(comparison_id: int | None) -> tuple:
    """Show a saved comparison for a new judgement (blind ones in a fresh random order)."""
    if comparison_id is None or not str(comparison_id).strip().lstrip("#").isdigit():
        return _error("Choose a saved comparison to open.")
    comparison = storage.get_comparison(int(str(comparison_id).strip().lstrip("#")))
    if comparison is None:
        return _error(f"Comparison #{comparison_id} does not exist.")
    outputs = list(comparison["outputs"])
    if comparison["blind"]:
        random.SystemRandom().shuffle(outputs)
    view = ComparisonView(
        comparison_id=comparison["id"], order=[o["method"] for o in outputs], texts=[o["text"] for o in outputs],
        generation_ids=[o["generation_id"] for o in outputs], blind=bool(comparison["blind"]),
    )
    frame = Frame().show_slots(len(outputs))
    frame.view = view
    frame.slots = _slot_views(view)
    frame.status = render.message_box(
        f"Opened comparison #{view.comparison_id} ({comparison['task']} task). Input: {comparison['input_text']}",
        "info")
    return frame.values()


def submit_annotation(view: ComparisonView | None, annotator: str, preferred: str | None, comment: str,
                      *ratings: int | None) -> tuple:
    """Save one judgement, then reveal which method produced which output."""
    def refuse(message: str) -> tuple:
        gr.Warning(render.esc(message))
        return (render.message_box(message, "error"), gr.skip(), *([gr.skip()] * MAX_SLOTS), gr.skip(), gr.skip())

    if view is None:
        return refuse("Run a comparison or open a saved one first.")
    if view.revealed:
        return refuse("This judgement is already saved. Reopen the comparison to judge it again (as another annotator).")
    if not (annotator or "").strip():
        return refuse("Enter your name as annotator.")
    if not preferred:
        return refuse("Pick the output you prefer (or tie / all bad).")
    scores = {
        slot_label(slot): {"personalization": ratings[2 * slot], "fluency": ratings[2 * slot + 1]}
        for slot in range(len(view.order))
    }
    try:
        annotation_id = storage.save_annotation(
            comparison_id=view.comparison_id, annotator=annotator.strip(), preferred=preferred, ratings=scores,
            comment=comment or "", display_order=view.order,
        )
    except ValueError as error:
        return refuse(str(error))
    stats = []
    for generation_id in view.generation_ids:
        generation = storage.get_generation(generation_id)
        stats.append(GenerationStats.from_dict(generation["stats"]) if generation else None)
    revealed = replace(view, revealed=True, stats=stats)
    table, agreement = summary_table()
    status = render.message_box(f"Saved annotation #{annotation_id}. The methods are now revealed.", "ok")
    return (status, revealed, *_slot_views(revealed), table, agreement)


# --------------------------------------------------------------------------- exports and summary


def summary_table() -> tuple[list[list], str]:
    """Win rates and mean ratings per method, and inter-annotator agreement (trusted numbers only)."""
    summary = storage.annotation_summary()
    rows = []
    for method, judged in summary.methods.items():
        means = judged.mean_ratings
        rows.append([
            method_label(method), judged.shown, judged.wins, round(judged.win_rate, 3), judged.ties,
            judged.all_bad, _round(means.get("personalization")), _round(means.get("fluency")),
        ])
    agreement = summary.agreement
    if agreement.comparisons:
        kappa = agreement.fleiss_kappa
        text = (
            f"**Agreement** over {agreement.comparisons} comparison(s) judged by two or more annotators "
            f"({agreement.judgements} judgements): pairwise agreement {agreement.percent_agreement:.0%}, "
            f"unanimous {agreement.unanimous:.0%}, Fleiss' κ {'n/a' if kappa is None else f'{kappa:.2f}'}."
        )
    else:
        text = "**Agreement**: no comparison has been judged by two annotators yet."
    text = f"{summary.judgements} judgement(s) by {summary.annotators} annotator(s). " + text
    return rows, text


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


LOCAL = Exposure()  # a local run: whoever is at the page is the operator


def export_annotations(kind: str, token: str = "", exposure: Exposure = LOCAL) -> tuple[dict, str]:
    """Write every annotation to a fresh CSV or JSONL file for download: for anyone in a local run, for the
    holder of the operator's token in public (annotator names and comments are not every visitor's)."""
    if not exposure.may_export_all(token):
        configured = "" if exposure.admin_token else f" No token is configured (${ADMIN_TOKEN_ENV}), so none is."
        return gr.update(value=None, visible=False), render.message_box(
            f"Exporting every annotation needs the operator's token on this public app.{configured}", "error")
    rows = storage.annotations_export_rows()
    if not rows:
        return gr.update(value=None, visible=False), render.message_box("No annotations yet: nothing to export.", "info")
    folder = Path(tempfile.mkdtemp(prefix="specsteer-export-"))
    path = folder / f"annotations-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
    writer = storage.write_annotations_csv if kind == "csv" else storage.write_annotations_jsonl
    count = writer(rows, path)
    return gr.update(value=str(path), visible=True), render.message_box(
        f"Exported {count} annotation(s) as {kind.upper()}.", "ok")


# --------------------------------------------------------------------------- layout


@dataclass
class CompareRefresh:
    """Components that show stored data, refreshed when a page loads (other users may have added to it)."""

    saved: gr.Dropdown
    summary: gr.Dataframe
    agreement: gr.Markdown


def refresh_on_load() -> tuple:
    rows, text = summary_table()
    return gr.update(choices=comparison_choices()), rows, text


def build(service: AppService, controls: GenerateControls) -> CompareRefresh:
    tab = CompareTab(service)
    gr.Markdown(
        "Runs the **history, input, pairing and decoding settings of the Generate tab** through several methods. "
        "In blind mode the outputs are labelled A, B, C… in a random order; the methods are revealed after "
        "your judgement is saved.", elem_classes="ss-note")
    with gr.Row(equal_height=True):
        methods = gr.CheckboxGroup(
            choices=[(method_label(m), m) for m in COMPARED_METHODS], value=list(CORE_METHODS), label="Methods",
            scale=3)
        blind = gr.Checkbox(value=True, label="Blind (shuffle, hide names)", scale=1)
    with gr.Row():
        run = gr.Button("Run comparison", variant="primary", elem_id="compare-button")
        stop = gr.Button("Stop", variant="stop")
    with gr.Row(equal_height=False):
        # Custom values: API clients (and typists) may give a comparison id this page has not listed.
        saved = gr.Dropdown(choices=comparison_choices(), value=None, label="…or reopen a saved comparison",
                            scale=4, elem_id="comparison-picker", allow_custom_value=True)
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
                slot_html.append(gr.HTML(render.comparison_slot_html(slot_label(slot), None),
                                         elem_id=f"slot-{slot_label(slot)}"))
                for criterion in ("personalization", "fluency"):
                    rating_inputs.append(gr.Radio(
                        [1, 2, 3, 4, 5], value=None, label=f"{criterion.capitalize()} of {slot_label(slot)} (1–5)",
                        elem_classes="ss-rating", elem_id=f"rating-{slot_label(slot)}-{criterion}"))
            slot_columns.append(column)

    with gr.Group(elem_classes="ss-judgement"):
        with gr.Row():
            annotator = gr.Textbox(label="Annotator", placeholder="your name", scale=1, elem_id="annotator")
            preferred = gr.Radio(preference_choices(0), label="Preferred output", scale=2, elem_id="preferred")
        comment = gr.Textbox(label="Comment (optional)", lines=2, elem_id="comment")
        submit = gr.Button("Submit judgement", variant="primary", elem_id="submit-judgement")

    with gr.Accordion("Annotation summary and export", open=True):
        summary_rows, agreement_text = summary_table()
        summary = gr.Dataframe(value=summary_rows, headers=SUMMARY_HEADERS, interactive=False,
                               label="Win rates and mean ratings per method", elem_id="annotation-summary")
        agreement = gr.Markdown(agreement_text)
        # Public: the export needs the operator's token (the field is hidden locally, where anyone may export).
        admin_token = gr.Textbox(label="Operator token (exports every annotation)", type="password", value="",
                                 visible=service.exposure.public, elem_id="admin-token")
        with gr.Row():
            export_csv = gr.Button("Export CSV")
            export_jsonl = gr.Button("Export JSONL")
            refresh_summary = gr.Button("Refresh summary")
        download = gr.File(label="Download", interactive=False, elem_id="annotation-download", visible=False)
        export_status = gr.HTML()

    frame_outputs = [status, view, preferred, saved, *slot_html, *slot_columns, *rating_inputs]
    # Shown at once, before the queue: the queue position appears beside it while others run first.
    queued = run.click(render.queued_status, None, status, queue=False, api_visibility="private",
                       show_progress="hidden")
    comparison = queued.then(
        tab.compare, [controls.history, controls.task, controls.input_text, methods, blind], frame_outputs,
        inputs_kwargs=controls.settings, api_name="compare", concurrency_id=MODELS_CONCURRENCY_ID,
        concurrency_limit=1,
    )
    stop.click(tab.stop, None, frame_outputs, cancels=[comparison], api_name="stop_compare", queue=False)
    reopen.click(open_comparison, saved, frame_outputs, api_name="open_comparison")
    refresh.click(lambda: gr.update(choices=comparison_choices()), None, saved, api_visibility="private")
    submit.click(submit_annotation, [view, annotator, preferred, comment, *rating_inputs],
                 [status, view, *slot_html, summary, agreement], api_name="annotate")
    for kind, button in (("csv", export_csv), ("jsonl", export_jsonl)):
        button.click(partial(export_annotations, kind, exposure=service.exposure), admin_token,
                     [download, export_status], api_name=f"export_{kind}")
    refresh_summary.click(summary_table, None, [summary, agreement], api_name="annotation_summary")
    return CompareRefresh(saved, summary, agreement)
