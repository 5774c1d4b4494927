"""Pending drafts in a real browser: a draft appears in the pending look before the Cloud's
verdict, and the verdict's colour replaces it. The emulated link's round trip (the RTT setting) holds
every verdict for seconds, so the pending state lasts long enough to be seen on a loaded machine.

Debian's Chromium driven by Playwright's Python package, as tests/test_browser.py; never run
``playwright install``.
"""

from __future__ import annotations

import pytest

from testkit import app_page, browser_api, set_rtt

sync_api = browser_api()

pytestmark = pytest.mark.browser

WAIT_MS = 60_000
RTT_MS = "2000"  # the setting's maximum
SETTLED = ".ss-tok-accepted, .ss-tok-rejected, .ss-tok-recovered, .ss-tok-bonus"


@pytest.fixture(scope="module")
def page(app_server, chromium):
    with app_page(chromium, app_server[0], WAIT_MS) as page:
        yield page


def test_drafts_show_pending_then_take_the_verdicts_colour(page):
    expect = sync_api.expect
    page.locator("#max-new-tokens input[type=number]").fill("8")
    page.locator("#max-new-tokens input[type=number]").press("Tab")
    set_rtt(page, RTT_MS)
    page.click("#generate-button")
    output = page.locator("#generate-output")
    first_pending = output.locator(".ss-tok-pending").first  # a draft's span (one whose piece is empty has none)
    expect(first_pending).to_be_attached(timeout=WAIT_MS)
    round_, position = first_pending.get_attribute("data-round"), first_pending.get_attribute("data-position")
    # the draft is on screen in its own look while its verdict is on its way: nothing of its round settled yet
    this_round = output.locator(f'[data-round="{round_}"]')
    assert this_round.and_(output.locator(SETTLED)).count() == 0
    look = first_pending.evaluate(
        "n => [getComputedStyle(n).fontStyle, getComputedStyle(n).opacity, getComputedStyle(n).backgroundColor]"
    )
    assert look[0] == "italic" and float(look[1]) < 1, look
    drafted = first_pending.get_attribute("title") or ""
    assert drafted.startswith("pending draft")
    # the verdict replaces it at the same place, in a settled kind's colour
    settled = output.locator(f'[data-round="{round_}"][data-position="{position}"]').and_(output.locator(SETTLED))
    expect(settled.first).to_be_attached(timeout=WAIT_MS)
    assert output.locator(f'.ss-tok-pending[data-round="{round_}"]').count() == 0
    colour = settled.first.evaluate("n => getComputedStyle(n).backgroundColor")
    assert colour != "rgba(0, 0, 0, 0)" and colour != look[2]
    expect(page.locator("#generate-status")).to_contain_text("saved as generation", timeout=WAIT_MS)
    assert output.locator(".ss-tok-pending").count() == 0  # nothing is left pending at the end
    legend = page.locator(".ss-legend")
    expect(legend).to_contain_text("pending draft")
