"""The Dashboard of an app whose database holds no run and no example beside it, in a real browser: a sentence
says so, and no plot or table is drawn empty (a blank plot, a table headed "1 2 3")."""

from __future__ import annotations

import pytest

from testkit import save_screen, serve_app

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")

pytestmark = pytest.mark.browser

WAIT_MS = 120_000
VIEWPORT = {"width": 1400, "height": 900}


def test_an_empty_database_gets_a_sentence_not_blank_plots(chromium, tmp_path):
    import storage

    with serve_app(tmp_path / "data", run_store=lambda: storage.SqlRunStore()) as served:
        context = chromium.new_context(viewport=VIEWPORT)
        try:
            page = context.new_page()
            page.goto(served.url)
            page.wait_for_selector("#generate-button", timeout=WAIT_MS)
            page.get_by_role("tab", name="Dashboard").click()
            expect = sync_api.expect
            expect(page.locator("#dashboard-status")).to_contain_text("No stored evaluation run yet", timeout=WAIT_MS)
            for hidden in ("#quality-plot", "#acceptance-plot", "#results-table", "#deployment-plot", "#sweep-plot"):
                expect(page.locator(hidden)).to_be_hidden()
            expect(page.locator("#deployment-table")).to_be_hidden()  # no table headed "1 2 3"
            save_screen(page, "dashboard-empty-database")
        finally:
            context.close()
