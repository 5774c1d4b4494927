"""Deployment projection: a generation's speed on two machines joined by a network, and the profiles.

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

The time split follows the critical path: each clock carries how much of its time was device
compute, cloud compute and link (latency, transmission and waiting for the wire); a receiver that
waits for a message inherits the sender's split plus the link time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple, Protocol

from specsteer.method.costs import PassCost, PassSample, check_number, fit_pass_cost, flat_cost, proportional_cost
from specsteer.method.events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM, STREAMS, TraceStep
from specsteer.protocol.emulation import NO_LINK, LinkConditions
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
    ``overhead_per_step_s``: host time per trace step outside the model passes (sampling, the
    verification test, serialization), charged to the side taking the step.
    """

    name: str
    label: str
    specialist: StreamCost | None
    generalist: StreamCost | None
    generic_specialist: StreamCost | None
    link: LinkConditions
    sources: tuple[Source, ...]
    cloud_parallel: bool = False
    overhead_per_step_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ValueError("a profile needs a name")
        if not self.label or not self.label.strip():
            raise ValueError(f"profile {self.name!r} needs a label")
        check_number("overhead_per_step_s", self.overhead_per_step_s)
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
        "overhead_per_step_s",
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


class MeasuredRun(NamedTuple):
    """A trace with its measured wall time and tokens, when there is no GenerationStats at hand."""

    trace: Sequence[TraceStep]
    seconds: float
    new_tokens: int


@dataclass(frozen=True)
class TimeSplit:
    """Seconds of a critical path spent in device compute, cloud compute and on the link."""

    device_s: float = 0.0
    cloud_s: float = 0.0
    link_s: float = 0.0

    def plus(self, device_s: float = 0.0, cloud_s: float = 0.0, link_s: float = 0.0) -> TimeSplit:
        return TimeSplit(self.device_s + device_s, self.cloud_s + cloud_s, self.link_s + link_s)


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
    at: float = 0.0
    path: TimeSplit = field(default_factory=TimeSplit)

    def compute(self, seconds: float) -> None:
        self.at += seconds
        self.path = self.path.plus(device_s=seconds) if self.on_device else self.path.plus(cloud_s=seconds)


class _Replay:
    """The two-clock replay of one trace (see the module docstring)."""

    def __init__(self, profile: DeploymentProfile, device_only: bool):
        self.profile = profile
        self.device_only = device_only
        self.edge = _Clock(on_device=True)
        self.cloud = _Clock(on_device=False)
        self.wire_free = {UPLINK: 0.0, DOWNLINK: 0.0}
        self.seen_streams: set[str] = set()
        self.cloud_round_start: float | None = None  # when this round's first cloud pass began
        self.cloud_round_streams: set[str] = set()
        self.last_direction: str | None = None
        self.round_trips = 0

    def forward(self, step: TraceStep) -> None:
        first = step.who not in self.seen_streams
        self.seen_streams.add(step.who)
        role = role_of(step.who, self.device_only)
        seconds = self.profile.cost(role).seconds(step.size, first) + self.profile.overhead_per_step_s
        if role == SPECIALIST:
            self.edge.compute(seconds)
            return
        start = self.cloud.at
        round_start = self.cloud_round_start
        joins_round = round_start is not None and step.who not in self.cloud_round_streams
        if self.profile.cloud_parallel and round_start is not None and joins_round:
            start = round_start  # side by side with the round's other model
        else:
            self.cloud_round_start, self.cloud_round_streams = start, set()
        self.cloud_round_streams.add(step.who)
        self.cloud.compute(max(0.0, start + seconds - self.cloud.at))

    def message(self, step: TraceStep) -> None:
        sender, receiver = (self.edge, self.cloud) if step.who == UPLINK else (self.cloud, self.edge)
        sender.compute(self.profile.overhead_per_step_s)  # serialization and the like, before it leaves
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


def project(trace: Iterable, profile: DeploymentProfile, tokens: int) -> Projection:
    """Replay one generation's trace under ``profile``; ``tokens`` is what it emitted."""
    steps = as_trace(trace)
    replay = _Replay(profile, is_device_only(steps))
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
    )


def project_runs(runs: Iterable[TracedRun], profile: DeploymentProfile) -> Projection:
    """Several generations projected one after the other: times, tokens and bytes add up."""
    projections = [project(run.trace, profile, run.new_tokens) for run in runs]
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
    )


# --------------------------------------------------------------------------- this machine's own profile


def pass_samples(runs: Iterable[TracedRun]) -> dict[str, tuple[list[PassSample], list[PassSample]]]:
    """Measured passes per role: (prefill passes, decode passes)."""
    samples: dict[str, tuple[list[PassSample], list[PassSample]]] = {}
    for run in runs:
        steps = as_trace(run.trace)
        device_only = is_device_only(steps)
        seen: set[str] = set()
        for step in steps:
            if step.kind != "forward":
                continue
            prefill, decode = samples.setdefault(role_of(step.who, device_only), ([], []))
            (decode if step.who in seen else prefill).append(PassSample(step.size, step.seconds))
            seen.add(step.who)
    return samples


def measured_profile(
    runs: Iterable[TracedRun],
    link: LinkConditions = NO_LINK,
    name: str = "this-machine",
    label: str = "This machine (measured)",
) -> DeploymentProfile:
    """The profile of the machine that produced ``runs``, fitted from their own passes.

    Each role's prefill and decode costs are fitted separately against tokens per pass; the time a
    generation spent outside passes and link waits becomes ``overhead_per_step_s``. Projecting the
    runs with it (and ``link`` set to the conditions they ran under) reproduces their measured total
    time -- the model's self-check. The Cloud's passes are one after the other, as they ran here.
    """
    runs = list(runs)
    if not runs:
        raise ValueError("no runs to measure a profile from")
    samples = pass_samples(runs)
    costs: dict[str, StreamCost | None] = {role: None for role in ROLES}
    sources = []
    for role, (prefill, decode) in samples.items():
        prefill_cost = fit_pass_cost(prefill, proportional_cost)
        decode_cost = fit_pass_cost(decode, flat_cost) if decode else prefill_cost
        costs[role] = StreamCost(decode_cost, prefill_cost)
        sources.append(Source(f"{role}.prefill", f"measured here: fit over {len(prefill)} first passes"))
        sources.append(
            Source(
                f"{role}.decode",
                f"measured here: fit over {len(decode)} later passes"
                + ("" if decode else " (none: the prefill fit stands in)"),
            )
        )
    outside = sum(run.seconds - sum(step.seconds for step in as_trace(run.trace)) for run in runs)
    steps = sum(len(run.trace) for run in runs)
    overhead = max(0.0, outside) / steps if steps else 0.0
    for number in ("link.rtt_ms", "link.uplink_kbps", "link.downlink_kbps", "link.overhead_bytes"):
        sources.append(Source(number, "the conditions the measured runs ran under"))
    sources.append(Source("cloud_parallel", "measured here: in process the Cloud's passes run one after the other"))
    sources.append(
        Source("overhead_per_step_s", f"measured here: time outside passes and link waits over {steps} steps")
    )
    return DeploymentProfile(
        name,
        label,
        costs[SPECIALIST],
        costs[GENERALIST],
        costs[GENERIC],
        link,
        tuple(sources),
        cloud_parallel=False,
        overhead_per_step_s=overhead,
    )
