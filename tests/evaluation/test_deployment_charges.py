"""What a deployed request is charged beyond its recorded passes: the whole prompt it reads (a cache hit only
under the stated rule), and each side's host overhead per logits row and per message; every bundled number
with its source, and every row of projected speeds carrying them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsteer.evaluation import deployment_profiles
from specsteer.evaluation.deployment import (
    AS_RECORDED,
    FRESH,
    HOST_NUMBERS,
    NO_HOST_OVERHEAD,
    ROLES,
    DeploymentProfile,
    HostOverhead,
    PromptReads,
    Source,
    StreamCost,
    profile_numbers,
    project,
)
from specsteer.evaluation.deployment_profiles import PASSES_OFF_THE_CORES, PASSES_ON_THE_CORES, PROFILES
from specsteer.evaluation.deployment_rows import TracedGeneration, deployment_rows, group_runs, projection_rows
from specsteer.method.costs import PassCost
from specsteer.method.events import GenerationStats, TraceStep
from specsteer.protocol.emulation import NO_LINK
from specsteer.stores.runs import CellResult, GridPoint

REPO = Path(__file__).resolve().parents[2]
NUMBERS = [f"{role}.{part}" for role in ROLES for part in ("decode", "prefill")] + [
    "link.rtt_ms",
    "link.uplink_kbps",
    "link.downlink_kbps",
    "link.overhead_bytes",
    "cloud_parallel",
    *HOST_NUMBERS,
]


def F(who: str, size: int) -> TraceStep:
    return TraceStep("forward", who, size, 0.0)


def M(direction: str, size: int) -> TraceStep:
    return TraceStep("message", direction, size, 0.0)


def profile(
    edge_host: HostOverhead = NO_HOST_OVERHEAD, cloud_host: HostOverhead = NO_HOST_OVERHEAD
) -> DeploymentProfile:
    """Decode passes 10 ms (Edge), 30 ms (Generalist), 5 ms (generic copy); prompts 1 ms a token (2 ms on
    the Generalist); no network."""

    def cost(step: float, per_token: float) -> StreamCost:
        return StreamCost(decode=PassCost(step, 0.0), prefill=PassCost(0.0, per_token))

    return DeploymentProfile(
        "test",
        "test profile",
        cost(0.010, 0.001),
        cost(0.030, 0.002),
        cost(0.005, 0.001),
        NO_LINK,
        tuple(Source(number, "test") for number in NUMBERS),
        edge_host=edge_host,
        cloud_host=cloud_host,
    )


# One SpecSteer round as a grid records it after other methods read the same prompts: the Edge found 825 of
# its 826 private-prompt tokens cached, each Cloud model 180 of its 181 plain-prompt tokens (its first pass
# reads the last prompt token and the 4 drafts).
CACHED_ROUND = [
    M("uplink", 700),
    F("specialist+", 1),
    F("specialist+", 1),
    F("specialist+", 1),
    F("specialist+", 1),
    M("uplink", 30),
    F("generalist", 5),
    F("specialist0", 5),
    M("downlink", 500),
]
REUSED = {"specialist+": 825, "generalist": 180, "specialist0": 180}
RECORDED_S = 0.001 + 3 * 0.010 + 5 * 0.002 + 5 * 0.001  # as recorded: prompts of 1 and 5 tokens


def test_a_fresh_request_reads_every_prompt_token():
    fresh = project(CACHED_ROUND, profile(), 4, REUSED)
    assert fresh.prompt_tokens == 826 + 185 + 185
    assert fresh.seconds == pytest.approx(826 * 0.001 + 3 * 0.010 + 185 * 0.002 + 185 * 0.001)
    recorded = project(CACHED_ROUND, profile(), 4, REUSED, AS_RECORDED)
    assert recorded.seconds == pytest.approx(RECORDED_S)
    assert project(CACHED_ROUND, profile(), 4, REUSED, FRESH) == fresh  # fresh is the default


def test_later_passes_are_charged_as_recorded():
    # Only a stream's first pass reads its prompt: what follows is charged as the trace recorded it.
    trace = [*CACHED_ROUND, F("specialist+", 2), M("uplink", 30), F("generalist", 5), F("specialist0", 5)]
    added = project(trace, profile(), 8, REUSED).seconds - project(CACHED_ROUND, profile(), 4, REUSED).seconds
    assert added == pytest.approx(0.010 + 0.030 + 0.005)


def test_a_cache_hit_only_where_the_rule_grants_one():
    # The Cloud's prefix cache, shared across users, holds the template's first 41 plain-prompt tokens: both
    # Cloud models read 41 fewer; the Edge still reads its whole private prompt.
    cloud = project(CACHED_ROUND, profile(), 4, REUSED, PromptReads(cloud_cached=41))
    assert cloud.prompt_tokens == 826 + 2 * (185 - 41)
    # The Edge's own earlier request over the same private prompt: its cache holds all but the last token.
    edge = project(CACHED_ROUND, profile(), 4, REUSED, PromptReads(edge_cached=825))
    assert edge.prompt_tokens == 1 + 185 + 185
    # A hit never covers a whole pass: at least one token is read.
    assert project(CACHED_ROUND, profile(), 4, REUSED, PromptReads(edge_cached=10_000)).prompt_tokens == 1 + 370
    with pytest.raises(ValueError, match="negative"):
        PromptReads(cloud_cached=-1)


def test_a_trace_without_its_reuse_record_is_charged_as_recorded():
    assert project(CACHED_ROUND, profile(), 4).seconds == pytest.approx(RECORDED_S)
    assert project(CACHED_ROUND, profile(), 4, {}).seconds == pytest.approx(RECORDED_S)


def test_host_overhead_is_charged_per_round_on_each_side():
    edge, cloud = HostOverhead(per_row_s=0.001, per_message_s=0.004), HostOverhead(per_row_s=0.002, per_message_s=0.008)
    base = project(CACHED_ROUND, profile(), 4, REUSED).seconds
    # The Edge: 4 rows (a first pass counts one) and 2 messages sent; the Cloud: 2 first-pass rows, 1 message.
    edge_only = project(CACHED_ROUND, profile(edge_host=edge), 4, REUSED)
    assert edge_only.seconds == pytest.approx(base + 4 * 0.001 + 2 * 0.004)
    cloud_only = project(CACHED_ROUND, profile(cloud_host=cloud), 4, REUSED)
    assert cloud_only.seconds == pytest.approx(base + 2 * 0.002 + 0.008)
    both = project(CACHED_ROUND, profile(edge, cloud), 4, REUSED)
    assert both.host_s == pytest.approx(4 * 0.001 + 2 * 0.004 + 2 * 0.002 + 0.008)
    # A later verification pass hands each of its rows to the host: 5 rows at the Cloud's charge, per model.
    round_two = [*CACHED_ROUND, F("specialist+", 2), M("uplink", 30), F("generalist", 5), F("specialist0", 5)]
    extra = project(round_two, profile(cloud_host=cloud), 8, REUSED).host_s - cloud_only.host_s
    assert extra == pytest.approx(2 * 5 * 0.002)


def test_a_streaming_cloud_charges_its_own_host_work_not_the_edges():
    stream = [M("uplink", 100), F("generalist", 20)] + [M("downlink", 9), F("generalist", 1)] * 3 + [M("downlink", 9)]
    edge_heavy = project(stream, profile(edge_host=HostOverhead(0.5, 0.0)), 4).seconds
    assert edge_heavy == pytest.approx(project(stream, profile(), 4).seconds)  # the Edge runs no pass
    cloud = project(stream, profile(cloud_host=HostOverhead(0.001, 0.002)), 4)
    assert cloud.seconds == pytest.approx(project(stream, profile(), 4).seconds + 4 * 0.001 + 4 * 0.002)


# --------------------------------------------------------------------------- the bundled profiles


# Where each profile's passes run: the phone's Edge on its CPU, every other side on a GPU.
EDGE_ON_CPU = {"phone-4g": True, "laptop-wifi": False, "paper": False}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_bundled_number_has_its_source(name):
    bundled = PROFILES[name]
    assert set(profile_numbers(bundled)) == {source.number for source in bundled.sources} == set(NUMBERS)
    edge = PASSES_ON_THE_CORES if EDGE_ON_CPU[name] else PASSES_OFF_THE_CORES
    assert bundled.edge_host == edge.edge  # no GPU measurement yet: the CPU one alone
    assert bundled.cloud_host == PASSES_OFF_THE_CORES.cloud
    for number, measurement in (("edge_host", edge), ("cloud_host", PASSES_OFF_THE_CORES)):
        for part in ("per_row_s", "per_message_s"):
            text = bundled.source(f"{number}.{part}")
            assert measurement.file in text and measurement.command in text, f"{name}: {number}.{part}"
    assert bundled.edge_host.per_row_s > 0 and bundled.cloud_host.per_row_s > 0


@pytest.mark.parametrize("measurement", [PASSES_OFF_THE_CORES, PASSES_ON_THE_CORES])
def test_the_host_numbers_are_the_measurements(measurement):
    measured = json.loads((REPO / measurement.file).read_text())
    assert measured["schema"] == "specsteer.host_overhead/1"
    for constant, side in ((measurement.edge, "edge"), (measurement.cloud, "cloud")):
        assert constant.per_row_s == pytest.approx(measured["fit"][side]["per_row_s"], abs=1e-7)
        assert constant.per_message_s == pytest.approx(measured["fit"][side]["per_message_s"], abs=1e-7)
    assert measured["machine"]["cpu"] in deployment_profiles.HOST_OVERHEAD_MACHINE
    assert measured["command"].split(" --out ")[0] in measurement.command


def test_a_gpu_measurement_adds_to_the_sides_on_a_gpu(monkeypatch):
    sync = HostOverhead(per_row_s=0.0005, per_message_s=0.0)
    monkeypatch.setattr(deployment_profiles, "GPU_PASS_SYNC", (sync, "benchmarks/results/engine_gpu.json"))
    phone = deployment_profiles._phone_4g()
    assert phone.cloud_host == PASSES_OFF_THE_CORES.cloud.plus(sync)  # the Cloud's passes run on a GPU
    assert phone.edge_host == PASSES_ON_THE_CORES.edge  # the phone's do not
    assert "engine_gpu.json" in phone.source("cloud_host.per_row_s")


# --------------------------------------------------------------------------- rows carry the sources


def stored_cell(method: str, trace: list[TraceStep], reused: dict[str, int]) -> CellResult:
    stats = GenerationStats(method=method, new_tokens=4, seconds=2.0, trace=list(trace), reused_tokens=dict(reused))
    return CellResult("r1", GridPoint(method, 0.1 if method == "specsteer" else None, 1.0), "text", {}, stats)


def test_dashboard_rows_carry_the_sources_and_the_reads():
    stream = [M("uplink", 100), F("generalist", 1)] + [M("downlink", 9), F("generalist", 1)] * 3 + [M("downlink", 9)]
    cells = [stored_cell("specsteer", CACHED_ROUND, REUSED), stored_cell("llm", stream, {"generalist": 180})]
    rows = deployment_rows(cells, "phone-4g", (0.0, 100.0))
    phone = PROFILES["phone-4g"]
    for row in rows:
        assert row["profile"] == "phone-4g"
        assert set(row["sources"]) == set(NUMBERS)
        assert row["sources"]["cloud_host.per_row_s"] == phone.source("cloud_host.per_row_s")
        assert row["prompt_reads"] == FRESH.describe()
        assert row["host_s"] > 0 and row["reuse_unrecorded"] == 0
    at_100 = next(row for row in rows if row["rtt_ms"] == 100.0 and row["method"] == "specsteer")
    assert at_100["sources"]["link.rtt_ms"] == "set for an RTT sweep"
    specsteer = next(row for row in rows if row["method"] == "specsteer")
    assert specsteer["prompt_tokens"] == 826 + 185 + 185


def test_rows_count_generations_stored_without_their_reuse_record():
    runs = [TracedGeneration.of(stored_cell("specsteer", CACHED_ROUND, {}).stats, 0.1, 1.0)]
    (row,) = projection_rows(group_runs(runs), PROFILES["paper"], (0.0,))
    assert row["reuse_unrecorded"] == 1 and row["prompt_tokens"] == 1 + 5 + 5


def test_traced_generations_keep_their_reuse_through_json():
    run = TracedGeneration.of(stored_cell("specsteer", CACHED_ROUND, REUSED).stats, 0.1, 1.0)
    again = TracedGeneration.from_json(json.loads(json.dumps(run.to_json())))
    assert again.reused_tokens == REUSED and again == run
    older = {key: value for key, value in run.to_json().items() if key != "reused_tokens"}
    assert TracedGeneration.from_json(older).reused_tokens == {}
