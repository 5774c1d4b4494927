"""What crosses the device-cloud link: typed messages, exact bytes, unreadable frames refused, nothing private."""

from __future__ import annotations

import dataclasses
import inspect
import struct

import numpy as np
import pytest

from specsteer.cloud.in_process import InProcessCloud, LocalTransport
from specsteer.cloud.service import CloudService
from specsteer.cloud.verifier import Cloud
from specsteer.data.history import HistoryItem
from specsteer.data.privacy import audit_uplink, audit_wire
from specsteer.engine import generate as engine
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, chat_ids, prepare
from specsteer.protocol.cloud_reports import CloudReport
from specsteer.protocol.link import Link, Reply
from specsteer.protocol.rules import Rule
from specsteer.protocol.wire import (
    DOWNLINK,
    PROTOCOL_VERSION,
    RULES,
    UPLINK,
    CrossOpen,
    Draft,
    FrameError,
    Open,
    Tokens,
    TruncatedFrame,
    UnsupportedVersion,
    Verdict,
    decode,
    decode_prefix,
    decode_stream,
    encode,
)

CANARY = "QUOKKA-canary-4417 purple kazoo"
SESSION = bytes(range(16))


def history_with_canary():
    return [
        HistoryItem({"text": "I review headphones and always mention battery life."}),
        HistoryItem({"text": f"My secret phrase is {CANARY}; headphones matter to me."}),
        HistoryItem({"text": "Gardening notes: tomatoes need sun."}),
    ]


class CapturingCloud:
    """The in-process Cloud with every frame kept as it crossed: the bytes a socket would carry."""

    def __init__(self, pair):
        self.cloud = InProcessCloud(pair)
        self.uplink: list[bytes] = []
        self.downlink: list[bytes] = []

    def transport(self):
        capture = self

        class Capturing(LocalTransport):
            def exchange(self, frame: bytes) -> Reply:
                capture.uplink.append(frame)
                reply = super().exchange(frame)
                return Reply(self._kept(reply.frames), reply.report)

            @staticmethod
            def _kept(frames):
                for arrival in frames:
                    capture.downlink.append(arrival.frame)
                    yield arrival

        return Capturing(self.cloud.transport().service)


MESSAGES = [
    Open(
        SESSION,
        "ratio",
        [1, 2, 3],
        64,
        alpha=0.1,
        beta=1.0,
        temperature=0.0,
        top_p=1.0,
        top_k=64,
        bonus=True,
        seed=7,
        stop_ids=[5, 6],
    ),
    Open(SESSION, "generate", [9], 8, temperature=0.7, top_p=0.9, seed=-3),
    Draft(SESSION, [4, 5, 6, 7], append=[9], keep=-1),
    Draft(SESSION, [], keep=2),
    Verdict(2, [3, 1], np.array([0.5, -1.0], np.float32)),
    Verdict(0, values=np.arange(6, dtype=np.float32)),
    Tokens([42]),
    Open(SESSION, "ratio", [1, 2], 16, alpha=1.0, cda_lambda=1.5),
    CrossOpen(SESSION, "ratio", [1, 2], 16, cda_lambda=0.0, large_prompt=[7, 8, 9]),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_messages_roundtrip(message):
    frame = encode(message)
    assert frame[0] == PROTOCOL_VERSION
    assert decode(frame) == message
    assert decode(frame, message.direction) == message


def test_sizes_are_exact():
    # 2 header + 16 session + 50 settings + (4 + 2 end ids) + (4 + 3 prompt ids), 4 bytes an id
    assert len(encode(MESSAGES[0])) == 2 + 16 + 50 + (4 + 8) + (4 + 12)
    # 2 + 16 + keep int32 + (count + 1 id) + (count + 4 ids)
    assert len(encode(MESSAGES[2])) == 2 + 16 + 4 + (4 + 4) + (4 + 16)
    # 2 + accepted + (count + 2 ids) + (count + 2 floats) + (count + 0 floats)
    assert len(encode(MESSAGES[4])) == 2 + 4 + (4 + 8) + (4 + 8) + 4
    assert len(encode(MESSAGES[6])) == 2 + 4 + 4


def test_an_acceptance_rule_travels_only_when_it_is_not_the_fixed_alpha():
    fixed, cda = MESSAGES[0], dataclasses.replace(MESSAGES[0], cda_lambda=2.0)
    assert fixed.acceptance == "fixed" and cda.acceptance == "cda"
    # The fixed α's frame is byte for byte the one before the extension existed: older Clouds read it as ever.
    assert len(encode(fixed)) == 2 + 16 + 50 + (4 + 8) + (4 + 12)
    frame = encode(cda)
    assert len(frame) == len(encode(fixed)) + 1 + 8  # the rule's index and λ
    rule_byte = frame[2 + 16]
    # An older Cloud reads the rule byte as an index past its rules and refuses the frame.
    assert rule_byte & 0x7F == RULES.index(Rule.RATIO) and rule_byte >= len(RULES)
    assert decode(frame).cda_lambda == 2.0 and "cda_lambda" in cda.summary() and "cda_lambda" not in fixed.summary()
    unknown = bytearray(frame)
    unknown[-9] = 7  # an acceptance rule this side does not know
    with pytest.raises(FrameError, match="acceptance rule"):
        decode(bytes(unknown))


def test_messages_are_frozen_and_typed():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MESSAGES[2].keep = 0
    with pytest.raises(ValueError):
        MESSAGES[4].values[0] = 1.0  # the arrays are read-only too
    with pytest.raises(FrameError):
        Draft(b"short", [1])
    with pytest.raises(FrameError):
        Open(SESSION, "no-such-rule", [1], 4)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_every_truncation_is_refused(message):
    frame = encode(message)
    for cut in range(len(frame)):
        with pytest.raises(TruncatedFrame):
            decode(frame[:cut])


def test_unreadable_frames_are_refused():
    frame = encode(MESSAGES[2])
    with pytest.raises(FrameError, match="after the end"):
        decode(frame + b"\0")
    with pytest.raises(UnsupportedVersion) as wrong:
        decode(bytes([PROTOCOL_VERSION + 1]) + frame[1:])
    assert wrong.value.code == "version"
    with pytest.raises(FrameError, match="kind"):
        decode(bytes([PROTOCOL_VERSION, 99]) + frame[2:])
    with pytest.raises(FrameError, match="cannot travel"):
        decode(frame, DOWNLINK)
    with pytest.raises(FrameError, match="cannot travel"):
        decode(encode(MESSAGES[4]), UPLINK)
    forged = frame[:22] + struct.pack("<I", 2**32 - 1)  # a count promising 16 GB
    with pytest.raises(TruncatedFrame):
        decode(forged)
    bad_rule = bytearray(encode(MESSAGES[0]))
    bad_rule[18] = 200
    with pytest.raises(FrameError, match="rule"):
        decode(bytes(bad_rule))


def test_a_stream_of_frames_reads_back_message_by_message():
    frames = [encode(Tokens([i])) for i in range(3)]
    data = b"".join(frames)
    assert decode_stream(data) == [Tokens([0]), Tokens([1]), Tokens([2])]
    message, end = decode_prefix(data)
    assert message == Tokens([0]) and end == len(frames[0])
    with pytest.raises(TruncatedFrame):
        decode_stream(data[:-1])


def test_stats_bytes_equal_the_transcript_and_the_frames(pair):
    request = Request(task="free", input_text="Write about headphones.", history=history_with_canary(), retrieval_k=2)
    cloud = CapturingCloud(pair)
    tokens, finished = collect(generate(pair, request, DecodeConfig(max_new_tokens=20, downlink_top_k=8), cloud=cloud))
    uplink = [m for m in finished.transcript if m.direction == "uplink"]
    downlink = [m for m in finished.transcript if m.direction == "downlink"]
    assert finished.stats.uplink_bytes == sum(m.bytes for m in uplink) == sum(map(len, cloud.uplink)) > 0
    assert finished.stats.downlink_bytes == sum(m.bytes for m in downlink) == sum(map(len, cloud.downlink)) > 0
    assert uplink[0].kind == "open"
    assert len(downlink) == finished.stats.rounds
    # A draft message costs 4 bytes per token id plus a fixed 30-byte frame (16 of them the session id).
    for message in uplink[1:]:
        ids = len(message.payload["draft"]) + len(message.payload["append"])
        assert message.bytes == 30 + 4 * ids
    # A recovery sends top-k = 8 entries (id + float32 value): 2 + 4 + (4 + 32) + (4 + 32) + 4 bytes.
    recoveries = [m for m in downlink if m.payload["ids"]]
    assert recoveries and all(m.bytes == 82 for m in recoveries)


def test_the_cloud_passes_are_in_the_trace_where_they_ran(pair):
    request = Request(task="free", input_text="Write about headphones.")
    for method in ("specsteer", "llm"):
        _, finished = collect(generate(pair, request, DecodeConfig(method=method, max_new_tokens=6)))
        trace = finished.stats.trace
        kinds = [(step.kind, step.who) for step in trace]
        assert kinds[0] == ("message", "uplink")  # the open
        assert ("forward", "generalist") in kinds
        # Every downlink message follows a Generalist pass of its own (a verification or a streamed token).
        for index, step in enumerate(trace):
            if step.kind == "message" and step.who == "downlink":
                assert ("forward", "generalist") in kinds[:index]
        assert finished.stats.forward_calls["generalist"] == sum(1 for k in kinds if k == ("forward", "generalist"))


METHODS_AUDITED = ("specsteer", "sd", "lightcosteer", "costeer", "llm")


def test_canary_in_history_never_leaves_the_device(pair):
    tokenizer = pair.tokenizer
    request = Request(
        task="free", input_text="Write about headphones and battery life.", history=history_with_canary(), retrieval_k=3
    )
    prepared = prepare(request)
    assert CANARY in prepared.prompts.private  # the Specialist does see it
    assert CANARY not in prepared.prompts.plain
    canary_ids = set(tokenizer.encode(CANARY))
    plain_ids = chat_ids(tokenizer, prepared.prompts.plain)
    configs = [DecodeConfig(method=method, max_new_tokens=24, alpha=0.5) for method in METHODS_AUDITED]
    configs.append(DecodeConfig(max_new_tokens=24, alpha=0.5, cda_lambda=1.0))  # CDA: the same audit, unchanged
    for config in configs:
        cloud = CapturingCloud(pair)
        tokens, finished = collect(generate(pair, prepared, config, cloud=cloud))
        assert audit_uplink(finished.transcript, plain_ids, tokens).ok
        wire = audit_wire(cloud.uplink, cloud.downlink, plain_ids, tokens)  # the bytes themselves
        assert wire.ok, wire.problems
        assert CANARY.encode() not in b"".join(cloud.uplink)
        # Canary tokens may cross only as tokens the model itself proposed or chose.
        model_tokens = {t.id for t in tokens}
        for frame in cloud.uplink:
            message = decode(frame)
            if isinstance(message, Open):
                assert not canary_ids & (set(message.prompt) - set(plain_ids))
            else:
                assert set(message.draft) | set(message.append) <= model_tokens


def test_audit_catches_a_leaking_edge(pair, monkeypatch):
    """The audit is not vacuous: an Edge that uplinks its private prompt is caught, on the bytes too."""
    request = Request(task="free", input_text="Write about headphones.", history=history_with_canary(), retrieval_k=3)
    prepared = prepare(request)
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain)
    private_ids = chat_ids(pair.tokenizer, prepared.prompts.private)
    honest_opening = engine.cloud_opening
    monkeypatch.setattr(
        engine, "cloud_opening", lambda pair_, link, plain, *rest: honest_opening(pair_, link, private_ids, *rest)
    )
    cloud = CapturingCloud(pair)
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(max_new_tokens=8), cloud=cloud))
    audit = audit_uplink(finished.transcript, plain_ids, tokens)
    assert not audit.ok and "plain" in audit.problems[0]
    wire = audit_wire(cloud.uplink, cloud.downlink, plain_ids, tokens)
    assert not wire.ok and "plain" in wire.problems[0]


def test_the_cloud_has_no_way_to_receive_the_history():
    parameters = set(inspect.signature(Cloud.__init__).parameters)
    # acceptance: the Cloud's own decision rule (specsteer.method.acceptance), set where the Cloud is built
    assert parameters == {"self", "generalist", "generic_specialist", "vocab_size", "forward_log", "acceptance"}
    assert set(inspect.signature(CloudService.__init__).parameters) == {
        "self",
        "pair",
        "limits",
        "clock",
        "reuse_prefixes",
        "notice",  # a log line per reclaimed session: the Cloud's own words, out to its operator
        "read_ahead",  # the policy (specsteer.cloud.read_ahead): when an Open's prompts are read
        "acceptance",  # the policy (specsteer.method.acceptance): who decides a round, set by the Cloud's owner
    }
    uplink_fields = {f.name for kind in (Open, Draft) for f in dataclasses.fields(kind)}
    assert uplink_fields == {
        "session",
        "rule",
        "prompt",
        "max_new_tokens",
        "alpha",
        "beta",
        "temperature",
        "top_p",
        "top_k",
        "bonus",
        "seed",
        "stop_ids",
        "cda_lambda",  # the acceptance rule's strength, chosen by the Edge's settings: no history in it
        "draft",
        "append",
        "keep",
    }
    assert not any("history" in f.name or "private" in f.name for f in dataclasses.fields(Link))


def test_downlink_is_small_on_greedy_acceptance(pair):
    request = Request(task="free", input_text="Write.", history=history_with_canary())
    _, finished = collect(generate(pair, request, DecodeConfig(alpha=0.0, bonus=False, max_new_tokens=16)))
    # Every round fully accepted with no bonus: an accept count and empty arrays only.
    downlink = [m for m in finished.transcript if m.direction == "downlink"]
    assert all(m.bytes == 2 + 4 + 4 + 4 + 4 for m in downlink)


def test_the_llm_stream_is_one_message_per_token_with_no_uplink_after_the_prompt(pair):
    request = Request(task="free", input_text="Write.")
    _, finished = collect(generate(pair, request, DecodeConfig(method="llm", max_new_tokens=7)))
    directions = [m.direction for m in finished.transcript]
    assert directions == ["uplink"] + ["downlink"] * finished.stats.new_tokens
    assert finished.transcript[0].payload["rule"] == "generate"
    assert all(m.bytes == 10 for m in finished.transcript[1:])


def test_report_round_trips_through_json():
    report = CloudReport(passes=(), ratios=(float("inf"), 0.5), reused=(("generalist", 3),))
    assert CloudReport.from_json(report.to_json()) == report


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


def test_a_last_draft_the_cloud_never_answered_is_named_not_a_leak(pair):
    """A Cloud that fails while verifying leaves one draft sent and never shown: the audit counts it and
    says so; any other draft sent but not shown is still a problem."""
    request = Request(task="free", input_text="Write about headphones.", history=history_with_canary(), retrieval_k=3)
    prepared = prepare(request)
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain)
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(alpha=0.5, max_new_tokens=16)))
    last_round = max(token.round for token in tokens)
    assert finished.transcript[-1].kind == "verdict"
    cut = finished.transcript[:-1]  # the last verdict never came back, nor the tokens it would have shown
    shown = [token for token in tokens if token.round < last_round]
    audit = audit_uplink(cut, plain_ids, shown)
    unanswered = len(cut[-1].payload["draft"])
    assert audit.ok, audit.problems
    assert audit.unanswered_tokens == unanswered > 0
    assert f"The last {unanswered} drafted ids were sent but never answered" in audit.summary()
    # Drafts of an answered round that were never shown are still a problem.
    early = [token for token in tokens if token.round < last_round - 1]
    assert not audit_uplink(cut, plain_ids, early).ok
    assert audit_uplink(finished.transcript, plain_ids, tokens).unanswered_tokens == 0
