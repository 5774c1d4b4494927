"""Where the Cloud runs, in the page's own words (Debian's Chromium through Playwright): with no Cloud address the
settings, the connection test and a generation's stats all say "inside this app", never "in process" (which
reads as "still processing")."""

from __future__ import annotations

import pytest

from testkit import app_page, browser_api

sync_api = browser_api()

pytestmark = pytest.mark.browser

WAIT_MS = 120_000


def test_the_page_says_the_cloud_runs_inside_this_app(chromium, app_server):
    expect = sync_api.expect
    with app_page(chromium, app_server[0], WAIT_MS) as page:
        page.get_by_text("Sampling and advanced settings").click()
        address = page.locator("#cloud-url input, #cloud-url textarea").first
        expect(address).to_be_visible(timeout=WAIT_MS)
        assert address.get_attribute("placeholder").startswith("empty: inside this app")
        expect(page.get_by_text("Empty: both models run inside this app.")).to_be_visible()
        page.click("#test-cloud")
        expect(page.locator("#cloud-check")).to_contain_text("The Cloud runs inside this app", timeout=WAIT_MS)

        box = page.locator("#max-new-tokens input[type=number]")
        box.fill("6")
        box.press("Tab")
        page.click("#generate-button")
        expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
        stats = page.locator("#generate-stats")
        expect(stats).to_contain_text("inside this app")
        assert "in process" not in stats.inner_text().lower()
