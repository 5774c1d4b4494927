"""The device-cloud system measured through a Cloud service, and projected onto deployments.

``python -m specsteer.bench link`` runs each method through a Cloud service in its own process at
each emulated round-trip time and sets the measured speed beside a projection of the same runs
(the check of the deployment model). ``python -m specsteer.bench project`` projects stored runs
onto a bundled deployment profile. Both print rows of the same shape::

    {"method", "alpha", "rtt_ms", "measured_tok_per_s", "projected_tok_per_s", "rounds",
     "uplink_bytes", "downlink_bytes", ...}

``rounds`` counts the exchanges in which the Edge waited for the Cloud (a speculative round, a
LightCoSteer token, one for a whole ``llm`` stream): the round trips a link charges.

The check of the model (``bench link``)
---------------------------------------
Each method's profile is fitted (``deployment.measured_profile``) on its runs at the lowest RTT of
the sweep only, and then replays the runs made at every RTT under that profile with the RTT they
ran at. So the link's share of every row above the lowest is predicted, not fitted: the fit knows
the passes' costs and the host's per-step overhead, the replay adds the latency. A profile fitted
on every method's runs together (``projected_shared_tok_per_s``) is reported beside it; it is off
where the methods' host overhead per step differs (an HTTP request per round against one stream
for ``llm``), which is why the per-method fit is the check.

:func:`deployment_rows` is what a dashboard calls for a stored run: each method's projected speed
at each RTT under a profile, next to what was measured here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from .deployment import (
    DEFAULT_RTTS_MS, DeploymentProfile, LinkConditions, as_trace, get_profile, measured_profile, project_runs,
)
from .events import GenerationStats, TraceStep


@dataclass(frozen=True)
class TracedGeneration:
    """One generation as the projections need it, with what identifies its method and what it measured."""

    method: str
    alpha: float | None
    rtt_ms: float
    prompt: int
    new_tokens: int
    seconds: float
    drafted: int
    accepted: int
    verified: int
    trace: tuple[TraceStep, ...]

    @classmethod
    def of(cls, stats: GenerationStats, alpha: float | None, rtt_ms: float = 0.0, prompt: int = 0) -> TracedGeneration:
        return cls(stats.method, alpha, rtt_ms, prompt, stats.new_tokens, stats.seconds, stats.drafted,
                   stats.accepted, stats.verified, tuple(as_trace(stats.trace)))

    def to_json(self) -> dict:
        return {**asdict(self), "trace": [list(step) for step in self.trace]}

    @classmethod
    def from_json(cls, data: Mapping) -> TracedGeneration:
        return cls(**{**data, "trace": tuple(as_trace(data["trace"]))})


GroupKey = tuple[str, float | None]  # (method, alpha)


def group_runs(runs: Iterable[TracedGeneration]) -> dict[GroupKey, list[TracedGeneration]]:
    groups: dict[GroupKey, list[TracedGeneration]] = {}
    for run in runs:
        groups.setdefault((run.method, run.alpha), []).append(run)
    return groups


def measured_tok_per_s(runs: Sequence[TracedGeneration]) -> float:
    seconds = sum(run.seconds for run in runs)
    return sum(run.new_tokens for run in runs) / seconds if seconds > 0 else 0.0


def acceptance_summary(runs: Sequence[TracedGeneration]) -> dict:
    """Acceptance as the benchmark reports it: per draft sent, and per draft tested (the bound's a)."""
    drafted = sum(run.drafted for run in runs)
    verified = sum(run.verified for run in runs)
    accepted = sum(run.accepted for run in runs)
    return {"acceptance": accepted / drafted if drafted else None,
            "token_acceptance": accepted / verified if verified else None}


def projection_rows(groups: Mapping[GroupKey, Sequence[TracedGeneration]], profile: DeploymentProfile,
                    rtts_ms: Sequence[float], reference: str = "llm") -> list[dict]:
    """Each group's runs projected under ``profile`` at each RTT (its bandwidths kept), with the speed
    they were measured at here and the projected speedup over the ``reference`` method."""
    rows = []
    for rtt in rtts_ms:
        at_rtt = profile.at_rtt(rtt)
        projected = {key: project_runs(runs, at_rtt) for key, runs in groups.items() if runs}
        reference_speed = next((p.tok_per_s for (method, _), p in projected.items() if method == reference), None)
        for (method, alpha), projection in projected.items():
            runs = groups[(method, alpha)]
            rows.append({
                "method": method, "alpha": alpha, "rtt_ms": float(rtt),
                "measured_tok_per_s": measured_tok_per_s(runs),
                "projected_tok_per_s": projection.tok_per_s,
                "projected_speedup": projection.tok_per_s / reference_speed if reference_speed else None,
                "rounds": projection.round_trips,
                "uplink_bytes": projection.uplink_bytes, "downlink_bytes": projection.downlink_bytes,
                "tokens": projection.tokens, "runs": len(runs),
                "device_s": projection.device_s, "cloud_s": projection.cloud_s, "link_s": projection.link_s,
                **acceptance_summary(runs),
            })
    return rows


def deployment_rows(cells: Iterable, profile_name: str, rtts_ms: Sequence[float] = DEFAULT_RTTS_MS) -> list[dict]:
    """For a stored evaluation run (``runstore.CellResult`` s): every method's projected tokens/s at
    each RTT under a bundled profile, next to what was measured here. Cells without a trace (runs
    stored before traces existed) and device-only methods' cells are projected too where they have one."""
    runs = [TracedGeneration.of(cell.stats, cell.point.alpha) for cell in cells if cell.stats.trace]
    return projection_rows(group_runs(runs), get_profile(profile_name), rtts_ms)


# --------------------------------------------------------------------------- bench link


def link_conditions(rtt_ms: float, uplink_kbps: float, downlink_kbps: float) -> LinkConditions:
    return LinkConditions(rtt_ms=rtt_ms, uplink_kbps=uplink_kbps, downlink_kbps=downlink_kbps)


def run_link_bench(edge_pair, cloud, prompts: Sequence, configs: Sequence, rtts_ms: Sequence[float],
                   uplink_kbps: float, downlink_kbps: float,
                   progress: Callable[[str], None] = lambda line: None) -> list[TracedGeneration]:
    """Every config on every prompt at every RTT through ``cloud``, interleaved prompt by prompt so that
    drift in the machine's load hits every method and RTT alike. Each generation starts with the
    Edge's prefix cache empty (the Cloud is started with ``--no-prefix-reuse``)."""
    from .engine import collect, generate

    for config in configs:  # warm both processes up (allocation, first-call costs), untimed
        collect(generate(edge_pair, prompts[0], _short(config), cloud=cloud))
    runs = []
    for index, prepared in enumerate(prompts):
        for config in configs:
            for rtt in rtts_ms:
                edge_pair.clear_prefix_caches()
                conditions = link_conditions(rtt, uplink_kbps, downlink_kbps)
                _, finished = collect(generate(edge_pair, prepared, config, cloud=cloud, conditions=conditions))
                alpha = config.alpha if config.method == "specsteer" else None
                runs.append(TracedGeneration.of(finished.stats, alpha, rtt, index))
                progress(f"prompt {index + 1}/{len(prompts)} {config.method} rtt {rtt:g} ms: "
                         f"{finished.stats.tok_per_s:.2f} tok/s, {finished.stats.new_tokens} tokens")
    return runs


def _short(config):
    from dataclasses import replace

    return replace(config, max_new_tokens=min(8, config.max_new_tokens))


def link_rows(runs: Sequence[TracedGeneration], uplink_kbps: float, downlink_kbps: float) -> list[dict]:
    """Measured against projected speed per method and RTT (see the module docstring)."""
    base_rtt = min(run.rtt_ms for run in runs)
    base_link = link_conditions(base_rtt, uplink_kbps, downlink_kbps)
    base_runs = [run for run in runs if run.rtt_ms == base_rtt]
    shared = measured_profile(base_runs, link=base_link, name="this-machine-shared")
    rows = []
    for key, method_runs in group_runs(runs).items():
        own = measured_profile([run for run in method_runs if run.rtt_ms == base_rtt], link=base_link)
        for rtt in sorted({run.rtt_ms for run in method_runs}):
            at = [run for run in method_runs if run.rtt_ms == rtt]
            projection = project_runs(at, own.at_rtt(rtt))
            shared_projection = project_runs(at, shared.at_rtt(rtt))
            measured = measured_tok_per_s(at)
            rows.append({
                "method": key[0], "alpha": key[1], "rtt_ms": rtt,
                "measured_tok_per_s": measured,
                "projected_tok_per_s": projection.tok_per_s,
                "projection_error": projection.tok_per_s / measured - 1 if measured else None,
                "projected_shared_tok_per_s": shared_projection.tok_per_s,
                "shared_projection_error": shared_projection.tok_per_s / measured - 1 if measured else None,
                "rounds": projection.round_trips,
                "uplink_bytes": projection.uplink_bytes, "downlink_bytes": projection.downlink_bytes,
                "tokens": projection.tokens, "runs": len(at),
                "fitted_on_rtt_ms": base_rtt,
                **acceptance_summary(at),
            })
    return rows
