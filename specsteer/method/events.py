"""Values that flow out of every decoding method.

A method is a generator that yields one :class:`TokenEvent` per token it shows
(emitted or rejected) and ends with a :class:`Finished` that carries the
statistics and the device-cloud transcript of that generation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, NamedTuple

TokenKind = Literal["accepted", "rejected", "recovered", "bonus", "plain", "pending"]
TOKEN_KINDS: tuple[TokenKind, ...] = ("accepted", "rejected", "recovered", "bonus", "plain")
EMITTED_KINDS = frozenset({"accepted", "recovered", "bonus", "plain"})
# A draft shown the moment the Edge drafted it, before the Cloud's verdict: not part of the output and
# not a settled token. The verdict settles the same (round, position) as accepted or rejected; a recovered
# token takes the place of the first rejected draft, a bonus the place after the last draft.
PENDING = "pending"

# The model streams a generation runs, as a TraceStep's ``who`` and a GenerationStats key names them:
# the Specialist reading the private prompt (the Edge), its generic copy and the Generalist (the Cloud).
EDGE_STREAM = "specialist+"
GENERIC_STREAM = "specialist0"
GENERALIST_STREAM = "generalist"
STREAMS = (EDGE_STREAM, GENERIC_STREAM, GENERALIST_STREAM)


@dataclass(frozen=True)
class SegmentPlace:
    """Where a drafted token sits in its segment on a cross-tokenizer pair (specsteer.method.crosstok): the
    stretch of the draft between two offsets where both tokenizations have a boundary, which the
    Cloud accepts or refuses as a whole. ``position`` counts from 0; ``size`` is the segment's number
    of Specialist tokens."""

    position: int
    size: int

    @property
    def first(self) -> bool:
        return self.position == 0

    @property
    def last(self) -> bool:
        return self.position == self.size - 1


@dataclass(frozen=True)
class TokenEvent:
    """One token shown to the user.

    ``text`` is the piece this token adds to the output. For emitted kinds the
    pieces concatenate to exactly the decoded output; a token that ends inside
    a multi-byte character has an empty piece and a later token carries the
    completed character. A ``rejected`` token is a draft the Cloud refused: its
    piece is what it would have added, and it is not part of the output.
    ``ratio`` is the verification ratio p_L(y) / (alpha * p_S0(y)) where one
    was computed. ``uplink_bytes`` / ``downlink_bytes`` are the link's running
    totals when the token was shown, for live displays. ``segment``: on a cross-tokenizer pair, a
    draft's place in the segment the Cloud tested (None for every other token).

    A ``pending`` event is a draft shown before its verdict (the stream's only unsettled kind): the
    round's settled events follow once the verdict is back, naming the same ``round`` and ``position``
    (the draft's index in its round; a recovered token has the first rejected draft's, a bonus the one
    after the last draft). Drafts still pending when the generation ends (a stop while drafting) were
    never sent and are not part of anything. ``position`` is None for tokens outside a drafted round.
    """

    id: int
    text: str
    kind: TokenKind
    round: int
    ratio: float | None = None
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    segment: SegmentPlace | None = None
    position: int | None = None

    @property
    def emitted(self) -> bool:
        return self.kind in EMITTED_KINDS

    @property
    def pending(self) -> bool:
        """Shown before the verdict: consumers of settled tokens (storage, audits, counts) skip it."""
        return self.kind == PENDING

    def to_dict(self) -> dict:
        """The token as stored and exported; the live byte totals are display-only. A cross pair's
        drafts add their segment place."""
        stored: dict = {"id": self.id, "text": self.text, "kind": self.kind, "round": self.round, "ratio": self.ratio}
        if self.segment is not None:
            stored["segment"] = {"position": self.segment.position, "size": self.segment.size}
        return stored


class TraceStep(NamedTuple):
    """One step of a generation's timeline, in the order it happened.

    ``kind`` "forward": the model stream ``who`` ("specialist+", "specialist0", "generalist") read
    ``size`` tokens in one pass that took ``seconds``. ``kind`` "message": ``size`` bytes crossed the
    link in direction ``who`` ("uplink" / "downlink"); ``seconds`` is the time the link itself took
    (0 in process). The timeline is what a deployment projection replays under other step times,
    round-trip times and bandwidths (tuples, so that a stored trace stays small as JSON).
    """

    kind: Literal["forward", "message"]
    who: str
    size: int
    seconds: float


class RoundStep(NamedTuple):
    """One speculative round as it ran: ``drafted`` drafts sent, ``accepted`` of them kept, and its wall
    time from the first draft to the settled verdict split by who spent it. ``edge_s``: the Specialist's
    passes; ``cloud_s``: the Cloud's (the Generalist and the generic copy, as the Cloud reported them);
    ``link_s``: the time the link itself took (0 in process); the rest (:attr:`host_s`) is host work: the
    loop, framing, the ratio test, steering, sampling, cache crops. The first round also holds the prompts' reads
    (the Edge's first draft pass reads its private prompt; a Cloud reading ahead reports its prompt passes with the
    first verdict), which may run side by side: its parts can add up to more than its wall time. A tuple, like
    TraceStep, so that a stored log stays small as JSON."""

    drafted: int
    accepted: int
    seconds: float
    edge_s: float
    cloud_s: float
    link_s: float

    @property
    def host_s(self) -> float:
        return max(0.0, self.seconds - self.edge_s - self.cloud_s - self.link_s)

    @classmethod
    def of(cls, drafted: int, accepted: int, seconds: float, steps: Sequence[TraceStep]) -> RoundStep:
        """The round that took ``seconds`` and whose passes and messages are ``steps`` (its slice of the trace)."""
        edge = cloud = link = 0.0
        for step in steps:
            if step.kind == "message":
                link += step.seconds
            elif step.who == EDGE_STREAM:
                edge += step.seconds
            else:
                cloud += step.seconds
        return cls(drafted, accepted, seconds, edge, cloud, link)


@dataclass
class GenerationStats:
    method: str
    new_tokens: int = 0
    seconds: float = 0.0
    tok_per_s: float = 0.0
    rounds: int = 0
    drafted: int = 0  # draft tokens sent, including those after a round's first rejection
    accepted: int = 0
    verified: int = 0  # drafts the test decided on: accepted ones plus each round's first rejection
    acceptance_rate: float | None = None
    forward_calls: dict[str, int] = field(default_factory=dict)
    forward_seconds: dict[str, float] = field(default_factory=dict)
    step_seconds: dict[str, float] = field(default_factory=dict)  # mean pass after the prefill, per model
    prefill_seconds: float = 0.0  # the first pass of every stream: prompt processing, not decoding
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    stop_reason: str = "length"  # "eos" | "length" | "cancelled"
    runtime: str = ""  # "llama.cpp" | "transformers"
    precision: str = ""  # what the weights compute in: "fp32", "bf16", "Q4_K_M", ...
    runtime_choice: str = ""  # why that runtime ran it ("auto" picks per machine and method)
    # each stream's runtime and precision ("specialist+", "specialist0", "generalist": "llama.cpp Q4_K_M"):
    # the Specialist and its generic copy always share one; the Generalist may differ (a split plan)
    stream_runtimes: dict[str, str] = field(default_factory=dict)
    # what the Cloud says verifies (its /v1/info runtime: "vllm" for `specsteer cloud --engine vllm`); "" if not asked
    cloud_runtime: str = ""
    specialist_lora: str = ""  # the Edge's LoRA adapter (directory name @ manifest hash), "" for none
    # evaluate with per-record adapters: the seconds and optimizer steps the record's adapter took to train
    lora_training_seconds: float | None = None
    lora_training_steps: int | None = None
    ttft_s: float | None = None  # seconds from the request to the first emitted (verified) token
    # seconds from the request to the first token on screen: the first pending draft of a speculative
    # method, the first token of a single-model one
    first_visible_s: float | None = None
    reused_tokens: dict[str, int] = field(default_factory=dict)  # prompt tokens read from the prefix cache, per stream
    trace: list[TraceStep] = field(default_factory=list)  # every forward pass and message, in order
    # Every speculative round in order (the Edge drafts, the Cloud verifies): drafts, kept, and its time split
    # (RoundStep); empty for the methods without rounds. What a replayed acceptance reads back.
    round_log: list[RoundStep] = field(default_factory=list)
    # The text of every token id the Edge sent, in the order sent: drafts (accepted or rejected) and the
    # tokens it chose; "" where the Edge sends none (device-only methods, llm, llm+). Privacy audits read it.
    sent_text: str = ""
    # P³ (the Cloud drafts): the tokens the Edge chose in place of a Cloud draft, its corrections; None for the
    # methods where the Edge drafts or decodes (device_share then says nothing about them).
    device_chosen: int | None = None
    # Steps in which this process stood still far beyond the generation's own steps (stopped, frozen, paused:
    # specsteer.method.timing), and their wall seconds beyond a typical step. Such a generation's timing is
    # disturbed: its seconds are kept as measured, and speed figures leave it out.
    pauses: int = 0
    paused_s: float = 0.0

    @property
    def timing_disturbed(self) -> bool:
        """Its wall time holds a pause (``pauses``): not the time it computed."""
        return self.pauses > 0

    @property
    def device_share(self) -> float | None:
        """P³: the share of the output's tokens the Edge chose rather than took from the Cloud."""
        if self.device_chosen is None or not self.new_tokens:
            return None
        return self.device_chosen / self.new_tokens

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> GenerationStats:
        """Statistics read back from :meth:`to_dict`'s JSON.

        Rows stored by an earlier version lack the fields added since (they take their defaults),
        and keys this version does not know are ignored, so old runs still read.
        """
        known = {item.name for item in fields(cls)}
        values = {key: value for key, value in stored.items() if key in known}
        values["trace"] = [TraceStep(*step) for step in values.get("trace") or ()]
        values["round_log"] = [RoundStep(*step) for step in values.get("round_log") or ()]
        return cls(**{"method": "", **values})


@dataclass(frozen=True)
class LinkMessage:
    """One message that crossed the device-cloud link, with its exact wire size."""

    direction: Literal["uplink", "downlink"]
    kind: str
    payload: dict
    bytes: int

    def to_dict(self) -> dict:
        return {"direction": self.direction, "kind": self.kind, "bytes": self.bytes, "payload": self.payload}


@dataclass
class Finished:
    """The last item a method yields."""

    text: str
    token_ids: list[int]
    stats: GenerationStats
    transcript: list[LinkMessage]
