"""BM25 retrieval: relevance, determinism, edge cases, noise selection."""

from __future__ import annotations

import pytest

from specsteer.data.history import HistoryItem
from specsteer.data.retrieval import document_text, low_similarity_items, retrieve, retrieve_scored, tokenize


def plain(text: str) -> HistoryItem:
    return HistoryItem({"text": text})


NOTES = [
    plain("A walk along the coast path with the dog."),
    plain("Baking sourdough bread with a rye starter and high hydration dough."),
    plain("The office printer jammed again this morning."),
    plain("Notes on tomato seedlings and watering in the greenhouse."),
    plain("Meeting minutes: budget, hiring, office move."),
]


def test_tokenize_lowercases_words_and_drops_punctuation():
    assert tokenize("Hello, World! It's 2024.") == ["hello", "world", "it", "s", "2024"]


def test_obviously_relevant_item_ranks_first():
    ranked = retrieve("free", "my sourdough starter and the bread dough", NOTES, 3)
    assert ranked[0] is NOTES[1]
    assert len(ranked) == 3


def test_scores_are_descending_and_deterministic():
    first = retrieve_scored("free", "office printer budget", NOTES, 5)
    second = retrieve_scored("free", "office printer budget", NOTES, 5)
    assert first == second
    scores = [score for _, score in first]
    assert scores == sorted(scores, reverse=True)
    assert all(isinstance(score, float) for score in scores)


def test_ties_keep_original_order():
    items = [plain("apple pie"), plain("zebra crossing"), plain("apple pie"), plain("quiet night"), plain("red car")]
    ranked = retrieve("free", "apple", items, 5)
    assert ranked[0] is items[0] and ranked[1] is items[2]
    assert ranked[2:] == [items[1], items[3], items[4]]


@pytest.mark.parametrize("k", [0, -3])
def test_non_positive_k_gives_nothing(k):
    assert retrieve("free", "bread", NOTES, k) == []


def test_k_beyond_profile_gives_all_items_ranked():
    ranked = retrieve("free", "greenhouse tomato", NOTES, 50)
    assert len(ranked) == len(NOTES)
    assert ranked[0] is NOTES[3]
    assert set(map(id, ranked)) == set(map(id, NOTES))


@pytest.mark.parametrize("query", ["", "   ", "?!"])
def test_query_without_words_keeps_profile_order(query):
    assert retrieve("free", query, NOTES, 2) == NOTES[:2]
    assert [score for _, score in retrieve_scored("free", query, NOTES, 2)] == [0.0, 0.0]


def test_term_in_exactly_half_the_items_scores_zero_with_bm25okapi():
    # rank_bm25's idf log((N - n + 0.5) / (n + 0.5)) is 0 at n = N/2: a known quirk, kept.
    items = [plain("apple pie"), plain("zebra crossing"), plain("apple tart"), plain("quiet night")]
    assert [score for _, score in retrieve_scored("free", "apple", items, 4)] == [0.0] * 4
    assert retrieve("free", "apple", items, 4) == items


def test_empty_profile_and_wordless_items():
    assert retrieve("free", "bread", [], 3) == []
    wordless = [plain("..."), plain("!!")]
    assert retrieve("free", "bread", wordless, 3) == wordless


def test_review_task_uses_summary_review_and_description():
    reviews = [
        HistoryItem({"summary": "Nice", "reviewText": "Solid kettle, boils fast.", "overall": "headphones"}),
        HistoryItem({"summary": "Good sound", "reviewText": "Comfortable.", "description": "Wireless headphones"}),
        HistoryItem({"summary": "Meh", "reviewText": "Too small.", "description": "A cotton shirt"}),
    ]
    # "overall" is not indexed, so the rating field cannot attract a query.
    assert retrieve("review", "headphones", reviews, 1) == [reviews[1]]
    assert document_text("review", reviews[1]) == "Good sound\nComfortable.\nWireless headphones"


def test_writing_and_abstract_fields():
    post = HistoryItem({"author": "sam", "content": "Rye loaf", "id": "x", "summary": "Bread"})
    paper = HistoryItem({"abstract": "We propose X.", "id": "p1", "title": "On X", "year": "2020"})
    assert document_text("writing", post) == "Bread\nRye loaf"
    assert document_text("abstract", paper) == "On X\nWe propose X."


def test_items_without_the_task_fields_fall_back_to_all_fields():
    item = HistoryItem({"text": "sourdough diary"})
    assert document_text("review", item) == "sourdough diary"
    items = [HistoryItem({"text": "cats"}), item, HistoryItem({"text": "dogs"})]
    assert retrieve("review", "sourdough", items, 1) == [item]


def test_unknown_task_is_rejected():
    with pytest.raises(ValueError, match="unknown task 'poetry'"):
        retrieve("poetry", "x", NOTES, 1)
    with pytest.raises(ValueError, match="unknown task"):
        retrieve("poetry", "x", [], 1)


def test_low_similarity_items_are_the_least_related_first():
    noise = low_similarity_items("free", "sourdough bread starter dough", NOTES, 2)
    assert NOTES[1] not in noise
    assert len(noise) == 2
    assert noise == low_similarity_items("free", "sourdough bread starter dough", NOTES, 2)
    assert low_similarity_items("free", "bread", NOTES, 0) == []
    # All tie at zero similarity: pool order is kept.
    assert low_similarity_items("free", "zzz", NOTES, 3) == NOTES[:3]
    assert len(low_similarity_items("free", "bread", NOTES, 99)) == len(NOTES)
