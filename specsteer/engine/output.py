"""A generation's output as it grows: each token turned into its event, the text so far, and when to stop."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from specsteer.method.decoding import Detokenizer
from specsteer.method.events import SegmentPlace, TokenEvent, TokenKind
from specsteer.method.token_details import TokenDetails
from specsteer.protocol.link import Link


class Output:
    """Counts emitted tokens, turns them into events and knows when to stop."""

    def __init__(self, tokenizer, max_new_tokens: int, stop_ids: frozenset[int], link: Link, cancel: threading.Event):
        self.detokenizer = Detokenizer(tokenizer)
        self.max_new_tokens = max_new_tokens
        self.stop_ids = stop_ids
        self.link = link
        self.cancel = cancel
        self.pieces: list[str] = []
        self.stop_reason: str | None = None
        self.sent: list[str] = []  # the text of every id the Edge sent, in order (GenerationStats.sent_text)

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    def keep_going(self) -> bool:
        """False once the text ended, the budget is spent or a stop was asked for.

        A stop is honoured here, between rounds and (by the speculative loop) right
        after drafting, before the drafts are sent: every draft that crossed the
        link is therefore also shown (and can be audited).
        """
        if self.stop_reason is None and self.cancel.is_set():
            self.stop_reason = "cancelled"
        return self.stop_reason is None

    def _event(
        self,
        token: int,
        text: str,
        kind: TokenKind,
        round_: int,
        ratio: float | None,
        segment: SegmentPlace | None = None,
        position: int | None = None,
        details: TokenDetails | None = None,
    ) -> TokenEvent:
        return TokenEvent(
            token,
            text,
            kind,
            round_,
            ratio,
            self.link.totals["uplink"],
            self.link.totals["downlink"],
            segment,
            position,
            details,
        )

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.detokenizer.ids)

    def emit(
        self,
        token: int,
        kind: TokenKind,
        round_: int,
        ratio: float | None = None,
        segment: SegmentPlace | None = None,
        position: int | None = None,
        details: TokenDetails | None = None,
    ) -> TokenEvent:
        is_end = token in self.stop_ids
        last = is_end or self.remaining == 1
        piece = self.detokenizer.push(token, final=last)
        self.pieces.append(piece)
        if last:
            self.stop_reason = "eos" if is_end else "length"
        return self._event(token, piece, kind, round_, ratio, segment, position, details)

    def pending(self, drafts: list[int], round_: int) -> TokenEvent:
        """The round's latest draft, shown before its verdict, with the text it would add after the
        drafts before it."""
        shown = self.detokenizer.peek(drafts[:-1]) if len(drafts) > 1 else ""
        text = self.detokenizer.peek(drafts)
        piece = text[len(shown) :] if text.startswith(shown) else text
        return self._event(drafts[-1], piece, "pending", round_, None, None, len(drafts) - 1)

    def rejected(
        self,
        drafts: list[int],
        round_: int,
        ratio: float | None,
        segments: Sequence[SegmentPlace | None],
        first_position: int = 0,
        details: Sequence[TokenDetails | None] = (),
    ) -> list[TokenEvent]:
        """The refused draft and the unverified drafts after it, each with the text it would have added;
        ``first_position``: the refused draft's index in its round; ``details``: their numbers, if asked."""
        events = []
        shown = ""
        for i, (token, segment) in enumerate(zip(drafts, segments)):
            text = self.detokenizer.peek(drafts[: i + 1])
            piece = text[len(shown) :] if text.startswith(shown) else text
            numbers = details[i] if i < len(details) else None
            events.append(
                self._event(
                    token, piece, "rejected", round_, ratio if i == 0 else None, segment, first_position + i, numbers
                )
            )
            shown = text
        return events

    def ends_text(self, tokens: list[int]) -> bool:
        return bool(tokens) and tokens[-1] in self.stop_ids
