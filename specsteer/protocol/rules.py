"""The verification rules of the protocol, and what each one needs, in one table (light: numpy, no torch).

A session's :class:`~specsteer.protocol.wire.Open` names its :class:`Rule`; :data:`RULE_SPECS` says what
that rule asks of both sides: whether the Cloud runs the generic Specialist copy, who tests the drafts,
what a :class:`~specsteer.protocol.wire.Verdict` carries back, whether the Edge reports the drafts it
kept, whether a cross-tokenizer pair may use it. The Edge (``specsteer.edge.session``), the Cloud
(``specsteer.cloud.verifier``, ``specsteer.cloud.service``) and the engine read these facts from here
instead of comparing rule names.

The ``ratio`` rule's threshold has rules of its own (:data:`ACCEPTANCE_RULES`): the fixed α, or CDA, α adapted
per draft by the Cloud (``specsteer.method.acceptance``); an Open names CDA by its λ (``Open.cda_lambda``).

A Verdict's payload is one of the small typed values below, tagged by its class. The wire format does
not carry the tag: it is derived from the frame's fields (:func:`payload_of`), which are laid out as
they always were (``ids``, ``values``, ``extra``):

=================  =========  =================  ==================
payload            ``ids``    ``values``         ``extra``
=================  =========  =================  ==================
none               empty      empty              empty
SteeredTopK        m > 0      m                  empty
PublicRows         empty      (k+1) * V > 0      empty
CoSteerCandidates  m > 0      m                  m
=================  =========  =================  ==================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np


class Rule(StrEnum):
    """A session's verification rule. Its order is the wire's (an Open carries its index: a byte)."""

    RATIO = "ratio"  # SpecSteer's ratio test (Eq. 7) on the Cloud; recovery from steered logits (Eq. 8)
    MATCH = "match"  # greedy standard SD: a draft is kept when it is the Generalist's argmax
    EXACT = "exact"  # the Edge tests the drafts against Q (residual sampling) from the Cloud's whole rows
    COSTEER = "costeer"  # no drafts: the Edge refines the Generalist's top-k by CoSteer's iterations
    GENERATE = "generate"  # no drafts: the Cloud decodes alone and streams its tokens (the llm baselines)
    # P³ (specsteer.method.p3), the roles reversed: each Draft carries no drafts, only the tokens the Edge kept
    # or chose since the last round (``append``); the Cloud answers with Tokens, the Generalist's next
    # ``Open.top_k`` greedy (or sampled) drafts, which the Edge checks.
    CLOUD_DRAFT = "cloud-draft"


class PayloadKind(StrEnum):
    """What a Verdict carries where a token must be chosen."""

    NONE = "none"  # nothing: the rule streams Tokens instead of verdicts
    STEERED_TOP_K = "steered-top-k"  # SteeredTopK (or nothing when every draft is kept and no bonus is asked)
    PUBLIC_ROWS = "public-rows"  # PublicRows
    COSTEER_CANDIDATES = "costeer-candidates"  # CoSteerCandidates


@dataclass(frozen=True)
class RuleSpec:
    """What one rule needs of the Edge and the Cloud."""

    rule: Rule
    # When the Cloud runs the generic Specialist copy: always, only while steering (beta != 0), never.
    generic: Literal["always", "steering", "never"]
    tests_drafts: Literal["cloud", "edge", "none"]  # who decides which drafts are kept ("none": no drafts)
    payload: PayloadKind  # what its verdicts carry
    reports_kept: bool  # the Edge tells the Cloud how many of the last round's drafts it kept (Draft.keep)
    cross_tokenizer: bool  # offered on a cross-tokenizer pair (specsteer.method.crosstok)
    cloud_drafts: bool = False  # the Cloud drafts (answers each Draft with Tokens) and the Edge tests (P³)

    @property
    def streams(self) -> bool:
        """Whether the Cloud answers the Open with a stream of Tokens instead of waiting for drafts."""
        return self.tests_drafts == "none" and self.payload is PayloadKind.NONE

    def needs_generic(self, beta: float) -> bool:
        """Whether a session of this rule with steering strength ``beta`` runs the generic Specialist copy."""
        return self.generic == "always" or (self.generic == "steering" and beta != 0)


RULE_SPECS: dict[Rule, RuleSpec] = {
    spec.rule: spec
    for spec in (
        RuleSpec(Rule.RATIO, "always", "cloud", PayloadKind.STEERED_TOP_K, False, True),
        # No generic copy: its recovery and bonus come from z_L alone (beta = 0).
        RuleSpec(Rule.MATCH, "never", "cloud", PayloadKind.STEERED_TOP_K, False, False),
        RuleSpec(Rule.EXACT, "steering", "edge", PayloadKind.PUBLIC_ROWS, True, False),
        RuleSpec(Rule.COSTEER, "always", "edge", PayloadKind.COSTEER_CANDIDATES, False, False),
        RuleSpec(Rule.GENERATE, "never", "none", PayloadKind.NONE, False, True),
        RuleSpec(Rule.CLOUD_DRAFT, "never", "edge", PayloadKind.NONE, False, False, cloud_drafts=True),
    )
}
# SpecSteer (and LightCoSteer as rounds of no drafts), and the llm baselines.
CROSS_RULES: tuple[Rule, ...] = tuple(rule for rule in Rule if RULE_SPECS[rule].cross_tokenizer)

# How the ratio rule's threshold is set; the wire's order (an Open's acceptance extension carries the index).
# FIXED: the session's α (paper Eq. 7). CDA: α·exp(−λ·JSD(p_L, p_S0)) per draft, computed by the Cloud from the
# two distributions it holds (specsteer.method.acceptance); ``Open.cda_lambda`` carries λ.
FIXED = "fixed"
CDA = "cda"
ACCEPTANCE_RULES: tuple[str, ...] = (FIXED, CDA)


def cda_problem(cda_lambda: float | None) -> str | None:
    """Why ``cda_lambda`` is no CDA strength (None, the fixed α, always is one), or None."""
    if cda_lambda is not None and not (math.isfinite(cda_lambda) and cda_lambda >= 0):
        return "CDA's λ must be a finite number >= 0"
    return None


# --------------------------------------------------------------------------- a Verdict's payload, by kind


@dataclass(frozen=True, eq=False)
class SteeredTopK:
    """The Cloud's share of the steered logits, ``z_L - beta z_S0``, on the candidates ``ids`` (the
    Generalist's top-k): the Edge adds ``beta z_S+`` and chooses the recovered or bonus token. On a
    cross-tokenizer pair ``ids`` name symbols of the common byte space."""

    ids: tuple[int, ...]  # [m], m > 0
    values: np.ndarray  # [m] float32


@dataclass(frozen=True, eq=False)
class PublicRows:
    """Exact mode: the whole rows ``z_L - beta z_S0`` (``z_L`` alone without steering) after each of the
    round's ``k`` drafts and after the last, flattened: the Edge runs the residual test itself."""

    values: np.ndarray  # [(k+1) * V] float32


@dataclass(frozen=True, eq=False)
class CoSteerCandidates:
    """CoSteer: the Generalist's top-k ``ids`` with ``log p_L`` and ``log p_S0`` on them; the Edge refines."""

    ids: tuple[int, ...]  # [m], m > 0
    log_large: np.ndarray  # [m] float32
    log_generic: np.ndarray  # [m] float32


Payload = SteeredTopK | PublicRows | CoSteerCandidates
_KINDS: dict[type[Payload], PayloadKind] = {
    SteeredTopK: PayloadKind.STEERED_TOP_K,
    PublicRows: PayloadKind.PUBLIC_ROWS,
    CoSteerCandidates: PayloadKind.COSTEER_CANDIDATES,
}


class PayloadError(ValueError):
    """A verdict whose fields fit no payload, or whose payload the session's rule does not read."""


def payload_kind(payload: Payload | None) -> PayloadKind:
    return PayloadKind.NONE if payload is None else _KINDS[type(payload)]


def payload_of(ids: tuple[int, ...], values: np.ndarray, extra: np.ndarray) -> Payload | None:
    """The payload a verdict's wire fields hold (the table in this module's docstring)."""
    if extra.size:
        if not (ids and len(ids) == values.size == extra.size):
            raise PayloadError("a verdict with CoSteer's log-probabilities needs as many ids and values as them")
        return CoSteerCandidates(ids, values, extra)
    if ids:
        if len(ids) != values.size:
            raise PayloadError(f"a verdict names {len(ids)} candidates but carries {values.size} values")
        return SteeredTopK(ids, values)
    if values.size:
        return PublicRows(values)
    return None


def fields_of(payload: Payload | None) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """The wire fields (``ids``, ``values``, ``extra``) that carry ``payload``: payload_of's inverse."""
    empty = np.zeros(0, np.float32)
    if payload is None:
        return (), empty, empty
    if isinstance(payload, SteeredTopK):
        return payload.ids, payload.values, empty
    if isinstance(payload, PublicRows):
        return (), payload.values, empty
    return payload.ids, payload.log_large, payload.log_generic


def expected_payload(rule: Rule, payload: Payload | None) -> Payload | None:
    """``payload`` when ``rule``'s verdicts may carry it; a PayloadError naming both otherwise. A rule whose
    Cloud tests the drafts sends nothing when every draft was kept and no bonus is asked for."""
    spec = RULE_SPECS[rule]
    kind = payload_kind(payload)
    if kind is spec.payload or (kind is PayloadKind.NONE and spec.tests_drafts == "cloud"):
        return payload
    raise PayloadError(f"the Cloud's verdict carries {kind.value}, which the {rule.value!r} rule does not read")
