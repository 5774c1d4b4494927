"""Rows of projected speeds: stored generations grouped by method, each group projected at each RTT.

What ``specsteer bench project`` prints and the Dashboard's deployment view shows for a stored run
(:func:`deployment_rows`): each method's projected speed at each RTT under a profile, next to what was
measured here. ``specsteer.evaluation.bench_link`` prints rows of the same shape for ``bench link``. The
projection itself is ``specsteer.evaluation.deployment``'s; the bundled profiles are
``specsteer.evaluation.deployment_profiles``'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from specsteer.evaluation.deployment import FRESH, DeploymentProfile, PromptReads, TracedRun, as_trace, project_runs
from specsteer.evaluation.deployment_profiles import get_profile
from specsteer.method.events import GenerationStats, TraceStep

DEFAULT_RTTS_MS: tuple[float, ...] = (0.0, 10.0, 20.0, 50.0, 100.0, 150.0, 200.0)
# The traces projected by default: the example database's LongLaMP grid on llama.cpp (assets/example_runs.db, the
# one example run that keeps its traces; docs/research/MEASUREMENTS.md projected it with its writing twin).
DEFAULT_RUNS = ("longlamp-review-llamacpp-256",)


# --------------------------------------------------------------------------- methods against RTT


class MethodRate(NamedTuple):
    """One method's projected speed at one round-trip time (its runs summed)."""

    method: str
    rtt_ms: float
    tok_per_s: float
    seconds: float
    tokens: int
    round_trips: int
    uplink_bytes: int
    downlink_bytes: int


@dataclass(frozen=True)
class SpeedupSummary:
    """Projected tokens/s of each method across RTTs under one profile, and speedups over a reference."""

    profile: str
    label: str
    rtts_ms: tuple[float, ...]
    rates: tuple[MethodRate, ...]
    reference: str = "llm"

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(rate.method for rate in self.rates))

    def tok_per_s(self, method: str, rtt_ms: float) -> float:
        for rate in self.rates:
            if rate.method == method and rate.rtt_ms == rtt_ms:
                return rate.tok_per_s
        raise KeyError((method, rtt_ms))

    def speedups(self, method: str = "specsteer") -> tuple[float, ...]:
        """``method``'s projected speed over the reference's, at each RTT."""
        return tuple(self.tok_per_s(method, rtt) / self.tok_per_s(self.reference, rtt) for rtt in self.rtts_ms)


def summarize_speedups(
    runs_by_method: Mapping[str, Sequence[TracedRun]],
    profile: DeploymentProfile,
    rtts_ms: Sequence[float] = DEFAULT_RTTS_MS,
    reference: str = "llm",
) -> SpeedupSummary:
    """Project every method's runs at every RTT (the profile's bandwidths kept)."""
    rates = []
    for rtt in rtts_ms:
        at_rtt = profile.at_rtt(rtt)
        for method, runs in runs_by_method.items():
            if not runs:
                continue
            total = project_runs(runs, at_rtt)
            rates.append(
                MethodRate(
                    method,
                    float(rtt),
                    total.tok_per_s,
                    total.seconds,
                    total.tokens,
                    total.round_trips,
                    total.uplink_bytes,
                    total.downlink_bytes,
                )
            )
    return SpeedupSummary(profile.name, profile.label, tuple(float(r) for r in rtts_ms), tuple(rates), reference)


# --------------------------------------------------------------------------- rows: grouped runs at each RTT


@dataclass(frozen=True)
class TracedGeneration:
    """One generation as the projections need it, with what identifies its method and what it measured."""

    method: str
    alpha: float | None
    beta: float | None
    rtt_ms: float
    prompt: int
    new_tokens: int
    seconds: float
    drafted: int
    accepted: int
    verified: int
    trace: tuple[TraceStep, ...]
    # its wall time holds a pause (GenerationStats.timing_disturbed): left out of every projection and measured
    # speed (timed_runs), since its passes' times and its seconds are not what it computed
    disturbed: bool = False
    # prompt tokens each stream found in a prefix cache (GenerationStats.reused_tokens); empty for a generation
    # stored before they were recorded (its first passes are then charged as recorded: PromptReads)
    reused_tokens: Mapping[str, int] = field(default_factory=dict, hash=False)

    @classmethod
    def of(
        cls,
        stats: GenerationStats,
        alpha: float | None,
        beta: float | None = None,
        rtt_ms: float = 0.0,
        prompt: int = 0,
    ) -> TracedGeneration:
        return cls(
            stats.method,
            alpha,
            beta,
            rtt_ms,
            prompt,
            stats.new_tokens,
            stats.seconds,
            stats.drafted,
            stats.accepted,
            stats.verified,
            tuple(as_trace(stats.trace)),
            stats.timing_disturbed,
            dict(stats.reused_tokens),
        )

    def to_json(self) -> dict:
        return {**asdict(self), "trace": [list(step) for step in self.trace]}

    @classmethod
    def from_json(cls, data: Mapping) -> TracedGeneration:
        reused = {str(stream): int(tokens) for stream, tokens in dict(data.get("reused_tokens") or {}).items()}
        return cls(**{"beta": None, **data, "trace": tuple(as_trace(data["trace"])), "reused_tokens": reused})


def timed_runs(runs: Iterable[TracedGeneration]) -> tuple[list[TracedGeneration], int]:
    """The runs whose timing is sound, and how many were left out for a disturbed one: a row's projected and
    measured speeds are then over the same generations."""
    runs = list(runs)
    kept = [run for run in runs if not run.disturbed]
    return kept, len(runs) - len(kept)


GroupKey = tuple[str, float | None, float | None]  # (method, alpha, beta)


def group_runs(runs: Iterable[TracedGeneration]) -> dict[GroupKey, list[TracedGeneration]]:
    groups: dict[GroupKey, list[TracedGeneration]] = {}
    for run in runs:
        groups.setdefault((run.method, run.alpha, run.beta), []).append(run)
    return groups


def measured_tok_per_s(runs: Sequence[TracedGeneration]) -> float:
    seconds = sum(run.seconds for run in runs)
    return sum(run.new_tokens for run in runs) / seconds if seconds > 0 else 0.0


def acceptance_summary(runs: Sequence[TracedGeneration]) -> dict:
    """Acceptance as the benchmark reports it: per draft sent, and per draft tested (the bound's a)."""
    drafted = sum(run.drafted for run in runs)
    verified = sum(run.verified for run in runs)
    accepted = sum(run.accepted for run in runs)
    return {
        "acceptance": accepted / drafted if drafted else None,
        "token_acceptance": accepted / verified if verified else None,
    }


def projection_rows(
    groups: Mapping[GroupKey, Sequence[TracedGeneration]],
    profile: DeploymentProfile,
    rtts_ms: Sequence[float],
    reference: str = "llm",
    reads: PromptReads = FRESH,
) -> list[dict]:
    """Each group's runs projected under ``profile`` at each RTT (its bandwidths kept), with the speed
    they were measured at here and the projected speedup over the ``reference`` method. Every row carries
    how it was obtained: the profile's name and every number's source at that RTT, the prompt-read rule,
    the host overhead and prompt tokens it charged, and how many generations were stored without a record
    of their cache hits (``reuse_unrecorded``: charged as recorded)."""
    rows = []
    for rtt in rtts_ms:
        at_rtt = profile.at_rtt(rtt)
        sources = {source.number: source.text for source in at_rtt.sources}
        projected = {key: project_runs(runs, at_rtt, reads) for key, runs in groups.items() if runs}
        reference_speed = next((p.tok_per_s for (method, *_), p in projected.items() if method == reference), None)
        for (method, alpha, beta), projection in projected.items():
            runs = groups[(method, alpha, beta)]
            rows.append(
                {
                    "method": method,
                    "alpha": alpha,
                    "beta": beta,
                    "rtt_ms": float(rtt),
                    "measured_tok_per_s": measured_tok_per_s(runs),
                    "projected_tok_per_s": projection.tok_per_s,
                    "projected_speedup": projection.tok_per_s / reference_speed if reference_speed else None,
                    "rounds": projection.round_trips,
                    "uplink_bytes": projection.uplink_bytes,
                    "downlink_bytes": projection.downlink_bytes,
                    "tokens": projection.tokens,
                    "runs": len(runs),
                    "device_s": projection.device_s,
                    "cloud_s": projection.cloud_s,
                    "link_s": projection.link_s,
                    "host_s": projection.host_s,
                    "prompt_tokens": projection.prompt_tokens,
                    "reuse_unrecorded": sum(1 for run in runs if not run.reused_tokens),
                    **acceptance_summary(runs),
                    "profile": at_rtt.name,
                    "prompt_reads": reads.describe(),
                    "sources": sources,
                }
            )
    return rows


def deployment_rows(cells: Iterable, profile_name: str, rtts_ms: Sequence[float] = DEFAULT_RTTS_MS) -> list[dict]:
    """For a stored evaluation run (``stores.CellResult`` s): every method's projected tokens/s at
    each RTT under a bundled profile, next to what was measured here. Cells without a trace (runs
    stored before traces existed) are left out, and so are cells whose timing was disturbed
    (:func:`timed_runs`); device-only methods' cells are projected too where they have one."""
    traced = [TracedGeneration.of(cell.stats, cell.point.alpha, cell.point.beta) for cell in cells if cell.stats.trace]
    runs, _ = timed_runs(traced)
    return projection_rows(group_runs(runs), get_profile(profile_name), rtts_ms)
