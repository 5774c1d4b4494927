"""Pending drafts on the page: the Generate tab's output keeps the settled tokens as appends and
the round's drafts as a tail the verdict replaces; Compare shows drafts only when the methods are named;
the legend and the statistics name the pending look and the first visible token. No models."""

from __future__ import annotations

from specsteer.engine.settings import GenerationSettings
from specsteer.method.events import GenerationStats, TokenEvent
from specsteer.service.events import ComparisonStarted, Generating, Pending, Token
from ui.compare_handlers import comparison_frames
from ui.stats_html import StatsView, stats_html
from ui.token_html import TokenHtml, legend_html


def event(kind: str, text: str, position: int | None, round_: int = 1, token: int = 7) -> TokenEvent:
    return TokenEvent(token, text, kind, round_, position=position)  # type: ignore[arg-type]


def test_pending_drafts_are_a_tail_the_verdict_replaces():
    html = TokenHtml()
    html.add(event("accepted", "Hi", 0))
    settled = html.html
    html.add(event("pending", " the<re", 0, 2))
    html.add(event("pending", " sea", 1, 2))
    shown = html.html
    assert shown.startswith(settled) and shown.count("ss-tok-pending") == 2
    assert 'data-round="2" data-position="1"' in shown and "&lt;re" in shown  # escaped, placed
    html.add(event("accepted", " the<re", 0, 2))
    html.add(event("rejected", " sea", 1, 2))
    html.add(event("recovered", " sky", 1, 2))
    after = html.html
    assert after.startswith(settled) and "ss-tok-pending" not in after
    assert after.count('data-round="2" data-position="1"') == 2  # the refused draft and its replacement
    html.add(event("pending", " never sent", 0, 3))
    html.end()
    assert html.html == after


def test_the_legend_and_the_statistics_name_the_pending_look():
    assert "pending draft" in legend_html() and "ss-tok-pending" in legend_html()
    stats = GenerationStats(method="specsteer", new_tokens=4, seconds=2.0, ttft_s=1.5, first_visible_s=0.25)
    strip = stats_html(StatsView.final(stats))
    assert "first visible" in strip and "0.25 s" in strip and "1.50 s" in strip


def comparison(blind: bool):
    settings = GenerationSettings(pairing="tiny-test")
    return [
        ComparisonStarted(settings, ("specsteer",), blind),
        Generating("specsteer", "transformers", "fp32"),
        Pending(event("pending", "Draft<b>", 0)),
        Token(event("accepted", "Draft<b>", 0)),
        Pending(event("pending", " two", 0, 2)),
    ]


def slots(frames) -> list[str]:
    return [str(frame.slots[0]) for frame in frames if hasattr(frame, "slots") and isinstance(frame.slots[0], str)]


def test_compare_shows_drafts_when_the_methods_are_named_and_hides_them_when_blind():
    named = slots(comparison_frames(comparison(blind=False), lambda: []))
    assert any("ss-tok-pending" in html and "Draft&lt;b&gt;" in html for html in named)
    assert "ss-tok-pending" in named[-1] and "two" in named[-1] and "Draft&lt;b&gt;<span" in named[-1]
    blind = slots(comparison_frames(comparison(blind=True), lambda: []))
    assert not any("ss-tok-pending" in html or "two" in html for html in blind)
