"""The history that crossed: runs of words from the user's history that reached the Cloud.

The uplink carries the plain prompt once, then token ids (``specsteer.data.privacy`` checks that). Those
ids, decoded, are text the Cloud can read: the output as it grows and each round's drafts, rejected ones
included. This module finds in that text the phrases of the user's history, names them and says where each
crossed.

**A phrase of the history** (:class:`PhraseIndex`), compared without case:

* a run of :data:`PHRASE_WORDS` (3) words of a history text holding at least two content words (words that
  are not function words, ``facts.STOPWORDS``): "senior environmental lawyer", "at Halstead International";
* a pair of :data:`NAME_WORDS` (2) content words both capitalised in the history: "InnovTech Solutions",
  "Madison Clark" (a name is often two words, and two-word pairs in general are common language);
* unless the Cloud has it anyway: a phrase whose content words, in order, occur together in the plain
  prompt (which holds the task input) is not one. When the task names "InnovTech Solutions", "at InnovTech
  Solutions" is not counted.

Overlapping matches merge into one phrase ("a senior environmental lawyer" rather than its three parts).

Why 3 and 2 (``benchmarks/crossing_phrase_study.py``, docs/THREAT_MODEL.md): on the 270 CoGenesis records, with
each record's reference answer standing for a personalised output, the rule finds phrases of the user's own
history in about half of the answers, and phrases of another user's history (what chance and common
language give) in 3 %. Every 2-word pair would flag another user's history in almost every answer ("of the",
"to the"), every 3-word run in a quarter ("the heart of", "as someone who"); 4-word runs miss 2-word names
and find the user's own history in a third of the answers.

**Where the text comes from** (``crossing_replay.crossed_phrases``): the transcript replayed as the Cloud holds it. The
opening message's prompt is read as it was sent (for ``llm+``, the private prompt: everything in it
crossed). Each Draft message appends the tokens the Edge chose since the last round, then drafts; the
round's verdict keeps the accepted ones (their number from the round's ``accepted`` token events) and drops
the rest, the rejected drafts; a Draft the transcript ends on never got a verdict (unanswered). The kept
stream, the output as it was sent, is read once; each round's refused drafts are read after the kept text
they followed, so a phrase that begins in accepted text and ends in a rejected draft is found (named by the
matches that reach into the refused drafts, not the kept phrase again). Matching is on
decoded text, so a word split across tokens, or across rounds, is one word.

Each phrase comes with every place it crossed (:class:`Crossing`: round, part, the token positions in the
transcript's messages) and its places in the output (character spans), for highlighting.

What it misses: paraphrase, and anything shorter than the rules (one rare word alone, "Bali"); what the
history does to the choice of words beyond copying them.

This module holds the phrase rules and the values (light: storage and the report read them); the replay of a
transcript with the engine's detokenizer is :mod:`specsteer.data.crossing_replay`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from specsteer.data.facts import STOPWORDS
from specsteer.method.events import TokenEvent

PHRASE_WORDS = 3  # a phrase: this many words, at least two of them content words
NAME_WORDS = 2  # or a name: this many capitalised content words
TAIL_CHARS = 400  # the kept text a round's refused drafts are read after

Part = Literal["prompt", "chosen", "accepted", "rejected", "unanswered"]
PARTS: tuple[Part, ...] = get_args(Part)
# What each part is, in words (the UI and the CLI say where a phrase crossed with these).
PART_WORDS: dict[Part, str] = {
    "prompt": "in the prompt sent",
    "chosen": "in a token chosen on the device",
    "accepted": "in an accepted draft",
    "rejected": "in a rejected draft",
    "unanswered": "in a draft never answered",
}
REFUSED_PARTS = frozenset({"rejected", "unanswered"})  # crossed, yet not in the output
Field = Literal["prompt", "append", "draft"]  # the field of a message's payload that holds the ids

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


# --------------------------------------------------------------------------- phrases of the history


def _key(word: str) -> str:
    return word.casefold().replace("’", "'")


@dataclass(frozen=True)
class _Word:
    text: str
    start: int
    end: int

    @property
    def key(self) -> str:
        return _key(self.text)


def _words(text: str) -> list[_Word]:
    return [_Word(match.group(), match.start(), match.end()) for match in _WORD.finditer(text)]


def _keys(text: str) -> tuple[list[str], list[bool]]:
    """The text's words without case, and whether each is capitalised (no positions: the history's words)."""
    words = _WORD.findall(text)
    return [_key(word) for word in words], [word[:1].isupper() for word in words]


def _content_runs(keys: Sequence[str]) -> Iterable[tuple[str, ...]]:
    """Every run of 2 and 3 consecutive content words of the text, function words left out between them."""
    content = [key for key in keys if key not in STOPWORDS]
    for size in (2, 3):
        for start in range(len(content) - size + 1):
            yield tuple(content[start : start + size])


def _runs(keys: Sequence[str]) -> Iterable[tuple[str, ...]]:
    """Every run of a phrase's or a name's length."""
    for size in (PHRASE_WORDS, NAME_WORDS):
        for start in range(len(keys) - size + 1):
            yield tuple(keys[start : start + size])


def _candidates(keys: Sequence[str], capitalised: Sequence[bool], first: set[str] | None) -> Iterable[tuple[str, ...]]:
    """The text's phrases by the rules (the module doc); ``first``: only those starting with one of these
    words (a set lookup per word, so that a long history costs little)."""
    for start, key in enumerate(keys):
        if first is not None and key not in first:
            continue
        run = keys[start : start + PHRASE_WORDS]
        if len(run) == PHRASE_WORDS and sum(word not in STOPWORDS for word in run) >= 2:
            yield tuple(run)
        pair = keys[start : start + NAME_WORDS]
        if len(pair) == NAME_WORDS and all(word not in STOPWORDS for word in pair):
            if all(capitalised[start : start + NAME_WORDS]):
                yield tuple(pair)


@dataclass(frozen=True)
class PhraseIndex:
    """The phrases of a user's history that the Cloud does not get anyway (see the module doc)."""

    phrases: frozenset[tuple[str, ...]]

    @classmethod
    def build(cls, history: Iterable[str], public: Iterable[str], within: Iterable[str] | None = None) -> PhraseIndex:
        """``history``: the user's private texts (history items, profile); ``public``: what the Cloud gets
        by design (the plain prompt, which holds the task input); ``within``: when given, only the phrases
        these texts hold are kept (what crossed: the index then stays that size whatever the history's)."""
        known = {run for text in public for run in _content_runs(_keys(text)[0])}
        wanted = None if within is None else {run for text in within for run in _runs(_keys(text)[0])}
        first = None if wanted is None else {run[0] for run in wanted}
        phrases = {
            phrase
            for text in history
            for phrase in _candidates(*_keys(text), first)
            if (wanted is None or phrase in wanted)
            and tuple(word for word in phrase if word not in STOPWORDS) not in known
        }
        return cls(frozenset(phrases))

    def find(self, text: str, after: int = 0) -> list[tuple[int, int]]:
        """The character spans of ``text`` that are phrases of the history, overlapping matches merged; with
        ``after``, only from the matches that end beyond that character (what a refused draft added to the
        kept text before it, not the kept phrase it extends)."""
        words = _words(text)
        matched: list[tuple[int, int]] = []  # word index ranges
        for start in range(len(words)):
            for size in (PHRASE_WORDS, NAME_WORDS):
                run = words[start : start + size]
                if len(run) == size and run[-1].end > after and tuple(word.key for word in run) in self.phrases:
                    matched.append((start, start + size))
        merged: list[list[int]] = []
        for start, end in sorted(matched):
            if merged and start < merged[-1][1]:  # shares a word with the run before: one phrase
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        return [(words[start].start, words[end - 1].end) for start, end in merged]


def phrase_key(text: str) -> tuple[str, ...]:
    """A phrase's words without case: two crossings of one phrase share it."""
    return tuple(word.key for word in _words(text))


def phrase_spans(key: tuple[str, ...], text: str) -> tuple[tuple[int, int], ...]:
    """The character spans of ``text`` whose words are the phrase ``key`` (:func:`phrase_key`), without case."""
    words = _words(text)
    size = len(key)
    return tuple(
        (words[start].start, words[start + size - 1].end)
        for start in range(len(words) - size + 1)
        if tuple(word.key for word in words[start : start + size]) == key
    )


def history_texts(items: Iterable[Any], profile: str | None = None) -> list[str]:
    """The private texts of a history: each item's text (``HistoryItem.text``) and the profile, if any."""
    return [item.text for item in items] + ([profile] if profile else [])


# --------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class SentSpan:
    """Token positions ``[start, end)`` in one field (``prompt``, ``append`` or ``draft``) of the payload of
    the transcript's message ``message`` (0-based, in the transcript's order, both directions counted)."""

    message: int
    field: Field
    start: int
    end: int


@dataclass(frozen=True)
class Crossing:
    """One place a phrase crossed: round 0 is the opening message, round r the r-th Draft message (the
    tokens' ``round``). ``part`` is where the phrase's last word arrived (:data:`PART_WORDS`); ``spans`` are
    the tokens that carried the phrase (one per message field; text kept from earlier rounds included)."""

    round: int
    part: Part
    spans: tuple[SentSpan, ...] = ()


@dataclass(frozen=True)
class CrossedPhrase:
    """One phrase of the history that crossed: as the Cloud could read it the first time, each place it
    crossed, and its character spans in the output (none when it crossed only in refused drafts)."""

    text: str
    crossings: tuple[Crossing, ...]
    output_spans: tuple[tuple[int, int], ...] = ()

    @property
    def refused_only(self) -> bool:
        """Every crossing was in a draft the Cloud refused or never answered: the user never saw it."""
        return all(crossing.part in REFUSED_PARTS for crossing in self.crossings)

    def where(self) -> str:
        """ "in a rejected draft (round 1)" and so on, each part once with its rounds."""
        rounds: dict[Part, list[int]] = {}
        for crossing in self.crossings:
            rounds.setdefault(crossing.part, []).append(crossing.round)
        return "; ".join(
            PART_WORDS[part] + ("" if part == "prompt" else f" (round{'s' if len(r) > 1 else ''} {_list(r)})")
            for part, r in rounds.items()
        )


def _list(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(number) for number in numbers[:6])
    return shown + (f" and {len(numbers) - 6} more" if len(numbers) > 6 else "")


@dataclass(frozen=True)
class HistoryCrossing:
    """The history that crossed in one generation: what any place shows (the privacy panel's headline, the
    CLI's JSON, an evaluation cell).

    ``linked``: whether anything crossed the link at all (False for a device-only method). ``guard``: the
    private-span guard's n in tokens (0: off; ``drafting.PrivateSpanGuard``), which the generation ran with.
    ``private_prompt_sent``: the opening prompt was the private one (``llm+``)."""

    phrases: tuple[CrossedPhrase, ...] = ()
    linked: bool = True
    guard: int = 0
    private_prompt_sent: bool = False

    @property
    def crossed(self) -> bool:
        return bool(self.phrases)

    @property
    def count(self) -> int:
        return len(self.phrases)

    @property
    def occurrences(self) -> int:
        return sum(len(phrase.crossings) for phrase in self.phrases)

    @property
    def refused_only(self) -> int:
        """Phrases that crossed only in drafts the Cloud refused (or never answered)."""
        return sum(phrase.refused_only for phrase in self.phrases)

    def sent_positions(self) -> dict[tuple[int, Field], frozenset[int]]:
        """The token positions that carried a phrase, by (transcript message, payload field): what a display of
        the transcript highlights (empty for an audit read back without its spans)."""
        positions: dict[tuple[int, Field], set[int]] = {}
        for phrase in self.phrases:
            for crossing in phrase.crossings:
                for span in crossing.spans:
                    positions.setdefault((span.message, span.field), set()).update(range(span.start, span.end))
        return {place: frozenset(found) for place, found in positions.items()}

    def token_marks(self, tokens: Sequence[TokenEvent]) -> dict[int, tuple[tuple[int, int], ...]]:
        """Where the phrases lie in a generation's settled token events, for highlighting: by the event's index
        in ``tokens``, the character ranges of its text that belong to a phrase. An output token is marked
        where it overlaps a phrase's span in the output (emitted pieces concatenate to the output); a refused
        draft wholly, where its round and position carried a phrase the Cloud refused."""
        output_spans = sorted(span for phrase in self.phrases for span in phrase.output_spans)
        refused = self._refused_drafts()
        marks: dict[int, tuple[tuple[int, int], ...]] = {}
        offset = 0
        for index, token in enumerate(tokens):
            if token.pending:
                continue
            if not token.emitted:
                if (token.round, token.position) in refused and token.text:
                    marks[index] = ((0, len(token.text)),)
                continue
            end = offset + len(token.text)
            inside = tuple(
                (max(start, offset) - offset, min(stop, end) - offset)
                for start, stop in output_spans
                if start < end and stop > offset
            )
            if inside:
                marks[index] = inside
            offset = end
        return marks

    def _refused_drafts(self) -> frozenset[tuple[int, int]]:
        """(round, draft position) of the drafts that carried a phrase in a round whose drafts the Cloud refused:
        the draft field of the last message the crossing's spans name (the round's own Draft message)."""
        found: set[tuple[int, int]] = set()
        for phrase in self.phrases:
            for crossing in phrase.crossings:
                if crossing.part not in REFUSED_PARTS or not crossing.spans:
                    continue
                last = max(span.message for span in crossing.spans)
                for span in crossing.spans:
                    if span.message == last and span.field == "draft":
                        found.update((crossing.round, position) for position in range(span.start, span.end))
        return frozenset(found)

    def headline(self) -> str:
        """One sentence: which phrases crossed, or that none did, and whether the guard was on."""
        guard = f" The private-span guard was on (n = {self.guard} tokens)." if self.guard else ""
        if not self.linked:
            return "Nothing crossed the link: this method runs on the device."
        if not self.phrases:
            return (
                f"No phrase of your history crossed to the cloud (runs of {PHRASE_WORDS} words, or {NAME_WORDS}-word "
                f"names, not in your input; a paraphrase is not caught).{guard}"
            )
        if self.private_prompt_sent:
            return (
                f"Your history crossed to the cloud: this method sends your private prompt, with "
                f"{self.count} phrase{_s(self.count)} of your history in it."
            )
        named = ", ".join(f"'{_shortened(phrase.text)}'" for phrase in self.phrases[:5])
        more = f" and {self.count - 5} more" if self.count > 5 else ""
        refused = f" ({self.refused_only} only in drafts the cloud rejected)" if self.refused_only else ""
        return (
            f"{self.count} phrase{_s(self.count)} of your history crossed to the cloud{refused}: {named}{more}.{guard}"
        )

    def to_dict(self, spans: bool = True) -> dict[str, Any]:
        """As JSON (``generate --json``, a stored cell): ``spans=False`` leaves the token and output spans
        out (what a stored cell keeps: the phrases, where they crossed, the counts)."""
        return {
            "linked": self.linked,
            "guard": self.guard,
            "private_prompt_sent": self.private_prompt_sent,
            "count": self.count,
            "occurrences": self.occurrences,
            "refused_only": self.refused_only,
            "phrases": [_phrase_dict(phrase, spans) for phrase in self.phrases],
        }

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> HistoryCrossing:
        """:meth:`to_dict`'s JSON read back (the counts are recomputed from the phrases)."""
        return cls(
            phrases=tuple(
                CrossedPhrase(
                    str(phrase["text"]),
                    tuple(
                        Crossing(
                            int(crossing["round"]),
                            crossing["part"],
                            tuple(SentSpan(**span) for span in crossing.get("spans", ())),
                        )
                        for crossing in phrase["crossings"]
                    ),
                    tuple((int(start), int(end)) for start, end in phrase.get("output_spans", ())),
                )
                for phrase in stored.get("phrases", ())
            ),
            linked=bool(stored.get("linked", True)),
            guard=int(stored.get("guard", 0)),
            private_prompt_sent=bool(stored.get("private_prompt_sent", False)),
        )


def _shortened(text: str, words: int = 8) -> str:
    """A long copied run by its first words (the phrase itself keeps them all)."""
    found = _words(text)
    return text if len(found) <= words else text[: found[words - 1].end] + " …"


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _phrase_dict(phrase: CrossedPhrase, spans: bool) -> dict[str, Any]:
    crossings = [
        {
            "round": crossing.round,
            "part": crossing.part,
            **({"spans": [vars(span) for span in crossing.spans]} if spans else {}),
        }
        for crossing in phrase.crossings
    ]
    document: dict[str, Any] = {"text": phrase.text, "crossings": crossings}
    if spans:
        document["output_spans"] = [list(span) for span in phrase.output_spans]
    return document
