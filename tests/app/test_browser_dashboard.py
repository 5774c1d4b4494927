"""The Dashboard in a real browser (Debian's Chromium through Playwright), on the example runs that ship with the
app: it opens on one, shown, with no environment variable and no click; its quality plot has error bars and a
legend naming every method, no text labels; the paired differences are a table; the α × β and joined views of a
sweep; the deployment view of a traced example, six series at most, with a line read off its numbers (an empty
database: test_browser_empty_dashboard.py). Full-page screenshots go to test-artifacts/screens/."""

from __future__ import annotations

import re

import pytest

from testkit import app_page, broken_header_words, browser_api, save_screen

sync_api = browser_api()

pytestmark = pytest.mark.browser

WAIT_MS = 240_000  # the first page of a process bootstraps the example's intervals on a shared CPU


@pytest.fixture(scope="module")
def server(app_server):
    return app_server[0]


@pytest.fixture
def dashboard(chromium, server):
    with app_page(chromium, server, WAIT_MS) as page:
        page.get_by_role("tab", name="Dashboard").click()
        yield page


def choose_runs(page, *names: str) -> None:
    """Only these stored runs chosen in the picker, then Show."""
    page.locator("#run-picker .remove-all").click()
    for name in names:
        page.locator("#run-picker input").click()
        page.get_by_role("option", name=re.compile(re.escape(name))).first.click()
    page.keyboard.press("Escape")
    sync_api.expect(page.locator("#run-picker .token")).to_have_count(len(names), timeout=WAIT_MS)


def first_column_is_sticky(page, table: str) -> bool:
    return page.evaluate(
        "(table) => getComputedStyle(document.querySelector(table + ' th.first-column')).position === 'sticky'", table
    )


def test_it_opens_on_an_example_with_error_bars_every_method_and_a_table_of_paired_differences(dashboard):
    expect, page = sync_api.expect, dashboard
    status = page.locator("#dashboard-status")
    expect(status).to_contain_text("Showing example: cogenesis-retest", timeout=WAIT_MS)  # nothing clicked
    plot = page.locator("#quality-plot")
    expect(plot.locator(".js-plotly-plot")).to_be_visible(timeout=WAIT_MS)
    assert plot.locator(".errorbar").count() == 3  # SLM+, LLM, SpecSteer: each its record bootstrap interval
    assert plot.locator(".textpoint").count() == 0  # named in the legend and on hover, never beside the point
    for name in ("SLM+", "LLM", "SpecSteer α=1 β=1"):
        expect(plot.locator(".legend")).to_contain_text(name)
    paired = page.locator("#paired-table")
    expect(paired).to_contain_text("SpecSteer α=1 β=1")
    expect(paired).to_contain_text("records better")
    assert "better, 95 % bootstrap)" not in status.inner_text()  # the claims are the table's, not sentences
    for table in ("#results-table", "#paired-table"):
        assert broken_header_words(page, table) == [] and first_column_is_sticky(page, table)
    save_screen(page, "dashboard-main-and-paired-table")

    choose_runs(page, "example: cogenesis-retest ·", "example: cogenesis-retest-p3")
    page.click("#show-runs")
    expect(status).to_contain_text("cogenesis-retest-p3", timeout=WAIT_MS)
    expect(plot.locator(".legend")).to_contain_text("P³", timeout=WAIT_MS)  # drawn: its run has no LLM for a speedup


def test_a_sweep_tells_its_settings_apart_and_the_joined_view_says_what_to_choose(dashboard):
    expect, page = sync_api.expect, dashboard
    expect(page.locator("#dashboard-status")).to_contain_text("Showing", timeout=WAIT_MS)
    choose_runs(page, "example: cogenesis-sweep-dev40")
    page.click("#show-runs")
    legend = page.locator("#quality-plot .legend")
    expect(legend).to_contain_text("SpecSteer α=0.05 β=0.5", timeout=WAIT_MS)
    expect(legend).to_contain_text("SpecSteer α=1 β=2")
    symbols = page.locator("#quality-plot .scatterlayer .point").evaluate_all(
        "points => new Set(points.map(p => p.getAttribute('d').slice(0, 12))).size"
    )
    assert symbols >= 3  # β=0.5, 1 and 2 by shape (and the references' stars)
    expect(page.locator("#sweep-status")).to_contain_text("40 of 40 records", timeout=WAIT_MS)
    expect(page.locator("#paired-table")).to_contain_text("SpecSteer α=0.05 β=0.5")
    save_screen(page, "dashboard-sweep-view")

    page.locator("#joined-view").get_by_text("Runs joined").click()
    page.click("#joined-show")
    refusal = page.locator("#joined-status")
    expect(refusal).to_contain_text("alone holds 14 methods and settings", timeout=WAIT_MS)
    expect(refusal).to_contain_text("α × β view")
    assert "choose fewer runs" not in refusal.inner_text()
    choose_runs(page, "example: cogenesis-retest ·", "example: cogenesis-retest-p3")
    page.click("#joined-show")
    expect(page.locator("#joined-status")).to_contain_text("records that every row has", timeout=WAIT_MS)
    expect(page.locator("#joined-table")).to_contain_text("P³")
    assert broken_header_words(page, "#joined-table") == [] and first_column_is_sticky(page, "#joined-table")
    save_screen(page, "dashboard-joined-view")


def test_the_deployment_view_draws_six_series_at_most_and_says_what_they_show(dashboard):
    expect, page = sync_api.expect, dashboard
    expect(page.locator("#dashboard-status")).to_contain_text("Showing", timeout=WAIT_MS)
    choose_runs(page, "example: longlamp-review-llamacpp-256")
    page.click("#deployment-project")
    expect(page.locator("#deployment-status")).to_contain_text("Projected 132 traced generations", timeout=WAIT_MS)
    expect(page.locator("#deployment-status")).to_contain_text("6 of its 11 series are drawn")
    plot = page.locator("#deployment-plot")
    expect(plot.locator(".js-plotly-plot")).to_be_visible(timeout=WAIT_MS)
    assert plot.locator(".legend .traces").count() <= 6
    assert page.locator("#deployment-series .token").count() == 6
    takeaway = page.locator("#deployment-takeaway")
    expect(takeaway).to_contain_text("round trip, SpecSteer")
    assert re.search(r"projected at \d+\.\d tok/s, \d+\.\d\d× the cloud-streamed LLM", takeaway.inner_text())
    assert broken_header_words(page, "#deployment-table") == []
    page.locator("#deployment-view").evaluate("node => node.scrollIntoView()")
    save_screen(page, "dashboard-deployment-view")
