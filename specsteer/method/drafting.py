"""Drafting: the Specialist proposes a round's tokens, one model step each, never completing a private span.

Shapes: ``V`` is the vocabulary both models share, ``k`` the draft length; a row is fp32 ``[V]``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

import torch

from specsteer.method.decoding import Sampler, Stream


class PrivateSpanGuard:
    """Keeps the Edge from sending a token that would copy a private span verbatim.

    A *private n-gram* is a run of ``n`` token ids found in the Specialist's private prompt (profile,
    history) and not in the plain prompt (the task and the chat template, which the Cloud gets
    anyway). :meth:`mask` gives a logits row in which every token that would complete a private
    n-gram after ``context`` (the stream's tokens so far) is impossible, so the Edge drafts and
    chooses around it: the copy is recovered locally and never crosses the link. It guards verbatim
    copies only; a paraphrase of a private fact passes.
    """

    def __init__(self, private_ids: Sequence[int], plain_ids: Sequence[int], n: int):
        if n < 2:
            raise ValueError("the private-span guard needs n >= 2 tokens")
        self.n = n
        public = set(_ngrams(plain_ids, n))
        self._next: dict[tuple[int, ...], set[int]] = {}
        for gram in _ngrams(private_ids, n):
            if gram not in public:
                self._next.setdefault(gram[:-1], set()).add(gram[-1])

    def blocked(self, context: Sequence[int]) -> set[int]:
        """The tokens that would complete a private n-gram after ``context``."""
        if len(context) < self.n - 1:
            return set()
        return self._next.get(tuple(context[len(context) - self.n + 1 :]), set())

    def mask(self, row: torch.Tensor, context: Sequence[int]) -> torch.Tensor:
        """``row`` with the blocked tokens at -inf (a copy; the row itself when nothing is blocked).
        A row whose every finite entry would be blocked is returned as it is: something must be chosen."""
        blocked = [token for token in self.blocked(context) if token < row.shape[-1]]
        if not blocked:
            return row
        masked = row.clone()
        masked[blocked] = -math.inf
        return masked if bool(torch.isfinite(masked).any()) else row


def _ngrams(ids: Sequence[int], n: int) -> Iterator[tuple[int, ...]]:
    return (tuple(ids[start : start + n]) for start in range(len(ids) - n + 1))


def draft(
    stream: Stream,
    k: int,
    sampler: Sampler,
    stop_ids: frozenset[int],
    min_confidence: float = 0.0,
    cancel: threading.Event | None = None,
    allowed: torch.Tensor | None = None,
    guard: PrivateSpanGuard | None = None,
) -> tuple[list[int], list[torch.Tensor]]:
    """The Specialist proposes up to ``k`` tokens; returns ids and the logits row each came from.

    Drafting stops early at an end token (nothing after it could be emitted) and,
    when ``min_confidence > 0``, after a token the Specialist itself gave less
    than that probability: the drafts after an unsure one are the likeliest to be
    refused, and each costs a device step whether or not it is kept.
    The last draft is appended to the stream but not fed (it is pending).
    ``allowed`` (``[V]`` bool) masks the ids that may be drafted, and the rows returned are masked:
    on a cross-tokenizer pair an id that spells no text cannot be told to the Generalist.
    A set ``cancel`` ends drafting before the next step, so that a stop waits for one step at most
    (a round of 16 drafts takes seconds on a CPU); the caller then sends nothing.
    ``guard``: each row is masked first, so no draft copies a private span (the masked row is returned).
    """
    ids: list[int] = []
    rows: list[torch.Tensor] = []
    for token, row in drafting(stream, k, sampler, stop_ids, min_confidence, cancel, allowed, guard):
        ids.append(token)
        rows.append(row)
    return ids, rows


def drafting(
    stream: Stream,
    k: int,
    sampler: Sampler,
    stop_ids: frozenset[int],
    min_confidence: float = 0.0,
    cancel: threading.Event | None = None,
    allowed: torch.Tensor | None = None,
    guard: PrivateSpanGuard | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """:func:`draft` one token at a time: each ``(id, row)`` as soon as it is drafted (a display shows it
    at once). Read it to the end: the stopping rules are :func:`draft`'s."""
    for _ in range(k):
        if cancel is not None and cancel.is_set():
            return
        row = stream.predict(1)[0]  # [V]
        if allowed is not None:
            row = row.masked_fill(~allowed, -math.inf)
        if guard is not None:
            row = guard.mask(row, stream.tokens)
        token = sampler.choose(row)
        stream.append([token])
        yield token, row
        if token in stop_ids or (min_confidence > 0 and _probability(row, token) < min_confidence):
            return


def _probability(row: torch.Tensor, token: int) -> float:
    """p(token) under softmax(row), at temperature 1 whatever the sampler's."""
    return math.exp(float(row[token] - torch.logsumexp(row, -1)))
