"""The history that crossed, as the Generate tab shows it (handlers, no server): the privacy panel's headline
amber naming the phrases, green only when none crossed; the phrases highlighted in the transcript and in the
output inside their tokens' colours, escaped; the private-span guard offered in one click."""

from __future__ import annotations

import html
import re

import gradio as gr
import pytest

import app
from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS
from specsteer.engine.settings import SUGGESTED_PRIVATE_GUARD
from specsteer.models.tiny import TEST_PAIRING_ID
from specsteer.service.page import read_sample
from testkit import force_drafts, widget_settings
from ui import generate_handlers

pytestmark = pytest.mark.usefixtures("tiny_app")

PHRASE = "Gregory Simmons"  # the default persona's name, in her history and not in her task's input


def generate(alpha: float, **overrides):
    """The default persona's generation on the tiny pair, its frames as the tab shows them."""
    service = app.build_service()
    persona = read_sample(DEFAULT_SAMPLE)
    task_input = SAMPLE_USERS[DEFAULT_SAMPLE].input_text
    assert PHRASE not in task_input
    settings = widget_settings(TEST_PAIRING_ID, 20, alpha=alpha, draft_len=16, **overrides)
    events = service.generate(persona, "cogenesis", task_input, settings)
    return list(generate_handlers.generation_frames(events))


def headline(frame) -> str:
    """The privacy panel's headline: what comes before the facts audit and the transcript."""
    return frame.privacy.split('<div class="ss-facts-box"')[0].split('<div class="ss-transcript">')[0]


def test_a_rejected_draft_with_the_personas_name_turns_the_headline_amber_and_is_marked(monkeypatch):
    """The newcomer's case: the name crossed only in a draft the Cloud rejected (alpha inf)."""
    # 16 bytes: the first round's drafts (forced: the tiny models copy nothing by themselves)
    force_drafts(monkeypatch, PHRASE.encode() + b" ")
    final = generate(alpha=float("inf"))[-1]
    top = headline(final)
    assert "ss-box-warning" in top and "ss-box-ok" not in top and "Privacy check passed" not in top
    assert f"'{PHRASE}'" in html.unescape(top) and "only in drafts the cloud rejected" in top
    assert f'<mark class="ss-crossed">{PHRASE}</mark>' in top and "in a rejected draft (round 1)" in top
    # The transcript's first draft shows the name highlighted; the output's struck-through drafts too.
    assert f'<mark class="ss-crossed">{PHRASE}</mark>' in final.privacy.split("<table>")[1]
    marks = re.findall(
        r'<del class="ss-tok ss-tok-rejected"[^>]*><mark class="ss-crossed">([^<]*)</mark></del>', final.output
    )
    assert "".join(marks).replace("\u2423", " ") == PHRASE  # a lone space shows as ␣ in a struck-through draft
    # Once it ends the panel opens and the guard is offered with the n the service chose; one click sets it.
    follow_up = final.follow_up
    assert follow_up == generate_handlers.PrivacyFollowUp(crossed=True, guard=SUGGESTED_PRIVATE_GUARD)
    panel, guard = generate_handlers.GenerateTab.follow_privacy(follow_up)
    assert panel["open"] is True and guard["visible"] is True and f"n = {SUGGESTED_PRIVATE_GUARD}" in guard["value"]
    assert generate_handlers.GenerateTab.take_guard_offer(follow_up) == SUGGESTED_PRIVATE_GUARD


def test_an_accepted_name_is_marked_inside_its_tokens_colours(monkeypatch):
    force_drafts(monkeypatch, PHRASE.encode() + b" ")
    final = generate(alpha=0.0)[-1]
    assert "ss-box-warning" in headline(final)
    kept = re.findall(
        r'<span class="ss-tok ss-tok-(\w+)"[^>]*><mark class="ss-crossed">([^<]*)</mark></span>', final.output
    )
    assert "".join(text for _, text in kept) == PHRASE  # every character of the name, each in its own token
    assert {kind for kind, _ in kept} <= {"accepted", "recovered", "bonus"}


def test_without_a_crossing_the_headline_is_green_and_nothing_is_offered():
    final = generate(alpha=0.1)[-1]
    top = headline(final)
    assert "ss-box-ok" in top and "Privacy check passed" in top and "No phrase of your history crossed" in top
    assert "ss-crossed" not in final.output and "ss-crossed" not in final.privacy
    assert final.follow_up == generate_handlers.PrivacyFollowUp(crossed=False, guard=None)
    panel, guard = generate_handlers.GenerateTab.follow_privacy(final.follow_up)
    assert panel == gr.skip() and guard["visible"] is False
    assert generate_handlers.GenerateTab.take_guard_offer(final.follow_up) == gr.skip()


def test_a_guarded_generation_says_the_guard_was_on_and_offers_it_no_more(monkeypatch):
    force_drafts(monkeypatch, PHRASE.encode() + b" ")
    final = generate(alpha=float("inf"), private_guard=SUGGESTED_PRIVATE_GUARD)[-1]
    assert f"guard was on (n = {SUGGESTED_PRIVATE_GUARD} tokens)" in final.privacy
    assert final.follow_up == generate_handlers.PrivacyFollowUp(crossed=True, guard=None)  # on already


def test_markup_in_a_phrase_that_crossed_stays_text():
    from specsteer.data.crossing import CrossedPhrase, Crossing, HistoryCrossing
    from specsteer.method.events import TokenEvent
    from ui.token_html import token_span

    phrase = "<b>Zork Quill</b>"
    crossing = HistoryCrossing((CrossedPhrase(phrase, (Crossing(1, "accepted"),), ((0, len(phrase)),)),))
    tokens = [
        TokenEvent(1, phrase[:6], "accepted", 1, position=0),
        TokenEvent(2, phrase[6:], "accepted", 1, position=1),
    ]
    marks = crossing.token_marks(tokens)
    shown = "".join(token_span(token, marks.get(index, ())) for index, token in enumerate(tokens))
    assert "<b>" not in shown and "&lt;b&gt;Zor</mark>" in shown and shown.count('<mark class="ss-crossed">') == 2
