"""The device-cloud protocol (DESIGN §2, paper Appendix D): typed messages and their wire format.

The Edge holds the Specialist and the user's private prompt; the Cloud holds
the Generalist and a generic copy of the Specialist and never sees the
history. They exchange only the messages below, each a frozen dataclass
encoded to bytes by :func:`encode` and read back by :func:`decode`.

Uplink (Edge -> Cloud), each naming its session (16 random bytes the Edge chose)
  :class:`Open`   once: the plain prompt ids (the task input, not private), the
                  decoding settings the Cloud needs and the ids that end a text.
                  On a cross-tokenizer pair (``specsteer.method.crosstok``) a :class:`CrossOpen`
                  instead, which adds the plain prompt in the Generalist's ids; there
                  drafts and chosen tokens stay Specialist ids and a verdict's ``ids``
                  name symbols of the common byte space (256 bytes and END).
  :class:`Draft`  per round: ``keep`` (how many of the previous round's drafts the
                  Edge kept, exact mode only), ``append`` (tokens the Edge chose since:
                  the recovered or bonus token) and the new ``draft`` ids.
Downlink (Cloud -> Edge), each answering the uplink message before it
  :class:`Verdict` per round: the number of drafts accepted and, where a token must
                  be chosen, the Cloud's share of the steered logits truncated to the
                  top-k entries (ids + values). In exact mode: full rows instead, and
                  the Edge decides.
  :class:`Tokens`  the Generalist's own tokens (the ``llm`` baseline), streamed one
                  message per token after an Open whose rule is ``generate``.

Nothing computed from the private history crosses the link except the ids of
tokens the Edge chose to emit (or proposes as drafts).

What a Cloud says besides the messages (its instrumentation and its description) is
``specsteer.protocol.cloud_reports``'s; it is not counted as link bytes.

The two ends that speak it live beside this module: ``specsteer.edge.session`` (the Specialist, with the
history) and ``specsteer.cloud.verifier`` (the Generalist and the generic Specialist copy, without it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar, Final, Literal

import numpy as np

from specsteer.protocol.rules import (
    ACCEPTANCE_RULES,
    CDA,
    FIXED,
    RULE_SPECS,
    Payload,
    Rule,
    expected_payload,
    fields_of,
    payload_of,
)

# --------------------------------------------------------------------------- limits shared by both sides

MAX_DRAFT_LEN = 16
MAX_NEW_TOKENS = 4096
# Tokens a stream may hold past its prompt and token budget: a round's drafts and the token chosen
# after them are read before the budget check ends the generation.
DRAFT_HEADROOM = MAX_DRAFT_LEN + 2

# --------------------------------------------------------------------------- wire format
#
# Every frame: 1 byte protocol version, 1 byte kind, then the fields. Integers are little-endian;
# token ids are uint32, counts uint32, logit values float32 (exact, so the Edge recovers the same
# token an all-in-one implementation would). A list is its count followed by its items, so every
# frame is self-delimiting: a stream of Tokens frames needs no other framing.
#
# Version 1 was the unversioned in-process format (no version byte, no session id, no end ids).

PROTOCOL_VERSION = 2
SESSION_BYTES = 16
Direction = Literal["uplink", "downlink"]
UPLINK: Final = "uplink"
DOWNLINK: Final = "downlink"
DIRECTIONS = (UPLINK, DOWNLINK)
# Verification rules (specsteer.protocol.rules: what each needs); an Open carries the index of its rule here.
RULES: tuple[Rule, ...] = tuple(Rule)

_HEADER = struct.Struct("<BB")
_OPEN_SETTINGS = struct.Struct("<Bdddi?dqI")
# The rule byte's high bit: an acceptance extension follows the prompt (and a CrossOpen's extension). Rule indices
# stay below it; a Cloud that predates the extension reads the byte as an unknown rule and refuses the frame.
_ACCEPTANCE_FOLLOWS = 0x80
_ACCEPTANCE = struct.Struct("<Bd")  # the acceptance rule's index in ACCEPTANCE_RULES, then its strength
_KEEP = struct.Struct("<i")
_COUNT = struct.Struct("<I")
CROSS_LAYOUT = 1  # the layout of a CrossOpen's extension; bumped if it ever changes
_CROSS_LAYOUT = struct.Struct("<B")


class FrameError(ValueError):
    """A frame that is not a well-formed message of this protocol version. ``code`` names the fault."""

    code = "malformed"


class TruncatedFrame(FrameError):
    code = "truncated"


class UnsupportedVersion(FrameError):
    code = "version"

    def __init__(self, version: int):
        super().__init__(f"protocol version {version} is not supported (this side speaks version {PROTOCOL_VERSION})")
        self.version = version


def _ids(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _floats(values) -> np.ndarray:
    array = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class Open:
    """Uplink, once: start a session. ``prompt`` is the plain (history-free) prompt."""

    kind: ClassVar[str] = "open"
    code: ClassVar[int] = 1
    direction: ClassVar[Direction] = UPLINK

    session: bytes
    rule: Rule  # its name is accepted too, and read as the Rule
    prompt: tuple[int, ...]
    max_new_tokens: int
    alpha: float = 0.1
    beta: float = 1.0
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 64
    bonus: bool = True
    seed: int = 0
    stop_ids: tuple[int, ...] = ()
    # The ratio test's threshold: None, the fixed α (the paper); a number, CDA's λ: the Cloud adapts α per draft
    # to how far p_L and p_S0 diverge there (specsteer.method.acceptance). Travels only when set (an extension).
    cda_lambda: float | None = None

    def __post_init__(self) -> None:
        _check_session(self.session)
        if self.rule not in RULES:
            raise FrameError(f"unknown verification rule {self.rule!r}")
        object.__setattr__(self, "rule", Rule(self.rule))
        object.__setattr__(self, "prompt", _ids(self.prompt))
        object.__setattr__(self, "stop_ids", _ids(self.stop_ids))
        if self.cda_lambda is not None:
            object.__setattr__(self, "cda_lambda", float(self.cda_lambda))

    @property
    def streams(self) -> bool:
        """Whether the Cloud answers with a stream of Tokens instead of waiting for drafts."""
        return RULE_SPECS[self.rule].streams

    @property
    def acceptance(self) -> str:
        """The acceptance rule this Open names (``rules.ACCEPTANCE_RULES``)."""
        return FIXED if self.cda_lambda is None else CDA

    def summary(self) -> dict:
        return {
            "rule": self.rule.value,
            "alpha": self.alpha,
            "beta": self.beta,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "bonus": self.bonus,
            "top_p": self.top_p,
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
            "stop_ids": list(self.stop_ids),
            "prompt": list(self.prompt),
            **({} if self.cda_lambda is None else {"acceptance": self.acceptance, "cda_lambda": self.cda_lambda}),
        }


@dataclass(frozen=True)
class CrossOpen(Open):
    """Uplink, once, on a cross-tokenizer pair (``specsteer.method.crosstok``): an Open whose ``prompt`` is the
    plain prompt in the Specialist's ids (the generic copy reads it) and whose ``large_prompt`` is the
    same plain prompt in the Generalist's ids. Drafts and chosen tokens stay Specialist ids; verdicts
    name symbols of the common byte space instead of token ids. Its frame is an Open's followed by
    the layout version of this extension (``CROSS_LAYOUT``) and ``large_prompt``: a Cloud that predates
    it refuses the unknown kind rather than misreading it, and the Open frame itself is unchanged."""

    kind: ClassVar[str] = "cross-open"
    code: ClassVar[int] = 5

    large_prompt: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "large_prompt", _ids(self.large_prompt))

    @classmethod
    def extending(cls, opening: Open, large_prompt: Sequence[int]) -> CrossOpen:
        """``opening``'s settings with the plain prompt in the Generalist's ids."""
        settings = {name.name: getattr(opening, name.name) for name in fields(Open)}
        return cls(**settings, large_prompt=tuple(large_prompt))

    def summary(self) -> dict:
        return {**super().summary(), "large_prompt": list(self.large_prompt)}


@dataclass(frozen=True)
class Draft:
    """Uplink, per round: the tokens the Edge chose since the last round, and new drafts."""

    kind: ClassVar[str] = "draft"
    code: ClassVar[int] = 2
    direction: ClassVar[Direction] = UPLINK

    session: bytes
    draft: tuple[int, ...]
    append: tuple[int, ...] = ()
    keep: int = -1  # exact mode: drafts of the previous round the Edge kept; -1 otherwise

    def __post_init__(self) -> None:
        _check_session(self.session)
        object.__setattr__(self, "draft", _ids(self.draft))
        object.__setattr__(self, "append", _ids(self.append))

    def summary(self) -> dict:
        return {"keep": self.keep, "append": list(self.append), "draft": list(self.draft)}


@dataclass(frozen=True, eq=False)
class Verdict:
    """Downlink, per round: drafts accepted, and the Cloud's share of the logits where needed.

    The fields are the wire's; what they mean depends on their shapes, which :attr:`payload` reads as one
    typed value (``specsteer.protocol.rules``): ``values`` are ``z_L - beta z_S0`` on ``ids`` (recovery or
    bonus: SteeredTopK); with no ``ids`` they are full rows (exact mode: PublicRows), or empty; ``extra``
    carries log p_S0 on ``ids``, ``values`` then being log p_L (CoSteer: CoSteerCandidates). Build one
    with :meth:`carrying`.
    """

    kind: ClassVar[str] = "verdict"
    code: ClassVar[int] = 3
    direction: ClassVar[Direction] = DOWNLINK

    accepted: int
    ids: tuple[int, ...] = ()
    values: np.ndarray = field(default_factory=lambda: _floats(()))
    extra: np.ndarray = field(default_factory=lambda: _floats(()))

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", _ids(self.ids))
        object.__setattr__(self, "values", _floats(self.values))
        object.__setattr__(self, "extra", _floats(self.extra))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Verdict)
            and self.accepted == other.accepted
            and self.ids == other.ids
            and np.array_equal(self.values, other.values)
            and np.array_equal(self.extra, other.extra)
        )

    # Unhashable (it holds arrays): a class that defines __eq__ and no __hash__ gets __hash__ = None.

    @classmethod
    def carrying(cls, accepted: int, payload: Payload | None = None) -> Verdict:
        """The verdict of ``accepted`` drafts that carries ``payload``."""
        return cls(accepted, *fields_of(payload))

    @property
    def payload(self) -> Payload | None:
        """What the fields carry, by kind; a PayloadError (a ValueError) when they fit none."""
        return payload_of(self.ids, self.values, self.extra)

    def payload_for(self, rule: Rule) -> Payload | None:
        """The payload, checked to be one ``rule``'s verdicts carry (an Edge never reads another kind)."""
        return expected_payload(rule, self.payload)

    def summary(self) -> dict:
        """What a transcript keeps: ids in full up to 256, long float arrays only by size."""
        ids = list(self.ids) if len(self.ids) <= 256 else f"<{len(self.ids)} ids>"
        return {"accepted": self.accepted, "ids": ids, "values": _shown(self.values), "extra": _shown(self.extra)}


@dataclass(frozen=True)
class Tokens:
    """Downlink: tokens the Generalist chose by itself (the ``llm`` baseline)."""

    kind: ClassVar[str] = "tokens"
    code: ClassVar[int] = 4
    direction: ClassVar[Direction] = DOWNLINK

    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", _ids(self.ids))

    def summary(self) -> dict:
        return {"ids": list(self.ids)}


Message = Open | CrossOpen | Draft | Verdict | Tokens
Uplink = Open | Draft  # what the Edge sends (a CrossOpen is an Open)
Downlink = Verdict | Tokens  # what the Cloud answers
MESSAGE_TYPES: dict[int, type[Message]] = {kind.code: kind for kind in (Open, CrossOpen, Draft, Verdict, Tokens)}


def _check_session(session: bytes) -> None:
    if not isinstance(session, bytes) or len(session) != SESSION_BYTES:
        raise FrameError(f"a session id is {SESSION_BYTES} bytes")


def _shown(values: np.ndarray):
    return values.tolist() if values.size <= 64 else f"<{values.size} float32>"


def _pack_ids(values: tuple[int, ...]) -> bytes:
    return _COUNT.pack(len(values)) + np.asarray(values, dtype="<u4").tobytes()


def _pack_floats(values: np.ndarray) -> bytes:
    return _COUNT.pack(values.size) + values.tobytes()


def encode(message: Message) -> bytes:
    """The frame of one message."""
    head = _HEADER.pack(PROTOCOL_VERSION, message.code)
    if isinstance(message, Open):
        settings = _OPEN_SETTINGS.pack(
            RULES.index(message.rule) | (0 if message.cda_lambda is None else _ACCEPTANCE_FOLLOWS),
            message.alpha,
            message.beta,
            message.temperature,
            message.top_k,
            message.bonus,
            message.top_p,
            message.seed,
            message.max_new_tokens,
        )
        frame = head + message.session + settings + _pack_ids(message.stop_ids) + _pack_ids(message.prompt)
        if isinstance(message, CrossOpen):
            frame += _CROSS_LAYOUT.pack(CROSS_LAYOUT) + _pack_ids(message.large_prompt)
        if message.cda_lambda is not None:
            frame += _ACCEPTANCE.pack(ACCEPTANCE_RULES.index(CDA), message.cda_lambda)
        return frame
    if isinstance(message, Draft):
        return head + message.session + _KEEP.pack(message.keep) + _pack_ids(message.append) + _pack_ids(message.draft)
    if isinstance(message, Verdict):
        return (
            head
            + _COUNT.pack(message.accepted)
            + _pack_ids(message.ids)
            + _pack_floats(message.values)
            + _pack_floats(message.extra)
        )
    if isinstance(message, Tokens):
        return head + _pack_ids(message.ids)
    raise TypeError(f"not a protocol message: {type(message).__name__}")


class _Reader:
    """Reads fields off a frame; running past its end is a TruncatedFrame."""

    def __init__(self, data: bytes, offset: int = 0):
        self.data = memoryview(data)
        self.offset = offset

    def take(self, layout: struct.Struct) -> tuple:
        self._need(layout.size)
        values = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return values

    def raw(self, size: int) -> bytes:
        self._need(size)
        value = bytes(self.data[self.offset : self.offset + size])
        self.offset += size
        return value

    def ids(self) -> tuple[int, ...]:
        return tuple(self._array("<u4").tolist())

    def floats(self) -> np.ndarray:
        return self._array("<f4").copy()

    def _array(self, dtype: str) -> np.ndarray:
        (count,) = self.take(_COUNT)
        self._need(4 * count)  # before allocating: a forged count must not reserve gigabytes
        array = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.offset)
        self.offset += 4 * count
        return array

    def _need(self, size: int) -> None:
        if self.offset + size > len(self.data):
            raise TruncatedFrame(f"the frame ends {self.offset + size - len(self.data)} bytes early")


def decode(data: bytes, direction: str | None = None) -> Message:
    """The message of exactly one frame; ``direction`` (UPLINK / DOWNLINK) restricts the kinds accepted."""
    message, end = decode_prefix(data, direction)
    if end != len(data):
        raise FrameError(f"{len(data) - end} bytes after the end of a {message.kind} message")
    return message


def decode_prefix(data: bytes, direction: str | None = None, offset: int = 0) -> tuple[Message, int]:
    """The message of the frame starting at ``offset``, and where it ends (for streams of frames).

    Raises TruncatedFrame when ``data`` ends inside the frame, UnsupportedVersion for another
    protocol version, FrameError for anything else that is not a message.
    """
    reader = _Reader(data, offset)
    version, code = reader.take(_HEADER)
    message: Message
    if version != PROTOCOL_VERSION:
        raise UnsupportedVersion(version)
    kind = MESSAGE_TYPES.get(code)
    if kind is None:
        raise FrameError(f"unknown message kind {code}")
    if direction is not None and kind.direction != direction:
        raise FrameError(f"a {kind.kind} message cannot travel {direction}")
    if kind is Open or kind is CrossOpen:
        session = reader.raw(SESSION_BYTES)
        rule, alpha, beta, temperature, top_k, bonus, top_p, seed, max_new_tokens = reader.take(_OPEN_SETTINGS)
        extended, rule = bool(rule & _ACCEPTANCE_FOLLOWS), rule & ~_ACCEPTANCE_FOLLOWS
        if rule >= len(RULES):
            raise FrameError(f"unknown verification rule {rule}")
        stop_ids = reader.ids()
        fields = dict(
            session=session,
            rule=RULES[rule],
            stop_ids=stop_ids,
            prompt=reader.ids(),
            max_new_tokens=max_new_tokens,
            alpha=alpha,
            beta=beta,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            bonus=bonus,
            seed=seed,
        )
        if kind is CrossOpen:
            (layout,) = reader.take(_CROSS_LAYOUT)
            if layout != CROSS_LAYOUT:
                raise FrameError(f"cross-tokenizer layout {layout} is not supported (this side reads {CROSS_LAYOUT})")
            fields["large_prompt"] = reader.ids()
        if extended:
            fields["cda_lambda"] = _read_acceptance(reader)
        message = kind(**fields)
    elif kind is Draft:
        session = reader.raw(SESSION_BYTES)
        (keep,) = reader.take(_KEEP)
        append = reader.ids()
        message = Draft(session=session, keep=keep, append=append, draft=reader.ids())
    elif kind is Verdict:
        (accepted,) = reader.take(_COUNT)
        message = Verdict(accepted, reader.ids(), reader.floats(), reader.floats())
    else:
        message = Tokens(reader.ids())
    return message, reader.offset


def _read_acceptance(reader: _Reader) -> float:
    """An Open's acceptance extension: the only rule it carries is CDA, with its λ."""
    index, strength = reader.take(_ACCEPTANCE)
    if index >= len(ACCEPTANCE_RULES) or ACCEPTANCE_RULES[index] != CDA:
        raise FrameError(f"unknown acceptance rule {index}")
    return strength


def decode_stream(data: bytes, direction: str | None = None) -> list[Message]:
    """Every message of a concatenation of frames (a captured response body); raises on a partial frame."""
    messages, offset = [], 0
    while offset < len(data):
        message, offset = decode_prefix(data, direction, offset)
        messages.append(message)
    return messages
