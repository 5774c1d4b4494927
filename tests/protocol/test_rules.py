"""The protocol's vocabulary typed: the verification rules' table, the Verdict's payload by kind (same bytes
on the wire), and the Edge's one params value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsteer.edge.params import CoSteerParams, EdgeParams
from specsteer.protocol.rules import (
    CROSS_RULES,
    RULE_SPECS,
    CoSteerCandidates,
    PayloadError,
    PayloadKind,
    PublicRows,
    Rule,
    SteeredTopK,
    payload_kind,
)
from specsteer.protocol.wire import RULES, Open, Verdict, decode, encode

SESSION = bytes(range(16))


def test_every_rule_has_one_spec_and_the_wire_order_is_unchanged():
    assert set(RULE_SPECS) == set(Rule)
    # an Open's rule byte: P³'s rule came last, so the others kept their bytes
    assert [r.value for r in RULES] == ["ratio", "match", "exact", "costeer", "generate", "cloud-draft"]
    assert CROSS_RULES == (Rule.RATIO, Rule.GENERATE)


def test_what_each_rule_needs():
    # The generic Specialist copy: the ratio test and CoSteer always, exact mode only while steering.
    needs = {(rule, beta): RULE_SPECS[rule].needs_generic(beta) for rule in Rule for beta in (0.0, 1.0)}
    assert needs == {
        (Rule.RATIO, 0.0): True,
        (Rule.RATIO, 1.0): True,
        (Rule.MATCH, 0.0): False,
        (Rule.MATCH, 1.0): False,
        (Rule.EXACT, 0.0): False,
        (Rule.EXACT, 1.0): True,
        (Rule.COSTEER, 0.0): True,
        (Rule.COSTEER, 1.0): True,
        (Rule.GENERATE, 0.0): False,
        (Rule.GENERATE, 1.0): False,
        (Rule.CLOUD_DRAFT, 0.0): False,
        (Rule.CLOUD_DRAFT, 1.0): False,
    }
    assert [rule for rule in Rule if RULE_SPECS[rule].reports_kept] == [Rule.EXACT]
    assert [rule for rule in Rule if RULE_SPECS[rule].streams] == [Rule.GENERATE]
    assert {rule: RULE_SPECS[rule].payload for rule in Rule} == {
        Rule.RATIO: PayloadKind.STEERED_TOP_K,
        Rule.MATCH: PayloadKind.STEERED_TOP_K,
        Rule.EXACT: PayloadKind.PUBLIC_ROWS,
        Rule.COSTEER: PayloadKind.COSTEER_CANDIDATES,
        Rule.GENERATE: PayloadKind.NONE,
        Rule.CLOUD_DRAFT: PayloadKind.NONE,  # its answers are Tokens, not verdicts
    }
    assert [rule for rule in Rule if RULE_SPECS[rule].cloud_drafts] == [Rule.CLOUD_DRAFT]


def test_an_open_reads_a_rule_name_as_the_rule_and_keeps_its_frame():
    named, typed = Open(SESSION, "exact", (1, 2), 8), Open(SESSION, Rule.EXACT, (1, 2), 8)
    assert named.rule is Rule.EXACT and named == typed and encode(named) == encode(typed)
    assert decode(encode(named)).rule is Rule.EXACT
    assert encode(named)[2 + 16] == 2  # the rule's index, as before the enum
    assert named.summary()["rule"] == "exact" and type(named.summary()["rule"]) is str
    assert Open(SESSION, "generate", (1,), 8).streams and not named.streams


PAYLOADS = [
    None,
    SteeredTopK((3, 1), np.array([0.5, -1.0], np.float32)),
    PublicRows(np.arange(6, dtype=np.float32)),
    CoSteerCandidates((7, 2, 9), np.array([-0.1, -2.0, -3.0], np.float32), np.array([-1.0, -0.5, -4.0], np.float32)),
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: payload_kind(p).value)
def test_a_payload_crosses_the_wire_in_the_old_fields_and_is_read_back_by_kind(payload):
    verdict = Verdict.carrying(1, payload)
    back = decode(encode(verdict))
    assert back == verdict
    assert type(back.payload) is type(payload) and payload_kind(back.payload) is payload_kind(payload)
    if payload is not None:
        for name in (f.name for f in dataclasses.fields(payload)):
            assert np.array_equal(getattr(back.payload, name), getattr(payload, name))


def test_the_frames_are_the_ones_the_fields_always_made():
    steered = Verdict(2, [3, 1], np.array([0.5, -1.0], np.float32))
    assert encode(Verdict.carrying(2, SteeredTopK((3, 1), np.array([0.5, -1.0], np.float32)))) == encode(steered)
    rows = Verdict(0, values=np.arange(6, dtype=np.float32))
    assert encode(Verdict.carrying(0, PublicRows(np.arange(6, dtype=np.float32)))) == encode(rows)
    assert encode(Verdict.carrying(4)) == encode(Verdict(4))


def test_fields_that_fit_no_payload_and_payloads_a_rule_does_not_read_are_refused():
    with pytest.raises(PayloadError, match="2 candidates but carries 3"):
        Verdict(0, (1, 2), np.zeros(3, np.float32)).payload_for(Rule.RATIO)
    with pytest.raises(PayloadError, match="CoSteer"):
        Verdict(0, (), np.zeros(2, np.float32), np.zeros(2, np.float32)).payload_for(Rule.COSTEER)
    rows = Verdict.carrying(0, PAYLOADS[2])
    assert isinstance(rows.payload_for(Rule.EXACT), PublicRows)
    with pytest.raises(PayloadError, match="public-rows.*'ratio'"):
        rows.payload_for(Rule.RATIO)
    assert Verdict(3).payload_for(Rule.RATIO) is None  # every draft kept, no bonus asked
    with pytest.raises(PayloadError, match="none.*'exact'"):
        Verdict(3).payload_for(Rule.EXACT)


def test_the_edge_is_configured_by_one_frozen_value():
    params = EdgeParams(Rule.RATIO, 1.0, frozenset({2}), temperature=0.8, top_p=0.9, seed=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.beta = 0.0  # type: ignore[misc]
    assert params.costeer == CoSteerParams(20, 10.0, 2.0)
    first, second = params.sampler(), params.sampler()
    assert first is not second and first.temperature == 0.8 and first.top_p == 0.9
    assert first.uniform() == second.uniform()  # each sampler starts at the seed: the value holds no RNG state
    assert EdgeParams(Rule.MATCH, 0.0, frozenset()).sampler().greedy


def test_an_edge_refuses_a_verdict_its_rule_does_not_read_before_changing_anything():
    from specsteer.edge.session import Edge
    from specsteer.method.decoding import ForwardLog
    from specsteer.models.tiny import shared_tiny_pair

    pair = shared_tiny_pair()
    edge = Edge(pair.specialist, [5, 6, 7], pair.vocab_size, ForwardLog(), EdgeParams(Rule.RATIO, 1.0, frozenset()))
    try:
        drafts = edge.draft(2)
        before = list(edge.stream.tokens)
        rows = PublicRows(np.zeros((len(drafts) + 1) * pair.vocab_size, np.float32))
        with pytest.raises(PayloadError, match="public-rows"):
            edge.settle(Verdict.carrying(0, rows), drafts, may_extend=True)
        with pytest.raises(PayloadError, match="no steered logits"):
            edge.settle(Verdict(0), drafts, may_extend=True)
        assert edge.stream.tokens == before
        settled = edge.settle(Verdict.carrying(0, SteeredTopK((9, 4), np.array([0.0, 1.0], np.float32))), drafts, True)
        assert settled.accepted == 0 and settled.chosen in (9, 4) and edge.stream.tokens == [5, 6, 7, settled.chosen]
    finally:
        edge.close()
