"""BM25 retrieval over a user's profile items (the paper's retrieval setting).

Each item becomes one BM25 document made of the task's content fields (below);
an item that has none of them (say, plain texts used for the review task)
falls back to all of its fields, so any history works with any task.
Tokens are lower-cased runs of word characters. Ranking is by descending
score with ties broken by the items' original order, so results are
deterministic.

A quirk of rank_bm25's BM25Okapi, kept as the paper's retrieval: the idf
log((N - n + 0.5) / (n + 0.5)) is 0 for a term found in exactly half of the N
items (so with two items every score is 0 and the original order is kept),
while terms in more than half get a small floor value (0.25 x the mean idf).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rank_bm25 import BM25Okapi

from specsteer.data.history import HistoryItem

RETRIEVAL_FIELDS: dict[str, tuple[str, ...]] = {
    "review": ("summary", "reviewText", "description"),
    "abstract": ("title", "abstract"),
    "writing": ("summary", "content"),
    "free": ("text",),
    "cogenesis": ("title", "text"),
    "lamp4": ("title", "text"),
    "lamp5": ("title", "abstract"),
    "lamp7": ("text",),
}

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def retrieve(task: str, query: str, items: Sequence[HistoryItem], k: int) -> list[HistoryItem]:
    """The k items most relevant to ``query`` by BM25, best first."""
    return [item for item, _ in retrieve_scored(task, query, items, k)]


def retrieve_scored(task: str, query: str, items: Sequence[HistoryItem], k: int) -> list[tuple[HistoryItem, float]]:
    """Like :func:`retrieve`, with each item's BM25 score.

    ``k <= 0`` gives nothing; ``k`` beyond the profile gives every item,
    ranked. A query without words keeps the profile's order (scores 0).
    """
    if k <= 0:
        return []
    scores = _scores(task, query, items)
    order = sorted(range(len(items)), key=lambda index: (-scores[index], index))
    return [(items[index], scores[index]) for index in order[:k]]


def low_similarity_items(task: str, query: str, items: Sequence[HistoryItem], n: int) -> list[HistoryItem]:
    """The n items least related to ``query`` (lowest BM25 first).

    Used by the robustness study to draw noise from another user's pool. Ties
    keep the pool's order.
    """
    if n <= 0:
        return []
    scores = _scores(task, query, items)
    order = sorted(range(len(items)), key=lambda index: (scores[index], index))
    return [items[index] for index in order[:n]]


def document_text(task: str, item: HistoryItem) -> str:
    """The text BM25 indexes for ``item`` under ``task``."""
    fields = [item.fields[key] for key in _task_fields(task) if key in item.fields]
    return "\n".join(fields or item.fields.values())


def _task_fields(task: str) -> tuple[str, ...]:
    try:
        return RETRIEVAL_FIELDS[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(RETRIEVAL_FIELDS)}") from None


def _scores(task: str, query: str, items: Sequence[HistoryItem]) -> list[float]:
    _task_fields(task)  # reject an unknown task even when the profile is empty
    corpus = [tokenize(document_text(task, item)) for item in items]
    query_tokens = tokenize(query)
    # BM25Okapi divides by the mean document length, so a corpus without any
    # words (or no corpus) cannot be scored; nothing would be ranked anyway.
    if not query_tokens or not any(corpus):
        return [0.0] * len(items)
    return [float(score) for score in BM25Okapi(corpus).get_scores(query_tokens)]
