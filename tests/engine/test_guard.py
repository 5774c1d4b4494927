"""The private-span guard: with it on, no token the Edge sends completes a private n-gram (tiny pair)."""

from __future__ import annotations

import pytest

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.method.drafting import PrivateSpanGuard

N = 2  # short spans, so that the tiny random models copy some of them when unguarded (the control)


def prompts(pair, topic: str) -> tuple[list[int], list[int]]:
    """A plain prompt, and a private one whose 'history' is what the Specialist itself writes for the
    task: the spans it would copy are then private ones."""
    plain = chat_ids(pair.tokenizer, f"Write a note about {topic}.", pair.chat)
    _, own = collect(generate_ids(pair, plain, plain, DecodeConfig(method="slm", max_new_tokens=40)))
    history = pair.tokenizer.decode(own.token_ids)
    return plain, chat_ids(pair.tokenizer, f"History: {history}\nWrite a note about {topic}.", pair.chat)


def cloud_views(plain: list[int], events) -> list[tuple[list[int], int]]:
    """Every token the Edge sent, as (the sequence the Cloud held when it arrived, its position in it)."""
    committed = list(plain)
    views = []
    for round_ in sorted({event.round for event in events}):
        shown = [event for event in events if event.round == round_]
        drafts = [event.id for event in shown if event.kind in ("accepted", "rejected")]
        for position in range(len(drafts)):
            views.append((committed + drafts, len(committed) + position))
        committed += [event.id for event in shown if event.kind == "accepted"]
        for event in shown:
            if event.kind in ("recovered", "bonus"):
                committed.append(event.id)
                views.append((list(committed), len(committed) - 1))
    return views


def private_copies(plain, private, events, n: int = N) -> int:
    guard = PrivateSpanGuard(private, plain, n)
    return sum(
        sequence[position] in guard.blocked(sequence[:position]) for sequence, position in cloud_views(plain, events)
    )


@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_no_sent_token_completes_a_private_ngram_with_the_guard_on(pair, alpha):
    unguarded = guarded = 0
    for topic in ("the garden", "a bicycle trip", "the harbour"):
        plain, private = prompts(pair, topic)
        for guard in (0, N):
            events, finished = collect(
                generate_ids(
                    pair,
                    plain,
                    private,
                    DecodeConfig(method="specsteer", alpha=alpha, max_new_tokens=40, private_guard=guard),
                )
            )
            copies = private_copies(plain, private, events)
            # Every drafted id that crossed the link is in the transcript, and the events show them all.
            sent = [
                token
                for message in finished.transcript
                if message.kind == "draft"
                for token in message.payload["draft"]
            ]
            assert sent == [event.id for event in events if event.kind in ("accepted", "rejected")]
            if guard:
                guarded += copies
            else:
                unguarded += copies
    assert unguarded > 0  # the control: without the guard some sent tokens do copy private spans
    assert guarded == 0


def test_the_guard_blocks_only_spans_the_plain_prompt_lacks():
    guard = PrivateSpanGuard(private_ids=[1, 2, 3, 9, 9, 4, 5], plain_ids=[4, 5, 7], n=2)
    assert guard.blocked([8, 1]) == {2}
    assert guard.blocked([9]) == {9, 4}
    assert guard.blocked([4]) == set()  # (4, 5) is in the plain prompt: the Cloud has it anyway
    with pytest.raises(ValueError):
        PrivateSpanGuard([1, 2], [], n=1)


def test_guard_settings_are_checked():
    with pytest.raises(ValueError, match="guard"):
        DecodeConfig(private_guard=1).validate()
    with pytest.raises(ValueError, match="exact"):
        DecodeConfig(private_guard=4, exact=True, sample=True).validate()
