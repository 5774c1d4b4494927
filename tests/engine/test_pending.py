"""Pending drafts: every draft is on the stream the moment it is drafted, its verdict's events
settle the same (round, position), and nothing settled changes. Tiny fp32 random pairs."""

from __future__ import annotations

import io
import threading
from itertools import groupby

import pytest

from specsteer.cli.terminal import TerminalStream
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.events import TokenEvent


def prompts(pair):
    plain = pair.tokenizer.encode("Write about the weather and the sea.")
    private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
    return plain, private


def events_of(pair, **config) -> tuple[list[TokenEvent], object]:
    config.setdefault("max_new_tokens", 40)
    events = list(generate_ids(pair, *prompts(pair), DecodeConfig(**config)))
    return events[:-1], events[-1]


@pytest.mark.parametrize("alpha", [0.1, 0.0, 1.0])
def test_each_round_shows_its_drafts_first_then_settles_the_same_positions(pair, alpha):
    events, finished = events_of(pair, method="specsteer", alpha=alpha, draft_len=4)
    kinds = {event.kind for event in events}
    assert "pending" in kinds and kinds & {"accepted", "rejected"} and kinds & {"recovered", "bonus"}
    for round_, group in groupby(events, key=lambda event: event.round):
        round_events = list(group)
        pending = [event for event in round_events if event.pending]
        settled = [event for event in round_events if not event.pending]
        # the drafts come first, each at once, in order
        assert round_events[: len(pending)] == pending, round_
        assert [event.position for event in pending] == list(range(len(pending)))
        drafts = [event for event in settled if event.kind in ("accepted", "rejected")]
        # the verdict settles exactly the drafts shown, at their positions
        assert [(event.id, event.position) for event in drafts] == [(event.id, event.position) for event in pending]
        assert [event.text for event in drafts] == [event.text for event in pending]
        chosen = [event for event in settled if event.kind in ("recovered", "bonus")]
        accepted = sum(event.kind == "accepted" for event in settled)
        for event in chosen:  # a recovered token takes the refused draft's place, a bonus the next one
            assert event.position == accepted
            assert event.kind == ("bonus" if accepted == len(pending) else "recovered")
    stats = finished.stats
    assert stats.first_visible_s is not None and stats.ttft_s is not None
    assert stats.first_visible_s < stats.ttft_s  # the first draft is on screen before the first verdict


def test_pending_drafts_change_nothing_settled(pair):
    """The settled stream, the output, the uplink's text and the counts are what collect() always gave."""
    events, finished = events_of(pair, method="specsteer", alpha=0.1, draft_len=3)
    settled = [event for event in events if not event.pending]
    tokens, again = collect(
        generate_ids(pair, *prompts(pair), DecodeConfig(method="specsteer", alpha=0.1, draft_len=3, max_new_tokens=40))
    )
    assert [event.to_dict() for event in tokens] == [event.to_dict() for event in settled]
    assert again.token_ids == finished.token_ids == [event.id for event in settled if event.emitted]
    assert finished.text == "".join(event.text for event in settled if event.emitted)
    # every id the Edge sent once (drafts, then the tokens it chose): the pending copies are not counted twice
    assert finished.stats.sent_text == "".join(event.text for event in settled)
    assert finished.stats.drafted == sum(event.pending for event in events)


@pytest.mark.parametrize("method", ["slm+", "llm", "lightcosteer"])
def test_methods_without_drafts_show_no_pending_and_first_visible_is_their_first_token(pair, method):
    events, finished = events_of(pair, method=method, max_new_tokens=12)
    assert not any(event.pending for event in events)
    stats = finished.stats
    assert stats.first_visible_s is not None and stats.ttft_s is not None
    assert 0 <= stats.ttft_s - stats.first_visible_s < 0.05  # the same event, two clock reads


def test_a_stop_while_drafting_leaves_drafts_that_were_never_sent(pair):
    cancel = threading.Event()
    config = DecodeConfig(method="specsteer", alpha=0.1, draft_len=6, max_new_tokens=40)
    events = []
    for event in generate_ids(pair, *prompts(pair), config, cancel):
        events.append(event)
        if getattr(event, "kind", None) == "pending" and event.round == 2 and event.position == 1:
            cancel.set()
    finished = events[-1]
    tokens = events[:-1]
    last_round = [event for event in tokens if event.round == 2]
    assert last_round and all(event.pending for event in last_round)  # shown, never settled
    assert finished.stats.stop_reason == "cancelled" and finished.stats.rounds == 1
    assert [m.kind for m in finished.transcript if m.direction == "uplink"] == ["open", "draft"]


# --------------------------------------------------------------------------- the terminal


def _event(kind: str, text: str, position: int | None = 0, round_: int = 1) -> TokenEvent:
    return TokenEvent(5, text, kind, round_, position=position)  # type: ignore[arg-type]


def test_terminal_shows_drafts_dim_and_redraws_them_in_the_verdicts_colours():
    out = io.StringIO()
    stream = TerminalStream(out, colour=True)
    stream.add(_event("pending", "Hello", 0))
    stream.add(_event("pending", "\nworld", 1))
    shown = out.getvalue()
    assert shown.startswith("\0337") and "\033[2;3mHello" in shown and "↵world" in shown and "\n" not in shown
    stream.add(_event("accepted", "Hello", 0))
    stream.add(_event("rejected", "\nworld", 1))
    stream.add(_event("recovered", "!", 1))
    redrawn = out.getvalue()[len(shown) :]
    assert redrawn.startswith("\0338\033[J\033[32mHello")  # back to the saved place, cleared, settled
    assert "\033[9;31m\nworld" in redrawn and "\033[33m!" in redrawn
    stream.add(_event("pending", "never sent", 0, 2))
    stream.end()
    assert out.getvalue().endswith("\0338\033[J")


def test_terminal_without_colour_writes_only_the_output():
    out = io.StringIO()
    stream = TerminalStream(out, colour=False)
    for event in (
        _event("pending", "Hi"),
        _event("accepted", "Hi"),
        _event("rejected", " x", 1),
        _event("recovered", "!", 1),
    ):
        stream.add(event)
    stream.end()
    assert out.getvalue() == "Hi!"
