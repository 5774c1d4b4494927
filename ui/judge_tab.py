"""The judging queue: an annotator names themself (with their join code where the campaign needs one), picks a
campaign and judges its comparisons one after another, in their own blind order, from the keyboard if they like.

The seat and the comparison shown live in this browser session's state (on the server: another session never
sees them); every decision (the order, what may be saved, the time from display to save) is the service's
(``specsteer.service.campaigns``). Keyboard shortcuts are one small script installed when the page loads.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specsteer.method.catalog import PRIVATE_METHODS
from specsteer.service.campaign_values import CampaignError, JudgeView, Seat
from specsteer.service.campaigns import CampaignService
from specsteer.stores.generations import RATING_CRITERIA, SPECIAL_PREFERENCE_LABELS, SPECIAL_PREFERENCES, slot_label
from ui import campaign_render
from ui.callers import client_address
from ui.render import message_box
from ui.wiring import QUIET

MAX_SLOTS = len(PRIVATE_METHODS)
SPECIAL = [(SPECIAL_PREFERENCE_LABELS[choice], choice) for choice in SPECIAL_PREFERENCES]

# Keys: digits pick a slot, T/G/X the special choices, Enter saves and moves on, arrows skip / go back.
# Inactive while typing in a text field (Ctrl+Enter saves from the rationale) and while the tab is hidden.
SHORTCUTS_JS = """
() => {
  if (window.__ssJudgeKeys) return;
  window.__ssJudgeKeys = true;
  document.addEventListener('keydown', (event) => {
    const root = document.getElementById('judge-panel');
    if (!root || root.offsetParent === null || event.altKey || event.metaKey) return;
    const target = event.target;
    const typing = target && (target.tagName === 'TEXTAREA' ||
      (target.tagName === 'INPUT' && !['radio', 'checkbox', 'button'].includes(target.type)));
    const press = (id) => { const b = document.getElementById(id); if (b) { event.preventDefault(); b.click(); } };
    if (typing) { if (event.key === 'Enter' && event.ctrlKey) press('judge-save'); return; }
    if (target && target.closest && target.closest('button') && (event.key === 'Enter' || event.key === ' ')) return;
    if (event.ctrlKey) return;
    const pick = (value) => {
      const inputs = root.querySelectorAll('#judge-choice input[type=radio]');
      const input = Array.from(inputs).find((candidate) => candidate.value === value);
      if (input) { event.preventDefault(); input.click(); }
    };
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    if (/^[1-9]$/.test(key)) pick(String.fromCharCode(64 + Number(key)));
    else if (key === 't') pick('tie');
    else if (key === 'g') pick('all_good');
    else if (key === 'x') pick('all_bad');
    else if (key === 'Enter') press('judge-save');
    else if (key === 'ArrowRight') press('judge-skip');
    else if (key === 'ArrowLeft') press('judge-back');
  });
}
"""

# After Start, the keys belong to the queue, not to the focused Start button.
BLUR_JS = "() => { if (document.activeElement) document.activeElement.blur(); }"


def _choices(count: int) -> list[tuple[str, str]]:
    return [(slot_label(slot), slot_label(slot)) for slot in range(count)] + SPECIAL


class JudgeHandlers:
    """The queue's handlers; each returns every output of the panel (see :meth:`shown`)."""

    def __init__(self, service: CampaignService) -> None:
        self.service = service

    def campaign_choices(self) -> Any:
        return gr.update(choices=[c.name for c in self.service.campaigns() if c.ready > 0])

    def _refused(self, message: str, seat: Seat | None, view: JudgeView | None) -> list[Any]:
        skip = gr.skip()
        return [seat, view, message_box(message, "error"), *([skip] * (3 + MAX_SLOTS + 1 + MAX_SLOTS * 2 + 1))]

    def shown(self, seat: Seat, view: JudgeView, message: str, kind: str = "info") -> list[Any]:
        """seat, view, status, progress, input, slots…, choice, ratings… (slot-major), rationale."""
        count = len(view.slots)
        previous = view.previous
        choice = previous.preference if previous is not None else None
        ratings = []
        for slot in range(MAX_SLOTS):
            method = view.slots[slot].method if slot < count else None
            for criterion in RATING_CRITERIA:
                value = previous.ratings.get(method or "", {}).get(criterion) if previous is not None else None
                ratings.append(gr.update(value=value, visible=slot < count))
        slots = [
            gr.update(value=campaign_render.slot_html(view, slot) if slot < count else "", visible=slot < count)
            for slot in range(MAX_SLOTS)
        ]
        return [
            seat,
            view,
            message_box(message, kind),
            campaign_render.progress_text(view),
            campaign_render.input_html(view),
            gr.update(visible=True),
            *slots,
            gr.update(choices=_choices(count), value=choice),
            *ratings,
            previous.rationale if previous is not None else "",
        ]

    def start(
        self,
        name: str,
        code: str,
        campaign: str,
        _seat: Seat | None,
        _view: JudgeView | None,
        request: gr.Request | None = None,
    ) -> list[Any]:
        """Join the campaign (failed joins are counted per client address: ``specsteer.service.join_codes``)."""
        try:
            seat = self.service.join(campaign or "", name or "", code or "", client_address(request))
            view = self.service.view(seat, self.service.first_open(seat))
        except CampaignError as error:
            return self._refused(str(error), None, None)
        return self.shown(seat, view, f"Judging “{seat.campaign}” as {seat.annotator}.")

    def move(self, seat: Seat | None, view: JudgeView | None, step: int) -> list[Any]:
        if seat is None or view is None:
            return self._refused("Name yourself and pick a campaign first.", seat, view)
        try:
            moved = self.service.view(seat, (view.position + step) % view.total)
        except CampaignError as error:
            return self._refused(str(error), seat, view)
        return self.shown(seat, moved, "Skipped: it stays in your queue." if step > 0 else "Back one.")

    def save(
        self, seat: Seat | None, view: JudgeView | None, choice: str | None, rationale: str, *ratings: Any
    ) -> list[Any]:
        if seat is None or view is None:
            return self._refused("Name yourself and pick a campaign first.", seat, view)
        if not choice:
            return self._refused(
                "Pick the output you prefer, or tie / all good / all bad (keys 1–6, T, G, X).", seat, view
            )
        scores = {
            slot_label(slot): {
                criterion: ratings[slot * len(RATING_CRITERIA) + index]
                for index, criterion in enumerate(RATING_CRITERIA)
            }
            for slot in range(len(view.slots))
        }
        try:
            saved = self.service.save(seat, view, choice, scores, rationale)
            following = self.service.view(seat, self.service.first_open(seat, view.position))
        except CampaignError as error:
            return self._refused(str(error), seat, view)
        done = following.judged >= following.total
        message = f"Saved ({saved.seconds or 0:.1f} s)." + (" You have judged every comparison." if done else "")
        return self.shown(seat, following, message, "ok")


def build(service: CampaignService) -> JudgeHandlers:
    handlers = JudgeHandlers(service)
    with gr.Column(elem_id="judge-panel"):
        gr.Markdown(
            "Judge a campaign's comparisons one after another. Your name and the order you see are yours alone."
        )
        with gr.Row():
            name = gr.Textbox(label="Your name", max_length=64, elem_id="judge-name")
            code = gr.Textbox(
                label="Join code (if the campaign needs one)", type="password", max_length=64, elem_id="judge-code"
            )
            campaign = gr.Dropdown(label="Campaign", choices=[], elem_id="judge-campaign", allow_custom_value=True)
            start = gr.Button("Start judging", variant="primary", elem_id="judge-start")
        status = gr.HTML(elem_id="judge-status")
        progress = gr.HTML(elem_id="judge-progress")
        gr.HTML(campaign_render.shortcuts_html())
        with gr.Column(visible=False) as board:
            shown_input = gr.HTML(elem_id="judge-input")
            with gr.Row():
                slots = [gr.HTML(visible=False, elem_id=f"judge-slot-{slot_label(slot)}") for slot in range(MAX_SLOTS)]
            choice = gr.Radio(choices=_choices(MAX_SLOTS), label="Preferred", elem_id="judge-choice")
            ratings = []
            with gr.Accordion("Ratings (optional, 1–5)", open=False):
                for slot in range(MAX_SLOTS):
                    with gr.Row():
                        for criterion in RATING_CRITERIA:
                            ratings.append(
                                gr.Radio([1, 2, 3, 4, 5], label=f"{slot_label(slot)} · {criterion}", visible=False)
                            )
            rationale = gr.Textbox(
                label="Rationale (optional, plain text)", max_length=2000, lines=2, elem_id="judge-rationale"
            )
            with gr.Row():
                back = gr.Button("← Back", elem_id="judge-back")
                skip = gr.Button("Skip →", elem_id="judge-skip")
                save = gr.Button("Save and next (Enter)", variant="primary", elem_id="judge-save")
    seat_state, view_state = gr.State(None), gr.State(None)
    outputs = [seat_state, view_state, status, progress, shown_input, board, *slots, choice, *ratings, rationale]
    start.click(handlers.start, [name, code, campaign, seat_state, view_state], outputs, api_name="judge_start").then(
        None, None, None, js=BLUR_JS, **QUIET
    )
    save.click(
        handlers.save,
        [seat_state, view_state, choice, rationale, *ratings],
        outputs,
        api_name="judge_save",
        trigger_mode="once",
    )
    skip.click(lambda s, v: handlers.move(s, v, 1), [seat_state, view_state], outputs, api_name="judge_skip")
    back.click(lambda s, v: handlers.move(s, v, -1), [seat_state, view_state], outputs, api_name="judge_back")
    handlers.refresh_outputs = [campaign]  # type: ignore[attr-defined]
    return handlers


def on_load(handlers: JudgeHandlers, page: gr.Blocks) -> None:
    """List the campaigns afresh and install the keyboard shortcuts when a page opens."""
    page.load(handlers.campaign_choices, None, handlers.refresh_outputs, **QUIET)  # type: ignore[attr-defined]
    page.load(None, None, None, js=SHORTCUTS_JS, **QUIET)
