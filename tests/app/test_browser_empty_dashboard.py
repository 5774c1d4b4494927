"""The Dashboard of an app whose database holds no run and no example beside it, in a real browser: a sentence
says so, and no plot or table is drawn empty (a blank plot, a table headed "1 2 3")."""

from __future__ import annotations

import pytest

from testkit import app_page, browser_api, save_screen, serve_app

sync_api = browser_api()

pytestmark = pytest.mark.browser

WAIT_MS = 120_000


def test_an_empty_database_gets_a_sentence_not_blank_plots(chromium, tmp_path):
    import storage

    with (
        serve_app(tmp_path / "data", run_store=lambda: storage.SqlRunStore()) as served,
        app_page(chromium, served.url, WAIT_MS) as page,
    ):
        page.get_by_role("tab", name="Dashboard").click()
        expect = sync_api.expect
        expect(page.locator("#dashboard-status")).to_contain_text("No stored evaluation run yet", timeout=WAIT_MS)
        for hidden in ("#quality-plot", "#acceptance-plot", "#results-table", "#deployment-plot", "#sweep-plot"):
            expect(page.locator(hidden)).to_be_hidden()
        expect(page.locator("#deployment-table")).to_be_hidden()  # no table headed "1 2 3"
        save_screen(page, "dashboard-empty-database")
