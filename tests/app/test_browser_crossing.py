"""The history that crossed, in a real browser: a phrase planted in an uploaded history and drafted by the
Specialist turns the privacy panel's headline amber and names it, is highlighted in the output (inside its
tokens' colours) and in the transcript, and one click on the offered guard generates again with it on.

The tiny test pair's random models never copy a history by themselves (the default persona's generation on it
crosses nothing: tests/app/test_crossing_ui.py), so the Specialist's first drafts are set to the planted phrase
(the server runs in this process). Debian's Chromium driven by Playwright's Python package, as
tests/app/test_browser.py; never run ``playwright install``. The full-page screenshot goes to
test-artifacts/screenshots/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit import app_page, browser_api, force_drafts, type_until_kept

sync_api = browser_api()

pytestmark = pytest.mark.browser

WAIT_MS = 90_000
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CANARY = "Zork Quill"  # two capitalised words: a name; with its spaces 12 bytes, one round's drafts
TRANSPARENT = "rgba(0, 0, 0, 0)"


@pytest.fixture
def page(app_server, chromium):
    with app_page(chromium, app_server[0], WAIT_MS) as page:
        yield page


def test_a_planted_phrase_that_crossed_is_named_amber_highlighted_and_the_guard_is_one_click(
    page, tmp_path, monkeypatch
):
    expect = sync_api.expect
    history = tmp_path / "canary-history.txt"
    history.write_text(f"Signed, {CANARY}, in the garden.\n\nTomatoes need sun.\n", encoding="utf-8")
    page.set_input_files("#history-upload input[type=file]", str(history))
    expect(page.locator("#history-summary")).to_contain_text("canary-history.txt", timeout=WAIT_MS)
    type_until_kept(page, page.locator("#task-input textarea"), "Write a note about the garden.")
    type_until_kept(page, page.get_by_label("number input for Draft length k"), "16")
    type_until_kept(page, page.locator("#max-new-tokens input[type=number]"), "24")
    force_drafts(monkeypatch, f" {CANARY} ".encode())  # the Specialist's first round copies the phrase

    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    headline = page.locator("#privacy-headline")  # the panel opened by itself
    expect(headline.locator(".ss-box-warning")).to_be_visible(timeout=WAIT_MS)
    expect(headline).to_contain_text("1 phrase of your history crossed to the cloud")
    expect(headline).to_contain_text(f"'{CANARY}'")
    expect(headline).not_to_contain_text("Privacy check passed")

    marks = page.locator("#generate-output mark.ss-crossed")
    assert marks.count() > 0
    assert "".join(marks.all_inner_texts()).replace("\u2423", " ").strip() == CANARY
    for mark in marks.all():  # the mark outlines the text; the token around it keeps its colour
        assert mark.evaluate("n => getComputedStyle(n).backgroundColor") == TRANSPARENT
        token = mark.locator("xpath=..")
        assert "ss-tok" in (token.get_attribute("class") or "")
        assert token.evaluate("n => getComputedStyle(n).backgroundColor") != TRANSPARENT
    assert page.locator("#privacy .ss-transcript mark.ss-crossed").count() > 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "generate-history-crossed.png"), full_page=True)

    guard = page.locator("#guard-offer")
    expect(guard).to_contain_text("private-span guard (n = 3)")
    guard.click()  # one click: the guard set, then Generate pressed
    expect(page.locator("#generate-status")).to_contain_text("saved as generation #2", timeout=WAIT_MS)
    expect(page.locator("#privacy")).to_contain_text("The private-span guard was on (n = 3 tokens)", timeout=WAIT_MS)
    expect(guard).to_be_hidden()
    page.get_by_text("Sampling and advanced settings").click()  # the setting itself now says 3
    expect(page.locator("#private-guard input")).to_have_value("3", timeout=WAIT_MS)
