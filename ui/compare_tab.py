"""Compare & annotate tab: one input through several methods side by side, judged blind.

The history, input, pairing and decoding settings come from the Generate tab. Outputs are shown
as A, B, C… (shuffled in blind mode); the methods behind the labels are revealed once the
annotator's judgement is saved. Anyone can reopen a saved comparison and judge it again, in their
own shuffled order (the service shuffles it), which is what the agreement statistics need.

Every saved comparison, judgement, summary and export comes from the service (``AppService``). The
handlers return named views (:class:`CompareView`, :class:`JudgedView`); Gradio gets them flat, one
value per output (:func:`flattened`).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

import gradio as gr

from specsteer.method.catalog import CORE_METHODS, PRIVATE_METHODS, method_label
from specsteer.method.events import GenerationStats
from specsteer.service.app_service import (
    AppService,
    ComparisonEvent,
    ComparisonSaved,
    ComparisonStarted,
    ExportRefused,
    Failed,
    Generating,
    Loading,
    OutputDone,
    Pending,
    Stopped,
    Token,
)
from specsteer.service.stores import (
    RATING_CRITERIA,
    AnnotationSummary,
    NamedHistory,
    NewAnnotation,
    StoredComparison,
    slot_label,
)
from ui import pairs, render
from ui.generate_tab import GenerateControls
from ui.streaming import RUNS, Throttle, Toast
from ui.wiring import QUIET, PageRefresh, wire_run

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


# --------------------------------------------------------------------------- views


class CompareView(NamedTuple):
    """The outputs of the comparison events, by name. ``slots`` (the outputs' HTML) and ``visible`` (their
    columns) hold one value per slot, ``ratings`` two (:data:`RATING_CRITERIA`) per slot. Fields left
    unchanged are ``gr.skip()``; Gradio gets the fields flat (:meth:`flat`)."""

    status: object
    view: object  # the ComparisonView being judged (a gr.State)
    preferred: object
    choices: object  # the saved comparisons' dropdown
    slots: tuple
    visible: tuple
    ratings: tuple

    @classmethod
    def unchanged(cls) -> CompareView:
        skip = gr.skip()
        return cls(
            skip,
            skip,
            skip,
            skip,
            (skip,) * MAX_SLOTS,
            (skip,) * MAX_SLOTS,
            (skip,) * (len(RATING_CRITERIA) * MAX_SLOTS),
        )

    @classmethod
    def message(cls, message: str, kind: str) -> CompareView:
        return cls.unchanged()._replace(status=render.message_box(message, kind))

    def showing(self, count: int) -> CompareView:
        """The first ``count`` slots shown, unrated, with a preference choice for each."""
        return self._replace(
            visible=tuple(gr.update(visible=slot < count) for slot in range(MAX_SLOTS)),
            ratings=(None,) * (len(RATING_CRITERIA) * MAX_SLOTS),
            preferred=gr.update(choices=preference_choices(count), value=None),
        )

    def with_slot(self, slot: int, html: str) -> CompareView:
        return self._replace(slots=tuple(html if index == slot else value for index, value in enumerate(self.slots)))

    def flat(self) -> tuple:
        return (self.status, self.view, self.preferred, self.choices, *self.slots, *self.visible, *self.ratings)

    @classmethod
    def from_flat(cls, values: Sequence) -> CompareView:
        slots, visible, ratings = (
            values[4 : 4 + MAX_SLOTS],
            values[4 + MAX_SLOTS : 4 + 2 * MAX_SLOTS],
            values[4 + 2 * MAX_SLOTS :],
        )
        return cls(*values[:4], tuple(slots), tuple(visible), tuple(ratings))


COMPARE_WIDTH = len(CompareView.unchanged().flat())


class JudgedView(NamedTuple):
    """What saving a judgement updates: the status, the judged view, the outputs (revealed) and the
    annotation summary. Flat for Gradio like :class:`CompareView`."""

    status: object
    view: object
    slots: tuple
    summary: object
    agreement: object

    @classmethod
    def refused(cls, message: str) -> JudgedView:
        gr.Warning(render.esc(message))
        skip = gr.skip()
        return cls(render.message_box(message, "error"), skip, (skip,) * MAX_SLOTS, skip, skip)

    def flat(self) -> tuple:
        return (self.status, self.view, *self.slots, self.summary, self.agreement)


@dataclass(frozen=True)
class JudgementForm:
    """What an annotator filled in: name, preference, comment, and the ratings of slot A's criteria
    (:data:`RATING_CRITERIA`), then slot B's, … (None: not rated)."""

    annotator: str
    preferred: str | None
    comment: str
    ratings: tuple[int | None, ...]

    def scores(self, count: int) -> dict[str, dict[str, int | None]]:
        """The ratings of the first ``count`` slots, by label and criterion (missing ones: not rated)."""
        per_slot = len(RATING_CRITERIA)
        given = self.ratings + (None,) * max(0, per_slot * count - len(self.ratings))
        return {
            slot_label(slot): dict(zip(RATING_CRITERIA, given[per_slot * slot : per_slot * (slot + 1)], strict=True))
            for slot in range(count)
        }


def flattened(handler: Callable) -> Callable:
    """``handler`` as Gradio calls it: each named view it returns (or streams) flattened into one value per
    output. The signature stays the handler's, so the API's parameter names do too."""
    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def stream(*args, **kwargs):
            for view in handler(*args, **kwargs):
                yield view.flat()

        return stream

    @functools.wraps(handler)
    def call(*args, **kwargs):
        return handler(*args, **kwargs).flat()

    return call


def preference_choices(count: int) -> list[tuple[str, str]]:
    return [(f"Output {slot_label(slot)}", slot_label(slot)) for slot in range(count)] + PREFERENCE_EXTRAS


def _slot_views(view: ComparisonView) -> tuple:
    slots: list[object] = []
    for slot in range(MAX_SLOTS):
        if slot >= len(view.order):
            slots.append(gr.skip())
            continue
        method = view.order[slot] if (view.revealed or not view.blind) else None
        stats = view.stats[slot] if view.revealed and slot < len(view.stats) else None
        slots.append(render.comparison_slot_html(slot_label(slot), view.texts[slot], method, stats))
    return tuple(slots)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# --------------------------------------------------------------------------- running a comparison

STOPPED_UNSAVED = "Stopped. The incomplete comparison was not saved."


def comparison_frames(
    events: Iterable[ComparisonEvent], choices: Callable[[], list[tuple[str, int]]]
) -> Iterator[CompareView | Toast]:
    """The service's events of one comparison as views of this tab's outputs, with a toast for a failure;
    ``choices`` lists the saved comparisons once this one is saved."""
    blind = True
    order: tuple[str, ...] = ()
    pieces: list[str] = []
    drafts: list[str] = []  # the slot's drafts awaiting their verdict (shown only when the methods are named)
    throttle = Throttle()
    unchanged = CompareView.unchanged()
    for event in events:
        if isinstance(event, Failed):
            yield Toast(render.esc(event.message))
            yield CompareView.message(event.message, "error")
        elif isinstance(event, ComparisonStarted):
            blind, order = event.blind, event.methods
            slots = tuple(
                render.comparison_slot_html(slot_label(slot), None) if slot < len(order) else gr.skip()
                for slot in range(MAX_SLOTS)
            )
            # view None: nothing to judge until every output is saved
            yield unchanged.showing(len(order))._replace(
                view=None, slots=slots, status=render.message_box("Starting…", "busy")
            )
        elif isinstance(event, Loading):
            yield CompareView.message(event.message, "busy")
        elif isinstance(event, Generating):
            pieces, drafts = [], []
            yield CompareView.message(
                f"Generating output {slot_label(event.slot)} ({event.slot + 1} of {event.of})…", "busy"
            )
        elif isinstance(event, (Token, Pending)):
            # A blind judgement shows no drafts: they would tell a drafting method from the others.
            if isinstance(event, Pending) and blind:
                continue
            if isinstance(event, Pending):
                drafts.append(event.event.text)
            else:
                drafts.clear()  # the verdict settles the round's drafts
                if not event.event.emitted:
                    continue
                pieces.append(event.event.text)
            # Every draft is published: the last one of a round may be on screen for a whole verification.
            if isinstance(event, Pending) or throttle.due():
                yield unchanged.with_slot(
                    event.slot,
                    render.comparison_slot_html(
                        slot_label(event.slot),
                        "".join(pieces),
                        None if blind else order[event.slot],
                        state="generating…",
                        pending="".join(drafts),
                    ),
                )
        elif isinstance(event, OutputDone):
            yield unchanged.with_slot(
                event.slot,
                render.comparison_slot_html(
                    slot_label(event.slot), event.finished.text, None if blind else event.method
                ),
            )
        elif isinstance(event, Stopped):
            yield CompareView.message(STOPPED_UNSAVED, "warning")
        elif isinstance(event, ComparisonSaved):
            saved = event.comparison
            view = ComparisonView(
                saved.comparison_id, list(saved.methods), list(saved.texts), list(saved.generation_ids), saved.blind
            )
            status = render.message_box(
                f"Saved as comparison #{view.comparison_id}. Read the outputs, rate them and pick the one you prefer"
                + (". The methods are revealed after you submit." if view.blind else "."),
                "ok",
            )
            yield unchanged._replace(
                status=status,
                view=view,
                slots=_slot_views(view),
                choices=gr.update(choices=choices(), value=view.comparison_id),
            )


def comparison_label(comparison: StoredComparison) -> str:
    """How the reopen dropdown names a saved comparison (rendered as text, not HTML)."""
    snippet = " ".join(comparison.input_text.split())[:60]
    blind = "blind, " if comparison.blind else ""
    return f"#{comparison.id} · {comparison.task} · {blind}{len(comparison.outputs)} outputs · {snippet}"


def summary_rows(summary: AnnotationSummary) -> tuple[list[list], str]:
    """Win rates and mean ratings per method, and inter-annotator agreement (trusted numbers only)."""
    rows = []
    for method, judged in summary.methods.items():
        means = judged.mean_ratings
        rows.append(
            [
                method_label(method),
                judged.shown,
                judged.wins,
                round(judged.win_rate, 3),
                judged.ties,
                judged.all_bad,
                _round(means.get("personalization")),
                _round(means.get("fluency")),
            ]
        )
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


class CompareTab:
    """The tab's handlers over one service."""

    def __init__(self, service: AppService) -> None:
        self.service = service

    def comparison_choices(self) -> list[tuple[str, int]]:
        """Saved comparisons for the reopen dropdown, newest first."""
        return [(comparison_label(comparison), comparison.id) for comparison in self.service.saved_comparisons()]

    def compare(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        methods: Sequence[str],
        blind: bool,
        request: gr.Request = None,
        **settings: object,
    ) -> Iterator[CompareView]:
        """Generate with every chosen method (streaming each into its slot), then save the comparison.

        ``settings``: the Generate tab's settings widgets, by GenerationSettings field name (the service
        reads them into one GenerationSettings).
        """

        def produce(flag):
            events = self.service.compare(history, task, input_text, settings, list(methods or ()), blind, cancel=flag)
            for view in comparison_frames(events, self.comparison_choices):
                yield view if isinstance(view, Toast) else view.flat()

        for frame in RUNS.start(request, "compare", produce, width=COMPARE_WIDTH).frames():
            yield CompareView.from_flat(frame)

    @staticmethod
    def stop(request: gr.Request = None) -> CompareView:
        """The Stop button: end this page's comparison run (an incomplete comparison is not saved)."""
        run = RUNS.stop(request, "compare")
        if run is not None and run.done:
            return CompareView.from_flat(run.state)
        return CompareView.message(STOPPED_UNSAVED, "warning")

    # ----------------------------------------------------------------------- reopening and judging

    def open_comparison(self, comparison_id: int | str | None) -> CompareView:
        """Show a saved comparison for a new judgement (a blind one in a fresh random order)."""
        chosen = str(comparison_id).strip().lstrip("#") if comparison_id is not None else ""
        try:
            if not chosen.isdigit():
                raise ValueError("Choose a saved comparison to open.")
            comparison = self.service.reopen_comparison(int(chosen))
        except ValueError as error:
            gr.Warning(render.esc(str(error)))
            return CompareView.message(str(error), "error")
        outputs = comparison.outputs
        view = ComparisonView(
            comparison_id=comparison.id,
            order=[o.method for o in outputs],
            texts=[o.text for o in outputs],
            generation_ids=[o.generation_id for o in outputs],
            blind=comparison.blind,
        )
        status = render.message_box(
            f"Opened comparison #{view.comparison_id} ({comparison.task} task). Input: {comparison.input_text}", "info"
        )
        return CompareView.unchanged().showing(len(outputs))._replace(view=view, slots=_slot_views(view), status=status)

    def submit_annotation(
        self, view: ComparisonView | None, annotator: str, preferred: str | None, comment: str, *ratings: int | None
    ) -> JudgedView:
        """The "Submit judgement" button (the /annotate endpoint: the name, the preference, the comment, then
        the ratings of slot A's criteria, slot B's, …): see :meth:`judge`."""
        return self.judge(view, JudgementForm(annotator or "", preferred, comment or "", tuple(ratings)))

    def judge(self, view: ComparisonView | None, form: JudgementForm) -> JudgedView:
        """Save one judgement, then reveal which method produced which output."""
        if view is None:
            return JudgedView.refused("Run a comparison or open a saved one first.")
        if view.revealed:
            return JudgedView.refused(
                "This judgement is already saved. Reopen the comparison to judge it again (as another annotator)."
            )
        if not form.annotator.strip():
            return JudgedView.refused("Enter your name as annotator.")
        if not form.preferred:
            return JudgedView.refused("Pick the output you prefer (or tie / all bad).")
        try:
            saved = self.service.annotate(
                NewAnnotation(
                    comparison_id=view.comparison_id,
                    annotator=form.annotator.strip(),
                    preferred=form.preferred,
                    ratings=form.scores(len(view.order)),
                    comment=form.comment,
                    display_order=tuple(view.order),
                )
            )
        except ValueError as error:
            return JudgedView.refused(str(error))
        revealed = replace(view, revealed=True, stats=[output.stats for output in saved.outputs])
        table, agreement = self.summary_table()
        status = render.message_box(f"Saved annotation #{saved.annotation_id}. The methods are now revealed.", "ok")
        return JudgedView(status, revealed, _slot_views(revealed), table, agreement)

    # ----------------------------------------------------------------------- summary and exports

    def summary_table(self) -> tuple[list[list], str]:
        """Win rates and mean ratings per method, and inter-annotator agreement."""
        return summary_rows(self.service.annotation_summary())

    def export_annotations(self, kind: str, token: str = "") -> tuple[dict, str]:
        """Every annotation in a fresh CSV or JSONL file for download (in public, for the operator's token)."""
        hidden = gr.update(value=None, visible=False)
        try:
            exported = self.service.export_annotations("csv" if kind == "csv" else "jsonl", token)
        except ExportRefused as error:
            return hidden, render.message_box(str(error), "error")
        if exported.path is None:
            return hidden, render.message_box("No annotations yet: nothing to export.", "info")
        return gr.update(value=str(exported.path), visible=True), render.message_box(
            f"Exported {exported.count} annotation(s) as {kind.upper()}.", "ok"
        )

    def refresh_on_load(self) -> tuple:
        """The saved comparisons and the summary afresh (other users may have added to them)."""
        rows, text = self.summary_table()
        return gr.update(choices=self.comparison_choices()), rows, text


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
    pairing = controls.settings["pairing"]  # the Generate tab's picker: Compare runs on its pairing
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
