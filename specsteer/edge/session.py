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

from specsteer.edge.params import EdgeParams
from specsteer.method.crosstok import SYMBOLS, ByteVocabulary, allowed_ids, choose_symbol, complete_symbol
from specsteer.method.decoding import ForwardLog, Stream
from specsteer.method.drafting import drafting
from specsteer.method.steering import costeer_refine, recover
from specsteer.method.token_details import TokenDetails
from specsteer.method.token_numbers import probability, steered_choice, top_alternatives
from specsteer.method.verification import ratio_temperature, residual_test
from specsteer.protocol.rules import CoSteerCandidates, PayloadError, PublicRows, SteeredTopK
from specsteer.protocol.wire import DRAFT_HEADROOM, Verdict
from specsteer.runtimes.base import ModelRuntime


def specialist_stream(
    specialist: ModelRuntime,
    private_prompt: list[int],
    vocab_size: int,
    forward_log: ForwardLog,
    name: str,
    max_new_tokens: int,
) -> Stream:
    """The Specialist reading ``private_prompt``, its cache sized for ``max_new_tokens`` and the headroom past
    them (``wire.DRAFT_HEADROOM``: a round's drafts are read before the budget check ends the generation)."""
    return Stream(
        specialist, private_prompt, vocab_size, forward_log, name, len(private_prompt) + max_new_tokens + DRAFT_HEADROOM
    )


@dataclass
class Settlement:
    """What the Edge makes of a verdict: drafts kept, the token it chose (if any), ratios."""

    accepted: int
    chosen: int | None
    ratios: list[float]


class Edge:
    """The Specialist reading the private prompt. The only holder of the user's history.

    ``specialist`` reads ``private_prompt`` (ids below ``vocab_size``), its passes logged in ``forward_log``;
    ``params`` says how it drafts and settles verdicts.
    """

    def __init__(
        self,
        specialist: ModelRuntime,
        private_prompt: list[int],
        vocab_size: int,
        forward_log: ForwardLog,
        params: EdgeParams,
    ):
        self.params = params
        # Drafts and chosen tokens never complete a private n-gram (drafting.PrivateSpanGuard).
        self.guard = params.guard
        self.stream = specialist_stream(
            specialist, private_prompt, vocab_size, forward_log, params.stream_name, params.max_new_tokens
        )
        self.sampler = params.sampler()
        self.beta = params.beta
        self.allowed: torch.Tensor | None = None  # [V] bool: the ids that may be drafted (all when None)
        self._draft_rows: list[torch.Tensor] = []
        # With ``params.details``: the last chosen token's distribution (method.token_details), for display.
        self.last_choice: TokenDetails | None = None

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
            self.params.stop_ids,
            self.params.draft_confidence,
            cancel,
            allowed=self.allowed,
            guard=self.guard,
        ):
            self._draft_rows.append(row)
            yield token

    def draft_details(self, drafts: list[int]) -> list[TokenDetails]:
        """The Edge's numbers for this round's drafts: p_S+(y) and the Specialist's top alternatives, from the
        rows it drafted from (at the ratio test's temperature). Display only."""
        temperature = ratio_temperature(self.sampler)
        return [
            TokenDetails(p_private=probability(row, token, temperature), top_private=top_alternatives(row, temperature))
            for token, row in zip(drafts, self._draft_rows)
        ]

    def next_token(self) -> int:
        """Plain decoding on the device (the ``slm`` and ``slm+`` baselines)."""
        token = self.sampler.choose(self.stream.predict(1)[0])
        self.stream.append([token])
        return token

    def settle(self, verdict: Verdict, drafts: list[int], may_extend: bool) -> Settlement:
        """Apply the Cloud's verdict; choose the recovered or bonus token.

        ``may_extend`` is False when nothing may follow the accepted drafts (token
        budget spent, or the last draft ended the text), so no bonus is chosen. A verdict whose payload
        the session's rule does not read is a PayloadError (a ValueError).
        """
        payload = verdict.payload_for(self.params.rule)
        self.last_choice = None
        if isinstance(payload, PublicRows):
            return self._settle_exact(payload, drafts, may_extend)
        if isinstance(payload, CoSteerCandidates):
            return Settlement(0, self._costeer_token(payload), [])
        accepted = verdict.accepted
        refused = accepted < len(drafts)
        if payload is None:  # every draft kept and no bonus asked for
            if refused:
                raise PayloadError("the Cloud refused a draft but sent no steered logits to recover from")
            return Settlement(accepted, None, [])
        if not (refused or may_extend):
            return Settlement(accepted, None, [])
        private_row = self._rewind(accepted) if refused else self._private_row_after_drafts()
        if self.guard is not None and private_row is not None:
            # The drafts' rows are masked already; a bonus row is masked here (the stream ends at the drafts).
            private_row = self.guard.mask(private_row, self.stream.tokens)
        chosen = self._choose(payload, private_row)
        if self.params.details:
            self.last_choice = self._choice_details(payload, private_row, chosen)
        self.stream.append([chosen])
        return Settlement(accepted, chosen, [])

    def _choose(self, steered: SteeredTopK, private_row: torch.Tensor | None) -> int:
        """The recovered or bonus token from the Cloud's share of the steered logits and the private row."""
        return recover(torch.tensor(steered.ids), _tensor(steered.values), private_row, self.beta, self.sampler)

    def _choice_details(self, steered: SteeredTopK, private_row: torch.Tensor | None, chosen: int) -> TokenDetails:
        """The steered distribution a recovered or bonus token was drawn from: the downlink's candidates with
        z_L - β·z_S0, plus β·z_S+ added here (:func:`recover`'s logits), at the ratio test's temperature."""
        ids = torch.tensor(steered.ids)
        values = _tensor(steered.values)
        if self.beta and private_row is not None:
            values = values + self.beta * private_row[ids]
            source = f"steered logits z_L + β·(z_S+ − z_S0), β = {self.beta:g}, on the cloud's {len(ids)} candidates"
        else:
            source = f"the generalist's logits z_L on its {len(ids)} candidates (β = 0)"
        p_chosen, top = steered_choice(ids, values, chosen, ratio_temperature(self.sampler))
        return TokenDetails(drawn_from=source, p_drawn=p_chosen, top_drawn=top)

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

    def _settle_exact(self, rows: PublicRows, drafts: list[int], may_extend: bool) -> Settlement:
        public = _tensor(rows.values).view(len(drafts) + 1, -1)  # [k+1, V]
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

    def _costeer_token(self, candidates: CoSteerCandidates) -> int:
        ids = torch.tensor(candidates.ids)
        log_private = torch.log_softmax(self.stream.predict(1)[0], -1)[ids]
        costeer = self.params.costeer
        refined = costeer_refine(
            _tensor(candidates.log_large),
            _tensor(candidates.log_generic),
            log_private,
            costeer.iterations,
            costeer.step,
            costeer.regularization,
        )
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

    def __init__(
        self,
        specialist: ModelRuntime,
        private_prompt: list[int],
        vocab_size: int,
        forward_log: ForwardLog,
        params: EdgeParams,
        vocabulary: ByteVocabulary,
    ):
        super().__init__(specialist, private_prompt, vocab_size, forward_log, params)
        self.vocabulary = vocabulary
        self.allowed = allowed_ids(vocabulary)[: self.stream.vocab_size]

    def _choose(self, steered: SteeredTopK, private_row: torch.Tensor | None) -> int:
        if any(s >= SYMBOLS for s in steered.ids):
            raise ValueError("the Cloud's verdict does not name symbols of the common byte space")
        if private_row is None:  # never: a cross pair reads its bonus row whatever beta (below)
            raise ValueError("a cross-tokenizer Edge completes a symbol from its own logits row")
        symbol = choose_symbol(
            torch.tensor(steered.ids),
            _tensor(steered.values),
            private_row,
            self.vocabulary,
            self.beta,
            self.sampler.choose,
        )
        return complete_symbol(symbol, private_row, self.vocabulary, self.sampler.choose)

    def _choice_details(self, steered: SteeredTopK, private_row: torch.Tensor | None, chosen: int) -> TokenDetails:
        return TokenDetails(drawn_from="a symbol of the common byte space, completed on the device (no per-id numbers)")

    def _private_row_after_drafts(self) -> torch.Tensor:
        """The Specialist's logits after the last draft: a bonus symbol is completed from them whatever beta."""
        return self.stream.predict(1)[0].masked_fill(~self.allowed, -math.inf)
