"""In a real browser: each token's popover with its numbers (hover, keyboard focus, Escape), and Compare's
progress line, outputs that fit their text and Submit turned off once judged. Debian's Chromium through
Playwright, as tests/app/test_browser.py; full-page screenshots go to test-artifacts/screenshots/ with the
load average when taken beside each (``*.load.txt``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from testkit import app_page, browser_api

sync_api = browser_api()

pytestmark = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
WAIT_MS = 120_000
NUMBER = r"[0-9][0-9.e+-]*"


@pytest.fixture(scope="module")
def server(app_server):
    return app_server[0]


@pytest.fixture
def page(chromium, server):
    with app_page(chromium, server, WAIT_MS) as page:
        yield page


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    (SCREENSHOTS / f"{name}.load.txt").write_text(f"load average when taken: {load}\n")


def set_number(page, selector: str, value: str) -> None:
    box = page.locator(f"{selector} input[type=number]")
    box.fill(value)
    box.press("Tab")


def test_a_tokens_popover_opens_on_hover_and_on_keyboard_focus_with_its_numbers(page):
    expect = sync_api.expect
    set_number(page, "#alpha", "0.01")  # permissive enough that the random pair accepts some drafts
    set_number(page, "#max-new-tokens", "24")
    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    output = page.locator("#generate-output")

    accepted = output.locator(".ss-tok-accepted.ss-tip").first
    popover = accepted.locator(":scope > .ss-pop")
    expect(popover).to_be_hidden()
    accepted.hover()
    expect(popover).to_be_visible()
    text = popover.inner_text()
    assert re.search(rf"p_L\(y\) = {NUMBER}", text) and re.search(rf"p_S\+\(y\) = {NUMBER}", text), text
    assert re.search(rf"α·p_S0\(y\) = {NUMBER} × {NUMBER} = {NUMBER}", text), text
    assert "The cloud keeps a draft when p_L(y) ≥ α·p_S0(y)" in text and "clears the bar" in text
    assert "round" in text and "position" in text
    assert "generalist p_L" in text and "generic copy p_S0" in text and "your specialist p_S+" in text
    page.mouse.move(2, 2)
    expect(popover).to_be_hidden()

    # keyboard: Tab moves from one token to the next, and the focused one shows its numbers; Escape closes it
    tokens = output.locator(".ss-tip")
    tokens.nth(0).focus()
    page.keyboard.press("Tab")
    second = tokens.nth(1)
    expect(second).to_be_focused()
    expect(second.locator(":scope > .ss-pop")).to_be_visible()
    assert "p_S+" in second.locator(":scope > .ss-pop").inner_text() or "Drawn from" in second.inner_text()
    page.keyboard.press("Escape")
    expect(second.locator(":scope > .ss-pop")).to_be_hidden()

    recovered = output.locator(".ss-tok-recovered.ss-tip").first
    recovered.focus()
    chosen = recovered.locator(":scope > .ss-pop")
    expect(chosen).to_be_visible()
    assert re.search(rf"Drawn from steered logits .* p = {NUMBER} for this token", chosen.inner_text())

    rejected = output.locator(".ss-tok-rejected.ss-tip").first
    rejected.focus()
    expect(rejected.locator(":scope > .ss-pop")).to_contain_text(re.compile("falls short of the bar|Not tested"))
    shot(page, "generate-popover")


def test_compare_shows_progress_with_elapsed_time_and_disables_submit_once_judged(page):
    expect = sync_api.expect
    set_number(page, "#max-new-tokens", "24")
    page.get_by_role("tab", name="Compare & annotate").click()
    submit = page.locator("#submit-judgement")
    page.click("#compare-button")
    status = page.locator("#compare-status")
    # Nothing to judge while the outputs come: the progress and the disabled Submit seen in one look, polled on every
    # frame in the page (the tiny pair's three outputs may all be saved before a second round trip from here could
    # look at the button, and once saved it is rightly enabled).
    page.wait_for_function(
        """() => {
            const status = document.querySelector("#compare-status")?.innerText ?? "";
            return /tokens · \\d+ s on this output, \\d+ s elapsed in all/.test(status)
                && /estimated ≈|no estimate/.test(status)
                && document.querySelector("#submit-judgement")?.disabled === true;
        }""",
        polling="raf",
        timeout=WAIT_MS,
    )
    expect(status).to_contain_text("Saved as comparison", timeout=WAIT_MS)
    expect(submit).to_be_enabled()
    for label in "ABC":
        box = page.locator(f"#slot-{label} .ss-output")
        overflow = box.evaluate("node => node.scrollHeight - node.clientHeight")
        assert overflow <= 1, f"output {label} is clipped by {overflow} px"
    page.locator("#annotator textarea, #annotator input").first.fill("browser-annotator")
    page.locator("#preferred").get_by_text("Output A", exact=True).click()
    page.click("#submit-judgement")
    expect(status).to_contain_text("Saved annotation", timeout=WAIT_MS)
    expect(submit).to_be_disabled()
    expect(submit).to_contain_text("Judged")
    shot(page, "compare")
