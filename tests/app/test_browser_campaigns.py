"""A campaign judged in a real browser (Debian's Chromium through Playwright): two annotators, each in their own
browser context, judge the same campaign from the keyboard alone (digits, T / G / X, Enter); the Campaigns tab
then shows the leaderboard, position bias, agreement and median times, and its export holds both annotators'
judgements with their times. Never run ``playwright install``: skipped without /usr/bin/chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urljoin

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")

pytestmark = pytest.mark.browser

WAIT_MS = 60_000
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CAMPAIGN = "browser-study"


@pytest.fixture(scope="module")
def campaign(app_server):
    """A campaign of 2 comparisons (llm vs specsteer) for two named annotators, in the served app's database."""
    import storage
    from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
    from specsteer.service.app_service import AppService
    from specsteer.service.campaign_values import CampaignRequest
    from specsteer.service.pair_catalog import PairCatalog

    database = storage.database_url()
    app = AppService(
        storage.SqlGenerationStore(database),
        storage.SqlRunStore(database),
        PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
    )
    service = app.campaigns(storage.SqlCampaignStore(database))
    created = service.create(
        CampaignRequest(
            CAMPAIGN,
            "review",
            "sample",
            ("llm", "specsteer"),
            {"pairing": TEST_PAIRING_ID, "max_new_tokens": 6},
            2,
            ("ann", "bob"),
        )
    )
    assert list(service.generate(CAMPAIGN))[-1].status == "ready"
    return app_server[0], created.codes


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


def open_judge(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("#generate-button", timeout=WAIT_MS)
    page.get_by_role("tab", name="Judge").click()
    return context, page


def join_by_keyboard(page, name: str, code: str) -> None:
    """Name, join code and campaign typed, Start pressed with Enter: no mouse."""
    page.locator("#judge-name input, #judge-name textarea").first.focus()
    page.keyboard.type(name)
    page.keyboard.press("Tab")
    page.keyboard.type(code)
    page.locator("#judge-campaign input").focus()
    page.keyboard.type(CAMPAIGN)
    page.keyboard.press("Escape")
    page.locator("#judge-start").focus()
    page.keyboard.press("Enter")
    sync_api.expect(page.locator("#judge-status")).to_contain_text(f"as {name}", timeout=WAIT_MS)


def judge(page, key: str, judged: int) -> None:
    expect = sync_api.expect
    page.wait_for_timeout(1200)  # a person reads before choosing: the stored time is above a second
    page.keyboard.press(key)
    expect(page.locator("#judge-choice input:checked")).to_have_count(1, timeout=WAIT_MS)
    page.keyboard.press("Enter")
    expect(page.locator("#judge-progress")).to_contain_text(f"judged {judged}", timeout=WAIT_MS)
    expect(page.locator("#judge-status")).to_contain_text("Saved", timeout=WAIT_MS)


def test_two_annotators_judge_from_the_keyboard_and_the_results_and_export_show_them(browser, campaign):
    url, codes = campaign
    expect = sync_api.expect
    first_context, first = open_judge(browser, url)
    second_context, second = open_judge(browser, url)
    try:
        join_by_keyboard(first, "ann", codes["ann"])
        expect(first.locator("#judge-shortcuts")).to_contain_text("save and next")
        expect(first.locator("#judge-progress")).to_contain_text("1 of 2")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        first.screenshot(path=str(SCREENSHOTS / "campaign-judge.png"), full_page=True)
        judge(first, "1", 1)  # output A
        judge(first, "t", 2)  # tie
        expect(first.locator("#judge-status")).to_contain_text("every comparison")

        join_by_keyboard(second, "bob", codes["bob"])
        expect(second.locator("#judge-progress")).to_contain_text("judged 0")  # ann's judgements are not bob's
        judge(second, "2", 1)  # output B
        judge(second, "x", 2)  # all bad

        panel = second
        panel.get_by_role("tab", name="Campaigns").click()
        panel.locator("#campaign-pick input").fill(CAMPAIGN)
        panel.keyboard.press("Enter")
        panel.click("#campaign-refresh")
        expect(panel.locator("#campaign-status")).to_contain_text("2 of 2 comparisons ready", timeout=WAIT_MS)
        board = panel.locator("#campaign-leaderboard")
        expect(board).to_contain_text("4 judgement(s) of 2 comparison(s)", timeout=WAIT_MS)
        assert re.search(r"[+-]\d\.\d{3}", board.inner_text()), "no strength shown"
        expect(panel.locator("#campaign-position-bias")).to_contain_text("decisive judgement")
        expect(panel.locator("#campaign-agreement")).to_contain_text("Fleiss")
        annotators = panel.locator("#campaign-annotators")
        expect(annotators).to_contain_text("ann")
        expect(annotators).to_contain_text("bob")
        expect(annotators).to_contain_text("Median time per judgement")
        median = re.search(r"Median time per judgement: ([\d.]+) s", annotators.inner_text())
        assert median and float(median.group(1)) >= 1.0

        panel.screenshot(path=str(SCREENSHOTS / "campaign-results.png"), full_page=True)
        panel.click("#campaign-export")
        link = panel.locator("#campaign-export-file a").first
        expect(link).to_be_visible(timeout=WAIT_MS)
        response = panel.request.get(urljoin(url, link.get_attribute("href")))
        rows = [json.loads(line) for line in response.text().splitlines() if line.strip()]
        assert {row["annotator"] for row in rows} == {"ann", "bob"} and len(rows) == 4
        assert all(row["seconds"] is not None and row["seconds"] >= 1.0 for row in rows)
        assert {row["preference"] for row in rows} == {"A", "tie", "B", "all_bad"}
    finally:
        first_context.close()
        second_context.close()
