"""What crosses the device-cloud link: exact bytes, and nothing private."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from specsteer import protocol
from specsteer.engine import DecodeConfig, Request, chat_ids, collect, generate, prepare
from specsteer.history import HistoryItem
from specsteer.privacy import audit_uplink
from specsteer.protocol import Cloud, Link, decode, encode
from specsteer.testing import tiny_pair

CANARY = "QUOKKA-canary-4417 purple kazoo"


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, generalist_seed=1)


def history_with_canary():
    return [
        HistoryItem({"text": "I review headphones and always mention battery life."}),
        HistoryItem({"text": f"My secret phrase is {CANARY}; headphones matter to me."}),
        HistoryItem({"text": "Gardening notes: tomatoes need sun."}),
    ]


def test_messages_roundtrip_and_sizes_are_exact():
    cases = [
        ("open", {"rule": "ratio", "alpha": 0.1, "beta": 1.0, "temperature": 0.0, "top_k": 64, "bonus": True,
                  "top_p": 1.0, "seed": 7, "max_new_tokens": 64, "prompt": [1, 2, 3]}),
        ("draft", {"keep": -1, "append": [9], "draft": [4, 5, 6, 7]}),
        ("verdict", {"accepted": 2, "ids": [3, 1], "values": np.array([0.5, -1.0], np.float32),
                     "extra": np.zeros(0, np.float32)}),
        ("tokens", {"ids": [42]}),
    ]
    for kind, payload in cases:
        data = encode(kind, payload)
        decoded_kind, decoded = decode(data)
        assert decoded_kind == kind
        for key, value in payload.items():
            assert np.array_equal(np.asarray(decoded[key]), np.asarray(value)) if isinstance(value, np.ndarray) else decoded[key] == value
    # 1 kind byte + keep int32 + (count + 1 id) + (count + 4 ids), all 4-byte fields
    assert len(encode(*cases[1])) == 1 + 4 + (4 + 4) + (4 + 16)
    # 1 + accepted + (count + 2 ids) + (count + 2 floats) + (count + 0 floats)
    assert len(encode(*cases[2])) == 1 + 4 + (4 + 8) + (4 + 8) + 4


def test_stats_bytes_equal_the_transcript(pair):
    request = Request(task="free", input_text="Write about headphones.", history=history_with_canary(), retrieval_k=2)
    tokens, finished = collect(generate(pair, request, DecodeConfig(max_new_tokens=20, downlink_top_k=8)))
    uplink = [m for m in finished.transcript if m.direction == "uplink"]
    downlink = [m for m in finished.transcript if m.direction == "downlink"]
    assert finished.stats.uplink_bytes == sum(m.bytes for m in uplink) > 0
    assert finished.stats.downlink_bytes == sum(m.bytes for m in downlink) > 0
    assert uplink[0].kind == "open"
    assert len(downlink) == finished.stats.rounds
    # A draft message costs 4 bytes per token id plus a fixed 13-byte frame.
    for message in uplink[1:]:
        ids = len(message.payload["draft"]) + len(message.payload["append"])
        assert message.bytes == 13 + 4 * ids
    # A recovery sends top-k = 8 entries (id + float32 value): 1 + 4 + (4 + 32) + (4 + 32) + 4 bytes.
    recoveries = [m for m in downlink if m.payload["ids"]]
    assert recoveries and all(m.bytes == 81 for m in recoveries)


def test_canary_in_history_never_leaves_the_device(pair):
    tokenizer = pair.tokenizer
    request = Request(task="free", input_text="Write about headphones and battery life.",
                      history=history_with_canary(), retrieval_k=3)
    prepared = prepare(request)
    assert CANARY in prepared.prompts.private  # the Specialist does see it
    assert CANARY not in prepared.prompts.plain
    canary_ids = set(tokenizer.encode(CANARY))
    plain_ids = chat_ids(tokenizer, prepared.prompts.plain)
    for method in ("specsteer", "sd", "lightcosteer", "costeer", "llm"):
        tokens, finished = collect(generate(pair, prepared, DecodeConfig(method=method, max_new_tokens=24, alpha=0.5)))
        audit = audit_uplink(finished.transcript, plain_ids, tokens)
        assert audit.ok, audit.problems
        uplinked_bytes = b"".join(
            encode(m.kind, _wire_payload(m.payload)) for m in finished.transcript if m.direction == "uplink"
        )
        assert CANARY.encode() not in uplinked_bytes
        # Canary tokens may cross only as tokens the model itself proposed or chose.
        model_tokens = {t.id for t in tokens}
        for message in finished.transcript:
            if message.direction == "uplink" and message.kind == "open":
                assert not canary_ids & (set(message.payload["prompt"]) - set(plain_ids))
            elif message.direction == "uplink":
                assert set(message.payload["draft"]) | set(message.payload["append"]) <= model_tokens


def _wire_payload(payload: dict) -> dict:
    return {k: (np.asarray(v, np.float32) if k in ("values", "extra") else v) for k, v in payload.items()}


def test_audit_catches_a_leaking_edge(pair, monkeypatch):
    """The audit is not vacuous: an Edge that uplinks its private prompt is caught."""
    request = Request(task="free", input_text="Write about headphones.", history=history_with_canary(), retrieval_k=3)
    prepared = prepare(request)
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain)
    private_ids = chat_ids(pair.tokenizer, prepared.prompts.private)
    original = protocol.Link.send

    def leaky_send(self, direction, kind, payload):
        if kind == "open":
            payload = {**payload, "prompt": private_ids}
        return original(self, direction, kind, payload)

    monkeypatch.setattr(protocol.Link, "send", leaky_send)
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(max_new_tokens=8)))
    audit = audit_uplink(finished.transcript, plain_ids, tokens)
    assert not audit.ok and "plain" in audit.problems[0]


def test_cloud_has_no_way_to_receive_the_history():
    parameters = set(inspect.signature(Cloud.__init__).parameters)
    assert parameters == {"self", "generalist", "generic_specialist", "vocab_size", "forward_log"}
    assert not any("history" in f.name for f in dataclasses.fields(Link))


def test_downlink_is_small_on_greedy_acceptance(pair):
    request = Request(task="free", input_text="Write.", history=history_with_canary())
    _, finished = collect(generate(pair, request, DecodeConfig(alpha=0.0, bonus=False, max_new_tokens=16)))
    # Every round fully accepted with no bonus: an accept count and empty arrays only.
    downlink = [m for m in finished.transcript if m.direction == "downlink"]
    assert all(m.bytes == 1 + 4 + 4 + 4 + 4 for m in downlink)


def test_the_audit_claims_what_it_checks_and_no_more(pair):
    """The verdict says what crossed (the plain prompt, drafted and chosen ids) and claims only that no
    raw history text left: the ids are functions of the history by design, rejected drafts included."""
    request = Request(task="free", input_text="Write about headphones.", history=history_with_canary(), retrieval_k=3)
    prepared = prepare(request)
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain)
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(alpha=0.5, max_new_tokens=16)))
    audit = audit_uplink(finished.transcript, plain_ids, tokens)
    summary = audit.summary()
    assert audit.ok and "nothing derived from the history" not in summary
    assert "No raw history text left the device" in summary
    assert f"the plain prompt ({len(plain_ids)} token ids" in summary
    assert f"{audit.draft_tokens} drafted token ids and {audit.chosen_tokens} chosen token ids" in summary
    assert "computed with your history, by design" in summary and "rejected drafts are among them" in summary
    assert summary.endswith(".")
