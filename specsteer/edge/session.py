"""The Edge's side of the protocol: the Specialist reading the private prompt, the only holder of the history.

An :class:`Edge` drafts tokens, and settles each :class:`~specsteer.protocol.wire.Verdict` the Cloud sends
back: it keeps the accepted drafts and chooses the recovered or bonus token from the Cloud's share
of the steered logits and its own private row (DESIGN §2). :class:`CrossEdge` does the same for a
cross-tokenizer pair, choosing a Specialist id from the Cloud's byte-level symbols
(``specsteer.method.crosstok``). The engine (``specsteer.engine.generate``) drives an Edge; what it sends and
receives crosses the link as the messages of ``specsteer.protocol.wire``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from specsteer.method.decoding import (
    ForwardLog,
    PrivateSpanGuard,
    Sampler,
    Stream,
    costeer_refine,
    drafting,
    recover,
    residual_test,
)
from specsteer.method.events import EDGE_STREAM
from specsteer.protocol.wire import DRAFT_HEADROOM, Verdict


@dataclass
class Settlement:
    """What the Edge makes of a verdict: drafts kept, the token it chose (if any), ratios."""

    accepted: int
    chosen: int | None
    ratios: list[float]


class Edge:
    """The Specialist reading the private prompt. The only holder of the user's history."""

    def __init__(
        self,
        specialist,
        private_prompt: list[int],
        vocab_size: int,
        forward_log: ForwardLog,
        sampler: Sampler,
        stop_ids: frozenset[int],
        rule: str,
        beta: float,
        costeer: tuple[int, float, float] = (20, 10.0, 2.0),
        stream_name: str = EDGE_STREAM,
        draft_confidence: float = 0.0,
        max_new_tokens: int = 1024,
        guard: PrivateSpanGuard | None = None,
    ):
        self.costeer = costeer  # iterations, step, regularization
        self.guard = guard  # drafts and chosen tokens never complete a private n-gram (decoding.PrivateSpanGuard)
        self.draft_confidence = draft_confidence
        self.stream = Stream(
            specialist,
            private_prompt,
            vocab_size,
            forward_log,
            stream_name,
            len(private_prompt) + max_new_tokens + DRAFT_HEADROOM,
        )
        self.sampler = sampler
        self.stop_ids = stop_ids
        self.rule = rule
        self.beta = beta
        self.allowed: torch.Tensor | None = None  # [V] bool: the ids that may be drafted (all when None)
        self._draft_rows: list[torch.Tensor] = []

    def close(self) -> None:
        self.stream.close()

    def draft(self, k: int, cancel: threading.Event | None = None) -> list[int]:
        """Up to ``k`` drafts; fewer when ``cancel`` is set meanwhile (the caller must not send them then)."""
        return list(self.drafts(k, cancel))

    def drafts(self, k: int, cancel: threading.Event | None = None) -> Iterator[int]:
        """:meth:`draft` one id at a time, each as soon as it is drafted (read it to the end before settling)."""
        self._draft_rows = []
        for token, row in drafting(
            self.stream,
            k,
            self.sampler,
            self.stop_ids,
            self.draft_confidence,
            cancel,
            allowed=self.allowed,
            guard=self.guard,
        ):
            self._draft_rows.append(row)
            yield token

    def next_token(self) -> int:
        """Plain decoding on the device (the ``slm`` and ``slm+`` baselines)."""
        token = self.sampler.choose(self.stream.predict(1)[0])
        self.stream.append([token])
        return token

    def settle(self, verdict: Verdict, drafts: list[int], may_extend: bool) -> Settlement:
        """Apply the Cloud's verdict; choose the recovered or bonus token.

        ``may_extend`` is False when nothing may follow the accepted drafts (token
        budget spent, or the last draft ended the text), so no bonus is chosen.
        """
        if self.rule == "exact":
            return self._settle_exact(verdict, drafts, may_extend)
        if self.rule == "costeer":
            return Settlement(0, self._costeer_token(verdict), [])
        accepted = verdict.accepted
        private_row: torch.Tensor | None
        if accepted < len(drafts):
            private_row = self._rewind(accepted)
        elif verdict.ids and may_extend:
            private_row = self._private_row_after_drafts()
        else:
            return Settlement(accepted, None, [])
        if self.guard is not None and private_row is not None:
            # The drafts' rows are masked already; a bonus row is masked here (the stream ends at the drafts).
            private_row = self.guard.mask(private_row, self.stream.tokens)
        chosen = self._choose(verdict, private_row)
        self.stream.append([chosen])
        return Settlement(accepted, chosen, [])

    def _choose(self, verdict: Verdict, private_row: torch.Tensor | None) -> int:
        """The recovered or bonus token from the Cloud's share of the steered logits and the private row."""
        return recover(torch.tensor(verdict.ids), _tensor(verdict.values), private_row, self.beta, self.sampler)

    def _private_row_after_drafts(self) -> torch.Tensor | None:
        """The Specialist's logits after the last draft, for a bonus token.

        With beta = 0 (standard SD) the bonus comes from the Cloud's logits alone, so
        the last draft stays pending and is fed together with the bonus token in the
        next round's first pass (two tokens cost about one step).
        """
        return self.stream.predict(1)[0] if self.beta else None

    def _rewind(self, accepted: int) -> torch.Tensor:
        """Drop the drafts after the accepted ones; return the private logits at the rejected position."""
        rejected_at = len(self.stream) - len(self._draft_rows) + accepted
        private_row = self._draft_rows[accepted]
        self.stream.truncate(rejected_at, private_row)
        return private_row

    def _settle_exact(self, verdict: Verdict, drafts: list[int], may_extend: bool) -> Settlement:
        public = _tensor(verdict.values).view(len(drafts) + 1, -1)  # [k+1, V]
        k = len(drafts)
        targets = public[:k] + self.beta * torch.stack(self._draft_rows) if k else public[:0]
        accepted, replacement, ratios = residual_test(targets, self._draft_rows, drafts, self.sampler)
        if replacement is not None:  # a draft was rejected (accepted < k): its replacement is chosen
            self._rewind(accepted)
            chosen = replacement
        elif may_extend:
            private_row = self._private_row_after_drafts()  # None when beta is 0
            chosen = self.sampler.choose(public[k] if private_row is None else public[k] + self.beta * private_row)
        else:
            return Settlement(accepted, None, ratios)
        self.stream.append([chosen])
        return Settlement(accepted, chosen, ratios)

    def _costeer_token(self, verdict: Verdict) -> int:
        ids = torch.tensor(verdict.ids)
        log_private = torch.log_softmax(self.stream.predict(1)[0], -1)[ids]
        refined = costeer_refine(_tensor(verdict.values), _tensor(verdict.extra), log_private, *self.costeer)
        chosen = int(ids[self.sampler.choose(refined)])
        self.stream.append([chosen])
        return chosen


def _tensor(values: np.ndarray) -> torch.Tensor:
    """A float tensor of a message's (read-only) array; torch needs memory it may write."""
    return torch.from_numpy(np.array(values, dtype=np.float32))


# --------------------------------------------------------------------------- cross-tokenizer pairs (specsteer.method.crosstok)


class CrossEdge(Edge):
    """The Edge of a cross-tokenizer pair: it drafts only ids the Generalist can be told about, and
    turns the Cloud's symbol values into a Specialist id (``crosstok.choose_symbol``)."""

    allowed: torch.Tensor  # never None here: the ids whose text the Generalist can read

    def __init__(self, *args, vocabulary, **kwargs):
        from specsteer.method.crosstok import allowed_ids

        super().__init__(*args, **kwargs)
        self.vocabulary = vocabulary
        self.allowed = allowed_ids(vocabulary)[: self.stream.vocab_size]

    def _choose(self, verdict: Verdict, private_row: torch.Tensor | None) -> int:
        from specsteer.method.crosstok import SYMBOLS, choose_symbol, complete_symbol

        if any(s >= SYMBOLS for s in verdict.ids) or len(verdict.ids) != verdict.values.size:
            raise ValueError("the Cloud's verdict does not name symbols of the common byte space")
        if private_row is None:  # never: a cross pair reads its bonus row whatever beta (below)
            raise ValueError("a cross-tokenizer Edge completes a symbol from its own logits row")
        symbol = choose_symbol(
            torch.tensor(verdict.ids),
            _tensor(verdict.values),
            private_row,
            self.vocabulary,
            self.beta,
            self.sampler.choose,
        )
        return complete_symbol(symbol, private_row, self.vocabulary, self.sampler.choose)

    def _private_row_after_drafts(self) -> torch.Tensor:
        """The Specialist's logits after the last draft: a bonus symbol is completed from them whatever beta."""
        return self.stream.predict(1)[0].masked_fill(~self.allowed, -math.inf)
