"""The transcript replayed as the Cloud holds it, and the phrases of the user's history it carried.

The rules for a phrase, the values and why (``specsteer.data.crossing``); here the uplink's token ids are
decoded with the engine's detokenizer (which brings torch: the values stay light without this module) round by
round, rejected drafts read after the kept text they followed, and each phrase found placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specsteer.data.crossing import (
    TAIL_CHARS,
    CrossedPhrase,
    Crossing,
    Field,
    HistoryCrossing,
    Part,
    PhraseIndex,
    SentSpan,
    phrase_key,
    phrase_spans,
)
from specsteer.method.decoding import Detokenizer
from specsteer.method.events import Finished, LinkMessage, TokenEvent


@dataclass(frozen=True)
class _Place:
    """Where one token of the replayed text came from."""

    message: int
    field: Field
    position: int
    round: int
    part: Part


@dataclass
class _Text:
    """Decoded text with the place of each token: ``pieces[i]`` is the text token i adds."""

    pieces: list[str] = field(default_factory=list)
    places: list[_Place] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def tail(self, chars: int) -> _Text:
        """The last tokens whose pieces hold at least ``chars`` characters (all, if fewer)."""
        total, start = 0, len(self.pieces)
        while start > 0 and total < chars:
            start -= 1
            total += len(self.pieces[start])
        return _Text(self.pieces[start:], self.places[start:])

    def places_in(self, start: int, end: int) -> list[_Place]:
        """The places of the tokens whose text overlaps ``[start, end)``, in order."""
        places, offset = [], 0
        for piece, place in zip(self.pieces, self.places, strict=True):
            if offset < end and offset + len(piece) > start:
                places.append(place)
            offset += len(piece)
        return places


def history_crossing(
    finished: Finished,
    tokens: Sequence[TokenEvent],
    tokenizer,
    history: Iterable[str],
    plain_prompt: str,
    guard: int = 0,
) -> HistoryCrossing:
    """The phrases of ``history`` (the user's private texts: :func:`history_texts`) that crossed in the
    generation ``finished``, whose Cloud received ``plain_prompt`` by design (the one call the service, the
    command line and the evaluation grid make). ``tokens``: its settled token events; ``tokenizer``: the
    Specialist's, whose ids the uplink carries; ``guard``: the private-span guard's n it ran with (0: off)."""
    return crossed_phrases(history, [plain_prompt], finished.transcript, tokens, tokenizer, finished.text, guard)


@dataclass(frozen=True)
class _Reading:
    """One text the Cloud could read: its phrases count from character ``after`` on, and (for a round's refused
    drafts) only those their ``part`` completed."""

    text: _Text
    after: int = 0
    part: Part | None = None


def crossed_phrases(
    history: Iterable[str],
    public: Iterable[str],
    transcript: Sequence[LinkMessage],
    tokens: Sequence[TokenEvent],
    tokenizer,
    output: str,
    guard: int = 0,
) -> HistoryCrossing:
    """The phrases of ``history`` (not in ``public``) that crossed in a generation's ``transcript`` (the module
    doc says how the text is rebuilt). ``tokens``: its settled token events (their ``accepted`` count per round
    says which drafts the Cloud kept); ``output``: its text. The work grows with the history's words once and
    with what crossed, whatever the history's size: only the history's phrases found in what crossed are kept."""
    if not any(message.direction == "uplink" for message in transcript):
        return HistoryCrossing(linked=False, guard=guard)
    readings = _replayed(transcript, tokens, tokenizer)
    index = PhraseIndex.build(history, public, within=[reading.text.text for reading in readings])
    found = [
        item
        for reading in readings
        for item in _crossings(index, reading.text, reading.after)
        if reading.part is None or item[1].part == reading.part
    ]
    return HistoryCrossing(
        _grouped(found, output),
        linked=True,
        guard=guard,
        private_prompt_sent=any(crossing.part == "prompt" for _, crossing in found),
    )


def _replayed(transcript: Sequence[LinkMessage], tokens: Sequence[TokenEvent], tokenizer) -> list[_Reading]:
    """The texts the uplink carried, as the Cloud holds them: the opening prompt, each round's refused drafts
    after the kept text they followed, and the kept stream (the output as sent), last."""
    accepted = Counter(token.round for token in tokens if token.kind == "accepted")
    last_reply = max((number for number, m in enumerate(transcript) if m.direction == "downlink"), default=-1)
    readings: list[_Reading] = []
    kept, detokenizer = _Text(), Detokenizer(tokenizer)
    round_ = 0
    for number, message in enumerate(transcript):
        if message.direction != "uplink":
            continue
        payload = message.payload
        if message.kind in ("open", "cross-open"):
            prompt, reader = _Text(), Detokenizer(tokenizer)
            for position, token in enumerate(payload.get("prompt", ())):
                _push(reader, prompt, token, _Place(number, "prompt", position, 0, "prompt"))
            readings.append(_Reading(prompt))
            continue
        if message.kind != "draft":
            continue
        round_ += 1
        for position, token in enumerate(payload.get("append", ())):
            _push(detokenizer, kept, token, _Place(number, "append", position, round_, "chosen"))
        drafts = [int(token) for token in payload.get("draft", ())]
        answered = number < last_reply
        keep = min(accepted.get(round_, 0), len(drafts)) if answered else 0
        if keep < len(drafts):
            refused: Part = "rejected" if answered else "unanswered"
            window = kept.tail(TAIL_CHARS)
            pieces = _draft_pieces(detokenizer, drafts)
            refused_from = len(window.text) + sum(len(piece) for piece in pieces[:keep])
            window.pieces += pieces
            window.places += [
                _Place(number, "draft", position, round_, "accepted" if position < keep else refused)
                for position in range(len(drafts))
            ]
            readings.append(_Reading(window, refused_from, refused))
        for position, token in enumerate(drafts[:keep]):
            _push(detokenizer, kept, token, _Place(number, "draft", position, round_, "accepted"))
    readings.append(_Reading(kept))
    return readings


def _push(detokenizer, text: _Text, token: int, place: _Place) -> None:
    text.pieces.append(detokenizer.push(int(token)))
    text.places.append(place)


def _draft_pieces(detokenizer, drafts: Sequence[int]) -> list[str]:
    """The text each draft adds after the kept tokens (as the engine's rejected events' pieces)."""
    pieces, shown = [], ""
    for end in range(1, len(drafts) + 1):
        text = detokenizer.peek(list(drafts[:end]))
        pieces.append(text[len(shown) :] if text.startswith(shown) else "")
        shown = text if text.startswith(shown) else shown
    return pieces


def _crossings(index: PhraseIndex, text: _Text, after: int = 0) -> list[tuple[str, Crossing]]:
    """Each phrase of ``text`` (ending beyond character ``after``: :meth:`PhraseIndex.find`), with the round
    and part of the token that completed it and the tokens that carried it."""
    whole = text.text
    found = []
    for start, end in index.find(whole, after):
        places = text.places_in(start, end)
        last = text.places_in(end - 1, end)[-1]
        found.append((whole[start:end], Crossing(last.round, last.part, _spans(places))))
    return found


def _spans(places: Sequence[_Place]) -> tuple[SentSpan, ...]:
    """Token places as one span per message field (the positions of a field are consecutive)."""
    spans: dict[tuple[int, str], list[int]] = {}
    fields: dict[tuple[int, str], Field] = {}
    for place in places:
        spans.setdefault((place.message, place.field), []).append(place.position)
        fields[(place.message, place.field)] = place.field
    return tuple(
        SentSpan(message, fields[(message, name)], min(positions), max(positions) + 1)
        for (message, name), positions in spans.items()
    )


def _grouped(found: Sequence[tuple[str, Crossing]], output: str) -> tuple[CrossedPhrase, ...]:
    """One phrase per key, its crossings by round, with its spans in the output; phrases by first crossing."""
    by_key: dict[tuple[str, ...], tuple[str, list[Crossing]]] = {}
    for text, crossing in found:
        by_key.setdefault(phrase_key(text), (text, []))[1].append(crossing)
    phrases = [
        CrossedPhrase(text, tuple(sorted(crossings, key=lambda c: c.round)), phrase_spans(key, output))
        for key, (text, crossings) in by_key.items()
    ]
    return tuple(sorted(phrases, key=lambda phrase: (phrase.crossings[0].round, phrase.text.casefold())))
