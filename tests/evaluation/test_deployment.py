"""Deployment projection and link emulation: hand-computed timelines, the self-check, the profiles."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import pytest

from specsteer.engine import generate as engine
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.evaluation.bench_link import measured_profile
from specsteer.evaluation.deployment import (
    AS_RECORDED,
    HOST_NUMBERS,
    NO_HOST_OVERHEAD,
    ROLES,
    DeploymentProfile,
    HostOverhead,
    MeasuredRun,
    Source,
    StreamCost,
    as_trace,
    profile_numbers,
    project,
    project_runs,
)
from specsteer.evaluation.deployment_profiles import PROFILES, get_profile
from specsteer.evaluation.deployment_rows import summarize_speedups
from specsteer.method import costs
from specsteer.method.costs import PassCost, PassSample, fit_pass_cost
from specsteer.method.events import TraceStep
from specsteer.protocol.cloud_reports import CloudInfo, CloudReport
from specsteer.protocol.emulation import NO_LINK, LinkConditions, LinkEmulator
from specsteer.protocol.link import Arrival, Link, Reply
from specsteer.protocol.wire import DOWNLINK, UPLINK, Draft, Open, Verdict, decode, encode

# --------------------------------------------------------------------------- helpers


def F(who: str, size: int, seconds: float = 0.0) -> TraceStep:
    return TraceStep("forward", who, size, seconds)


def M(direction: str, size: int, seconds: float = 0.0) -> TraceStep:
    return TraceStep("message", direction, size, seconds)


ALL_NUMBERS = [f"{role}.{part}" for role in ROLES for part in ("decode", "prefill")] + [
    "link.rtt_ms",
    "link.uplink_kbps",
    "link.downlink_kbps",
    "link.overhead_bytes",
    "cloud_parallel",
    *HOST_NUMBERS,
]


def flat_profile(
    link: LinkConditions = NO_LINK,
    specialist: float = 0.010,
    generalist: float = 0.030,
    generic: float = 0.005,
    prefill_per_token: float = 0.001,
    generalist_prefill_per_token: float = 0.002,
    parallel: bool = False,
    host: HostOverhead = NO_HOST_OVERHEAD,
) -> DeploymentProfile:
    """Decode passes cost a flat step; prefills a fixed time per prompt token."""

    def cost(step: float, per_token: float) -> StreamCost:
        return StreamCost(decode=PassCost(step, 0.0), prefill=PassCost(0.0, per_token))

    return DeploymentProfile(
        "test",
        "test profile",
        cost(specialist, prefill_per_token),
        cost(generalist, generalist_prefill_per_token),
        cost(generic, prefill_per_token),
        link,
        tuple(Source(n, "test") for n in ALL_NUMBERS),
        cloud_parallel=parallel,
        edge_host=host,
        cloud_host=host,
    )


# A speculative generation of two rounds: the prompt goes up, the Edge prefills and drafts,
# the Cloud prefills and verifies, the verdict comes down, and so on.
LOCKSTEP = [
    M(UPLINK, 100),
    F("specialist+", 10),
    F("specialist+", 1),
    M(UPLINK, 20),
    F("generalist", 12),
    M(DOWNLINK, 30),
    F("specialist+", 1),
    M(UPLINK, 20),
    F("generalist", 2),
    M(DOWNLINK, 30),
]

# The llm baseline: the prompt goes up, the Cloud prefills, then streams five tokens down.
STREAM = [M(UPLINK, 100), F("generalist", 5), M(DOWNLINK, 9)] + [F("generalist", 1), M(DOWNLINK, 9)] * 4


class VirtualClock:
    """A clock that only moves when told to: sleeping and computing advance it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def work(self, seconds: float) -> None:
        self.now += seconds


def emulate(trace: list[TraceStep], conditions: LinkConditions) -> MeasuredRun:
    """Run a trace's timeline in one thread on a virtual clock, with the link emulator deciding the waits."""
    clock = VirtualClock()
    emulator = LinkEmulator(conditions, clock.clock, clock.sleep)
    steps = []
    for step in trace:
        if step.kind == "forward":
            clock.work(step.seconds)
            steps.append(step)
        else:
            steps.append(step._replace(seconds=emulator.carry(step.who, step.size)))
    return MeasuredRun(steps, clock.now, 1)


def prompts(pair):
    plain = pair.tokenizer.encode("Write about the weather and the sea.")
    private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
    return plain, private


# --------------------------------------------------------------------------- the projection, by hand


def test_lockstep_rounds_pay_a_round_trip_each():
    projection = project(LOCKSTEP, flat_profile(LinkConditions(rtt_ms=100)), tokens=4)
    # Edge: prefill 10 ms + draft 10 ms; the draft arrives at 70 ms (the prompt's upload hides
    # behind the drafting); Cloud prefill of 12 tokens 24 ms -> 94; verdict at 144; Edge step
    # -> 154; draft arrives 204; verification 30 ms -> 234; verdict at 284.
    assert projection.seconds == pytest.approx(0.284)
    assert projection.round_trips == 2
    assert projection.device_s == pytest.approx(0.030)
    assert projection.cloud_s == pytest.approx(0.054)
    assert projection.link_s == pytest.approx(0.200)
    assert projection.tok_per_s == pytest.approx(4 / 0.284)
    assert (projection.uplink_bytes, projection.downlink_bytes) == (140, 60)
    no_link = project(LOCKSTEP, flat_profile(), tokens=4)
    assert no_link.seconds == pytest.approx(0.084)  # compute only
    assert projection.seconds - no_link.seconds == pytest.approx(2 * 0.100)


def test_a_token_stream_pays_the_round_trip_once():
    projection = project(STREAM, flat_profile(LinkConditions(rtt_ms=100)), tokens=5)
    # up 50 ms, prefill 5 x 2 ms, four more tokens at 30 ms each while earlier ones travel, down 50 ms
    assert projection.seconds == pytest.approx(0.050 + 0.010 + 4 * 0.030 + 0.050)
    assert projection.round_trips == 1
    assert projection.link_s == pytest.approx(0.100)
    assert projection.cloud_s == pytest.approx(0.130)
    assert projection.device_s == 0
    at_200 = project(STREAM, flat_profile(LinkConditions(rtt_ms=200)), tokens=5)
    assert at_200.seconds - projection.seconds == pytest.approx(0.100)


def test_per_token_rounds_pay_the_round_trip_per_token():
    # lightcosteer: every token is a round (an empty draft up, a verdict down, an Edge step).
    per_token = [M(UPLINK, 100)] + [
        M(UPLINK, 13),
        F("generalist", 1),
        F("specialist0", 1),
        M(DOWNLINK, 500),
        F("specialist+", 1),
    ] * 5
    slow = project(per_token, flat_profile(LinkConditions(rtt_ms=100)), tokens=5)
    fast = project(per_token, flat_profile(), tokens=5)
    assert slow.round_trips == 5
    assert slow.seconds - fast.seconds == pytest.approx(5 * 0.100)


def test_bandwidth_and_framing_add_transmission_time():
    link = LinkConditions(rtt_ms=20, uplink_kbps=80, overhead_bytes=40)
    projection = project([M(UPLINK, 1000)], flat_profile(link), tokens=0)
    assert projection.seconds == pytest.approx(1040 * 8 / 80_000 + 0.010)
    assert projection.link_s == pytest.approx(projection.seconds)
    assert projection.uplink_bytes == 1000  # payload bytes are reported, framing only costs time


def test_a_stream_faster_than_its_bandwidth_queues_on_the_wire():
    # Each 9-byte token takes 50 ms to transmit, longer than the 30 ms the Cloud needs per token.
    link = LinkConditions(rtt_ms=100, downlink_kbps=9 * 8 / 50)
    projection = project(STREAM, flat_profile(link), tokens=5)
    assert projection.seconds == pytest.approx(0.050 + 0.010 + 5 * 0.050 + 0.050)


def test_back_to_back_messages_share_the_wire():
    link = LinkConditions(rtt_ms=0, uplink_kbps=8)  # 1 byte per millisecond
    projection = project([M(UPLINK, 100), M(UPLINK, 50)], flat_profile(link), tokens=0)
    assert projection.seconds == pytest.approx(0.150)


def test_cloud_passes_side_by_side_or_one_after_the_other():
    rounds = [
        M(UPLINK, 10),
        F("generalist", 1),
        F("specialist0", 1),
        M(DOWNLINK, 10),
        M(UPLINK, 10),
        F("generalist", 3),
        F("specialist0", 3),
        M(DOWNLINK, 10),
    ]
    sequential = project(rounds, flat_profile(), tokens=2)
    parallel = project(rounds, flat_profile(parallel=True), tokens=2)
    # prefills 2 ms + 1 ms, then verification 30 ms + 5 ms
    assert sequential.seconds == pytest.approx(0.002 + 0.001 + 0.030 + 0.005)
    assert parallel.seconds == pytest.approx(0.002 + 0.030)
    assert parallel.cloud_s == pytest.approx(parallel.seconds)


def test_both_sides_compute_at_once_where_the_trace_allows():
    # A Cloud that prefills on "open" while the Edge prefills and drafts: the draft arrives at
    # 110 ms, while the Cloud is still busy until 150 ms; it does not go back in time for it.
    trace = [
        M(UPLINK, 100),
        F("generalist", 50),
        F("specialist+", 50),
        F("specialist+", 1),
        M(UPLINK, 20),
        F("generalist", 3),
        M(DOWNLINK, 30),
    ]
    projection = project(trace, flat_profile(LinkConditions(rtt_ms=100)), tokens=1)
    assert projection.seconds == pytest.approx(0.050 + 0.100 + 0.030 + 0.050)
    assert (projection.device_s, projection.cloud_s, projection.link_s) == (
        0,
        pytest.approx(0.130),
        pytest.approx(0.100),
    )


def test_side_by_side_never_reaches_across_a_message():
    rounds = [M(UPLINK, 10), F("generalist", 1), M(DOWNLINK, 10), M(UPLINK, 10), F("specialist0", 1), M(DOWNLINK, 10)]
    assert project(rounds, flat_profile(parallel=True), tokens=1).seconds == pytest.approx(0.002 + 0.001)


def test_a_trace_without_messages_runs_on_the_device():
    # slm names its stream specialist0 (plain prompt), but it is the device's Specialist.
    projection = project(
        [F("specialist0", 10), F("specialist0", 1), F("specialist0", 1)], flat_profile(generic=99.0), tokens=2
    )
    assert projection.seconds == pytest.approx(0.010 + 2 * 0.010)
    assert projection.device_s == pytest.approx(projection.seconds)
    assert projection.round_trips == 0


def test_host_overhead_is_charged_per_row_and_message():
    # LOCKSTEP's rows: first passes 1 each (specialist+, generalist), later passes 1 + 1 + 2; messages: 5.
    with_overhead = project(LOCKSTEP, flat_profile(LinkConditions(rtt_ms=100), host=HostOverhead(0.001, 0.001)), 4)
    assert with_overhead.seconds == pytest.approx(0.284 + (2 + 4 + 5) * 0.001)
    assert with_overhead.host_s == pytest.approx((2 + 4 + 5) * 0.001)


def test_projection_reads_stored_json_traces():
    stored = json.loads(json.dumps({"trace": LOCKSTEP}))["trace"]
    assert stored[0] == ["message", "uplink", 100, 0.0]
    profile = flat_profile(LinkConditions(rtt_ms=100))
    assert project(stored, profile, 4) == project(LOCKSTEP, profile, 4)
    assert as_trace([{"kind": "forward", "who": "generalist", "size": 3, "seconds": 0.1}]) == [F("generalist", 3, 0.1)]


@pytest.mark.parametrize(
    "bad",
    [
        [("forward", "gpt", 1, 0.0)],
        [("message", "sideways", 1, 0.0)],
        [("sleep", "generalist", 1, 0.0)],
        [("forward", "generalist", -1, 0.0)],
    ],
)
def test_malformed_traces_are_refused(bad):
    with pytest.raises(ValueError):
        project(bad, flat_profile(), 0)


def test_a_profile_without_a_role_cannot_price_it():
    profile = DeploymentProfile(
        "partial",
        "no cloud",
        flat_profile().specialist,
        None,
        None,
        NO_LINK,
        tuple(Source(n, "test") for n in ALL_NUMBERS[:2] + ALL_NUMBERS[6:]),
    )
    assert project([F("specialist+", 4)], profile, 1).seconds == pytest.approx(0.004)
    with pytest.raises(ValueError, match="no cost for the generalist"):
        project(STREAM, profile, 5)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rtt_ms": -1},
        {"rtt_ms": math.inf},
        {"rtt_ms": math.nan},
        {"uplink_kbps": 0},
        {"downlink_kbps": -5},
        {"downlink_kbps": math.nan},
        {"overhead_bytes": -1},
        {"overhead_bytes": 1.5},
        {"rtt_ms": "fast"},
    ],
)
def test_link_conditions_are_validated(kwargs):
    with pytest.raises(ValueError):
        LinkConditions(**kwargs)


def test_a_requested_link_reads_zero_and_nothing_as_no_emulation():
    assert LinkConditions.requested(None, None, None) is None
    assert LinkConditions.requested(0.0, 0.0, 0.0) is None
    assert LinkConditions.requested(50.0, None, 0.0) == LinkConditions(rtt_ms=50.0)
    assert LinkConditions.requested(None, 2000.0, None) == LinkConditions(uplink_kbps=2000.0)
    with pytest.raises(ValueError):
        LinkConditions.requested(-1.0, None, None)


def test_pass_costs_are_validated():
    with pytest.raises(ValueError):
        PassCost(-0.1, 0.0)
    with pytest.raises(ValueError):
        PassCost(0.0, math.inf)
    with pytest.raises(ValueError):
        StreamCost.from_rates(0, 100)
    with pytest.raises(ValueError, match="faster than one prompt token"):
        StreamCost.from_rates(decode_tok_per_s=100, prompt_tok_per_s=50)
    cost = StreamCost.from_rates(decode_tok_per_s=50, prompt_tok_per_s=250)
    assert cost.seconds(1, first=False) == pytest.approx(1 / 50)
    assert cost.seconds(5, first=False) == pytest.approx(1 / 50 + 4 / 250)
    assert cost.seconds(100, first=True) == pytest.approx(100 / 250)


def test_profiles_need_a_source_for_every_number():
    good = flat_profile()
    with pytest.raises(ValueError, match="no source for link.rtt_ms"):
        DeploymentProfile(
            "p",
            "p",
            good.specialist,
            good.generalist,
            good.generic_specialist,
            NO_LINK,
            tuple(s for s in good.sources if s.number != "link.rtt_ms"),
        )
    with pytest.raises(ValueError, match="numbers it does not have: generalist.decode"):
        DeploymentProfile("p", "p", good.specialist, None, good.generic_specialist, NO_LINK, good.sources)
    with pytest.raises(ValueError, match="empty source"):
        DeploymentProfile(
            "p",
            "p",
            good.specialist,
            good.generalist,
            good.generic_specialist,
            NO_LINK,
            good.sources[:-1] + (Source(good.sources[-1].number, " "),),
        )
    with pytest.raises(ValueError, match="needs a name"):
        DeploymentProfile("", "p", good.specialist, good.generalist, good.generic_specialist, NO_LINK, good.sources)
    with pytest.raises(ValueError, match="per_row_s"):
        HostOverhead(per_row_s=-1.0)


def test_unknown_profile_names_list_the_known_ones():
    with pytest.raises(ValueError, match="phone-4g"):
        get_profile("mainframe")
    assert get_profile("paper") is PROFILES["paper"]


# --------------------------------------------------------------------------- this machine's own profile


def test_fit_recovers_a_linear_cost_and_keeps_totals():
    samples = [PassSample(n, 0.020 + 0.003 * n) for n in (1, 2, 5, 9)]
    cost = fit_pass_cost(samples, costs.flat_cost)
    assert (cost.base_s, cost.per_token_s) == (pytest.approx(0.020), pytest.approx(0.003))
    noisy = [PassSample(1, 0.05), PassSample(5, 0.03), PassSample(5, 0.04)]  # negative slope: flat
    flat = fit_pass_cost(noisy, costs.flat_cost)
    assert flat.per_token_s == 0 and flat.base_s == pytest.approx(0.04)
    steep = [PassSample(10, 0.01), PassSample(20, 0.05)]  # negative intercept: proportional
    proportional = fit_pass_cost(steep, costs.flat_cost)
    assert proportional.base_s == 0 and proportional.per_token_s == pytest.approx(0.06 / 30)
    assert fit_pass_cost([PassSample(40, 0.2)], costs.proportional_cost) == PassCost(0.0, 0.005)
    for group in (samples, noisy, steep):
        fitted = fit_pass_cost(group, costs.flat_cost)
        assert sum(fitted.seconds(s.tokens) for s in group) == pytest.approx(sum(s.seconds for s in group))


def test_own_profile_reproduces_a_synthetic_trace():
    trace = [
        M(UPLINK, 100),
        F("specialist+", 30, 0.06),
        F("specialist+", 1, 0.011),
        F("specialist+", 1, 0.009),
        M(UPLINK, 20),
        F("generalist", 22, 0.21),
        F("specialist0", 22, 0.05),
        M(DOWNLINK, 300),
        F("specialist+", 1, 0.010),
        F("specialist+", 1, 0.012),
        M(UPLINK, 24),
        F("generalist", 3, 0.090),
        F("specialist0", 3, 0.021),
        M(DOWNLINK, 300),
    ]
    seconds = sum(step.seconds for step in trace) + 0.0042  # some host time outside the passes
    profile = measured_profile([MeasuredRun(trace, seconds, 3)])
    assert project(trace, profile, 3, reads=AS_RECORDED).seconds == pytest.approx(seconds, rel=1e-12)
    # rows: first passes 1 each (specialist+, generalist, specialist0), later passes 1+1+1+1+3+3; messages: 5
    assert profile.edge_host == profile.cloud_host
    assert profile.edge_host.per_row_s == profile.edge_host.per_message_s == pytest.approx(0.0042 / 18)
    assert profile.cloud_parallel is False


@pytest.mark.parametrize("method", ["llm", "slm+", "sd", "specsteer", "lightcosteer", "costeer"])
def test_own_profile_reproduces_a_real_generation(pair, method):
    plain, private = prompts(pair)
    _, finished = collect(
        generate_ids(pair, plain, private, DecodeConfig(method=method, max_new_tokens=8, draft_len=3))
    )
    stats = finished.stats
    projection = project(stats.trace, measured_profile([stats]), stats.new_tokens, stats.reused_tokens, AS_RECORDED)
    assert projection.seconds == pytest.approx(stats.seconds, rel=1e-9)
    assert projection.tokens == stats.new_tokens
    assert (projection.uplink_bytes, projection.downlink_bytes) == (stats.uplink_bytes, stats.downlink_bytes)
    assert projection.round_trips == (stats.rounds if method not in ("llm", "slm+") else int(method == "llm"))


def test_one_profile_for_many_runs_reproduces_their_total(pair):
    plain, private = prompts(pair)
    runs = [
        collect(generate_ids(pair, plain, private, DecodeConfig(method=m, max_new_tokens=6)))[1].stats
        for m in ("llm", "specsteer", "lightcosteer")
    ]
    projected = project_runs(runs, measured_profile(runs), AS_RECORDED)
    assert projected.seconds == pytest.approx(sum(r.seconds for r in runs), rel=1e-9)


# --------------------------------------------------------------------------- link emulation


def test_emulated_lockstep_waits_half_the_rtt_each_way():
    clock = VirtualClock()
    emulator = LinkEmulator(LinkConditions(rtt_ms=100), clock.clock, clock.sleep)
    waits = []
    for _ in range(3):
        waits.append(emulator.carry(UPLINK, 20))
        clock.work(0.030)  # the Cloud verifies
        waits.append(emulator.carry(DOWNLINK, 30))
        clock.work(0.010)  # the Edge drafts
    assert waits == pytest.approx([0.050] * 6)
    assert clock.now == pytest.approx(3 * (0.100 + 0.040))


def test_emulated_stream_waits_for_the_latency_once():
    clock = VirtualClock()
    emulator = LinkEmulator(LinkConditions(rtt_ms=100), clock.clock, clock.sleep)
    waits = [emulator.carry(DOWNLINK, 9)]
    for _ in range(4):
        clock.work(0.030)  # the Cloud decodes the next token while the last one travels
        waits.append(emulator.carry(DOWNLINK, 9))
    assert waits == pytest.approx([0.050, 0, 0, 0, 0])
    assert clock.sleeps == pytest.approx([0.050])


def test_emulated_stream_waits_where_it_outruns_the_bandwidth():
    clock = VirtualClock()
    emulator = LinkEmulator(LinkConditions(rtt_ms=100, downlink_kbps=9 * 8 / 50), clock.clock, clock.sleep)
    waits = [emulator.carry(DOWNLINK, 9)]
    for _ in range(3):
        clock.work(0.030)
        waits.append(emulator.carry(DOWNLINK, 9))
    # 50 ms on the wire + 50 ms latency, then each token 50 ms behind the last, 30 of them computing
    assert waits == pytest.approx([0.100, 0.020, 0.020, 0.020])


def test_a_reply_pays_the_latency_again():
    clock = VirtualClock()
    emulator = LinkEmulator(LinkConditions(rtt_ms=100), clock.clock, clock.sleep)
    emulator.carry(DOWNLINK, 9)
    clock.work(0.030)
    assert emulator.carry(DOWNLINK, 9) == 0
    assert emulator.carry(UPLINK, 9) == pytest.approx(0.050)


@pytest.mark.parametrize("rtt_ms", [0, 20, 50, 100, 200])
@pytest.mark.parametrize("timeline", ["lockstep", "stream"])
def test_emulation_and_projection_agree(rtt_ms, timeline):
    seconds = {"specialist+": 0.012, "generalist": 0.030, "specialist0": 0.004}
    base = LOCKSTEP if timeline == "lockstep" else STREAM
    trace = [s._replace(seconds=seconds[s.who]) if s.kind == "forward" else s for s in base]
    for link in (LinkConditions(rtt_ms=rtt_ms), LinkConditions(rtt_ms=rtt_ms, uplink_kbps=64, downlink_kbps=4)):
        if timeline == "lockstep" and math.isfinite(link.uplink_kbps):
            continue  # the prompt's upload outlasting the next message: see the next test
        run = emulate(trace, link)
        projected = project(run.trace, measured_profile([run], link=link), 1)
        assert projected.seconds == pytest.approx(run.seconds, rel=1e-9, abs=1e-12)


def test_emulation_over_charges_a_stream_opener_by_at_most_its_transmission():
    # The thread sleeps through the prompt's upload before the Edge drafts; a real Edge would draft
    # meanwhile. The difference is bounded by the prompt message's transmission time.
    link = LinkConditions(rtt_ms=50, uplink_kbps=64)
    trace = [s._replace(seconds=0.012) if s.kind == "forward" else s for s in LOCKSTEP]
    run = emulate(trace, link)
    projected = project(run.trace, measured_profile([run], link=link), 1).seconds
    assert projected <= run.seconds <= projected + link.transmission_s(UPLINK, 100) + 1e-12


class EchoTransport:
    """A Cloud that accepts every draft (enough to exercise the link's bookkeeping)."""

    def info(self) -> CloudInfo:
        return CloudInfo("test", 10)

    def exchange(self, frame: bytes) -> Reply:
        message = decode(frame)
        frames = [Arrival(encode(Verdict(len(message.draft))))] if isinstance(message, Draft) else []
        return Reply(frames, CloudReport())

    def close_session(self, session: bytes) -> CloudReport:
        return CloudReport()


def exchange_once(link: Link) -> Verdict:
    link.open(Open(link.session, "ratio", [1], 4))
    return link.verify(Draft(link.session, [1, 2, 3], append=[5]))


def test_link_without_conditions_does_not_wait():
    link = Link(EchoTransport())
    assert exchange_once(link) == Verdict(3)
    assert link.emulator is None and link.conditions is None
    # open: 2 header + 16 session + 50 settings + (4) no end ids + (4 + 4) prompt; draft: 2 + 16 + 4 keep +
    # (4 + 4) append + (4 + 12) drafts; verdict: 2 + 4 accepted + three empty lists.
    assert link.trace == [
        TraceStep("message", UPLINK, 80, 0.0),
        TraceStep("message", UPLINK, 46, 0.0),
        TraceStep("message", DOWNLINK, 18, 0.0),
    ]


def test_link_records_the_emulated_wait_and_keeps_its_records():
    clock = VirtualClock()
    conditions = LinkConditions(rtt_ms=80)
    link = Link(EchoTransport(), emulator=LinkEmulator(conditions, clock.clock, clock.sleep))
    assert link.conditions is conditions
    exchange_once(link)
    # The open waits for its arrival; the draft follows it on the same stream (its sender never
    # waited), so it arrives 40 ms after it left with no further wait; the verdict is a reply.
    assert [step.seconds for step in link.trace] == pytest.approx([0.040, 0.0, 0.040])
    assert link.totals == {"uplink": 80 + 46, "downlink": 18}
    assert [m.bytes for m in link.transcript] == [80, 46, 18]
    assert Link(EchoTransport(), conditions=conditions).emulator is not None


def test_a_concurrent_sender_is_charged_from_when_it_sent():
    # A stream from another process: the message reached the Edge at 0.100 while the thread was
    # busy until 0.120; it arrives one way (25 ms) after it was sent, not after the thread read it.
    clock = VirtualClock()
    emulator = LinkEmulator(LinkConditions(rtt_ms=50), clock.clock, clock.sleep)
    emulator.carry(UPLINK, 10)  # the open: 25 ms
    clock.work(0.095)
    assert emulator.carry(DOWNLINK, 10, sent_at=0.100) == pytest.approx(0.005)
    clock.work(0.010)
    assert emulator.carry(DOWNLINK, 10, sent_at=0.110) == pytest.approx(0.0)  # arrived at 0.135, read at 0.135
    clock.work(0.001)
    assert emulator.carry(DOWNLINK, 10, sent_at=0.135) == pytest.approx(0.024)


@pytest.fixture
def virtual_link(monkeypatch):
    """Generations whose Link waits on a virtual clock: real time plus the sleeps it pretended."""
    slept = []
    conditions = LinkConditions(rtt_ms=50)

    def clock() -> float:
        return time.perf_counter() + sum(slept)

    def make_link(transport, forward_log, _conditions=None) -> Link:
        return Link(transport, forward_log, emulator=LinkEmulator(conditions, clock, slept.append))

    monkeypatch.setattr(engine, "Link", make_link)
    return conditions, slept


@pytest.mark.parametrize(
    "method,round_trips",
    [("llm", lambda stats: 1), ("lightcosteer", lambda s: s.rounds), ("specsteer", lambda s: s.rounds)],
)
def test_generations_over_an_emulated_link(pair, virtual_link, method, round_trips):
    conditions, slept = virtual_link
    plain, private = prompts(pair)
    _, finished = collect(
        generate_ids(pair, plain, private, DecodeConfig(method=method, max_new_tokens=8, draft_len=3))
    )
    stats = finished.stats
    waited = sum(step.seconds for step in stats.trace if step.kind == "message")
    assert waited == pytest.approx(sum(slept))
    # llm pays one round trip for its whole stream; the round-based methods one per round.
    assert waited == pytest.approx(round_trips(stats) * 0.050)
    run = MeasuredRun(stats.trace, stats.seconds + waited, stats.new_tokens)
    projected = project(run.trace, measured_profile([run], link=conditions), run.new_tokens)
    assert projected.seconds == pytest.approx(run.seconds, rel=0.02)


# --------------------------------------------------------------------------- methods against RTT


def test_summary_projects_each_method_at_each_rtt():
    runs = {"llm": [MeasuredRun(STREAM, 0.0, 5)], "specsteer": [MeasuredRun(LOCKSTEP, 0.0, 4)] * 2}
    summary = summarize_speedups(runs, flat_profile(), rtts_ms=(0, 100))
    assert summary.methods == ("llm", "specsteer")
    assert summary.tok_per_s("llm", 100.0) == pytest.approx(5 / 0.230)
    assert summary.tok_per_s("specsteer", 100.0) == pytest.approx(8 / (2 * 0.284))
    assert summary.speedups() == pytest.approx((4 / 0.084 / (5 / 0.130), 8 / 0.568 / (5 / 0.230)))
    llm_at_100 = next(r for r in summary.rates if r.method == "llm" and r.rtt_ms == 100)
    assert (llm_at_100.tokens, llm_at_100.round_trips, llm_at_100.uplink_bytes) == (5, 1, 100)


# --------------------------------------------------------------------------- the bundled profiles


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_bundled_number_has_a_source(name):
    profile = PROFILES[name]
    sourced = {source.number for source in profile.sources}
    assert set(profile_numbers(profile)) == sourced
    assert set(ALL_NUMBERS) == sourced  # bundled profiles price every role
    for source in profile.sources:
        text = source.text
        cited = any(marker in text for marker in ("http", "SpecSteer paper", "RFC", "benchmarks/results/"))
        assert cited or "assumed" in text.lower(), f"{name}: {source.number} has neither a citation nor 'assumed'"


def test_bundled_numbers_are_wired_as_published():
    phone = PROFILES["phone-4g"]
    assert phone.specialist.seconds(1, first=False) == pytest.approx(1 / 50.2)  # ExecuTorch, OnePlus 12
    assert phone.generalist.seconds(1, first=False) == pytest.approx(1 / 20.72)  # Qwen3-32B on H20
    assert phone.link.rtt_ms == pytest.approx(55.25)
    paper = PROFILES["paper"]
    assert paper.cloud_parallel and paper.link.rtt_ms == 0
    # A long llm stream under the paper's profile runs at the paper's Vanilla LLM speed, less the host overhead.
    stream = [M(UPLINK, 100), F("generalist", 1)] + [M(DOWNLINK, 9), F("generalist", 1)] * 999 + [M(DOWNLINK, 9)]
    no_host = replace(paper, edge_host=NO_HOST_OVERHEAD, cloud_host=NO_HOST_OVERHEAD)
    assert project(stream, no_host, 1000).tok_per_s == pytest.approx(22.58, rel=0.01)
    host = paper.cloud_host.per_row_s * 1000 + paper.cloud_host.per_message_s * 1000 + paper.edge_host.per_message_s
    assert project(stream, paper, 1000).seconds == pytest.approx(project(stream, no_host, 1000).seconds + host)


def test_profiles_sweep_rtt_and_projections_export():
    phone = PROFILES["phone-4g"]
    assert phone.at_rtt(phone.link.rtt_ms) is phone
    swept = phone.at_rtt(150)
    assert swept.link == LinkConditions(150, phone.link.uplink_kbps, phone.link.downlink_kbps, 80)
    assert swept.source("link.rtt_ms") == "set for an RTT sweep"
    exported = project(STREAM, flat_profile(), 5).to_dict()
    assert exported["tok_per_s"] == pytest.approx(5 / 0.130) and exported["round_trips"] == 1
