"""The token stream as HTML: each token coloured by its kind, a cross-tokenizer segment as one element, the
phrases of the history that crossed marked inside their tokens, the legend and the output panel. A token's
popover (its numbers) is :mod:`ui.token_details`.

The rule of this module, as of every module that builds HTML: each piece of text that came from a user, a
file or a model goes through :func:`ui.markup.esc` before it is placed in markup. Model outputs are
untrusted: a token reading ``<img src=x onerror=...>`` must show up as those characters and run nothing.
Only this module's own literals (class names, labels, numbers it formats) are trusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specsteer.method.events import TokenEvent
from specsteer.service.events import PrivacyReport
from ui.markup import esc
from ui.token_details import popover_html

KIND_LABELS = {
    "accepted": "accepted draft",
    "rejected": "rejected draft",
    "recovered": "recovered",
    "bonus": "bonus",
    "plain": "single model",
    "pending": "pending draft",
}
KIND_EXPLANATIONS = {
    "accepted": "proposed by the on-device Specialist and accepted by the cloud (P³: the cloud's draft, kept by "
    "the device)",
    "rejected": "proposed by the Specialist, refused by the cloud, not part of the output (P³: a cloud draft the "
    "device refused)",
    "recovered": "chosen on the device from the steered logits after a rejection (P³: the device's correction)",
    "bonus": "extra steered token after a fully accepted round",
    "plain": "token of a method without drafting",
    "pending": "drafted on the device and shown at once; recoloured when the cloud's verdict arrives",
}


def _visible_whitespace(text: str) -> str:
    # A struck-through draft made only of spaces or newlines would be invisible.
    return text.replace(" ", "\u2423").replace("\n", "\u21b5")


def marked_text(text: str, marks: Sequence[tuple[int, int]] = ()) -> str:
    """``text`` escaped, its ``marks`` (character ranges, in order) wrapped as phrases of the history that
    crossed; the mark sits inside a token's element, so the token keeps its colour."""
    parts, at = [], 0
    for start, end in marks:
        parts.append(esc(text[at:start]))
        parts.append(f'<mark class="ss-crossed">{esc(text[start:end])}</mark>')
        at = end
    parts.append(esc(text[at:]))
    return "".join(parts)


def token_span(event: TokenEvent, marks: Sequence[tuple[int, int]] = ()) -> str:
    """One token as a span whose CSS class names its kind (ss-tok-accepted, ...); ``marks``: the character
    ranges of its text that belong to a phrase of the history that crossed."""
    text = event.text
    if not text:
        return ""  # a token ending inside a multi-byte character; a later one carries it
    if event.kind == "rejected" and not text.strip():
        text = _visible_whitespace(text)
    title = f"{KIND_LABELS.get(event.kind, event.kind)} · token {event.id}"
    if event.round:
        title += f" · round {event.round}"
    if event.ratio is not None and math.isfinite(event.ratio):
        title += f" · ratio {event.ratio:.3g}"
    tag = "del" if event.kind == "rejected" else "span"
    place = "" if event.position is None else f' data-round="{event.round}" data-position="{event.position}"'
    if event.details is not None:  # a popover with its numbers, reached by hover, Tab or a tap (ui.token_details)
        popover = popover_html(event, KIND_LABELS.get(event.kind, event.kind))
        return (
            f'<{tag} class="ss-tok ss-tok-{esc(event.kind)} ss-tip" tabindex="0"{place} aria-label="{esc(title)}">'
            f"{marked_text(text, marks)}{popover}</{tag}>"
        )
    return (
        f'<{tag} class="ss-tok ss-tok-{esc(event.kind)}"{place} title="{esc(title)}">{marked_text(text, marks)}</{tag}>'
    )


def segment_title(event: TokenEvent) -> str:
    """The tooltip of a drafted segment on a cross-tokenizer pair (``event`` is its first token)."""
    size = event.segment.size if event.segment is not None else 1
    title = (
        f"{KIND_LABELS.get(event.kind, event.kind)} · one segment of {size} Specialist "
        f"token{'' if size == 1 else 's'}: the text between two offsets where both tokenizers cut, "
        "which the cloud accepts or refuses whole"
    )
    if event.round:
        title += f" · round {event.round}"
    if event.ratio is not None and math.isfinite(event.ratio):
        title += f" · ratio {event.ratio:.3g}"
    return title


def _segment_open(event: TokenEvent) -> tuple[str, str]:
    """(the opening tag of a segment's element, its closing tag)."""
    tag = "del" if event.kind == "rejected" else "span"
    size = event.segment.size if event.segment is not None else 1
    return (
        f'<{tag} class="ss-tok ss-tok-{esc(event.kind)} ss-seg" data-segment-size="{size}" '
        f'title="{esc(segment_title(event))}">',
        f"</{tag}>",
    )


def _segment_piece(event: TokenEvent, marks: Sequence[tuple[int, int]] = ()) -> str:
    """One Specialist token inside its segment's element (the segment's tooltip covers it)."""
    text = event.text
    if not text:
        return ""
    if event.kind == "rejected" and not text.strip():
        text = _visible_whitespace(text)
    return f'<span class="ss-seg-tok" data-token="{event.id}">{marked_text(text, marks)}</span>'


class TokenHtml:
    """The token stream as HTML that only ever grows at its end, but for the pending drafts.

    Appending keeps each update a pure extension of the previous value, so re-rendering stays
    proportional to what is new on the Python side, and Gradio's diff of a streamed string value
    is an append. Pending drafts (shown before the Cloud's verdict) are a tail after the settled
    tokens: a round's settled events replace the whole tail, and :meth:`end` drops what is left
    (drafts never sent).

    On a cross-tokenizer pair a draft's event names its segment (``TokenEvent.segment``): the
    segment is one coloured element, opened at its first token and closed after its last, holding
    a piece per Specialist token. Until it closes, the HTML parser closes it (the output panel is
    left unclosed the same way, :func:`output_html`).
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._html = ""
        self._closing = ""  # the open segment's closing tag, "" when none is open
        self._expected: tuple[int, str, int] | None = None  # (round, kind, position) that continues it
        self._pending: list[str] = []  # the current round's drafts awaiting their verdict

    def add(self, event: TokenEvent, marks: Sequence[tuple[int, int]] = ()) -> None:
        """Append a token; ``marks``: the character ranges of its text to highlight (:func:`marked_text`)."""
        if event.pending:
            self._pending.append(token_span(event))
            return
        self._pending.clear()  # the verdict is back: its settled events take the drafts' place
        segment = event.segment
        continues = segment is not None and self._expected == (event.round, event.kind, segment.position)
        if self._closing and not continues:
            self._close()
        if segment is None:
            self._parts.append(token_span(event, marks))
            return
        if not continues:
            opening, self._closing = _segment_open(event)
            self._parts.append(opening)
        self._parts.append(_segment_piece(event, marks))
        self._expected = (event.round, event.kind, segment.position + 1)
        if segment.last:
            self._close()

    def _close(self) -> None:
        self._parts.append(self._closing)
        self._closing = ""
        self._expected = None

    def end(self) -> None:
        """The output is over: drafts still pending were never sent."""
        self._pending.clear()

    @property
    def html(self) -> str:
        if self._parts:
            self._html += "".join(self._parts)
            self._parts.clear()
        return self._html + "".join(self._pending) if self._pending else self._html


def marked_tokens_html(tokens: Sequence[TokenEvent], report: PrivacyReport | None) -> str:
    """A finished generation's tokens with the phrases of the history that crossed highlighted (in the output
    and in the refused drafts that carried them); as streamed where none crossed."""
    crossing = report.crossing if report is not None else None
    marks = crossing.token_marks(tokens) if crossing is not None and crossing.crossed else {}
    rendered = TokenHtml()
    for index, event in enumerate(tokens):
        rendered.add(event, marks.get(index, ()))
    rendered.end()
    return rendered.html


def legend_html(kinds: Sequence[str] = ("pending", "accepted", "rejected", "recovered", "bonus", "plain")) -> str:
    items = "".join(
        f'<span class="ss-legend-item" title="{esc(KIND_EXPLANATIONS[kind])}">'
        f'<span class="ss-tok ss-tok-{kind}">{"abc" if kind != "rejected" else "xyz"}</span> '
        f"{esc(KIND_LABELS[kind])}</span>"
        for kind in kinds
    )
    return f'<div class="ss-legend" aria-label="token colours">{items}</div>'


def output_html(body: str, placeholder: str = "The output appears here, token by token.") -> str:
    """The output panel around token spans (already escaped).

    The wrapper is deliberately left unclosed (the HTML parser closes it): successive values
    while streaming are then pure extensions of each other, which Gradio sends as an append
    instead of the whole output again.
    """
    if not body:
        return f'<div class="ss-output ss-output-empty">{esc(placeholder)}</div>'
    return f'<div class="ss-output">{body}'
