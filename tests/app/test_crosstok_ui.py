"""Every surface on a cross-tokenizer pairing (two tokenizers), on tiny random models: the Generate tab's
segment colouring, Compare with the methods a cross pair runs, a Dashboard batch, the pairing picker's note
and the ``generate`` CLI. Handlers are called as plain functions, as in test_ui_handlers.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import app
import storage
from specsteer import cli
from specsteer.engine.decode_config import CROSS_TOKENIZER_METHODS
from specsteer.method.catalog import METHOD_INFO, METHODS, method_label
from specsteer.method.events import SegmentPlace, TokenEvent
from specsteer.models.tiny import CROSS_PAIRING_ID, narrow_cross_pair
from specsteer.service import judging, page, pairings
from specsteer.service.app_service import AppService
from specsteer.service.pair_catalog import PairCatalog
from testkit import widget_settings
from ui import compare_handlers, dashboard_handlers, generate_handlers, pairs
from ui.token_html import TokenHtml

XSS = '<img src=x onerror="window.__pwned=1">'
SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "samples" / "review_user.jsonl"
TASK_INPUT = dict(task="review", input_text="Write a review of a power bank with great battery life")


pytestmark = pytest.mark.usefixtures("tiny_app")


def narrow_service() -> AppService:
    """The app's service, its cross pairing being narrow_cross_pair(): its drafts make segments of
    several Specialist tokens (the tiny cross pair's random bytes seldom do)."""
    service = app.build_service()
    return AppService(store=service.store, runs=service.runs, pairs=PairCatalog({CROSS_PAIRING_ID: narrow_cross_pair}))


def settings(**overrides):
    """The widgets' values for a short greedy SpecSteer run on the tiny two-tokenizer pair."""
    return widget_settings(**{"pairing": CROSS_PAIRING_ID, "max_new_tokens": 40, **overrides})


def run_generate(tab, **overrides):
    return list(tab.generate(page.read_sample("review"), **TASK_INPUT, **settings(**overrides)))


SEGMENT = re.compile(
    r'<(span|del) class="ss-tok ss-tok-(\w+) ss-seg" data-segment-size="(\d+)" title="([^"]*)">'
    r"((?:<span class=\"ss-seg-tok\" data-token=\"\d+\">[^<]*</span>)*)</\1>"
)


# --------------------------------------------------------------------------- rendering


def _segment_events():
    """Round 1: an accepted segment of three drafts (one spelling markup), a refused one of two; a recovery."""
    return [
        TokenEvent(10, XSS, "accepted", 1, 2.5, segment=SegmentPlace(0, 3)),
        TokenEvent(11, "b", "accepted", 1, 2.5, segment=SegmentPlace(1, 3)),
        TokenEvent(12, "", "accepted", 1, 2.5, segment=SegmentPlace(2, 3)),  # ends inside a character
        TokenEvent(13, " ", "rejected", 1, 0.2, segment=SegmentPlace(0, 2)),
        TokenEvent(14, "d", "rejected", 1, None, segment=SegmentPlace(1, 2)),
        TokenEvent(15, "e", "recovered", 1),
    ]


def test_a_segment_is_one_coloured_element_with_its_size_in_the_tooltip_and_the_html_only_grows():
    stream = TokenHtml()
    before = stream.html
    for event in _segment_events():
        stream.add(event)
        after = stream.html
        assert after.startswith(before)
        before = after
    html = stream.html
    assert "<img" not in html and "&lt;img src=x onerror=&quot;" in html
    found = SEGMENT.findall(html)
    assert [(tag, kind, size) for tag, kind, size, _title, _inner in found] == [
        ("span", "accepted", "3"),
        ("del", "rejected", "2"),
    ]
    accepted_title, rejected_title = found[0][3], found[1][3]
    assert "accepted draft · one segment of 3 Specialist tokens" in accepted_title and "ratio 2.5" in accepted_title
    assert "rejected draft · one segment of 2 Specialist tokens" in rejected_title and "ratio 0.2" in rejected_title
    assert found[0][4].count("ss-seg-tok") == 2  # the empty piece adds nothing; its token still closes the segment
    assert "\u2423" in found[1][4]  # a refused space stays visible
    assert html.endswith('<span class="ss-tok ss-tok-recovered" title="recovered · token 15 · round 1">e</span>')


def test_a_segment_cut_short_is_closed_by_the_next_token():
    stream = TokenHtml()
    stream.add(TokenEvent(1, "a", "accepted", 1, 2.0, segment=SegmentPlace(0, 2)))
    stream.add(TokenEvent(2, "b", "recovered", 1))  # e.g. a stop between the two (never in one round)
    assert stream.html.count("</span></span>") == 1 and stream.html.endswith(">b</span>")


# --------------------------------------------------------------------------- Generate


def test_generate_on_a_cross_pairing_streams_segments_and_saves_the_generation():
    tab = generate_handlers.GenerateTab(narrow_service())
    frames = run_generate(tab)
    final = frames[-1]
    assert "saved as generation #" in final.status
    found = SEGMENT.findall(str(final.output))
    assert {kind for _, kind, _, _, _ in found} == {"accepted", "rejected"}
    assert any(int(size) > 1 for _, _, size, _, _ in found)  # two tokenizers cut the text differently
    for _tag, _kind, size, title, inner in found:
        assert f"one segment of {size} Specialist token" in title and inner.count("data-token=") <= int(size)
    assert "LEAK" not in str(final.privacy)
    generation_id = int(re.search(r"generation #(\d+)", final.status).group(1))
    stored = storage.get_generation(generation_id)
    drafts = [token for token in stored["tokens"] if token["kind"] in ("accepted", "rejected")]
    assert drafts and all(set(token["segment"]) == {"position", "size"} for token in drafts)


def test_llm_plus_runs_on_a_cross_pairing_and_its_privacy_report_says_the_private_prompt_was_sent(warnings):
    tab = generate_handlers.GenerateTab(app.build_service())
    final = run_generate(tab, method="llm+", max_new_tokens=8)[-1]
    assert "saved as generation #" in final.status and not warnings
    privacy = str(final.privacy)
    assert "the whole private prompt" in privacy and "not private by design" in privacy
    assert "Also:" not in privacy  # no problem found: the Generalist's prompt is the private one in its own ids


def test_a_method_a_cross_pairing_cannot_run_is_refused_naming_what_can(warnings):
    tab = generate_handlers.GenerateTab(app.build_service())
    final = run_generate(tab, method="sd")[-1]
    assert (
        "ss-box-error" in final.status and "Standard SD is not available on a cross-tokenizer pairing" in final.status
    )
    assert "Available here: SLM, SLM+, LLM, LLM+" in final.status and warnings
    exact = run_generate(tab, exact=True, decoding="sampling")[-1]
    assert "exact-target variant is not available" in exact.status


def test_the_pairing_picker_offers_the_tiny_cross_pair_and_its_note_names_what_it_runs():
    catalog = pairings.catalog()
    labels = dict((value, label) for label, value in pairs.pairing_choices(catalog))
    assert labels[CROSS_PAIRING_ID] == pairs.TINY_CROSS_LABEL
    assert pairings.default_pairing_id(catalog) == pairings.TINY_PAIRING_ID  # the default stays the one-tokenizer pair
    note = pairs.pairing_note(catalog, CROSS_PAIRING_ID)
    for method in CROSS_TOKENIZER_METHODS:
        assert METHOD_INFO[method].label in note
    assert "Standard SD, CoSteer" in note and "refused" in note
    assert "Two tokenizers" in pairs.pairing_note(catalog, "offline-smollm2__qwen2.5-coder")
    assert "Two tokenizers" not in pairs.pairing_note(catalog, "offline-qwen2.5-coder")


# --------------------------------------------------------------------------- Compare


def compare_frames(tab, methods):
    return list(
        tab.compare(
            page.read_sample("review"),
            **TASK_INPUT,
            methods=list(methods),
            blind=False,
            request=None,
            **settings(max_new_tokens=8),
        )
    )


def test_compare_runs_every_compared_method_a_cross_pairing_runs():
    compared = [method for method in judging.COMPARED_METHODS if method in CROSS_TOKENIZER_METHODS]
    assert {"specsteer", "lightcosteer", "slm+", "llm"} <= set(compared)  # llm+ is never compared (it sends data)
    tab = compare_handlers.CompareTab(app.build_service())
    final = compare_frames(tab, compared)[-1]
    status, view = final[0], final[1]
    assert "Saved as comparison" in status
    assert sorted(view.order) == sorted(compared)
    assert all("(empty output)" not in str(slot) for slot in final[4 : 4 + len(compared)])
    stored = storage.get_comparison(view.comparison_id)
    assert stored["settings"]["pairing"] == CROSS_PAIRING_ID


def test_compare_with_a_method_a_cross_pairing_cannot_run_saves_nothing():
    tab = compare_handlers.CompareTab(app.build_service())
    status = compare_frames(tab, ("specsteer", "costeer"))[-1][0]
    assert "CoSteer is not available on a cross-tokenizer pairing" in status and "Available here" in status
    assert storage.list_comparisons() == []


# --------------------------------------------------------------------------- Dashboard


def dashboard_values(**overrides):
    values = dict(
        source="sample",
        upload=None,
        task="review",
        records=1,
        methods=["llm", "llm+", "specsteer"],
        alphas="1.0, 0.1",
        betas="1",
        pairing=CROSS_PAIRING_ID,
        runtime="auto",
        max_new_tokens=4,
        draft_len=2,
        run_name="cross-run",
    )
    values.update(overrides)
    return values


def test_dashboard_batch_on_a_cross_pairing():
    tab = dashboard_handlers.DashboardTab(app.build_service())
    final = list(tab.run_batch(**dashboard_values()))[-1]
    assert "finished" in final.status and "4 cells computed" in final.status
    assert list(final.table["value"]["method"]) == ["LLM", "LLM+ (sends your data)", "SpecSteer", "SpecSteer"]
    run = storage.get_run_by_name("cross-run")
    assert run.status == "finished" and run.config["pairing"] == CROSS_PAIRING_ID


def test_dashboard_refuses_a_method_a_cross_pairing_cannot_run_before_storing_a_run():
    tab = dashboard_handlers.DashboardTab(app.build_service())
    status = list(tab.run_batch(**dashboard_values(methods=["specsteer", "sd"], run_name="refused")))[-1].status
    assert "ss-box-error" in status and "Standard SD is not available" in status and "Available here" in status
    assert "The run failed" not in status
    assert storage.get_run_by_name("refused") is None


# --------------------------------------------------------------------------- the generate CLI


def test_the_generate_cli_runs_the_tiny_cross_pair_and_refuses_what_it_cannot_run(capsys):
    base = [
        "generate",
        "--history",
        str(SAMPLE),
        "--task",
        "review",
        "--input",
        "A review of earbuds.",
        "--pairing",
        CROSS_PAIRING_ID,
        "--max-new-tokens",
        "12",
    ]
    assert cli.main([*base, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["stats"]["drafted"] > 0 and set(document["tokens"][0]) == {"id", "text", "kind"}
    assert "".join(t["text"] for t in document["tokens"] if t["kind"] != "rejected") == document["text"]
    assert cli.main([*base, "--method", "llm+", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["method"] == "llm+"
    assert cli.main([*base, "--method", "costeer"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: CoSteer is not available on a cross-tokenizer pairing") and "Traceback" not in err


def test_method_pickers_offer_only_what_the_chosen_pairing_runs():
    """After the pairing changes, a method picker lists the methods it runs and keeps the choice where
    it still runs: a two-tokenizer pairing drops SD and CoSteer; the tiny same-tokenizer pair offers all."""
    runs = pairings.methods_run_by(CROSS_PAIRING_ID)
    assert set(runs) == set(CROSS_TOKENIZER_METHODS) and "sd" not in runs and "costeer" not in runs
    assert pairings.methods_run_by(pairings.TINY_PAIRING_ID) == METHODS
    group = pairs.offer_methods(METHODS, method_label, CROSS_PAIRING_ID, ["sd", "specsteer", "llm"])
    assert [value for _, value in group["choices"]] == list(runs)
    assert group["value"] == ["specsteer", "llm"]
    dropdown = pairs.offer_methods(("sd", "specsteer"), method_label, CROSS_PAIRING_ID, "sd")
    assert dropdown["value"] == "specsteer" and dropdown["info"] == METHOD_INFO["specsteer"].description
    back = pairs.offer_methods(METHODS, method_label, pairings.TINY_PAIRING_ID, "sd")
    assert back["value"] == "sd" and len(back["choices"]) == len(METHODS)
