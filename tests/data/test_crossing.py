"""The history that crossed: phrases of a history found in what the uplink carried, rejected drafts included.

Transcripts built by hand check the replay (rounds, refused drafts, words across tokens and rounds); the tiny
fp32 pair, with the Specialist made to draft a canary, checks it end to end through the real link.
"""

from __future__ import annotations

import pytest

from specsteer.data.crossing import CrossedPhrase, Crossing, HistoryCrossing, PhraseIndex, SentSpan, history_texts
from specsteer.data.crossing_replay import crossed_phrases, history_crossing
from specsteer.data.history import HistoryItem
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, prepare
from specsteer.method.events import LinkMessage, TokenEvent
from specsteer.models.tiny import tiny_pair, tiny_tokenizer
from testkit import force_drafts

HISTORY = ["Gregory works at InnovTech Solutions in Austin, Texas, as a senior HR manager. I am a reader of the news."]
TASK = "Write an article on balancing work and family life."


def ids(text: str) -> list[int]:
    return list(text.encode())  # the tiny tokenizer: one id per byte


def up(kind: str, **payload) -> LinkMessage:
    return LinkMessage("uplink", kind, payload, 0)


def verdict(accepted: int) -> LinkMessage:
    return LinkMessage("downlink", "verdict", {"accepted": accepted}, 0)


def accepted_events(round_: int, count: int) -> list[TokenEvent]:
    return [TokenEvent(0, "", "accepted", round_) for _ in range(count)]


def crossing_of(transcript, events, output="", history=HISTORY, task=TASK) -> HistoryCrossing:
    return crossed_phrases(history, [task], transcript, events, tiny_tokenizer(), output)


def texts(crossing: HistoryCrossing) -> list[str]:
    return [phrase.text for phrase in crossing.phrases]


# --------------------------------------------------------------------------- what a phrase is


def test_a_phrase_is_three_words_with_two_content_words_or_a_two_word_name():
    index = PhraseIndex.build(HISTORY, [TASK])
    text = "Yes, I am a reader of the news; I joined InnovTech Solutions as a senior HR manager."
    found = [text[start:end] for start, end in index.find(text)]
    # "I am a" and "reader of the" hold fewer than two content words; the name and the title are found,
    # overlapping matches merged into one phrase.
    assert found == ["InnovTech Solutions", "a senior HR manager"]
    assert index.find("innovtech solutions") == [(0, 19)]  # without case


def test_the_index_keeps_only_the_phrases_found_in_what_crossed():
    crossed = "We met at InnovTech Solutions."
    index = PhraseIndex.build(HISTORY, [TASK], within=[crossed])
    assert index.phrases == {("innovtech", "solutions"), ("at", "innovtech", "solutions")}
    assert index.find(crossed) == PhraseIndex.build(HISTORY, [TASK]).find(crossed)


def test_what_the_task_input_holds_is_not_a_phrase_of_the_history():
    task = "Write about your years at InnovTech Solutions as a senior HR manager."
    index = PhraseIndex.build(HISTORY, [task])
    text = "I left InnovTech Solutions in Austin, Texas last year."
    # The name alone is the task's; joined to Austin it is the history's.
    assert [text[start:end] for start, end in index.find(text)] == ["Solutions in Austin, Texas"]
    assert index.find("I worked at InnovTech Solutions as the senior HR manager.") == []


# --------------------------------------------------------------------------- the transcript replayed


def test_a_phrase_in_a_rejected_draft_is_counted_though_it_never_reached_the_output():
    transcript = [
        up("open", prompt=ids(TASK)),
        up("draft", append=[], draft=ids("At InnovTech Solutions")),
        verdict(3),  # "At " kept, the rest refused
        up("draft", append=ids("X"), draft=ids(" a senior HR manager")),
        verdict(20),
    ]
    events = accepted_events(1, 3) + accepted_events(2, 20)
    crossing = crossing_of(transcript, events, output="At X a senior HR manager")
    assert texts(crossing) == ["At InnovTech Solutions", "a senior HR manager"]
    rejected, accepted = crossing.phrases
    assert rejected.refused_only and rejected.output_spans == ()
    assert [(c.round, c.part) for c in rejected.crossings] == [(1, "rejected")]
    assert rejected.crossings[0].spans == (SentSpan(1, "draft", 0, 22),)
    assert [(c.round, c.part) for c in accepted.crossings] == [(2, "accepted")]
    assert accepted.output_spans == ((5, 24),)
    assert (crossing.count, crossing.occurrences, crossing.refused_only) == (2, 2, 1)
    assert "1 only in drafts the cloud rejected" in crossing.headline()


def test_a_phrase_split_across_rounds_and_tokens_is_one_phrase_with_a_span_in_each_message():
    transcript = [
        up("open", prompt=ids(TASK)),
        up("draft", append=[], draft=ids("I joined Innov")),
        verdict(14),
        up("draft", append=ids("T"), draft=ids("ech Solutions.")),
        verdict(14),
    ]
    crossing = crossing_of(transcript, accepted_events(1, 14) + accepted_events(2, 14), "I joined InnovTech Solutions.")
    (phrase,) = crossing.phrases
    assert phrase.text == "InnovTech Solutions"
    (where,) = phrase.crossings
    assert (where.round, where.part) == (2, "accepted")  # crossed when its last word arrived
    assert where.spans == (SentSpan(1, "draft", 9, 14), SentSpan(3, "append", 0, 1), SentSpan(3, "draft", 0, 13))


def test_refused_drafts_are_read_after_the_kept_text_and_a_chosen_token_counts():
    transcript = [
        up("open", prompt=ids(TASK)),
        up("draft", append=[], draft=ids("In Austin")),
        verdict(9),
        up("draft", append=ids(","), draft=ids(" Texas!")),  # the chosen "," and the refused " Texas"
        verdict(0),
        up("draft", append=ids(" Gregory"), draft=ids(" works at")),  # no verdict: the transcript ends
    ]
    crossing = crossing_of(transcript, accepted_events(1, 9), output="In Austin, Gregory")
    where = {phrase.text: [(c.round, c.part) for c in phrase.crossings] for phrase in crossing.phrases}
    assert where == {"In Austin, Texas": [(2, "rejected")], "Gregory works at": [(3, "unanswered")]}


def test_a_refused_draft_that_extends_a_kept_phrase_is_named_by_what_it_added():
    history = ["We are a leader in delivering ground-breaking tech services."]
    transcript = [
        up("open", prompt=ids(TASK)),
        up("draft", append=[], draft=ids("a leader in delivering ground-breaking")),
        verdict(22),  # " ground-breaking" refused
        up("draft", append=ids("."), draft=[]),
        verdict(0),
    ]
    crossing = crossing_of(transcript, accepted_events(1, 22), "a leader in delivering.", history=history)
    where = {phrase.text: [(c.round, c.part) for c in phrase.crossings] for phrase in crossing.phrases}
    # Not "leader in delivering ground-breaking" again: the refused draft added "ground-breaking" to it.
    assert where == {"leader in delivering": [(1, "accepted")], "in delivering ground-breaking": [(1, "rejected")]}


def test_the_prompt_sent_is_read_too_and_a_device_only_generation_crossed_nothing():
    private = f"History: {HISTORY[0]}\n{TASK}"
    crossing = crossing_of([up("open", prompt=ids(private))], [])
    assert crossing.private_prompt_sent and "InnovTech Solutions" in " ".join(texts(crossing))
    assert all(c.part == "prompt" for phrase in crossing.phrases for c in phrase.crossings)
    assert crossing_of([up("open", prompt=ids(TASK))], []).phrases == ()
    nothing = crossing_of([], [])
    assert not nothing.linked and not nothing.crossed and "device" in nothing.headline()


def test_a_word_whose_bytes_span_tokens_is_whole():
    history = ["Zoë Brontë wrote here."]
    transcript = [up("open", prompt=ids(TASK)), up("draft", append=[], draft=ids("Dear Zoë Brontë")), verdict(17)]
    crossing = crossing_of(transcript, accepted_events(1, 17), "Dear Zoë Brontë", history=history)
    assert texts(crossing) == ["Zoë Brontë"]
    assert crossing.phrases[0].crossings[0].spans == (SentSpan(1, "draft", 5, 17),)  # "Dear " is 5 bytes


def test_the_result_reads_back_from_its_json():
    transcript = [up("open", prompt=ids(TASK)), up("draft", append=[], draft=ids("At InnovTech Solutions")), verdict(0)]
    crossing = crossed_phrases(HISTORY, [TASK], transcript, [], tiny_tokenizer(), "", guard=3)
    assert HistoryCrossing.from_dict(crossing.to_dict()) == crossing
    stored = HistoryCrossing.from_dict(crossing.to_dict(spans=False))
    assert (stored.count, stored.refused_only, stored.guard) == (1, 1, 3)
    assert "guard was on (n = 3" in HistoryCrossing(guard=3).headline()
    copied = "people, providing a culture rich in collaboration, innovation, and wellness"
    long = HistoryCrossing((CrossedPhrase(copied, (Crossing(2, "accepted"),)),))
    assert "'people, providing a culture rich in collaboration, innovation …'" in long.headline()


# --------------------------------------------------------------------------- end to end: a canary in a draft

CANARY = "Zork Quill"  # two capitalised words: a name; 12 bytes with its spaces, so one round drafts it whole


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, generalist_seed=1)


@pytest.fixture
def drafts_canary(monkeypatch):
    force_drafts(monkeypatch, b" " + CANARY.encode() + b" ")  # a space before the token after them


def run(pair, alpha: float, task_input: str, guard: int = 0):
    history = [HistoryItem({"text": f"Signed, {CANARY}, in the garden."}), HistoryItem({"text": "Tomatoes need sun."})]
    prepared = prepare(Request(task="free", input_text=task_input, history=history, retrieval_k=2))
    assert CANARY in prepared.prompts.private
    config = DecodeConfig(method="specsteer", alpha=alpha, draft_len=16, max_new_tokens=40, private_guard=guard)
    tokens, finished = collect(generate(pair, prepared, config))
    crossing = history_crossing(finished, tokens, pair.tokenizer, history_texts(history), prepared.prompts.plain, guard)
    return tokens, finished, crossing


@pytest.mark.usefixtures("drafts_canary")
def test_a_canary_in_an_accepted_draft_is_named_where_it_crossed(pair):
    tokens, finished, crossing = run(pair, alpha=0.0, task_input="Write a note about the garden.")
    assert CANARY in finished.text  # alpha 0: every draft accepted
    (phrase,) = [phrase for phrase in crossing.phrases if phrase.text == CANARY]
    assert {c.part for c in phrase.crossings} == {"accepted"} and phrase.output_spans
    start, end = phrase.output_spans[0]
    assert finished.text[start:end] == CANARY
    assert CANARY in crossing.headline()


@pytest.mark.usefixtures("drafts_canary")
def test_a_canary_only_in_rejected_drafts_is_named_too(pair):
    tokens, finished, crossing = run(pair, alpha=float("inf"), task_input="Write a note about the garden.")
    assert CANARY not in finished.text  # alpha inf: every draft rejected
    (phrase,) = [phrase for phrase in crossing.phrases if phrase.text == CANARY]
    assert phrase.refused_only and phrase.output_spans == ()
    assert [(c.round, c.part) for c in phrase.crossings] == [(1, "rejected")]
    (span,) = phrase.crossings[0].spans
    assert finished.transcript[span.message].payload["draft"][span.start : span.end] == list(CANARY.encode())
    assert "only in drafts the cloud rejected" in crossing.headline()


@pytest.mark.usefixtures("drafts_canary")
def test_a_canary_the_task_input_names_is_not_reported(pair):
    tokens, finished, crossing = run(pair, alpha=0.0, task_input=f"Write a note to {CANARY} about the garden.")
    assert CANARY in finished.text
    assert not any("Quill" in phrase.text for phrase in crossing.phrases)


def marked(tokens, crossing: HistoryCrossing) -> str:
    """The characters of the token events that token_marks highlights, in order."""
    marks = crossing.token_marks(tokens)
    return "".join(tokens[index].text[start:end] for index, ranges in marks.items() for start, end in ranges)


@pytest.mark.usefixtures("drafts_canary")
def test_the_output_tokens_are_marked_where_an_accepted_canary_lies(pair):
    tokens, finished, crossing = run(pair, alpha=0.0, task_input="Write a note about the garden.")
    assert marked(tokens, crossing) == CANARY  # exactly the canary's characters, across its tokens
    marks = crossing.token_marks(tokens)
    assert all(tokens[index].emitted for index in marks)
    (span,) = next(phrase for phrase in crossing.phrases if phrase.text == CANARY).crossings[0].spans
    sent = crossing.sent_positions()[(span.message, span.field)]
    assert set(range(span.start, span.end)) <= sent


@pytest.mark.usefixtures("drafts_canary")
def test_the_refused_drafts_that_carried_a_canary_are_marked_whole(pair):
    tokens, finished, crossing = run(pair, alpha=float("inf"), task_input="Write a note about the garden.")
    marks = crossing.token_marks(tokens)
    assert marks and all(tokens[index].kind == "rejected" and tokens[index].round == 1 for index in marks)
    assert marked(tokens, crossing) == CANARY
    assert HistoryCrossing().token_marks(tokens) == {} and HistoryCrossing().sent_positions() == {}
