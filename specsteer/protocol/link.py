"""The Edge's end of the device-cloud link: typed messages out, typed messages back, every byte counted.

The engine talks to a :class:`Link` and nothing else. A Link turns each message into its frame
(``specsteer.protocol.wire``), holds the thread as the emulated network would (``LinkConditions``,
through ``link_emulation.LinkEmulator``), records the frame in the transcript and the trace, and hands
it to a :class:`Transport`, which carries frames to a Cloud service and brings its answers back.
Two transports exist and nothing else differs between them:

* :class:`LocalTransport` calls a ``CloudService`` in this process (the default: ``InProcessCloud``);
* ``specsteer.cloud.client.HttpTransport`` posts the same frames to ``python -m specsteer cloud``.

Whatever the transport, a failure reaches the engine as a :class:`CloudError` subclass whose
message says what happened and what to do: the Cloud cannot be reached or went away
(:class:`CloudUnreachable`), it no longer knows the session (:class:`SessionGone`: expired, closed,
or the Cloud restarted), it speaks another protocol version (:class:`VersionMismatch`), or it
refused a request (:class:`CloudRefused`: malformed or oversized frame, a limit, the shared secret,
no room for another session).

The Cloud's instrumentation (its forward passes and verification ratios, :class:`CloudReport`)
comes with its answers, or for a streamed answer when the session closes, and is merged into the
generation's trace at the position the Cloud ran it: a pass that led to message ``n`` goes right
before message ``n``.
"""

from __future__ import annotations

import secrets
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from specsteer.method.decoding import ForwardLog
from specsteer.method.events import Finished, LinkMessage, TraceStep
from specsteer.method.token_details import CloudScores
from specsteer.protocol.cloud_reports import CloudInfo, CloudReport
from specsteer.protocol.emulation import LinkConditions, LinkEmulator
from specsteer.protocol.wire import (
    DOWNLINK,
    PROTOCOL_VERSION,
    SESSION_BYTES,
    UPLINK,
    Draft,
    FrameError,
    Message,
    Open,
    Tokens,
    UnsupportedVersion,
    Uplink,
    Verdict,
    decode,
    encode,
)

# --------------------------------------------------------------------------- errors the Edge can see


class CloudError(RuntimeError):
    """The Cloud could not serve this generation. ``code`` names the cause (the service's error code);
    ``partial`` is set by the engine to what the generation had emitted before the failure."""

    def __init__(self, message: str, code: str = "error", status: int | None = None):
        super().__init__(message)
        self.code = code
        self.status = status
        self.partial: Finished | None = None  # set by the engine


class CloudUnreachable(CloudError):
    """No answer: the Cloud is not running, the connection broke, or it took too long."""


class SessionGone(CloudError):
    """The Cloud does not know this generation's session any more (expired, closed, or it restarted)."""


class VersionMismatch(CloudError):
    """The Cloud speaks another protocol version than this Edge."""


class CloudEngineFailed(CloudError):
    """The Cloud's serving engine (a vLLM server behind it) failed or did not answer; the message names it."""


class CloudRefused(CloudError):
    """The Cloud refused a request: a malformed or oversized frame, a limit, the shared secret, or no room."""


_ERROR_TYPES: dict[str, type[CloudError]] = {
    "unknown-session": SessionGone,
    "expired-session": SessionGone,
    "closed-session": SessionGone,
    "reclaimed-session": SessionGone,
    "lifetime-session": SessionGone,
    "version": VersionMismatch,
    "unreachable": CloudUnreachable,
    "engine-unavailable": CloudEngineFailed,
}

# What a person can do about each refusal, appended to the Cloud's own words.
_ADVICE = {
    "unknown-session": "Run the generation again.",
    "expired-session": "Run the generation again (or ask for a longer --idle-timeout-s on the Cloud).",
    "closed-session": "Run the generation again.",
    "reclaimed-session": "Run the generation again.",
    "lifetime-session": "Run the generation again, or with a smaller token budget.",
    "version": "Update the Edge or the Cloud so that both run the same SpecSteer version.",
    "unauthorized": "Set the Cloud's shared secret on the Edge (SPECSTEER_CLOUD_SECRET).",
    "busy": "Try again in a moment.",
}


def cloud_error(code: str, message: str, status: int | None = None) -> CloudError:
    """The Edge's exception for an error the Cloud reported (the same for every transport)."""
    advice = _ADVICE.get(code)
    text = f"{message} {advice}" if advice else message
    return _ERROR_TYPES.get(code, CloudRefused)(text, code, status)


# --------------------------------------------------------------------------- transports


class Arrival(NamedTuple):
    """A downlink frame, and when it reached the Edge on the link's clock if the sender did not wait
    for the Edge to read it (a concurrent stream); None when the Edge was waiting for it."""

    frame: bytes
    received_at: float | None = None


@dataclass
class Reply:
    """A Cloud's answer to one uplink frame: its downlink frames (none, one, or a stream read lazily)
    and its report, or None when the report comes with the session's close (streamed answers)."""

    frames: Iterable[Arrival]
    report: CloudReport | None = None


class Transport(Protocol):
    """Carries frames between a Link and one Cloud service."""

    def info(self) -> CloudInfo: ...

    def exchange(self, frame: bytes) -> Reply: ...

    def close_session(self, session: bytes) -> CloudReport: ...


@runtime_checkable
class EdgeReadyHint(Protocol):
    """A transport whose Cloud can use the hint that the Edge has drafted its first token (an in-process
    Cloud that reads its prompts ``after-first-draft``, specsteer.cloud.read_ahead). No frame carries it: a
    Cloud on another machine is never told."""

    def edge_ready(self, session: bytes) -> None: ...


@runtime_checkable
class DetailsHint(Protocol):
    """A transport whose Cloud, in this process, can hand back each draft's numbers with its instrumentation
    (``CloudReport.details``, method.token_details). No frame carries the request nor the numbers."""

    def ask_details(self) -> None: ...


class CloudEndpoint(Protocol):
    """Where a generation's Cloud is: builds a transport for one generation."""

    def transport(self) -> Transport: ...


# --------------------------------------------------------------------------- the link

_Answer = TypeVar("_Answer", Verdict, Tokens)  # a downlink message the Edge waits for


@dataclass
class Link:
    """The Edge's channel to a Cloud: typed messages, every frame recorded with its exact size.

    ``conditions`` (None: no delay) make every frame hold the caller as a network with that
    round-trip time and bandwidth would (specsteer.evaluation.deployment explains the rule); the time waited is
    the frame's ``seconds`` in the trace. ``emulator`` replaces the one built from ``conditions``
    (tests pass one on a virtual clock). ``forward_log`` is the generation's: the Cloud's passes are
    merged into its counts and its trace, which is also the trace of the link's frames.
    """

    transport: Transport
    forward_log: ForwardLog = field(default_factory=ForwardLog)
    conditions: LinkConditions | None = None
    emulator: LinkEmulator | None = field(default=None, repr=False)
    transcript: list[LinkMessage] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=lambda: {UPLINK: 0, DOWNLINK: 0})
    last_ratios: list[float] = field(default_factory=list)  # the Cloud's, for display only
    last_scores: list[CloudScores] = field(default_factory=list)  # each draft's Cloud numbers, when asked (display)
    # The session's id: random, chosen here so that opening needs no answer (no extra round trip).
    session: bytes = field(default_factory=lambda: secrets.token_bytes(SESSION_BYTES))

    def __post_init__(self) -> None:
        self._open = False
        if self.emulator is None and self.conditions is not None:
            self.emulator = LinkEmulator(self.conditions)
        elif self.emulator is not None:
            self.conditions = self.emulator.conditions
        self._info: CloudInfo | None = None

    @property
    def trace(self) -> list[TraceStep]:
        return self.forward_log.trace

    def info(self) -> CloudInfo:
        if self._info is None:
            self._info = self.transport.info()
        return self._info

    @property
    def known_info(self) -> CloudInfo | None:
        """The Cloud's description if this link has asked for it already (asks nothing)."""
        return self._info

    def open(self, message: Open) -> Generator[Tokens, None, None]:
        """Start the session (sent now); iterate the result for a streaming rule's tokens."""
        if self._open:
            raise RuntimeError("a link carries one session")
        self._open = True
        return self._receive(self._send(message), Tokens)

    def verify(self, draft: Draft) -> Verdict:
        """One round trip: the drafts up, the Cloud's verdict down."""
        reply = self._send(draft)
        verdicts = list(self._receive(reply, Verdict))
        if len(verdicts) != 1:
            raise CloudRefused(f"the Cloud answered a draft with {len(verdicts)} verdicts instead of one", "malformed")
        return verdicts[0]

    def cloud_drafts(self, draft: Draft) -> Tokens:
        """One P³ round trip (the ``cloud-draft`` rule): the tokens the Edge kept or chose up, the Cloud's
        next drafts down."""
        reply = self._send(draft)
        answers = list(self._receive(reply, Tokens))
        if len(answers) != 1:
            raise CloudRefused(f"the Cloud answered with {len(answers)} sets of drafts instead of one", "malformed")
        return answers[0]

    def ask_details(self) -> bool:
        """Ask an in-process Cloud for each draft's numbers (before the Open); False when the transport
        cannot give them (a Cloud on another machine is never asked: nothing extra crosses the link)."""
        if isinstance(self.transport, DetailsHint):
            self.transport.ask_details()
            return True
        return False

    def edge_ready(self) -> None:
        """The Edge has read its prompt and drafted: a hint to a Cloud in this process that may start
        reading its prompts now. Nothing crosses the link; without an open session, or over a transport
        that takes no hint, it does nothing."""
        if self._open and isinstance(self.transport, EdgeReadyHint):
            self.transport.edge_ready(self.session)

    def close(self) -> bool:
        """End the session; merges the Cloud's last report. Never raises a CloudError: False when the
        Cloud could not be told (its idle expiry then frees the session)."""
        if not self._open:
            return True
        self._open = False
        try:
            report = self.transport.close_session(self.session)
        except CloudError:
            return False
        self._absorb(report, final=True)
        return True

    # ----------------------------------------------------------------------- frames

    def _send(self, message: Uplink) -> Reply:
        if message.session != self.session:
            raise ValueError("a message for another session")
        frame = encode(message)
        self._record(message, len(frame), self._carry(UPLINK, len(frame)))
        reply = self.transport.exchange(frame)
        if reply.report is not None:
            self._absorb(reply.report, final=False)
        return reply

    def _receive(self, reply: Reply, kind: type[_Answer]) -> Generator[_Answer, None, None]:
        for arrival in reply.frames:
            try:
                message = decode(arrival.frame, DOWNLINK)
            except UnsupportedVersion as error:
                raise VersionMismatch(
                    f"The Cloud answered in protocol version {error.version}; this Edge speaks "
                    f"version {PROTOCOL_VERSION}. Update the Edge or the Cloud so that both run "
                    "the same SpecSteer version.",
                    "version",
                ) from None
            except FrameError as error:
                raise CloudRefused(f"The Cloud sent an unreadable message: {error}.", "malformed") from None
            if not isinstance(message, kind):
                raise CloudRefused(f"The Cloud sent a {message.kind} message where a {kind.kind} was due.", "malformed")
            self._record(message, len(arrival.frame), self._carry(DOWNLINK, len(arrival.frame), arrival.received_at))
            yield message

    def _carry(self, direction: str, size: int, sent_at: float | None = None) -> float:
        return self.emulator.carry(direction, size, sent_at) if self.emulator is not None else 0.0

    def _record(self, message: Message, size: int, waited: float) -> None:
        self.transcript.append(LinkMessage(message.direction, message.kind, message.summary(), size))
        self.totals[message.direction] += size
        self.trace.append(TraceStep("message", message.direction, size, waited))

    def _absorb(self, report: CloudReport, final: bool) -> None:
        """Merge the Cloud's passes into the trace; keep its ratios for display."""
        if not final:
            self.last_ratios = list(report.ratios)
            self.last_scores = list(report.details)
        for stream, reused in report.reused:
            self.forward_log.reused[stream] = reused
        messages = [index for index, step in enumerate(self.trace) if step.kind == "message"]
        # A pass ran before the session's message number ``after``; passes whose message never reached
        # this Edge (a stream cut short) are dropped at the close. Inserted back to front so that the
        # positions found above stay valid.
        placed = []
        for cloud_pass in report.passes:
            if cloud_pass.after < len(messages):
                placed.append((messages[cloud_pass.after], cloud_pass))
            elif not final:
                placed.append((len(self.trace), cloud_pass))
        for _, cloud_pass in placed:  # counted in the order they ran: a stream's first pass is its prefill
            self.forward_log.count(cloud_pass.stream, cloud_pass.seconds)
        for position, cloud_pass in reversed(placed):
            self.trace.insert(position, TraceStep("forward", cloud_pass.stream, cloud_pass.tokens, cloud_pass.seconds))
