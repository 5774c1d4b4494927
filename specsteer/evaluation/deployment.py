"""Deployment projection: a generation's speed on two machines joined by a network, replayed from its trace.

The bundled profiles, each number with its source: ``deployment_profiles``; the rows of projected speeds that
``bench project`` and the Dashboard show: ``deployment_rows`` (both in ``specsteer.evaluation``).

Every generation records its timeline (``GenerationStats.trace``, a list of
:class:`~specsteer.method.events.TraceStep`): each forward pass (which model stream, how many tokens,
how long) and each link message (which direction, how many bytes), in the order they happened.
This module replays such a timeline under a :class:`DeploymentProfile` -- the device's
Specialist speed, the cloud's Generalist and generic-Specialist speed as a function of tokens per
pass, and the network's :class:`~specsteer.protocol.emulation.LinkConditions` -- to project how long the
same generation would take deployed. (``specsteer.protocol.emulation`` applies the same rule at run time.)

The replay rule (two clocks)
----------------------------
The Edge (device) and the Cloud each keep a clock, starting at 0.

* A forward pass advances the clock of the side that runs it: ``specialist+`` runs on the Edge,
  ``generalist`` and ``specialist0`` in the Cloud. (A trace with no link messages ran on the device
  alone -- the ``slm``/``slm+`` baselines -- so all of its passes are the device Specialist's, whatever
  the stream is called.) The first pass of a stream is its prompt prefill and is charged at the
  profile's prefill cost; later passes at its decode cost, ``base + per_token * tokens``.
* Every pass also costs its side's host overhead per logits row it hands over, and every message its
  sender's host overhead per message (:class:`HostOverhead`: the Python loop, handing the logits to the host, sampling, the
  ratio test and steering, top-k, frames, KV-cache crops), Edge and Cloud apart.
* The Cloud's two passes of one round (Generalist, then generic Specialist, with no message in
  between) run one after the other, or side by side when the profile says ``cloud_parallel``.
* A message leaves its sender at the sender's clock, waits for its direction's wire to be free
  (messages of one direction are serialized on the wire), takes ``bytes * 8 / bandwidth`` to
  transmit and arrives ``rtt / 2`` later. The receiver's clock moves to the arrival if it is
  behind: every step the receiver takes after a message in the trace is taken to depend on it.
  The sender never waits for anything it sent.

Nothing in the rule names a method. Round trips come out of who waits for what: in ``sd`` and
``specsteer`` the Edge waits for each round's verdict and the Cloud for each draft, so every round
pays a full round trip; ``lightcosteer``/``costeer`` are rounds of one token, so they pay one per
token; the ``llm`` baseline's Cloud sends token after token without waiting for a reply, so its
messages are pipelined behind its own decoding and the whole stream pays the latency once (plus the
uplink of the prompt). The projection's end is the later of the two clocks.

Prompt reads (:class:`PromptReads`)
----------------------------------
A recorded run may have found part of a prompt in a prefix cache (an evaluation grid runs every method on
one record's prompts; ``GenerationStats.reused_tokens`` says how many tokens per stream), so its first pass
read only the rest. A deployed request is charged what it would read, by one rule: **every prompt token is
read** (:data:`FRESH`, what every figure shows), except the tokens :class:`PromptReads` grants to a side's
cache -- only where the deployment would hold them: the Edge's own earlier request over the same private
prompt (``edge_cached``: a regenerate, or a user's next request whose private prompt begins the same), the
Cloud's prefix cache shared across users (``cloud_cached``: the leading tokens of the plain prompt that
every request of the task template shares). Never the recorded run's hits: they came from other methods
run on the same prompt, which a deployment does not do. A trace stored without ``reused_tokens`` (before
they were recorded) is charged as recorded. :data:`AS_RECORDED` replays what ran, hits included (the
self-check of ``specsteer.evaluation.bench_link.measured_profile``).

The time split follows the critical path: each clock carries how much of its time was device
compute, cloud compute and link (latency, transmission and waiting for the wire); a receiver that
waits for a message inherits the sender's split plus the link time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple, Protocol

from specsteer.method.costs import PassCost, check_number
from specsteer.method.events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM, STREAMS, TraceStep
from specsteer.protocol.emulation import LinkConditions
from specsteer.protocol.wire import DIRECTIONS, DOWNLINK, UPLINK

# The three model roles a profile prices, and the streams they run.
SPECIALIST, GENERALIST, GENERIC = "specialist", "generalist", "generic_specialist"
ROLES = (SPECIALIST, GENERALIST, GENERIC)
_CLOUD_ROLE = {GENERALIST_STREAM: GENERALIST, GENERIC_STREAM: GENERIC}


# --------------------------------------------------------------------------- what things cost


@dataclass(frozen=True)
class StreamCost:
    """One model's pass costs on one machine: the stream's first pass (prompt prefill), the rest."""

    decode: PassCost
    prefill: PassCost

    def seconds(self, tokens: int, first: bool) -> float:
        return (self.prefill if first else self.decode).seconds(tokens)

    @classmethod
    def from_rates(cls, decode_tok_per_s: float, prompt_tok_per_s: float) -> StreamCost:
        """From published rates: a one-token pass takes ``1/decode``; every further token in a pass,
        like every prompt token, costs ``1/prompt`` (the pass is memory-bound at one token and
        compute-bound per extra token)."""
        check_number("decode_tok_per_s", decode_tok_per_s, positive=True)
        check_number("prompt_tok_per_s", prompt_tok_per_s, positive=True)
        per_token = 1.0 / prompt_tok_per_s
        if 1.0 / decode_tok_per_s < per_token:
            raise ValueError("a one-token pass cannot be faster than one prompt token")
        return cls(PassCost(1.0 / decode_tok_per_s - per_token, per_token), PassCost(0.0, per_token))


@dataclass(frozen=True)
class HostOverhead:
    """One side's host time outside the model passes: per logits row its passes hand to the host (the loop,
    sampling, the ratio test and steering, top-k over the vocabulary, KV-cache crops: a row for each token
    of a later pass, one for a stream's first pass, whose prompt yields its last row) and per message it
    sends (settling the round, encoding the frame)."""

    per_row_s: float = 0.0
    per_message_s: float = 0.0

    def __post_init__(self) -> None:
        check_number("per_row_s", self.per_row_s)
        check_number("per_message_s", self.per_message_s)

    def plus(self, other: HostOverhead) -> HostOverhead:
        return HostOverhead(self.per_row_s + other.per_row_s, self.per_message_s + other.per_message_s)


def host_rows(step: TraceStep, first: bool) -> int:
    """The logits rows a pass hands to the host, as the host overhead counts them."""
    return 1 if first else step.size


NO_HOST_OVERHEAD = HostOverhead()


@dataclass(frozen=True)
class PromptReads:
    """Which prompt tokens a projected request reads (the rule: the module docstring).

    ``recorded``: charge each stream's first pass as the trace recorded it, the recorded run's cache hits
    kept. Otherwise the whole prompt (the recorded first pass plus the stream's ``reused_tokens``) less the
    tokens the deployment's cache holds: ``edge_cached`` leading tokens of the Edge's prompt, ``cloud_cached``
    of the Cloud's (both Cloud models read the plain prompt). At least one token is always read.
    """

    recorded: bool = False
    edge_cached: int = 0
    cloud_cached: int = 0

    def __post_init__(self) -> None:
        if self.edge_cached < 0 or self.cloud_cached < 0:
            raise ValueError("cached prompt tokens cannot be negative")

    def first_pass(self, size: int, reused: int | None, on_edge: bool) -> int:
        """Tokens charged for a stream's first pass, recorded at ``size`` with ``reused`` tokens found cached
        (None: not recorded)."""
        if self.recorded or reused is None:
            return size
        whole = size + reused
        cached = self.edge_cached if on_edge else self.cloud_cached
        return max(1, whole - cached)

    def describe(self) -> str:
        if self.recorded:
            return "as recorded (the recorded run's prefix-cache hits kept)"
        held = [
            f"{n} leading tokens of the {side} prompt cached"
            for side, n in (("Edge's", self.edge_cached), ("Cloud's", self.cloud_cached))
            if n
        ]
        return "fresh: every prompt token read" + (f" but {' and '.join(held)}" if held else "")


FRESH = PromptReads()
AS_RECORDED = PromptReads(recorded=True)


class Source(NamedTuple):
    """Where one number of a profile comes from: ``number`` names it (see ``profile_numbers``)."""

    number: str
    text: str


@dataclass(frozen=True)
class DeploymentProfile:
    """Speeds of a deployment: the device, the cloud, the link between them, and a source for each.

    A role's cost may be ``None`` when it is unknown (a profile measured from traces that never ran
    that model); projecting a trace that needs it then fails. ``cloud_parallel``: the Cloud runs a
    round's Generalist and generic-Specialist passes side by side instead of one after the other.
    ``edge_host`` / ``cloud_host``: each side's host time outside the model passes (:class:`HostOverhead`).
    """

    name: str
    label: str
    specialist: StreamCost | None
    generalist: StreamCost | None
    generic_specialist: StreamCost | None
    link: LinkConditions
    sources: tuple[Source, ...]
    cloud_parallel: bool = False
    edge_host: HostOverhead = NO_HOST_OVERHEAD
    cloud_host: HostOverhead = NO_HOST_OVERHEAD

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ValueError("a profile needs a name")
        if not self.label or not self.label.strip():
            raise ValueError(f"profile {self.name!r} needs a label")
        needed = set(profile_numbers(self))
        given = [source.number for source in self.sources]
        unknown = sorted(set(given) - needed)
        missing = sorted(needed - set(given))
        empty = sorted(source.number for source in self.sources if not source.text.strip())
        problems = []
        if missing:
            problems.append(f"no source for {', '.join(missing)}")
        if unknown:
            problems.append(f"sources for numbers it does not have: {', '.join(unknown)}")
        if empty:
            problems.append(f"empty source text for {', '.join(empty)}")
        if len(given) != len(set(given)):
            problems.append("a number has two sources")
        if problems:
            raise ValueError(f"profile {self.name!r}: " + "; ".join(problems))

    def cost(self, role: str) -> StreamCost:
        cost = getattr(self, role)
        if cost is None:
            raise ValueError(f"profile {self.name!r} has no cost for the {role.replace('_', ' ')}")
        return cost

    def source(self, number: str) -> str:
        for source in self.sources:
            if source.number == number:
                return source.text
        raise KeyError(number)

    def at_rtt(self, rtt_ms: float) -> DeploymentProfile:
        """The same deployment at another round-trip time (for RTT sweeps)."""
        if rtt_ms == self.link.rtt_ms:
            return self
        sources = tuple(
            s if s.number != "link.rtt_ms" else Source(s.number, "set for an RTT sweep") for s in self.sources
        )
        return replace(self, link=self.link.with_rtt(rtt_ms), sources=sources)


HOST_NUMBERS = tuple(
    f"{side}.{part}" for side in ("edge_host", "cloud_host") for part in ("per_row_s", "per_message_s")
)


def profile_numbers(profile: DeploymentProfile) -> list[str]:
    """The names of every number and setting of a profile that needs a source."""
    numbers = []
    for role in ROLES:
        if getattr(profile, role) is not None:
            numbers += [f"{role}.decode", f"{role}.prefill"]
    numbers += [
        "link.rtt_ms",
        "link.uplink_kbps",
        "link.downlink_kbps",
        "link.overhead_bytes",
        "cloud_parallel",
        *HOST_NUMBERS,
    ]
    return numbers


# --------------------------------------------------------------------------- replaying a trace


class TracedRun(Protocol):
    """What a projection needs of a generation (``GenerationStats`` has it); read only."""

    @property
    def trace(self) -> Sequence[TraceStep]: ...
    @property
    def seconds(self) -> float: ...
    @property
    def new_tokens(self) -> int: ...
    @property
    def reused_tokens(self) -> Mapping[str, int]: ...


class MeasuredRun(NamedTuple):
    """A trace with its measured wall time and tokens, when there is no GenerationStats at hand;
    ``reused_tokens``: prompt tokens each stream found cached (empty: not recorded)."""

    trace: Sequence[TraceStep]
    seconds: float
    new_tokens: int
    reused_tokens: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True)
class TimeSplit:
    """Seconds of a critical path spent in device compute, cloud compute and on the link; ``host_s`` is the
    part of the first two that is host overhead (:class:`HostOverhead`)."""

    device_s: float = 0.0
    cloud_s: float = 0.0
    link_s: float = 0.0
    host_s: float = 0.0

    def plus(self, device_s: float = 0.0, cloud_s: float = 0.0, link_s: float = 0.0, host_s: float = 0.0) -> TimeSplit:
        return TimeSplit(self.device_s + device_s, self.cloud_s + cloud_s, self.link_s + link_s, self.host_s + host_s)


@dataclass(frozen=True)
class Projection:
    """A generation (or several, summed) projected onto a deployment profile."""

    profile: str
    rtt_ms: float
    seconds: float
    tokens: int
    round_trips: int  # exchanges in which the Edge waited for the Cloud's reply
    uplink_bytes: int
    downlink_bytes: int
    device_s: float  # the time split along the critical path; the three add up to ``seconds``
    cloud_s: float
    link_s: float
    host_s: float = 0.0  # of device_s and cloud_s, the host overhead on the critical path
    prompt_tokens: int = 0  # prompt tokens charged to the streams' first passes (PromptReads)

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "tok_per_s": self.tok_per_s}


def as_trace(rows: Iterable) -> list[TraceStep]:
    """Trace steps from stored rows (JSON turns each TraceStep into a list; dicts also work)."""
    steps = []
    for row in rows:
        step = TraceStep(**row) if isinstance(row, Mapping) else TraceStep(*row)
        if step.kind == "forward":
            if step.who not in STREAMS:
                raise ValueError(f"unknown model stream {step.who!r} in a trace")
        elif step.kind == "message":
            if step.who not in DIRECTIONS:
                raise ValueError(f"unknown link direction {step.who!r} in a trace")
        else:
            raise ValueError(f"unknown trace step kind {step.kind!r}")
        if step.size < 0:
            raise ValueError(f"negative size in trace step {step!r}")
        steps.append(step)
    return steps


def is_device_only(trace: Sequence[TraceStep]) -> bool:
    """A trace without link messages ran on the device alone (the slm / slm+ baselines)."""
    return not any(step.kind == "message" for step in trace)


def role_of(stream: str, device_only: bool) -> str:
    """The profile role that prices a stream's passes."""
    if device_only or stream == EDGE_STREAM:
        return SPECIALIST  # on the device alone, whatever prompt it reads, the Specialist runs there
    return _CLOUD_ROLE[stream]


@dataclass
class _Clock:
    """One side's time, and how the critical path that led to it splits."""

    on_device: bool
    host: HostOverhead
    at: float = 0.0
    path: TimeSplit = field(default_factory=TimeSplit)

    def compute(self, seconds: float, host_s: float = 0.0) -> None:
        """``seconds`` of this side's work, of which ``host_s`` host overhead."""
        self.at += seconds
        if self.on_device:
            self.path = self.path.plus(device_s=seconds, host_s=host_s)
        else:
            self.path = self.path.plus(cloud_s=seconds, host_s=host_s)


class _Replay:
    """The two-clock replay of one trace (see the module docstring)."""

    def __init__(self, profile: DeploymentProfile, device_only: bool, reads: PromptReads, reused: Mapping[str, int]):
        self.profile = profile
        self.device_only = device_only
        self.reads = reads
        self.reused = reused
        self.edge = _Clock(on_device=True, host=profile.edge_host)
        self.cloud = _Clock(on_device=False, host=profile.cloud_host)
        self.wire_free = {UPLINK: 0.0, DOWNLINK: 0.0}
        self.seen_streams: set[str] = set()
        self.cloud_round_start: float | None = None  # when this round's first cloud pass began
        self.cloud_round_streams: set[str] = set()
        self.last_direction: str | None = None
        self.round_trips = 0
        self.prompt_tokens = 0

    def forward(self, step: TraceStep) -> None:
        first = step.who not in self.seen_streams
        self.seen_streams.add(step.who)
        role = role_of(step.who, self.device_only)
        clock = self.edge if role == SPECIALIST else self.cloud
        tokens = step.size
        if first:
            recorded = self.reused.get(step.who) if self.reused else None
            tokens = self.reads.first_pass(step.size, recorded, on_edge=clock is self.edge)
            self.prompt_tokens += tokens
        host = clock.host.per_row_s * host_rows(step, first)
        seconds = self.profile.cost(role).seconds(tokens, first) + host
        if clock is self.edge:
            self.edge.compute(seconds, host)
            return
        start = self.cloud.at
        round_start = self.cloud_round_start
        joins_round = round_start is not None and step.who not in self.cloud_round_streams
        if self.profile.cloud_parallel and round_start is not None and joins_round:
            start = round_start  # side by side with the round's other model
        else:
            self.cloud_round_start, self.cloud_round_streams = start, set()
        self.cloud_round_streams.add(step.who)
        added = max(0.0, start + seconds - self.cloud.at)
        self.cloud.compute(added, min(host, added))

    def message(self, step: TraceStep) -> None:
        sender, receiver = (self.edge, self.cloud) if step.who == UPLINK else (self.cloud, self.edge)
        sender.compute(sender.host.per_message_s, sender.host.per_message_s)  # settling the round, the frame
        link = self.profile.link
        start = max(sender.at, self.wire_free[step.who])
        self.wire_free[step.who] = start + link.transmission_s(step.who, step.size)
        arrival = self.wire_free[step.who] + link.one_way_s
        if arrival > receiver.at:
            receiver.at = arrival
            receiver.path = sender.path.plus(link_s=arrival - sender.at)
        if step.who == DOWNLINK and self.last_direction == UPLINK:
            self.round_trips += 1
        self.last_direction = step.who
        self.cloud_round_start, self.cloud_round_streams = None, set()

    def end(self) -> _Clock:
        return self.edge if self.edge.at >= self.cloud.at else self.cloud


def project(
    trace: Iterable,
    profile: DeploymentProfile,
    tokens: int,
    reused: Mapping[str, int] | None = None,
    reads: PromptReads = FRESH,
) -> Projection:
    """Replay one generation's trace under ``profile``; ``tokens`` is what it emitted, ``reused`` the prompt
    tokens each stream found cached when it ran (``GenerationStats.reused_tokens``; None or empty: not
    recorded), ``reads`` the rule for what the deployed request reads of its prompts."""
    steps = as_trace(trace)
    replay = _Replay(profile, is_device_only(steps), reads, reused or {})
    uplink = downlink = 0
    for step in steps:
        if step.kind == "forward":
            replay.forward(step)
        else:
            replay.message(step)
            if step.who == UPLINK:
                uplink += step.size
            else:
                downlink += step.size
    end = replay.end()
    return Projection(
        profile.name,
        profile.link.rtt_ms,
        end.at,
        tokens,
        replay.round_trips,
        uplink,
        downlink,
        end.path.device_s,
        end.path.cloud_s,
        end.path.link_s,
        end.path.host_s,
        replay.prompt_tokens,
    )


def project_runs(runs: Iterable[TracedRun], profile: DeploymentProfile, reads: PromptReads = FRESH) -> Projection:
    """Several generations projected one after the other: times, tokens and bytes add up."""
    projections = [project(run.trace, profile, run.new_tokens, run.reused_tokens, reads) for run in runs]
    if not projections:
        raise ValueError("no runs to project")
    return Projection(
        profile.name,
        profile.link.rtt_ms,
        sum(p.seconds for p in projections),
        sum(p.tokens for p in projections),
        sum(p.round_trips for p in projections),
        sum(p.uplink_bytes for p in projections),
        sum(p.downlink_bytes for p in projections),
        sum(p.device_s for p in projections),
        sum(p.cloud_s for p in projections),
        sum(p.link_s for p in projections),
        sum(p.host_s for p in projections),
        sum(p.prompt_tokens for p in projections),
    )
