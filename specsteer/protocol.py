"""The device-cloud protocol (DESIGN §2, paper Appendix D): typed messages and their wire format.

The Edge holds the Specialist and the user's private prompt; the Cloud holds
the Generalist and a generic copy of the Specialist and never sees the
history. They exchange only the messages below, each a frozen dataclass
encoded to bytes by :func:`encode` and read back by :func:`decode`.

Uplink (Edge -> Cloud), each naming its session (16 random bytes the Edge chose)
  :class:`Open`   once: the plain prompt ids (the task input, not private), the
                  decoding settings the Cloud needs and the ids that end a text.
                  On a cross-tokenizer pair (``specsteer.crosstok``) a :class:`CrossOpen`
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

Besides the messages, a Cloud reports instrumentation that is never part of a
decision (:class:`CloudReport`: its forward passes, for the generation's trace,
and the verification ratios shown in the UI) and describes itself
(:class:`CloudInfo`). How those travel is the transport's business
(``specsteer.link``, ``specsteer.remote``); they are not counted as link bytes.
"""

from __future__ import annotations

import math
import struct
import threading
from dataclasses import asdict, dataclass, field
from typing import ClassVar

import numpy as np
import torch

from .decoding import (
    ForwardLog,
    PrivateSpanGuard,
    Sampler,
    Stream,
    costeer_refine,
    draft,
    match_test,
    ratio_test,
    recover,
    residual_test,
    steering_entries,
)
from .events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM

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
UPLINK, DOWNLINK = "uplink", "downlink"
# Verification rules; "generate" is the Cloud decoding alone (the llm baseline) and streaming tokens.
RULES = ("ratio", "match", "exact", "costeer", "generate")
STREAMING_RULES = frozenset({"generate"})

_HEADER = struct.Struct("<BB")
_OPEN_SETTINGS = struct.Struct("<Bdddi?dqI")
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
    direction: ClassVar[str] = UPLINK

    session: bytes
    rule: str
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

    def __post_init__(self) -> None:
        _check_session(self.session)
        if self.rule not in RULES:
            raise FrameError(f"unknown verification rule {self.rule!r}")
        object.__setattr__(self, "prompt", _ids(self.prompt))
        object.__setattr__(self, "stop_ids", _ids(self.stop_ids))

    @property
    def streams(self) -> bool:
        """Whether the Cloud answers with a stream of Tokens instead of waiting for drafts."""
        return self.rule in STREAMING_RULES

    def summary(self) -> dict:
        return {"rule": self.rule, "alpha": self.alpha, "beta": self.beta, "temperature": self.temperature,
                "top_k": self.top_k, "bonus": self.bonus, "top_p": self.top_p, "seed": self.seed,
                "max_new_tokens": self.max_new_tokens, "stop_ids": list(self.stop_ids), "prompt": list(self.prompt)}


@dataclass(frozen=True)
class CrossOpen(Open):
    """Uplink, once, on a cross-tokenizer pair (``specsteer.crosstok``): an Open whose ``prompt`` is the
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

    def summary(self) -> dict:
        return {**super().summary(), "large_prompt": list(self.large_prompt)}


@dataclass(frozen=True)
class Draft:
    """Uplink, per round: the tokens the Edge chose since the last round, and new drafts."""

    kind: ClassVar[str] = "draft"
    code: ClassVar[int] = 2
    direction: ClassVar[str] = UPLINK

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

    ``values`` are ``z_L - beta z_S0`` on ``ids`` (recovery or bonus); with no ``ids`` they are
    full rows (exact mode), or empty. ``extra`` carries log p_S0 on ``ids`` (CoSteer).
    """

    kind: ClassVar[str] = "verdict"
    code: ClassVar[int] = 3
    direction: ClassVar[str] = DOWNLINK

    accepted: int
    ids: tuple[int, ...] = ()
    values: np.ndarray = field(default_factory=lambda: _floats(()))
    extra: np.ndarray = field(default_factory=lambda: _floats(()))

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", _ids(self.ids))
        object.__setattr__(self, "values", _floats(self.values))
        object.__setattr__(self, "extra", _floats(self.extra))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Verdict) and self.accepted == other.accepted and self.ids == other.ids
                and np.array_equal(self.values, other.values) and np.array_equal(self.extra, other.extra))

    __hash__ = None  # holds arrays

    def summary(self) -> dict:
        """What a transcript keeps: ids in full up to 256, long float arrays only by size."""
        ids = list(self.ids) if len(self.ids) <= 256 else f"<{len(self.ids)} ids>"
        return {"accepted": self.accepted, "ids": ids, "values": _shown(self.values), "extra": _shown(self.extra)}


@dataclass(frozen=True)
class Tokens:
    """Downlink: tokens the Generalist chose by itself (the ``llm`` baseline)."""

    kind: ClassVar[str] = "tokens"
    code: ClassVar[int] = 4
    direction: ClassVar[str] = DOWNLINK

    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", _ids(self.ids))

    def summary(self) -> dict:
        return {"ids": list(self.ids)}


Message = Open | CrossOpen | Draft | Verdict | Tokens
MESSAGE_TYPES: dict[int, type] = {kind.code: kind for kind in (Open, CrossOpen, Draft, Verdict, Tokens)}


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
        settings = _OPEN_SETTINGS.pack(RULES.index(message.rule), message.alpha, message.beta, message.temperature,
                                       message.top_k, message.bonus, message.top_p, message.seed,
                                       message.max_new_tokens)
        frame = head + message.session + settings + _pack_ids(message.stop_ids) + _pack_ids(message.prompt)
        if isinstance(message, CrossOpen):
            frame += _CROSS_LAYOUT.pack(CROSS_LAYOUT) + _pack_ids(message.large_prompt)
        return frame
    if isinstance(message, Draft):
        return head + message.session + _KEEP.pack(message.keep) + _pack_ids(message.append) + _pack_ids(message.draft)
    if isinstance(message, Verdict):
        return (head + _COUNT.pack(message.accepted) + _pack_ids(message.ids) + _pack_floats(message.values)
                + _pack_floats(message.extra))
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
        value = bytes(self.data[self.offset:self.offset + size])
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
        if rule >= len(RULES):
            raise FrameError(f"unknown verification rule {rule}")
        stop_ids = reader.ids()
        fields = dict(session=session, rule=RULES[rule], stop_ids=stop_ids, prompt=reader.ids(),
                      max_new_tokens=max_new_tokens, alpha=alpha, beta=beta, temperature=temperature, top_p=top_p,
                      top_k=top_k, bonus=bonus, seed=seed)
        if kind is CrossOpen:
            (layout,) = reader.take(_CROSS_LAYOUT)
            if layout != CROSS_LAYOUT:
                raise FrameError(f"cross-tokenizer layout {layout} is not supported (this side reads {CROSS_LAYOUT})")
            message = CrossOpen(**fields, large_prompt=reader.ids())
        else:
            message = Open(**fields)
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


def decode_stream(data: bytes, direction: str | None = None) -> list[Message]:
    """Every message of a concatenation of frames (a captured response body); raises on a partial frame."""
    messages, offset = [], 0
    while offset < len(data):
        message, offset = decode_prefix(data, direction, offset)
        messages.append(message)
    return messages


# --------------------------------------------------------------------------- what a Cloud says besides messages


@dataclass(frozen=True)
class CloudPass:
    """One forward pass the Cloud ran: ``after`` counts the session's messages (both ways) before it."""

    after: int
    stream: str  # GENERALIST_STREAM | GENERIC_STREAM
    tokens: int
    seconds: float


@dataclass(frozen=True)
class CloudReport:
    """Instrumentation from the Cloud, never used for a decision: its passes since the last report
    (the generation's trace needs them), the ratios of the last verification (the UI shows them),
    and how many prompt tokens each Cloud stream found in the prefix cache."""

    passes: tuple[CloudPass, ...] = ()
    ratios: tuple[float, ...] = ()
    reused: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict:
        return {"passes": [[p.after, p.stream, p.tokens, p.seconds] for p in self.passes],
                "ratios": list(self.ratios), "reused": dict(self.reused)}

    @classmethod
    def from_json(cls, data: dict) -> CloudReport:
        try:
            passes = tuple(CloudPass(int(a), str(s), int(t), float(sec)) for a, s, t, sec in data.get("passes", ()))
            ratios = tuple(float(r) for r in data.get("ratios", ()))
            reused = tuple((str(k), int(v)) for k, v in dict(data.get("reused", {})).items())
        except (TypeError, ValueError) as error:
            raise FrameError(f"unreadable Cloud report: {error}") from None
        return cls(passes, ratios, reused)


@dataclass(frozen=True)
class CloudInfo:
    """What a Cloud serves: the pairing (both sides must run the same Specialist), the vocabulary
    its logits cover, the protocol version, its limits, and ``instance`` (changes when it restarts)."""

    pairing: str
    vocab_size: int
    protocol: int = PROTOCOL_VERSION
    instance: str = ""
    runtime: str = ""
    limits: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CloudInfo:
        try:
            return cls(str(data["pairing"]), int(data["vocab_size"]), int(data["protocol"]),
                       str(data.get("instance", "")), str(data.get("runtime", "")), dict(data.get("limits", {})))
        except (KeyError, TypeError, ValueError) as error:
            raise FrameError(f"unreadable Cloud description: {error!r}") from None


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
    return None


# --------------------------------------------------------------------------- Cloud


def needs_generic(rule: str, beta: float) -> bool:
    """Whether the generic Specialist copy must run: the ratio test and CoSteer always use it, steering only when beta != 0."""
    return rule in ("ratio", "costeer") or (rule == "exact" and beta != 0)


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

    @staticmethod
    def _session_sampler(message: Open) -> Sampler:
        if message.rule == "generate":
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

    def next_tokens(self, count: int = 1) -> Tokens:
        """The ``generate`` rule (the ``llm`` baseline): the Generalist decodes alone, in its own ids."""
        ids = []
        for _ in range(count):
            token = self._sampler.choose(self.large.predict(1)[0])
            self.large.append([token])
            ids.append(token)
        return Tokens(ids)


class Cloud(_CloudStreams):
    """The Generalist and the generic Specialist copy serving one session. Knows nothing of the user's history.

    ``open`` starts the session's streams, ``verify`` answers a Draft with a Verdict, ``next_tokens``
    decodes alone (the ``generate`` rule). ``problem`` says why a Draft cannot be applied, before
    anything is changed, so that a faulty Edge gets an error and the session stays usable.
    """

    def __init__(self, generalist, generic_specialist, vocab_size: int, forward_log: ForwardLog):
        super().__init__(generalist, generic_specialist, forward_log)
        self._vocab_size = vocab_size
        self._settings: Open | None = None
        self._rows: tuple[torch.Tensor, torch.Tensor] | None = None  # last verify rows, exact mode

    def open(self, message: Open) -> None:
        self._settings = message
        self.capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        self.large = Stream(self._generalist, list(message.prompt), self._vocab_size, self._forward_log,
                            GENERALIST_STREAM, self.capacity)
        if needs_generic(message.rule, message.beta):
            self.generic = Stream(self._generic, list(message.prompt), self._vocab_size, self._forward_log,
                                  GENERIC_STREAM, self.capacity)
        self._sampler = self._session_sampler(message)

    def problem(self, message: Draft) -> str | None:
        """Why ``message`` cannot be applied to this session, or None."""
        settings = self._settings
        if settings is None or settings.streams:
            return "this session does not take drafts"
        if message.keep != -1 and settings.rule != "exact":
            return "only exact mode reports kept drafts"
        drafted = self._rows[0].shape[0] - 1 if self._rows is not None else 0
        if not -1 <= message.keep <= drafted:
            return f"keep must be between -1 and {drafted}"
        dropped = drafted - message.keep if message.keep >= 0 else 0
        if len(self.large) - dropped + len(message.append) + len(message.draft) > self.capacity:
            return "the drafts run past the token budget the session was opened with"
        return None

    def verify(self, message: Draft) -> Verdict:
        """One round: score the drafts with both Cloud models in one pass each, then decide."""
        settings = self._settings
        if settings.rule == "exact":
            self._keep(message.keep)
        streams = [s for s in (self.large, self.generic) if s is not None]
        for stream in streams:
            stream.append(list(message.append + message.draft))
        drafts = list(message.draft)
        k = len(drafts)
        large_rows = self.large.predict(k + 1)  # [k+1, V]
        generic_rows = self.generic.predict(k + 1) if self.generic else None

        if settings.rule in ("exact", "costeer"):
            return self._send_rows(large_rows, generic_rows)

        self.last_ratios = []
        if settings.rule == "ratio":
            accepted, self.last_ratios = ratio_test(large_rows, generic_rows, drafts, settings.alpha, self._sampler)
        else:
            accepted = match_test(large_rows, drafts)
        self._rewind(accepted, k, large_rows, generic_rows)
        if accepted == k and not settings.bonus:
            return Verdict(accepted)
        generic_row = generic_rows[accepted] if generic_rows is not None else None
        beta = settings.beta if generic_row is not None else 0.0
        ids, values = steering_entries(large_rows[accepted], generic_row, beta, settings.top_k)
        return Verdict(accepted, ids.tolist(), values.numpy())

    def _send_rows(self, large_rows: torch.Tensor, generic_rows: torch.Tensor | None) -> Verdict:
        """Exact and CoSteer modes: the Edge decides, so it needs the Cloud's rows (no truncation for exact)."""
        self._rows = (large_rows, generic_rows)
        settings = self._settings
        if settings.rule == "costeer":
            # Candidates: the Generalist's top-k; both Cloud log-probs on them.
            log_large = torch.log_softmax(large_rows[-1], -1)
            log_generic = torch.log_softmax(generic_rows[-1], -1)
            ids, values = steering_entries(log_large, None, 0.0, settings.top_k)  # log p_L on its top-k
            return Verdict(0, ids.tolist(), values.numpy(), log_generic[ids].numpy())
        public = large_rows - settings.beta * generic_rows if generic_rows is not None else large_rows
        return Verdict(0, values=public.reshape(-1).numpy())

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
        length = len(self.large) - (drafted - kept)
        self.large.truncate(length, large_rows[kept])
        if self.generic is not None:
            self.generic.truncate(length, generic_rows[kept])


# --------------------------------------------------------------------------- Edge


@dataclass
class Settlement:
    """What the Edge makes of a verdict: drafts kept, the token it chose (if any), ratios."""

    accepted: int
    chosen: int | None
    ratios: list[float]


class Edge:
    """The Specialist reading the private prompt. The only holder of the user's history."""

    def __init__(self, specialist, private_prompt: list[int], vocab_size: int, forward_log: ForwardLog,
                 sampler: Sampler, stop_ids: frozenset[int], rule: str, beta: float,
                 costeer: tuple[int, float, float] = (20, 10.0, 2.0), stream_name: str = EDGE_STREAM,
                 draft_confidence: float = 0.0, max_new_tokens: int = 1024, guard: PrivateSpanGuard | None = None):
        self.costeer = costeer  # iterations, step, regularization
        self.guard = guard  # drafts and chosen tokens never complete a private n-gram (decoding.PrivateSpanGuard)
        self.draft_confidence = draft_confidence
        self.stream = Stream(specialist, private_prompt, vocab_size, forward_log, stream_name,
                             len(private_prompt) + max_new_tokens + DRAFT_HEADROOM)
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
        ids, self._draft_rows = draft(self.stream, k, self.sampler, self.stop_ids, self.draft_confidence, cancel,
                                      allowed=self.allowed, guard=self.guard)
        return ids

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
        if accepted < k:
            self._rewind(accepted)
            chosen = replacement
        elif may_extend:
            private_row = self._private_row_after_drafts()
            chosen = self.sampler.choose(public[k] + self.beta * private_row if self.beta else public[k])
        else:
            return Settlement(accepted, None, ratios)
        self.stream.append([chosen])
        return Settlement(accepted, chosen, ratios)

    def _costeer_token(self, verdict: Verdict) -> int:
        ids = torch.tensor(verdict.ids)
        log_private = torch.log_softmax(self.stream.predict(1)[0], -1)[ids]
        refined = costeer_refine(
            _tensor(verdict.values), _tensor(verdict.extra), log_private,
            *self.costeer,
        )
        chosen = int(ids[self.sampler.choose(refined)])
        self.stream.append([chosen])
        return chosen


def _tensor(values: np.ndarray) -> torch.Tensor:
    """A float tensor of a message's (read-only) array; torch needs memory it may write."""
    return torch.from_numpy(np.array(values, dtype=np.float32))


# --------------------------------------------------------------------------- cross-tokenizer pairs (specsteer.crosstok)


CROSS_RULES = ("ratio", "generate")  # SpecSteer (and LightCoSteer as rounds of no drafts), and the llm baseline
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

    def __init__(self, generalist, generic_specialist, small_vocab_size: int, large_vocab_size: int,
                 vocabularies, forward_log: ForwardLog):
        super().__init__(generalist, generic_specialist, forward_log)
        self._small_vocab_size = small_vocab_size
        self._large_vocab_size = large_vocab_size
        self._vocabularies = vocabularies
        self._settings: CrossOpen | None = None
        self.large_capacity = 0  # Generalist ids the session may hold

    def open(self, message: CrossOpen) -> None:
        from .crosstok import allowed_ids

        self._settings = message
        self._allowed = allowed_ids(self._vocabularies.small)
        self.capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        self.large_capacity = (len(message.large_prompt)
                               + LARGE_TOKENS_PER_SMALL * (message.max_new_tokens + DRAFT_HEADROOM))
        self.large = Stream(self._generalist, list(message.large_prompt), self._large_vocab_size, self._forward_log,
                            GENERALIST_STREAM, self.large_capacity)
        self._sampler = self._session_sampler(message)
        if message.rule != "generate":
            self.generic = Stream(self._generic, list(message.prompt), self._small_vocab_size, self._forward_log,
                                  GENERIC_STREAM, self.capacity)

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
        if len(self.generic) + len(message.append) + len(message.draft) > self.capacity:
            return "the drafts run past the token budget the session was opened with"
        transfer = self._vocabularies.transfer
        if len(self.large) + len(transfer(message.append)[0]) + len(transfer(message.draft)[0]) > self.large_capacity:
            return "the drafted text needs more Generalist tokens than the session was opened with"
        return None

    def verify(self, message: Draft) -> Verdict:
        from .crosstok import public_symbol_values, ratios_per_draft, segment_test

        settings = self._settings
        vocabularies = self._vocabularies
        appended_large = vocabularies.transfer(message.append)[0]
        drafts = list(message.draft)
        drafted_large, segments = vocabularies.draft_segments(drafts)
        self.large.append(appended_large + drafted_large)
        self.generic.append(list(message.append) + drafts)
        k, m = len(drafts), len(drafted_large)
        large_rows = self.large.predict(m + 1)  # [m+1, V_L]
        generic_rows = self.generic.predict(k + 1)  # [k+1, V_S]
        temperature = 1.0 if self._sampler.greedy else self._sampler.temperature
        large_log_probs = _log_probs_of(large_rows[:m], drafted_large, temperature)
        generic_log_probs = _log_probs_of(generic_rows[:k], drafts, temperature)
        uniform = None if self._sampler.greedy else self._sampler.uniform
        verdict = segment_test(large_log_probs, generic_log_probs, segments, settings.alpha, uniform)
        self.last_ratios = ratios_per_draft(segments, verdict.ratios)[: verdict.small_accepted + 1]
        small_kept, large_kept = verdict.small_accepted, verdict.large_accepted
        if small_kept < k:
            self.large.truncate(len(self.large) - (m - large_kept), large_rows[large_kept])
            self.generic.truncate(len(self.generic) - (k - small_kept), generic_rows[small_kept])
        if small_kept == k and not settings.bonus:
            return Verdict(small_kept)
        symbols, values = public_symbol_values(large_rows[large_kept], vocabularies.large, generic_rows[small_kept],
                                               vocabularies.small, settings.beta, settings.top_k)
        return Verdict(small_kept, symbols.tolist(), values.numpy())


def _log_probs_of(rows: torch.Tensor, ids: list[int], temperature: float) -> torch.Tensor:
    """log softmax(rows / temperature) at ``ids``, one per row: ``[n]``."""
    if not ids:
        return rows.new_zeros(0)
    return torch.log_softmax(rows / temperature, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


class CrossEdge(Edge):
    """The Edge of a cross-tokenizer pair: it drafts only ids the Generalist can be told about, and
    turns the Cloud's symbol values into a Specialist id (``crosstok.choose_symbol``)."""

    def __init__(self, *args, vocabulary, **kwargs):
        from .crosstok import allowed_ids

        super().__init__(*args, **kwargs)
        self.vocabulary = vocabulary
        self.allowed = allowed_ids(vocabulary)[: self.stream.vocab_size]

    def _choose(self, verdict: Verdict, private_row: torch.Tensor | None) -> int:
        from .crosstok import SYMBOLS, choose_symbol, complete_symbol

        if any(s >= SYMBOLS for s in verdict.ids) or len(verdict.ids) != verdict.values.size:
            raise ValueError("the Cloud's verdict does not name symbols of the common byte space")
        symbol = choose_symbol(torch.tensor(verdict.ids), _tensor(verdict.values), private_row, self.vocabulary,
                               self.beta, self.sampler.choose)
        return complete_symbol(symbol, private_row, self.vocabulary, self.sampler.choose)

    def _private_row_after_drafts(self) -> torch.Tensor:
        """The Specialist's logits after the last draft: a bonus symbol is completed from them whatever beta."""
        return self.stream.predict(1)[0].masked_fill(~self.allowed, -math.inf)
