"""The engine benchmark (``benchmarks/engine_bench.py``) beside the projection: its JSON read and checked, the
deployment it ran (the pair's three models on one GPU, no link) as a profile priced by the same GPU's measured passes
(``specsteer.evaluation.gpu_profile``), and each run's measured speed and split beside its own trace projected with
that profile (``specsteer gpu-profile --engine-bench``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specsteer.evaluation.deployment import (
    GENERALIST,
    GENERIC,
    HOST_NUMBERS,
    SPECIALIST,
    DeploymentProfile,
    Source,
    as_trace,
    project,
)
from specsteer.evaluation.gpu_profile import GpuCosts, choose_context, measured_stream
from specsteer.method.events import TraceStep
from specsteer.protocol.emulation import NO_LINK

BENCH_SCHEMA = "specsteer.engine_bench/1"


@dataclass(frozen=True)
class BenchRun:
    """One run of the engine benchmark: what it measured end to end, and its trace."""

    pair: str
    run: str
    tokens: int
    seconds: float
    passes: Mapping[str, float]  # edge_s, cloud_s, link_s: the run's passes by side, and the link
    host_s: float  # the rest of its wall time
    trace: tuple[TraceStep, ...]


@dataclass(frozen=True)
class EngineBench:
    device: str
    dry_run: bool
    runs: tuple[BenchRun, ...]


def parse_engine_bench(data: Mapping) -> EngineBench:
    """Check and read ``benchmarks/engine_bench.py``'s JSON; a clear ValueError for anything it cannot use."""
    if not isinstance(data, Mapping) or data.get("schema") != BENCH_SCHEMA:
        raise ValueError(f"not an engine benchmark result (schema {BENCH_SCHEMA!r} expected)")
    try:
        runs = tuple(
            BenchRun(
                str(row["pair"]),
                str(row["run"]),
                int(row["tokens"]),
                float(row["seconds"]),
                {key: float(row["passes"][key]) for key in ("edge_s", "cloud_s", "link_s")},
                float(row["host_s"]),
                tuple(as_trace(row["trace"])),
            )
            for row in data["runs"]
        )
        return EngineBench(str(data["device"]["name"]), bool(data.get("dry_run", False)), runs)
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed engine benchmark result: missing or wrong field {error}") from None


def load_engine_bench(path: str | Path) -> EngineBench:
    return parse_engine_bench(json.loads(Path(path).read_text(encoding="utf-8")))


def one_gpu_profile(
    costs: GpuCosts, pair: str = "qwen3", context: int | None = None, origin: str = ""
) -> DeploymentProfile:
    """The engine benchmark's deployment as the projection prices it: the pair's Edge Specialist, Generalist and
    generic copy on one GPU, each pass at its median measured by ``benchmarks/gpu_costs.py``; no link (in process),
    the Cloud's two passes one after the other, and no host overhead (the gap to the measurement shows it)."""
    if pair not in costs.pairs:
        raise ValueError(f"pair {pair!r} was not measured (measured: {', '.join(costs.pairs) or 'none'})")
    small, large = costs.pairs[pair]
    at = choose_context(costs, (small, large), context)
    small_cost, small_decode, small_prefill = measured_stream(costs.models[small], at, costs, origin)
    large_cost, large_decode, large_prefill = measured_stream(costs.models[large], at, costs, origin)
    sources = [
        Source(f"{SPECIALIST}.decode", small_decode),
        Source(f"{SPECIALIST}.prefill", small_prefill),
        Source(f"{GENERALIST}.decode", large_decode),
        Source(f"{GENERALIST}.prefill", large_prefill),
        Source(f"{GENERIC}.decode", small_decode),
        Source(f"{GENERIC}.prefill", small_prefill),
    ]
    sources += [Source(n, "in process: no link") for n in ("link.rtt_ms", "link.uplink_kbps", "link.downlink_kbps")]
    sources += [
        Source("link.overhead_bytes", "in process: no link"),
        Source("cloud_parallel", "the engine runs the Cloud's two passes one after the other"),
    ]
    sources += [
        Source(number, "none charged: the gap to the measurement shows the host's share") for number in HOST_NUMBERS
    ]
    device = costs.device + (" (dry run)" if costs.dry_run else "")
    return DeploymentProfile(
        f"one-gpu+measured-{pair}",
        f"{small} (Edge) and {large} with its generic copy (Cloud) on one {device}, passes as measured",
        small_cost,
        large_cost,
        small_cost,
        NO_LINK,
        tuple(sources),
        cloud_parallel=False,
    )


def bench_comparison(bench: EngineBench, profile: DeploymentProfile, pair: str) -> list[dict]:
    """Each run of ``pair``: its measured tokens/s and split beside its own trace projected with ``profile``."""
    rows = []
    for run in bench.runs:
        if run.pair != pair:
            continue
        projected = project(run.trace, profile, run.tokens)
        rows.append(
            {
                "pair": run.pair,
                "run": run.run,
                "measured_tok_per_s": run.tokens / run.seconds if run.seconds > 0 else 0.0,
                "projected_tok_per_s": projected.tok_per_s,
                "measured_s": run.seconds,
                "projected_s": projected.seconds,
                "gap_s": run.seconds - projected.seconds,
                "measured_split": {**run.passes, "host_s": run.host_s},
                "projected_split": {
                    "device_s": projected.device_s,
                    "cloud_s": projected.cloud_s,
                    "link_s": projected.link_s,
                },
            }
        )
    return rows


def format_bench_comparison(rows: Sequence[Mapping]) -> str:
    lines = [
        f"{'run':18s} {'measured tok/s':>15s} {'projected tok/s':>16s} {'measured s':>11s} {'projected s':>12s} "
        f"{'gap s':>7s} {'Edge s':>7s} {'Cloud s':>8s} {'host s':>7s}"
    ]
    for row in rows:
        split = row["measured_split"]
        lines.append(
            f"{row['run']:18s} {row['measured_tok_per_s']:15.2f} {row['projected_tok_per_s']:16.2f} "
            f"{row['measured_s']:11.2f} {row['projected_s']:12.2f} {row['gap_s']:7.2f} {split['edge_s']:7.2f} "
            f"{split['cloud_s']:8.2f} {split['host_s']:7.2f}"
        )
    return "\n".join(lines)
