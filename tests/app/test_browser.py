"""The app in a real browser: Debian's Chromium driven by Playwright's Python package.

Covers uploading a history, streaming a generation with coloured tokens, the privacy panel, a
blind comparison with an annotation, dashboard batches with their plots and table, and proof that
markup in a history, an input or a run name is shown as text and never runs; and what only a
browser shows: the retrieval preview following a paste, the pairing dropdown's single warning, the
table's layout. Screenshots go to test-artifacts/screenshots/ for a person to look at: every tab at
1400×900 (``tab-*.png``), and the whole page at moments of the flows.

Never run ``playwright install``: the test uses /usr/bin/chromium and is skipped without it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from testkit import APP_VIEWPORT, broken_header_words, browser_api, set_rtt

sync_api = browser_api()


pytestmark = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
XSS_SCRIPT = "<script>window.__pwned=1</script>"
XSS_IMG = '<img src=x onerror="window.__pwned=1">'
XSS_TEMPLATE = "${window.__pwned=1}"  # gr.HTML renders through a JS template: data must not be evaluated
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def server(app_server):
    return app_server[0]


@pytest.fixture(scope="module")
def browser(chromium):
    return chromium


@pytest.fixture
def page(browser, server):
    """A fresh page on the app; fails the test if the page asks anything of a host other than the app."""
    context = browser.new_context(viewport=APP_VIEWPORT, permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    outside: list[str] = []
    page.on(
        "request",
        lambda request: (
            outside.append(request.url)
            if urlparse(request.url).hostname not in ("127.0.0.1", None) and request.url.startswith("http")
            else None
        ),
    )
    page.goto(server)
    page.wait_for_selector("#generate-button", timeout=WAIT_MS)
    yield page
    context.close()
    assert not outside, f"the page made requests outside the app: {outside[:5]}"


def shot(page, name: str, full_page: bool = True) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


def tab_shot(page, name: str) -> None:
    """The tab as a person first sees it: the 1400×900 window, scrolled to the top."""
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, f"tab-{name}", full_page=False)


def set_number(page, selector: str, value: str) -> None:
    """Type into a slider's number box and leave it, as a user would."""
    box = page.locator(f"{selector} input[type=number]")
    box.fill(value)
    box.press("Tab")


def fill_text(page, selector: str, value: str, hold_ms: int = 1500) -> None:
    """Type into a text box, leave it, and see the text hold for ``hold_ms``, typing again if it did not.

    Gradio mounts the children of an accordion opened for the first time, then renders them again once
    the expand event has gone round; text typed in between lands in a box that is then replaced by an
    empty one. No person types that fast after a click; a test on a loaded machine can.
    """
    box = page.locator(f"{selector} textarea, {selector} input").first
    for _attempt in range(5):
        box.fill(value)
        box.press("Tab")
        for _tick in range(hold_ms // 100):
            page.wait_for_timeout(100)
            if box.input_value() != value:
                break
        else:
            return
    raise AssertionError(f"{selector} did not keep the text typed into it")


def assert_not_pwned(page) -> None:
    assert page.evaluate("typeof window.__pwned") == "undefined", "injected markup ran in the page"
    assert page.locator('img[src="x"]').count() == 0


def test_generate_streams_coloured_tokens_and_injection_stays_text(page, tmp_path):
    expect = sync_api.expect
    shot(page, "01-page-loaded")
    history = tmp_path / "my-history.txt"
    history.write_text(
        f"I review power banks. {XSS_SCRIPT}\n\nBattery life matters most. {XSS_IMG}\n\n"
        f"Garden hoses are dull. {XSS_TEMPLATE}\n",
        encoding="utf-8",
    )
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
    colours = {
        kind: output.locator(f".ss-tok-{kind}").first.evaluate("n => getComputedStyle(n).backgroundColor")
        for kind in ("accepted", "rejected", "recovered")
    }
    assert len(set(colours.values())) == 3 and "rgba(0, 0, 0, 0)" not in colours.values(), colours
    expect(page.locator("#generate-stats")).to_contain_text("tok/s")
    shot(page, "02-generated")

    stats = page.locator("#generate-stats")
    for shown in ("transformers · fp32", "first token", "prefix cache"):
        expect(stats).to_contain_text(shown)
    tab_shot(page, "generate")

    page.locator("#privacy-accordion").get_by_text("Privacy: what was sent to the cloud").click()
    privacy = page.locator("#privacy")
    expect(privacy).to_contain_text("Privacy check passed", timeout=WAIT_MS)
    expect(privacy).to_contain_text("uplink messages")
    expect(privacy).to_contain_text("No raw history text left the device")
    expect(privacy).to_contain_text("computed with your history, by design")
    shot(page, "03-privacy-panel")
    assert_not_pwned(page)
    expect(page.locator("#sample-user input")).to_have_value("")  # the upload replaced the sample user


def test_a_cross_tokenizer_pairing_colours_each_drafted_segment(page):
    """The tiny pair of two tokenizers: its note names what it runs, and each drafted segment is one
    coloured element whose tooltip says how many Specialist tokens it holds."""
    expect = sync_api.expect
    page.locator("#pairing input").click()
    page.get_by_role("option", name="Tiny random pair, two tokenizers (tests only)").click()
    expect(page.get_by_text("Two tokenizers: runs SLM").first).to_be_visible(timeout=WAIT_MS)
    set_number(page, "#alpha", "0.01")
    set_number(page, "#max-new-tokens", "32")
    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    segments = page.locator("#generate-output .ss-seg")
    assert segments.count() > 0
    for kind in ("accepted", "rejected"):
        segment = page.locator(f"#generate-output .ss-seg.ss-tok-{kind}").first
        assert re.search(r"one segment of \d+ Specialist token", segment.get_attribute("title") or "")
        assert segment.evaluate("n => getComputedStyle(n).backgroundColor") != "rgba(0, 0, 0, 0)"
    shot(page, "05-cross-tokenizer-segments")


def test_a_persona_generates_and_the_privacy_panel_names_the_facts_that_crossed(page):
    """The default sample user is a CoGenesis persona: its profile is shown, its task is prefilled, the
    prompt style is the clean one; after a generation the privacy panel counts the persona's private
    facts and names those that reached the cloud (here the one the task itself names)."""
    expect = sync_api.expect
    expect(page.locator("#persona-profile")).to_contain_text("Privacy_info", timeout=WAIT_MS)
    expect(page.locator("#persona-profile")).to_contain_text("Gregory Simmons")
    expect(page.locator("#task-input textarea")).to_have_value(re.compile("^Write an article on balancing work"))
    expect(page.locator("#prompt-style input[value=clean]")).to_be_checked()
    expect(page.locator("#retrieved")).to_contain_text("## About the user", timeout=WAIT_MS)
    set_number(page, "#max-new-tokens", "16")
    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    page.locator("#privacy-accordion").get_by_text("Privacy: what was sent to the cloud").click()
    facts = page.locator("#privacy-facts")
    expect(facts).to_contain_text(re.compile(r"\d+ of 9 private facts were sent to the cloud"), timeout=WAIT_MS)
    expect(facts).to_contain_text("Works remotely on Fridays to spend more time with family and to meditate")
    expect(facts).to_contain_text("named in your task")
    shot(page, "04-persona-privacy-facts")
    assert_not_pwned(page)


def test_stop_keeps_the_partial_output(page):
    expect = sync_api.expect
    set_number(page, "#max-new-tokens", "1000")
    # Every round then waits 300 ms, so Stop lands mid-generation even where the tiny pair reaches its end
    # token within a second.
    set_rtt(page, "300")
    try:
        page.click("#generate-button")
        expect(page.locator("#generate-output .ss-tok").first).to_be_visible(timeout=WAIT_MS)
        page.click("#stop-button")
        status = page.locator("#generate-status")
        expect(status).to_contain_text("Stopped", timeout=WAIT_MS)
        expect(status).to_contain_text("saved as generation")
        expect(page.locator("#generate-stats")).to_contain_text("cancelled")
        expect(page.locator("#generate-button")).to_be_enabled()
    finally:
        set_rtt(page, "0")


def test_a_failed_generation_shows_its_warning_toast(page):
    """A run's failure reaches the page as a toast too: the run's worker thread hands it to the handler's
    thread, where Gradio knows which page to send it to."""
    expect = sync_api.expect
    page.locator("#task-input textarea").fill("")
    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("Enter a task input first", timeout=WAIT_MS)
    expect(page.locator(".toast-body")).to_contain_text("Enter a task input first", timeout=WAIT_MS)


def test_a_second_users_generation_runs_while_anothers_grid_is_under_way(page, browser, server):
    """Fair queue: a grid takes the models one cell at a time and a waiting generation goes before
    its next cell, so another user's generation finishes while the grid is still running; then the grid is
    cancelled and stays resumable."""
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
        expect(other.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
        shot(other, "08-second-user-served-during-a-grid")
        expect(page.locator("#dashboard-status .ss-progress")).to_be_visible()  # the grid is still under way

        page.click("#dashboard-cancel")
        expect(page.locator("#dashboard-status")).to_contain_text("cancelled", timeout=WAIT_MS)
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
    tab_shot(page, "compare")
    assert_not_pwned(page)


def test_preview_follows_a_paste_and_a_cleared_input(page):
    """ "What the Specialist sees" must follow every change of the input, not only typed keys."""
    expect = sync_api.expect
    # The gadget reviewer has a vacuum review for the paste to find, and the paper's templates show its
    # product description (the app now starts on a persona and the clean style).
    page.locator("#sample-user input").click()
    page.get_by_role("option", name=re.compile("Gadget reviewer")).click()
    expect(page.locator("#history-summary")).to_contain_text("Gadget reviewer", timeout=WAIT_MS)
    page.locator("#prompt-style").get_by_text("Paper (the paper's templates)").click()
    expect(page.locator("#retrieved")).to_contain_text("Product:", timeout=WAIT_MS)
    retrieved = page.locator("#retrieved")
    box = page.locator("#task-input textarea")
    first_rank = retrieved.locator(".ss-retrieved-item").first
    expect(first_rank).to_be_visible(timeout=WAIT_MS)
    before = first_rank.inner_text()
    page.evaluate("navigator.clipboard.writeText('cordless handheld vacuum cleaner suction')")
    box.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Control+V")
    expect(box).to_have_value("cordless handheld vacuum cleaner suction")
    expect(first_rank).to_contain_text("vacuum", timeout=WAIT_MS)
    assert first_rank.inner_text() != before
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    expect(retrieved).to_contain_text("Type an input to see which history items BM25 retrieves", timeout=WAIT_MS)


def test_an_unavailable_pairing_warns_once_and_the_dropdown_goes_back(page):
    expect = sync_api.expect
    dropdown = page.locator("#pairing input")
    before = dropdown.input_value()
    dropdown.click()
    page.get_by_role("option", name=re.compile(r"32B .*unavailable")).first.click()
    toast = page.locator(".toast-body")
    expect(toast).to_contain_text("is unavailable here", timeout=WAIT_MS)
    page.wait_for_timeout(1500)  # a second warning would arrive by now
    assert toast.count() == 1 and "(2)" not in toast.first.inner_text(), toast.all_inner_texts()
    expect(dropdown).to_have_value(before)
    expect(page.locator("#runtime-note")).to_contain_text("Auto runs the test pair on transformers")


def _run_batch(page, name: str) -> None:
    page.locator("#run-name textarea, #run-name input").first.fill(name)
    page.click("#dashboard-run")
    sync_api.expect(page.locator("#dashboard-status")).to_contain_text("finished", timeout=WAIT_MS)
    # The finished frame also chooses the new run in the picker; the page applies that a moment after
    # the status text, and a click before then would act on the previous choice.
    chosen = page.locator("#run-picker .token").filter(has_text=name)
    sync_api.expect(chosen).to_have_count(1, timeout=WAIT_MS)


def _columns_out_of_view(page) -> list[str]:
    """Headers whose column ends beyond the table's visible box (they would need a sideways scroll)."""
    return page.evaluate("""() => {
        const table = document.querySelector('#results-table');
        const right = table.getBoundingClientRect().right;
        return [...table.querySelectorAll('th')]
            .filter(th => th.getBoundingClientRect().right > right + 1)
            .map(th => th.textContent.trim());
    }""")


def test_dashboard_batch_plot_and_table_and_compared_runs(page):
    expect = sync_api.expect
    page.get_by_role("tab", name="Dashboard").click()
    set_number(page, "#dashboard-max-new-tokens", "6")
    page.locator("#dashboard-alphas textarea, #dashboard-alphas input").first.fill("1.0, 0.1")
    _run_batch(page, "<b>first</b> run, named at some length")
    expect(page.locator("#quality-plot .js-plotly-plot").first).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#acceptance-plot .js-plotly-plot").first).to_be_visible()
    table = page.locator("#results-table")
    expect(table).to_contain_text("SpecSteer")
    assert broken_header_words(page, "#results-table") == []
    assert _columns_out_of_view(page) == []
    shot(page, "07-dashboard")
    tab_shot(page, "dashboard")

    _run_batch(page, '<a href="https://example.org">second</a>')
    picker = page.locator("#run-picker input")
    picker.click()
    page.get_by_role("option", name=re.compile("first")).click()  # the second run is already chosen
    page.keyboard.press("Escape")
    chosen = page.locator("#run-picker .token")
    expect(chosen).to_have_count(2, timeout=WAIT_MS)
    page.click("#show-runs")
    status = page.locator("#dashboard-status")
    expect(status).to_contain_text("Showing", timeout=WAIT_MS)
    expect(table).to_contain_text("<b>first</b> run, named at some length")  # the name as text
    assert broken_header_words(page, "#results-table") == []
    assert _columns_out_of_view(page) == [], "comparing runs pushed columns out of sight"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    legend = page.locator("#quality-plot .legend")
    expect(legend).to_contain_text("<b>first</b> run")  # plotly shows the markup as text
    assert legend.locator("a").count() == 0 and page.locator("#quality-plot svg a").count() == 0
    bold = legend.evaluate(
        "node => [...node.querySelectorAll('tspan')].some(t => "
        "getComputedStyle(t).fontWeight === '700' || t.style.fontWeight === 'bold')"
    )
    assert not bold
    shot(page, "09-dashboard-compared")
    assert_not_pwned(page)


def test_generate_through_a_cloud_process_after_testing_the_connection(page, tmp_path):
    """The Cloud setting against ``python -m specsteer cloud`` in a child process (stopped by its pid):
    Test connection says what it serves, and a generation through it says where its Cloud ran."""
    import os

    from specsteer.cloud.process import free_loopback_port, start_cloud_process

    expect = sync_api.expect
    log = (tmp_path / "cloud.log").open("wb")
    child = start_cloud_process(
        "--pairing", "tiny-test", env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=log, ready_timeout_s=180
    )
    try:
        page.get_by_text("Sampling and advanced settings").click()
        fill_text(page, "#cloud-url", f"http://127.0.0.1:{free_loopback_port()}")  # nothing listens there
        page.click("#test-cloud")
        check = page.locator("#cloud-check")
        expect(check).to_contain_text("Lost the connection", timeout=WAIT_MS)
        fill_text(page, "#cloud-url", child.url + "/")
        page.click("#test-cloud")
        expect(check).to_contain_text("answers", timeout=WAIT_MS)
        expect(check).to_contain_text("protocol")
        expect(check).to_contain_text("sessions at once")
        set_number(page, "#rtt-ms", "20")
        set_number(page, "#max-new-tokens", "24")
        page.click("#generate-button")
        expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
        stats = page.locator("#generate-stats")
        expect(stats).to_contain_text(child.url)
        expect(stats).to_contain_text("RTT 20 ms")
        page.locator("#cloud-url").evaluate("node => node.scrollIntoView({block: 'center'})")
        shot(page, "tab-generate-remote-cloud", full_page=False)
        shot(page, "10-generate-remote-cloud")
    finally:
        child.stop()


def test_deployment_view_projects_a_stored_run(page):
    expect = sync_api.expect
    page.get_by_role("tab", name="Dashboard").click()
    set_number(page, "#dashboard-max-new-tokens", "8")
    page.locator("#dashboard-alphas textarea, #dashboard-alphas input").first.fill("0.1")
    _run_batch(page, "<b>deploy</b> run <img src=x onerror=\"window.__pwned=1\">")  # the new run is chosen
    page.click("#deployment-project")
    status = page.locator("#deployment-status")
    expect(status).to_contain_text("Projected", timeout=WAIT_MS)
    expect(status).to_contain_text("<b>deploy</b> run")  # the run's name, as text
    plot = page.locator("#deployment-plot")
    expect(plot.locator(".js-plotly-plot").first).to_be_visible(timeout=WAIT_MS)
    expect(plot.locator(".gtitle")).to_contain_text("a projection, not a measurement")
    expect(plot.locator(".gtitle")).to_contain_text("<b>deploy</b> run")
    expect(plot.locator(".xtitle").first).to_contain_text("round-trip time")
    expect(plot.locator(".legend")).to_contain_text("SpecSteer α=0.1 β=1")
    table = page.locator("#deployment-table")
    expect(table).to_contain_text("SpecSteer α=0.1 β=1 speedup")
    expect(table).to_contain_text("200")

    dropdown = page.locator("#deployment-profile input")
    dropdown.click()
    page.get_by_role("option", name=re.compile("The paper's setting")).click()
    expect(status).to_contain_text("The paper's setting", timeout=WAIT_MS)
    page.locator("#deployment-sources").get_by_text("The profile's numbers and their sources").click()
    expect(page.locator("#deployment-profile-note")).to_contain_text("Vanilla LLM")
    dropdown.click()
    page.get_by_role("option", name=re.compile("over 4G")).click()
    expect(status).to_contain_text("over 4G", timeout=WAIT_MS)
    expect(page.locator("#deployment-profile-note")).to_contain_text("Opensignal")
    assert_not_pwned(page)
    page.locator("#deployment-view").evaluate("node => node.scrollIntoView()")
    shot(page, "tab-dashboard-deployment", full_page=False)
    shot(page, "11-dashboard-deployment")


def test_teaching_the_specialist_then_generating_with_it(page):
    """The Generate tab's "Teach the Specialist my history": progress while the adapter trains on
    the device, then a generation whose statistics name the taught Specialist; another history forgets it."""
    expect = sync_api.expect
    page.locator("#sample-user input").click()
    page.get_by_role("option", name=re.compile("Gadget reviewer")).click()
    expect(page.locator("#history-summary")).to_contain_text("Gadget reviewer", timeout=WAIT_MS)
    page.locator("#lora-teach").get_by_text("Teach the Specialist my history (LoRA, on the device)").click()
    status = page.locator("#lora-teach-status")
    expect(status).to_contain_text("the cloud never receives it", timeout=WAIT_MS)
    page.click("#lora-teach-button")
    expect(status).to_contain_text("The Specialist learned", timeout=3 * WAIT_MS)
    expect(status).to_contain_text("never receives the adapter")
    set_number(page, "#max-new-tokens", "8")
    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    expect(page.locator("#generate-stats")).to_contain_text("taught (LoRA)", timeout=WAIT_MS)
    shot(page, "11-taught-specialist")
    page.locator("#sample-user input").click()
    page.get_by_role("option", name=re.compile("Home baker")).click()
    expect(status).to_contain_text("The Specialist is the base model", timeout=WAIT_MS)
    page.click("#generate-button")
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    expect(page.locator("#generate-stats")).not_to_contain_text("taught (LoRA)")
