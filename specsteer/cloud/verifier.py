"""The Cloud's side of the protocol: the Generalist and a generic Specialist copy serving one session.

A :class:`Cloud` answers the Edge's messages (``specsteer.protocol.wire``): ``open`` starts a session's
streams from an :class:`~specsteer.protocol.wire.Open`, ``verify`` answers each
:class:`~specsteer.protocol.wire.Draft` with a :class:`~specsteer.protocol.wire.Verdict` (the ratio test, DESIGN §2),
``next_tokens`` decodes alone for the ``llm`` baseline. :class:`CrossCloud` does the same for a
cross-tokenizer pair (``specsteer.method.crosstok``). Neither ever sees the user's history; the Cloud
service (``specsteer.cloud.service``) holds one per session.
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch

from specsteer.method.acceptance import (
    RATIO_TEST,
    AcceptancePolicy,
    DivergenceAdaptive,
    RoundDecider,
    RoundScores,
    cda_log_thresholds,
    jensen_shannon,
)
from specsteer.method.decoding import ForwardLog, Sampler, Stream
from specsteer.method.drafting import draft
from specsteer.method.events import GENERALIST_STREAM, GENERIC_STREAM
from specsteer.method.steering import steering_entries
from specsteer.method.token_details import CloudScores
from specsteer.method.token_numbers import cloud_scores
from specsteer.method.verification import match_test, of_drafts, ratio_temperature, tested_log_probs
from specsteer.protocol.rules import RULE_SPECS, CoSteerCandidates, PublicRows, Rule, SteeredTopK, cda_problem
from specsteer.protocol.wire import DRAFT_HEADROOM, MAX_DRAFT_LEN, CrossOpen, Draft, Open, Tokens, Verdict


def finite_settings_problem(message: Open) -> str | None:
    """Why an Open's numbers cannot drive a generation, or None (decoding accepts any bit pattern)."""
    if not message.alpha >= 0:  # also NaN
        return "alpha must be >= 0"
    if not (math.isfinite(message.beta) and message.beta >= 0):
        return "beta must be a finite number >= 0"
    if not (math.isfinite(message.temperature) and message.temperature >= 0):
        return "temperature must be a finite number >= 0"
    if not 0 < message.top_p <= 1:
        return "top_p must be in (0, 1]"
    if message.top_k < 0:
        return "top_k must be >= 0"
    if RULE_SPECS[message.rule].cloud_drafts and not 1 <= message.top_k <= MAX_DRAFT_LEN:
        return f"the Cloud's draft length (top_k) must be between 1 and {MAX_DRAFT_LEN}"
    return cda_problem(message.cda_lambda)


def acceptance_problem(message: Open) -> str | None:
    """Why the acceptance rule ``message`` names cannot apply to its rule, or None. CDA adapts the ratio test's
    α (the ``ratio`` rule); the other rules have no α, the exact-target one the true partition function."""
    if message.cda_lambda is not None and message.rule is not Rule.RATIO:
        return (
            f"CDA adapts the ratio test's α: the {message.rule.value!r} rule has none to adapt "
            "(open the session with the fixed α)"
        )  # a sentence without its full stop
    return None


class _CloudStreams:
    """What every Cloud session has: the Generalist's stream, perhaps the generic copy's, and a sampler."""

    def __init__(self, generalist, generic_specialist, forward_log: ForwardLog):
        self._generalist = generalist
        self._generic = generic_specialist
        self._forward_log = forward_log
        self.large: Stream | None = None
        self.generic: Stream | None = None
        self.capacity = 0  # tokens the session's generic stream may hold
        self._sampler = Sampler()
        self.last_ratios: list[float] = []  # instrumentation for display; never sent as a message
        # Each draft's numbers (method.token_details), computed only when ``details`` is set; display only.
        self.details = False
        self.last_scores: list[CloudScores] = []

    @staticmethod
    def _session_sampler(message: Open) -> Sampler:
        if message.streams:
            # The llm baseline samples with the Edge's own seed, as a Generalist alone would.
            return Sampler.make(message.temperature > 0, message.temperature, message.top_p, message.seed)
        if message.temperature > 0:
            return Sampler.make(True, message.temperature, message.top_p, message.seed + 1)
        return Sampler()

    def close(self) -> None:
        """Give the streams' caches back for reuse by a later request with the same prompt."""
        for stream in (self.large, self.generic):
            if stream is not None:
                stream.close()

    def read_ahead(self) -> None:
        """Read the session's prompts now (all but their last token), before the first Draft comes."""
        for stream in (self.large, self.generic):
            if stream is not None:
                stream.read_ahead()

    def next_tokens(self, count: int = 1) -> Tokens:
        """The ``generate`` rule (the ``llm`` baseline): the Generalist decodes alone, in its own ids."""
        large = self._generalist_stream()
        ids = []
        for _ in range(count):
            token = self._sampler.choose(large.predict(1)[0])
            large.append([token])
            ids.append(token)
        return Tokens(tuple(ids))

    def _generalist_stream(self) -> Stream:
        """The Generalist's stream, which ``open`` started."""
        if self.large is None:
            raise RuntimeError("the Cloud session has not been opened")
        return self.large

    def _drafting_streams(self) -> tuple[Stream, Stream]:
        """The Generalist's and the generic copy's streams of a session whose rule runs both."""
        if self.large is None or self.generic is None:
            raise RuntimeError("this Cloud session does not run the generic Specialist")
        return self.large, self.generic


_Opened = TypeVar("_Opened")


def _opened(settings: _Opened | None) -> _Opened:
    """What a session's Open set up (the Open itself, its decider), which every request after it reads."""
    if settings is None:
        raise RuntimeError("the Cloud session has not been opened")
    return settings


def _needed(generic_rows: torch.Tensor | None, rule: Rule) -> torch.Tensor:
    """The generic copy's rows, which ``rule`` always reads (``RuleSpec.needs_generic`` opened its stream)."""
    if generic_rows is None:
        raise RuntimeError(f"the {rule} rule reads the generic Specialist, but this session does not run it")
    return generic_rows


class Cloud(_CloudStreams):
    """The Generalist and the generic Specialist copy serving one session. Knows nothing of the user's history.

    ``open`` starts the session's streams, ``verify`` answers a Draft with a Verdict, ``next_tokens``
    decodes alone (the ``generate`` rule). ``problem`` says why a Draft cannot be applied, before
    anything is changed, so that a faulty Edge gets an error and the session stays usable.
    """

    def __init__(
        self,
        generalist,
        generic_specialist,
        vocab_size: int,
        forward_log: ForwardLog,
        acceptance: AcceptancePolicy = RATIO_TEST,
    ):
        super().__init__(generalist, generic_specialist, forward_log)
        self._vocab_size = vocab_size
        self._settings: Open | None = None
        self._acceptance = acceptance  # who decides the ratio rule's rounds (specsteer.method.acceptance)
        self._decider: RoundDecider | None = None
        self._cda_lambda: float | None = None  # the session's CDA λ, for the drafts' details (None: fixed α)
        self._rows: tuple[torch.Tensor, torch.Tensor | None] | None = None  # last verify rows, exact mode
        # P³: the last round's Cloud drafts and the Generalist's row before each ([m, V]), to take them back
        self._drafted: tuple[list[int], list[torch.Tensor]] = ([], [])

    def open(self, message: Open) -> None:
        self._settings = message
        self.capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        self.large = Stream(
            self._generalist,
            list(message.prompt),
            self._vocab_size,
            self._forward_log,
            GENERALIST_STREAM,
            self.capacity,
        )
        if RULE_SPECS[message.rule].needs_generic(message.beta):
            self.generic = Stream(
                self._generic, list(message.prompt), self._vocab_size, self._forward_log, GENERIC_STREAM, self.capacity
            )
        self._sampler = self._session_sampler(message)
        # The session's own acceptance rule when its Open names one (CDA), the service's otherwise.
        policy = self._acceptance if message.cda_lambda is None else DivergenceAdaptive(message.cda_lambda)
        self._decider = policy.start(message.seed)
        self._cda_lambda = message.cda_lambda

    def problem(self, message: Draft) -> str | None:
        """Why ``message`` cannot be applied to this session, or None."""
        settings = self._settings
        if settings is None or settings.streams:
            return "this session does not take drafts"
        if message.keep != -1 and not RULE_SPECS[settings.rule].reports_kept:
            return "only exact mode reports kept drafts"
        if RULE_SPECS[settings.rule].cloud_drafts:
            return self._cloud_draft_problem(message, settings)
        drafted = self._rows[0].shape[0] - 1 if self._rows is not None else 0
        if not -1 <= message.keep <= drafted:
            return f"keep must be between -1 and {drafted}"
        dropped = drafted - message.keep if message.keep >= 0 else 0
        if len(self._generalist_stream()) - dropped + len(message.append) + len(message.draft) > self.capacity:
            return "the drafts run past the token budget the session was opened with"
        return None

    def verify(self, message: Draft) -> Verdict | Tokens:
        """One round: score the drafts with both Cloud models in one pass each, then decide. Under P³'s
        rule (``cloud-draft``) the Cloud drafts instead, and answers with its drafts as Tokens."""
        settings = _opened(self._settings)
        spec = RULE_SPECS[settings.rule]
        if spec.cloud_drafts:
            return self._cloud_drafts(message, settings)
        if spec.reports_kept:
            self._keep(message.keep)
        large = self._generalist_stream()
        streams = [s for s in (large, self.generic) if s is not None]
        for stream in streams:
            stream.append(list(message.append + message.draft))
        drafts = list(message.draft)
        k = len(drafts)
        large_rows = large.predict(k + 1)  # [k+1, V]
        generic_rows = self.generic.predict(k + 1) if self.generic else None

        if spec.tests_drafts == "edge":
            return self._send_rows(large_rows, generic_rows)

        self.last_ratios = []
        self.last_scores = []
        if settings.rule is Rule.RATIO:
            scores = RoundScores(
                large_rows, _needed(generic_rows, settings.rule), drafts, settings.alpha, self._sampler
            )
            accepted, self.last_ratios = _opened(self._decider).decide(scores)
            self.last_scores = self._scores(scores) if self.details else []
        else:
            accepted = match_test(large_rows, drafts)
        self._rewind(accepted, k, large_rows, generic_rows)
        if accepted == k and not settings.bonus:
            return Verdict(accepted)
        generic_row = generic_rows[accepted] if generic_rows is not None else None
        beta = settings.beta if generic_row is not None else 0.0
        ids, values = steering_entries(large_rows[accepted], generic_row, beta, settings.top_k)
        return Verdict.carrying(accepted, SteeredTopK(tuple(ids.tolist()), values.numpy()))

    def _scores(self, scores: RoundScores) -> list[CloudScores]:
        """The drafts' numbers, from the same log-probabilities the ratio test compares (display only); under
        CDA each draft's own α, α·exp(−λ·JSD), as the test computed it."""
        temperature = ratio_temperature(scores.sampler)
        drafts = list(scores.drafts)
        k = len(drafts)
        # The rows' log-distributions once: the drafts' probabilities and, under CDA, the divergence both read them.
        log_large_rows = tested_log_probs(scores.large_rows[:k], scores.sampler)
        log_generic_rows = tested_log_probs(scores.generic_rows[:k], scores.sampler)
        log_large, log_generic = of_drafts(log_large_rows, drafts), of_drafts(log_generic_rows, drafts)
        alphas = None
        if self._cda_lambda is not None and k:
            divergence = jensen_shannon(log_large_rows, log_generic_rows)
            alphas = cda_log_thresholds(scores.alpha, divergence, self._cda_lambda).exp().tolist()
        return cloud_scores(
            log_large, log_generic, scores.large_rows[:k] / temperature, scores.generic_rows[:k] / temperature, alphas
        )

    def _cloud_draft_problem(self, message: Draft, settings: Open) -> str | None:
        """P³: a Draft carries no drafts, only the tokens the Edge kept or chose, and must leave room for ``k``."""
        if message.draft:
            return "under the cloud-draft rule the Cloud drafts: the Edge sends only the tokens it kept or chose"
        before = len(self._generalist_stream()) - len(self._drafted[0])
        if before + len(message.append) + settings.top_k > self.capacity:
            return "the tokens run past the token budget the session was opened with"
        return None

    def _cloud_drafts(self, message: Draft, settings: Open) -> Tokens:
        """P³ (specsteer.method.p3): take the last round's drafts back after the ones the Edge kept (the first
        ids of ``append`` that equal them), read the rest of ``append`` (its correction), then draft
        ``top_k`` tokens from the Generalist (fewer at an end id)."""
        large = self._generalist_stream()
        drafted, rows = self._drafted
        kept = 0
        while kept < min(len(drafted), len(message.append)) and message.append[kept] == drafted[kept]:
            kept += 1
        if kept < len(drafted):
            large.truncate(len(large) - (len(drafted) - kept), rows[kept])
        large.append(list(message.append[kept:]))
        ids, new_rows = draft(large, settings.top_k, self._sampler, frozenset(settings.stop_ids))
        self._drafted = (ids, new_rows)
        return Tokens(tuple(ids))

    def _send_rows(self, large_rows: torch.Tensor, generic_rows: torch.Tensor | None) -> Verdict:
        """Exact and CoSteer modes: the Edge decides, so it needs the Cloud's rows (no truncation for exact)."""
        self._rows = (large_rows, generic_rows)
        settings = _opened(self._settings)
        if settings.rule is Rule.COSTEER:
            # Candidates: the Generalist's top-k; both Cloud log-probs on them.
            log_large = torch.log_softmax(large_rows[-1], -1)
            log_generic = torch.log_softmax(_needed(generic_rows, settings.rule)[-1], -1)
            ids, values = steering_entries(log_large, None, 0.0, settings.top_k)  # log p_L on its top-k
            return Verdict.carrying(0, CoSteerCandidates(tuple(ids.tolist()), values.numpy(), log_generic[ids].numpy()))
        public = large_rows - settings.beta * generic_rows if generic_rows is not None else large_rows
        return Verdict.carrying(0, PublicRows(public.reshape(-1).numpy()))

    def _keep(self, kept: int) -> None:
        """Exact mode: the Edge reports how many of the last round's drafts it kept."""
        if kept >= 0 and self._rows is not None:
            large_rows, generic_rows = self._rows
            self._rewind(kept, large_rows.shape[0] - 1, large_rows, generic_rows)
        self._rows = None

    def _rewind(self, kept: int, drafted: int, large_rows: torch.Tensor, generic_rows: torch.Tensor | None) -> None:
        """Forget the drafts after the first ``kept`` of ``drafted``; their rows replace the cut cache's logits."""
        if kept >= drafted:
            return
        large = self._generalist_stream()
        length = len(large) - (drafted - kept)
        large.truncate(length, large_rows[kept])
        if self.generic is not None and generic_rows is not None:
            self.generic.truncate(length, generic_rows[kept])


# --------------------------------------------------------------------------- cross-tokenizer pairs (specsteer.method.crosstok)


# Generalist tokens a session may hold per Specialist token of its budget. Two BPE vocabularies cut
# one text into about as many tokens, and a recovered byte is one token on each side, so 4 leaves
# wide room; a text that needs more is refused (the runtimes size their caches from this).
LARGE_TOKENS_PER_SMALL = 4


class CrossCloud(_CloudStreams):
    """The Cloud of a cross-tokenizer pair: the Generalist reads its own tokenization of the text, the
    generic Specialist copy reads the Specialist ids the Edge sent. Same requests as :class:`Cloud`.

    Per round it re-encodes the drafted text for the Generalist, scores the draft with one pass of
    each model, tests the aligned segments (``crosstok.segment_test``) and, where a symbol must be
    chosen, sends ``M_L - beta M_S0`` on the likeliest symbols. ``vocabularies`` are the pair's.
    """

    def __init__(
        self,
        generalist,
        generic_specialist,
        small_vocab_size: int,
        large_vocab_size: int,
        vocabularies,
        forward_log: ForwardLog,
    ):
        super().__init__(generalist, generic_specialist, forward_log)
        self._small_vocab_size = small_vocab_size
        self._large_vocab_size = large_vocab_size
        self._vocabularies = vocabularies
        self._settings: CrossOpen | None = None
        self.large_capacity = 0  # Generalist ids the session may hold

    def open(self, message: CrossOpen) -> None:
        from specsteer.method.crosstok import allowed_ids

        self._settings = message
        self._allowed = allowed_ids(self._vocabularies.small)
        self.capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        self.large_capacity = len(message.large_prompt) + LARGE_TOKENS_PER_SMALL * (
            message.max_new_tokens + DRAFT_HEADROOM
        )
        self.large = Stream(
            self._generalist,
            list(message.large_prompt),
            self._large_vocab_size,
            self._forward_log,
            GENERALIST_STREAM,
            self.large_capacity,
        )
        self._sampler = self._session_sampler(message)
        if not message.streams:
            self.generic = Stream(
                self._generic,
                list(message.prompt),
                self._small_vocab_size,
                self._forward_log,
                GENERIC_STREAM,
                self.capacity,
            )

    def problem(self, message: Draft) -> str | None:
        settings = self._settings
        if settings is None or settings.streams:
            return "this session does not take drafts"
        if message.keep != -1:
            return "only exact mode reports kept drafts, and a cross-tokenizer pair has no exact mode"
        small = self._vocabularies.small
        for ids, what in ((message.append, "chosen token"), (message.draft, "draft")):
            if any(not bool(self._allowed[i]) for i in ids):
                return f"a {what} spells no text the Generalist could read"
            if any(i in small.stop_ids for i in ids[:-1]):
                return f"an end id is followed by more {what}s"
        if message.append and message.append[-1] in small.stop_ids and message.draft:
            return "drafts after an end id"
        large, generic = self._drafting_streams()
        if len(generic) + len(message.append) + len(message.draft) > self.capacity:
            return "the drafts run past the token budget the session was opened with"
        transfer = self._vocabularies.transfer
        if len(large) + len(transfer(message.append)[0]) + len(transfer(message.draft)[0]) > self.large_capacity:
            return "the drafted text needs more Generalist tokens than the session was opened with"
        return None

    def verify(self, message: Draft) -> Verdict:
        from specsteer.method.crosstok import public_symbol_values, ratios_per_draft, segment_test

        settings = _opened(self._settings)
        large, generic = self._drafting_streams()
        vocabularies = self._vocabularies
        appended_large = vocabularies.transfer(message.append)[0]
        drafts = list(message.draft)
        drafted_large, segments = vocabularies.draft_segments(drafts)
        large.append(appended_large + drafted_large)
        generic.append(list(message.append) + drafts)
        k, m = len(drafts), len(drafted_large)
        large_rows = large.predict(m + 1)  # [m+1, V_L]
        generic_rows = generic.predict(k + 1)  # [k+1, V_S]
        temperature = 1.0 if self._sampler.greedy else self._sampler.temperature
        large_log_probs = _log_probs_of(large_rows[:m], drafted_large, temperature)
        generic_log_probs = _log_probs_of(generic_rows[:k], drafts, temperature)
        uniform = None if self._sampler.greedy else self._sampler.uniform
        verdict = segment_test(large_log_probs, generic_log_probs, segments, settings.alpha, uniform)
        self.last_ratios = ratios_per_draft(segments, verdict.ratios)[: verdict.small_accepted + 1]
        small_kept, large_kept = verdict.small_accepted, verdict.large_accepted
        if small_kept < k:
            large.truncate(len(large) - (m - large_kept), large_rows[large_kept])
            generic.truncate(len(generic) - (k - small_kept), generic_rows[small_kept])
        if small_kept == k and not settings.bonus:
            return Verdict(small_kept)
        symbols, values = public_symbol_values(
            large_rows[large_kept],
            vocabularies.large,
            generic_rows[small_kept],
            vocabularies.small,
            settings.beta,
            settings.top_k,
        )
        return Verdict.carrying(small_kept, SteeredTopK(tuple(symbols.tolist()), values.numpy()))


def _log_probs_of(rows: torch.Tensor, ids: list[int], temperature: float) -> torch.Tensor:
    """log softmax(rows / temperature) at ``ids``, one per row: ``[n]``."""
    if not ids:
        return rows.new_zeros(0)
    return torch.log_softmax(rows / temperature, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
