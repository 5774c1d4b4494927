"""A campaign in a real browser (Debian's Chromium through Playwright). Its form starts small (a campaign a 2-core
CPU generates in minutes), with an estimated time that follows the settings and each source's own field. Two
annotators, each in their own browser context, judge the same campaign from the keyboard alone (digits fitted to
the outputs, T / G / X, Enter) up to a "queue complete" screen; the Campaigns tab counts the comparisons judged,
ranks nothing from fewer than the minimum, leaves the win matrix's diagonal "–", shows position bias, agreement
and median times, and its export holds both annotators' judgements with their times. Full-page screenshots of the
Judge screen and the leaderboard go to test-artifacts/screens/. Never run ``playwright install``: skipped without
/usr/bin/chromium."""

from __future__ import annotations

import json
import re
from urllib.parse import urljoin

import pytest

from specsteer.evaluation.preference import MIN_COMPARISONS_TO_RANK
from testkit import app_page, browser_api, save_screen

sync_api = browser_api()

pytestmark = pytest.mark.browser

WAIT_MS = 60_000
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
def browser(chromium):
    return chromium


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


def open_results(page) -> None:
    """The Campaigns tab on this test's campaign, refreshed."""
    page.get_by_role("tab", name="Campaigns").click()
    page.locator("#campaign-pick input").fill(CAMPAIGN)
    page.keyboard.press("Enter")
    page.click("#campaign-refresh")
    sync_api.expect(page.locator("#campaign-status")).to_contain_text("2 of 2 comparisons ready", timeout=WAIT_MS)


def test_the_form_starts_small_estimates_its_time_and_shows_each_sources_field(browser, campaign):
    url, _codes = campaign
    expect = sync_api.expect
    with app_page(browser, url, WAIT_MS) as page:
        page.get_by_role("tab", name="Campaigns").click()
        page.locator("#campaign-create").get_by_text("New campaign").click()
        assert 2 <= page.locator("#campaign-methods input:checked").count() <= 3
        assert int(page.locator("#campaign-max-new input").input_value()) <= 64
        assert int(page.locator("#campaign-limit input").input_value()) <= 5
        estimate = page.locator("#campaign-estimate")
        expect(estimate).to_contain_text("3 records × 3 methods × up to 64 tokens", timeout=WAIT_MS)
        page.locator("#campaign-max-new input").fill("32")
        page.locator("#campaign-max-new input").press("Enter")
        expect(estimate).to_contain_text("× up to 32 tokens", timeout=WAIT_MS)  # it follows the form
        expect(page.locator("#campaign-upload")).to_be_hidden()  # the bundled sample has no file to upload
        page.locator("#campaign-data").get_by_text("A stored run's outputs").click()
        expect(page.locator("#campaign-run")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#campaign-upload")).to_be_hidden()
        expect(estimate).to_contain_text("nothing is generated", timeout=WAIT_MS)
        page.locator("#campaign-data").get_by_text("Uploaded file").click()
        expect(page.locator("#campaign-upload")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#campaign-run")).to_be_hidden()


def test_two_annotators_judge_from_the_keyboard_and_the_results_and_export_show_them(browser, campaign):
    url, codes = campaign
    expect = sync_api.expect
    with app_page(browser, url, WAIT_MS) as first, app_page(browser, url, WAIT_MS) as second:
        for page in (first, second):
            page.get_by_role("tab", name="Judge").click()
        open_results(second)
        expect(second.locator("#campaign-judged")).to_contain_text("0 of 2 comparisons judged", timeout=WAIT_MS)
        second.get_by_role("tab", name="Judge").click()

        join_by_keyboard(first, "ann", codes["ann"])
        keys = first.locator("#judge-shortcuts")
        expect(keys).to_contain_text("save and next")
        expect(keys).to_contain_text("1 … 2 prefer output A … B")  # two outputs: two digits
        expect(first.locator("#judge-progress")).to_contain_text("1 of 2")
        save_screen(first, "campaign-judge")
        judge(first, "1", 1)  # output A
        judge(first, "t", 2)  # tie
        expect(first.locator("#judge-status")).to_contain_text("every comparison")
        complete = first.locator("#judge-complete")
        expect(complete).to_contain_text("Queue complete", timeout=WAIT_MS)
        expect(complete).to_contain_text("all 2 comparisons")
        expect(first.locator("#judge-save")).to_be_hidden()
        save_screen(first, "campaign-judge-queue-complete")

        join_by_keyboard(second, "bob", codes["bob"])
        expect(second.locator("#judge-progress")).to_contain_text("judged 0")  # ann's judgements are not bob's
        judge(second, "2", 1)  # output B
        judge(second, "x", 2)  # all bad

        panel = second
        open_results(panel)
        board = panel.locator("#campaign-leaderboard")
        expect(board).to_contain_text("2 of 2 comparisons judged (4 judgement(s))", timeout=WAIT_MS)
        too_few = panel.locator("#campaign-too-few")
        expect(too_few).to_contain_text(f"Too few judgements to rank: 2 of {MIN_COMPARISONS_TO_RANK}")
        assert not re.search(r"[+-]\d\.\d{3}", board.inner_text()), "a strength ranked from 2 comparisons"
        diagonal = panel.locator("#campaign-win-matrix tbody tr").evaluate_all(
            "rows => rows.map((row, i) => row.querySelectorAll('td')[i + 1].textContent.trim())"
        )
        assert diagonal == ["–", "–"]
        expect(panel.locator("#campaign-position-bias")).to_contain_text("decisive judgement")
        expect(panel.locator("#campaign-agreement")).to_contain_text("Fleiss")
        annotators = panel.locator("#campaign-annotators")
        expect(annotators).to_contain_text("ann")
        expect(annotators).to_contain_text("bob")
        expect(annotators).to_contain_text("Median time per judgement")
        median = re.search(r"Median time per judgement: ([\d.]+) s", annotators.inner_text())
        assert median and float(median.group(1)) >= 1.0

        save_screen(panel, "campaign-leaderboard")
        panel.click("#campaign-export")
        link = panel.locator("#campaign-export-file a").first
        expect(link).to_be_visible(timeout=WAIT_MS)
        response = panel.request.get(urljoin(url, link.get_attribute("href")))
        rows = [json.loads(line) for line in response.text().splitlines() if line.strip()]
        assert {row["annotator"] for row in rows} == {"ann", "bob"} and len(rows) == 4
        assert all(row["seconds"] is not None and row["seconds"] >= 1.0 for row in rows)
        assert {row["preference"] for row in rows} == {"A", "tie", "B", "all_bad"}
