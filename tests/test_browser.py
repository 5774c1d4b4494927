"""The app in a real browser: Debian's Chromium driven by Playwright's Python package.

Covers uploading a history, streaming a generation with coloured tokens, the privacy panel, a
blind comparison with an annotation, a one-record dashboard batch with its plot, and proof that
markup in a history or an input is shown as text and never runs. Screenshots go to
test-artifacts/screenshots/ for a person to look at.

Never run ``playwright install``: the test uses /usr/bin/chromium and is skipped without it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium (apt-get install chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")


pytestmark = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "screenshots"
XSS_SCRIPT = "<script>window.__pwned=1</script>"
XSS_IMG = '<img src=x onerror="window.__pwned=1">'
XSS_TEMPLATE = "${window.__pwned=1}"  # gr.HTML renders through a JS template: data must not be evaluated
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def server(app_server):
    return app_server[0]


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, server):
    """A fresh page on the app; fails the test if the page asks anything of a host other than the app."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    outside: list[str] = []
    page.on("request", lambda request: outside.append(request.url)
            if urlparse(request.url).hostname not in ("127.0.0.1", None) and request.url.startswith("http") else None)
    page.goto(server)
    page.wait_for_selector("#generate-button", timeout=WAIT_MS)
    yield page
    context.close()
    assert not outside, f"the page made requests outside the app: {outside[:5]}"


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def set_number(page, selector: str, value: str) -> None:
    """Type into a slider's number box and leave it, as a user would."""
    box = page.locator(f"{selector} input[type=number]")
    box.fill(value)
    box.press("Tab")


def assert_not_pwned(page) -> None:
    assert page.evaluate("typeof window.__pwned") == "undefined", "injected markup ran in the page"
    assert page.locator('img[src="x"]').count() == 0


def test_generate_streams_coloured_tokens_and_injection_stays_text(page, tmp_path):
    expect = sync_api.expect
    shot(page, "01-page-loaded")
    history = tmp_path / "my-history.txt"
    history.write_text(f"I review power banks. {XSS_SCRIPT}\n\nBattery life matters most. {XSS_IMG}\n\n"
                       f"Garden hoses are dull. {XSS_TEMPLATE}\n", encoding="utf-8")
    page.set_input_files("#history-upload input[type=file]", str(history))
    expect(page.locator("#history-summary")).to_contain_text("Read 3 items", timeout=WAIT_MS)

    page.locator("#task-input textarea").fill(f"Review this power bank {XSS_SCRIPT} {XSS_IMG} {XSS_TEMPLATE}")
    set_number(page, "#alpha", "0.01")  # permissive enough that the random pair accepts some drafts
    set_number(page, "#max-new-tokens", "48")
    retrieved = page.locator("#retrieved")
    expect(retrieved).to_contain_text(XSS_SCRIPT, timeout=WAIT_MS)  # shown literally, as text
    expect(retrieved).to_contain_text(XSS_IMG)
    expect(retrieved).to_contain_text(XSS_TEMPLATE)
    expect(retrieved).to_contain_text("BM25")

    page.click("#generate-button")
    output = page.locator("#generate-output")
    expect(output.locator(".ss-tok").first).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    for kind in ("accepted", "rejected", "recovered"):
        assert output.locator(f".ss-tok-{kind}").count() > 0, f"no {kind} tokens shown"
    rejected = output.locator(".ss-tok-rejected").first
    assert "line-through" in rejected.evaluate("node => getComputedStyle(node).textDecorationLine")
    colours = {kind: output.locator(f".ss-tok-{kind}").first.evaluate("n => getComputedStyle(n).backgroundColor")
               for kind in ("accepted", "rejected", "recovered")}
    assert len(set(colours.values())) == 3 and "rgba(0, 0, 0, 0)" not in colours.values(), colours
    expect(page.locator("#generate-stats")).to_contain_text("tok/s")
    shot(page, "02-generated")

    page.locator("#privacy-accordion").get_by_text("Privacy: what was sent to the cloud").click()
    privacy = page.locator("#privacy")
    expect(privacy).to_contain_text("Privacy check passed", timeout=WAIT_MS)
    expect(privacy).to_contain_text("uplink messages")
    shot(page, "03-privacy-panel")
    assert_not_pwned(page)


def test_stop_keeps_the_partial_output(page):
    expect = sync_api.expect
    set_number(page, "#max-new-tokens", "1000")
    page.click("#generate-button")
    expect(page.locator("#generate-output .ss-tok").first).to_be_visible(timeout=WAIT_MS)
    page.click("#stop-button")
    status = page.locator("#generate-status")
    expect(status).to_contain_text("Stopped", timeout=WAIT_MS)
    expect(status).to_contain_text("saved as generation")
    expect(page.locator("#generate-stats")).to_contain_text("cancelled")
    expect(page.locator("#generate-button")).to_be_enabled()


def test_second_user_waits_with_a_visible_queue_position(page, browser, server):
    """Every model event shares one slot: while one user's evaluation batch runs, another user's
    generation waits in the queue and shows its position; cancelling the batch lets it run."""
    expect = sync_api.expect
    other_context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        other = other_context.new_page()
        other.goto(server)
        other.wait_for_selector("#generate-button", timeout=WAIT_MS)
        set_number(other, "#max-new-tokens", "8")

        page.get_by_role("tab", name="Dashboard").click()
        set_number(page, "#dashboard-records", "3")
        set_number(page, "#dashboard-max-new-tokens", "400")
        page.click("#dashboard-run")
        expect(page.locator("#dashboard-status .ss-progress")).to_be_visible(timeout=WAIT_MS)

        other.click("#generate-button")
        expect(other.locator("#generate-status")).to_contain_text("Queued", timeout=WAIT_MS)
        expect(other.get_by_text(re.compile(r"queue: \d+/\d+")).first).to_be_visible(timeout=WAIT_MS)
        shot(other, "08-second-user-queued")

        page.click("#dashboard-cancel")
        expect(page.locator("#dashboard-status")).to_contain_text("cancelled", timeout=WAIT_MS)
        expect(other.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    finally:
        other_context.close()


def test_malformed_upload_shows_a_message_not_a_trace(page, tmp_path):
    expect = sync_api.expect
    broken = tmp_path / "broken.json"
    broken.write_text('[{"summary": "<b>bold</b>", "reviewText": ', encoding="utf-8")
    page.set_input_files("#history-upload input[type=file]", str(broken))
    summary = page.locator("#history-summary")
    expect(summary).to_contain_text("malformed JSON", timeout=WAIT_MS)
    expect(summary).to_contain_text("Still using")
    assert "Traceback" not in page.content()
    shot(page, "04-upload-error")
    assert_not_pwned(page)


def test_blind_comparison_and_annotation(page):
    expect = sync_api.expect
    set_number(page, "#max-new-tokens", "16")
    page.locator("#task-input textarea").fill(f"Review this lamp {XSS_IMG}")
    page.get_by_role("tab", name="Compare & annotate").click()
    page.click("#compare-button")
    status = page.locator("#compare-status")
    expect(status).to_contain_text("Saved as comparison", timeout=WAIT_MS)
    assert XSS_IMG in page.locator("#comparison-picker input").input_value()  # the label, as text
    for label in "ABC":
        expect(page.locator(f"#slot-{label}")).to_contain_text(f"Output {label}")
    assert "SpecSteer" not in page.locator("#slot-A").inner_text()  # blind until judged
    shot(page, "05-comparison-blind")

    page.locator("#annotator textarea, #annotator input").first.fill("browser-annotator")
    for label, (personal, fluent) in zip("ABC", ((5, 4), (3, 3), (2, 4))):
        page.locator(f"#rating-{label}-personalization").get_by_text(str(personal), exact=True).click()
        page.locator(f"#rating-{label}-fluency").get_by_text(str(fluent), exact=True).click()
    page.locator("#preferred").get_by_text("Output A", exact=True).click()
    page.locator("#comment textarea").fill("A sounds like the user <script>window.__pwned=1</script>")
    page.click("#submit-judgement")
    expect(status).to_contain_text("Saved annotation", timeout=WAIT_MS)
    revealed = " ".join(page.locator(f"#slot-{label}").inner_text() for label in "ABC")
    for name in ("SpecSteer", "SLM+", "LLM"):
        assert name in revealed
    expect(page.locator("#annotation-summary")).to_contain_text("SpecSteer")
    shot(page, "06-comparison-annotated")
    assert_not_pwned(page)


def test_dashboard_batch_shows_the_plot(page):
    expect = sync_api.expect
    page.get_by_role("tab", name="Dashboard").click()
    set_number(page, "#dashboard-max-new-tokens", "6")
    page.locator("#dashboard-alphas textarea, #dashboard-alphas input").first.fill("1.0, 0.1")
    page.click("#dashboard-run")
    status = page.locator("#dashboard-status")
    expect(status).to_contain_text("finished", timeout=WAIT_MS)
    expect(page.locator("#quality-plot .js-plotly-plot").first).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#acceptance-plot .js-plotly-plot").first).to_be_visible()
    expect(page.locator("#results-table")).to_contain_text("SpecSteer")
    shot(page, "07-dashboard")
    assert_not_pwned(page)
