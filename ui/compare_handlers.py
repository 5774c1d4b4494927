"""The Compare tab's handlers over the service: each takes a few widget values and returns one named view
(testable without a server); the layout and wiring are in ui/compare_tab.py."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import gradio as gr

from specsteer.service import judging
from specsteer.service.app_service import AppService
from specsteer.service.events import (
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
from specsteer.service.judging import (
    COMPARED_METHODS,
    PREFERENCE_EXTRAS,
    ComparisonView,
    JudgementForm,
    comparison_label,
    summary_rows,
)
from specsteer.stores.generations import RATING_CRITERIA, NamedHistory, slot_label
from ui import render
from ui.callers import page_session
from ui.markup import esc
from ui.streaming import NOT_YOURS, RUNS, Throttle, Toast

MAX_SLOTS = len(COMPARED_METHODS)


class CompareView(NamedTuple):
    """The outputs of the comparison events, by name. ``slots`` (the outputs' HTML) and ``visible`` (their
    columns) hold one value per slot, ``ratings`` two (:data:`RATING_CRITERIA`) per slot. Fields left
    unchanged are ``gr.skip()``; Gradio gets the fields flat (:meth:`flat`)."""

    status: object
    view: object  # the ComparisonView being judged (a gr.State)
    preferred: object
    choices: object  # the saved comparisons' dropdown
    submit: object  # the Submit button: enabled only while a saved comparison waits for this page's judgement
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
        return (
            self.status,
            self.view,
            self.preferred,
            self.choices,
            self.submit,
            *self.slots,
            *self.visible,
            *self.ratings,
        )

    @classmethod
    def from_flat(cls, values: Sequence) -> CompareView:
        slots, visible, ratings = (
            values[5 : 5 + MAX_SLOTS],
            values[5 + MAX_SLOTS : 5 + 2 * MAX_SLOTS],
            values[5 + 2 * MAX_SLOTS :],
        )
        status, view, preferred, choices, submit = values[:5]
        return cls(status, view, preferred, choices, submit, tuple(slots), tuple(visible), tuple(ratings))


COMPARE_WIDTH = len(CompareView.unchanged().flat())


class JudgedView(NamedTuple):
    """What saving a judgement updates: the status, the judged view, the outputs (revealed) and the
    annotation summary. Flat for Gradio like :class:`CompareView`."""

    status: object
    view: object
    slots: tuple
    summary: object
    agreement: object
    submit: object  # disabled once judged (a new or reopened comparison enables it again)

    @classmethod
    def refused(cls, message: str) -> JudgedView:
        gr.Warning(esc(message))
        skip = gr.skip()
        return cls(render.message_box(message, "error"), skip, (skip,) * MAX_SLOTS, skip, skip, skip)

    def flat(self) -> tuple:
        return (self.status, self.view, *self.slots, self.summary, self.agreement, self.submit)


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


SUBMIT_LABEL = "Submit judgement"
JUDGED_LABEL = "Judged: run or open a comparison to judge another"


def submit_button(judged: bool, waiting: bool = False) -> dict:
    """The Submit button: off once this page judged the comparison shown, or while outputs are still coming."""
    if judged:
        return gr.update(interactive=False, value=JUDGED_LABEL)
    return gr.update(interactive=not waiting, value=SUBMIT_LABEL)


def preference_choices(count: int) -> list[tuple[str, str]]:
    return [(f"Output {slot_label(slot)}", slot_label(slot)) for slot in range(count)] + PREFERENCE_EXTRAS


def _slot_views(view: ComparisonView) -> tuple:
    slots: list[object] = []
    for slot in range(MAX_SLOTS):
        if slot >= len(view.order):
            slots.append(gr.skip())
            continue
        method = view.shown_method(slot)
        stats = view.stats[slot] if view.revealed and slot < len(view.stats) else None
        slots.append(render.comparison_slot_html(slot_label(slot), view.texts[slot], method, stats))
    return tuple(slots)


STOPPED_UNSAVED = "Stopped. The incomplete comparison was not saved."


@dataclass
class _Progress:
    """Where a running comparison is: the output in progress, its tokens, and the clock (``time.monotonic``)."""

    of: int = 1
    max_tokens: int = 0
    started: float = 0.0
    slot: int = 0
    slot_started: float = 0.0
    tokens: int = 0
    estimate_s: float | None = None

    def status(self, now: float) -> str:
        """One line: which output, its tokens, the seconds on it and in all, and the calibration's estimate."""
        line = (
            f"Generating output {slot_label(self.slot)} ({self.slot + 1} of {self.of}) · "
            f"{self.tokens} of {self.max_tokens} tokens · {now - self.slot_started:.0f} s on this output, "
            f"{now - self.started:.0f} s elapsed in all"
        )
        if self.estimate_s is not None:
            line += (
                f" · estimated ≈ {self.estimate_s:.0f} s for all {self.of} outputs "
                "(this machine's calibration, for reference-length prompts)"
            )
        else:
            line += " · no estimate: this pairing was not calibrated on this machine"
        return line + "…"

    def slot_state(self, now: float) -> str:
        return f"generating… {self.tokens} of {self.max_tokens} tokens · {now - self.slot_started:.0f} s"


def comparison_frames(
    events: Iterable[ComparisonEvent],
    choices: Callable[[], list[tuple[str, int]]],
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[CompareView | Toast]:
    """The service's events of one comparison as views of this tab's outputs, with a toast for a failure;
    ``choices`` lists the saved comparisons once this one is saved. While outputs come, the status line says
    which, its tokens, the seconds elapsed (``clock``) and the calibration's estimate (:class:`_Progress`)."""
    blind = True
    order: tuple[str, ...] = ()
    pieces: list[str] = []
    progress = _Progress()
    throttle = Throttle()
    unchanged = CompareView.unchanged()
    drafts: list[str] = []  # the slot's drafts awaiting their verdict (shown only when the methods are named)
    for event in events:
        if isinstance(event, Failed):
            yield Toast(esc(event.message))
            yield CompareView.message(event.message, "error")
        elif isinstance(event, ComparisonStarted):
            blind, order = event.blind, event.methods
            progress = _Progress(len(order), event.settings.max_new_tokens, clock())
            slots = tuple(
                render.comparison_slot_html(slot_label(slot), None) if slot < len(order) else gr.skip()
                for slot in range(MAX_SLOTS)
            )
            # view None: nothing to judge until every output is saved
            yield unchanged.showing(len(order))._replace(
                view=None,
                slots=slots,
                status=render.message_box("Starting…", "busy"),
                submit=submit_button(judged=False, waiting=True),
            )
        elif isinstance(event, Loading):
            yield CompareView.message(event.message, "busy")
        elif isinstance(event, Generating):
            pieces, drafts = [], []
            progress.slot, progress.slot_started, progress.tokens = event.slot, clock(), 0
            progress.of, progress.estimate_s = event.of, event.estimate_s
            yield CompareView.message(progress.status(clock()), "busy")
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
                progress.tokens += 1
            # Every draft is published: the last one of a round may be on screen for a whole verification.
            if isinstance(event, Pending) or throttle.due():
                now = clock()
                yield unchanged.with_slot(
                    event.slot,
                    render.comparison_slot_html(
                        slot_label(event.slot),
                        "".join(pieces),
                        None if blind else order[event.slot],
                        state=progress.slot_state(now),
                        pending="".join(drafts),
                    ),
                )._replace(status=render.message_box(progress.status(now), "busy"))
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
                submit=submit_button(judged=False),
            )


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
        request: gr.Request | None = None,
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
    def stop(request: gr.Request | None = None) -> CompareView:
        """The Stop button: end this page's comparison run (an incomplete comparison is not saved)."""
        run = RUNS.stop(request, "compare")
        if run is None:
            return CompareView.message(NOT_YOURS, "warning")
        if run.done:
            return CompareView.from_flat(run.state)
        return CompareView.message(STOPPED_UNSAVED, "warning")

    # ----------------------------------------------------------------------- reopening and judging

    def open_comparison(self, comparison_id: int | str | None) -> CompareView:
        """Show a saved comparison for a new judgement (a blind one in a fresh random order)."""
        try:
            comparison = self.service.reopen_comparison(judging.comparison_id(comparison_id))
        except ValueError as error:
            gr.Warning(esc(str(error)))
            return CompareView.message(str(error), "error")
        view = ComparisonView.of(comparison)
        status = render.message_box(
            f"Opened comparison #{view.comparison_id} ({comparison.task} task). Input: {comparison.input_text}", "info"
        )
        return (
            CompareView.unchanged()
            .showing(len(view.order))
            ._replace(view=view, slots=_slot_views(view), status=status, submit=submit_button(judged=False))
        )

    def submit_annotation(
        self,
        request: gr.Request | None,
        view: ComparisonView | None,
        annotator: str,
        preferred: str | None,
        comment: str,
        *ratings: int | None,
    ) -> JudgedView:
        """The "Submit judgement" button (the /annotate endpoint: the name, the preference, the comment, then
        the ratings of slot A's criteria, slot B's, …; Gradio passes the page's ``request``): see :meth:`judge`."""
        form = JudgementForm(annotator or "", preferred, comment or "", tuple(ratings))
        return self.judge(view, form, page_session(request))

    def judge(self, view: ComparisonView | None, form: JudgementForm, session: str | None) -> JudgedView:
        """Save the judgement of the page ``session`` (one per comparison: a re-submit replaces the page's
        earlier one), then reveal which method produced which output."""
        try:
            saved = self.service.annotate(judging.judgement(view, form, session))
        except ValueError as error:
            return JudgedView.refused(str(error))
        assert view is not None  # judging.judgement refuses a missing view
        revealed = view.revealed_with(saved)
        table, agreement = self.summary_table()
        replaced = " It replaces this page's earlier judgement of the comparison." if saved.replaced else ""
        status = render.message_box(
            f"Saved annotation #{saved.annotation_id}.{replaced} The methods are now revealed.", "ok"
        )
        return JudgedView(status, revealed, _slot_views(revealed), table, agreement, submit_button(judged=True))

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
