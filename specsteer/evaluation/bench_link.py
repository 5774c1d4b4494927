"""``python -m specsteer bench link``: the device-cloud system measured through a Cloud service, beside its projection.

``python -m specsteer bench link`` runs each method through a Cloud service in its own process at
each emulated round-trip time and sets the measured speed beside a projection of the same runs
(the check of the deployment model). ``python -m specsteer bench project`` projects stored runs
onto a bundled deployment profile. Both print rows of the same shape::

    {"method", "alpha", "rtt_ms", "measured_tok_per_s", "projected_tok_per_s", "rounds",
     "uplink_bytes", "downlink_bytes", ...}

``rounds`` counts the exchanges in which the Edge waited for the Cloud (a speculative round, a
LightCoSteer token, one for a whole ``llm`` stream): the round trips a link charges.

The check of the model (``bench link``)
---------------------------------------
``projected_tok_per_s`` replays each method's runs at one RTT, as they ran (``deployment.AS_RECORDED``),
under this machine's own profile (:func:`measured_profile`: the passes' costs fitted on those runs, the
time outside passes and link waits as a per-step host overhead) with the link they ran over. The fit preserves the
compute, so what it checks is the rest: that the projection's account of the link -- who waits for
whom, a round trip per lockstep exchange, one latency for a pipelined stream, bandwidth on a
serialized wire -- matches what the real HTTP service and the emulated network did.

Two harder variants are reported beside it. ``projected_shared_tok_per_s`` fits one profile on
every method's runs at that RTT: it misprices methods whose host overhead per step differs (an
HTTP request per round against one stream for ``llm``), which is why the check fits per method.
``predicted_from_lowest_rtt_tok_per_s`` fits each method at the lowest RTT only and predicts the
others: out of sample, so on a shared machine it also carries the drift of the passes' speed
between runs, which has nothing to do with the link.

The rows' shared parts (grouping runs, measured speed, acceptance, ``projection_rows``) live in
``specsteer.evaluation.deployment_rows``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from specsteer.evaluation.deployment import (
    AS_RECORDED,
    GENERALIST,
    GENERIC,
    HOST_NUMBERS,
    ROLES,
    SPECIALIST,
    DeploymentProfile,
    HostOverhead,
    Source,
    StreamCost,
    TracedRun,
    as_trace,
    host_rows,
    is_device_only,
    project_runs,
    role_of,
)
from specsteer.evaluation.deployment_rows import TracedGeneration, acceptance_summary, group_runs, measured_tok_per_s
from specsteer.method.catalog import METHOD_INFO
from specsteer.method.costs import PassSample, fit_pass_cost, flat_cost, proportional_cost
from specsteer.protocol.emulation import NO_LINK, LinkConditions


def run_link_bench(
    edge_pair,
    cloud,
    prompts: Sequence,
    configs: Sequence,
    rtts_ms: Sequence[float],
    uplink_kbps: float,
    downlink_kbps: float,
    progress: Callable[[str], None] = lambda line: None,
) -> list[TracedGeneration]:
    """Every config on every prompt at every RTT through ``cloud``, interleaved prompt by prompt so that
    drift in the machine's load hits every method and RTT alike. Each generation starts with the
    Edge's prefix cache empty (the Cloud is started with ``--no-prefix-reuse``)."""
    from specsteer.engine.generate import collect, generate

    for config in configs:  # warm both processes up (allocation, first-call costs), untimed
        collect(generate(edge_pair, prompts[0], _short(config), cloud=cloud))
    runs = []
    for index, prepared in enumerate(prompts):
        for config in configs:
            for rtt in rtts_ms:
                edge_pair.clear_prefix_caches()
                conditions = LinkConditions(rtt_ms=rtt, uplink_kbps=uplink_kbps, downlink_kbps=downlink_kbps)
                _, finished = collect(generate(edge_pair, prepared, config, cloud=cloud, conditions=conditions))
                info = METHOD_INFO[config.method]
                runs.append(
                    TracedGeneration.of(
                        finished.stats,
                        config.alpha if info.takes_alpha else None,
                        config.beta if info.takes_beta else None,
                        rtt,
                        index,
                    )
                )
                progress(
                    f"prompt {index + 1}/{len(prompts)} {config.method} rtt {rtt:g} ms: "
                    f"{finished.stats.tok_per_s:.2f} tok/s, {finished.stats.new_tokens} tokens"
                )
    return runs


def _short(config):
    from dataclasses import replace

    return replace(config, max_new_tokens=min(8, config.max_new_tokens))


def link_rows(runs: Sequence[TracedGeneration], uplink_kbps: float, downlink_kbps: float) -> list[dict]:
    """Measured against projected speed per method and RTT (see the module docstring)."""
    base_rtt = min(run.rtt_ms for run in runs)
    profiles = _ProfileCache(uplink_kbps, downlink_kbps)
    rows = []
    for key, method_runs in group_runs(runs).items():
        for rtt in sorted({run.rtt_ms for run in method_runs}):
            at = [run for run in method_runs if run.rtt_ms == rtt]
            every_method = [run for run in runs if run.rtt_ms == rtt]
            lowest = [run for run in method_runs if run.rtt_ms == base_rtt]
            measured = measured_tok_per_s(at)
            own = project_runs(at, profiles.fitted(at, rtt), AS_RECORDED)
            shared = project_runs(at, profiles.fitted(every_method, rtt), AS_RECORDED)
            predicted = project_runs(at, profiles.fitted(lowest, base_rtt).at_rtt(rtt), AS_RECORDED)
            rows.append(
                {
                    "method": key[0],
                    "alpha": key[1],
                    "beta": key[2],
                    "rtt_ms": rtt,
                    "measured_tok_per_s": measured,
                    "projected_tok_per_s": own.tok_per_s,
                    "projection_error": _error(own.tok_per_s, measured),
                    "projected_shared_tok_per_s": shared.tok_per_s,
                    "shared_projection_error": _error(shared.tok_per_s, measured),
                    "predicted_from_lowest_rtt_tok_per_s": predicted.tok_per_s,
                    "prediction_error": _error(predicted.tok_per_s, measured),
                    "rounds": own.round_trips,
                    "uplink_bytes": own.uplink_bytes,
                    "downlink_bytes": own.downlink_bytes,
                    "tokens": own.tokens,
                    "runs": len(at),
                    "link_s": own.link_s,
                    "lowest_rtt_ms": base_rtt,
                    **acceptance_summary(at),
                }
            )
    return rows


class _ProfileCache:
    """This machine's profiles fitted on groups of runs, each under the link those runs ran over."""

    def __init__(self, uplink_kbps: float, downlink_kbps: float):
        self.uplink_kbps = uplink_kbps
        self.downlink_kbps = downlink_kbps
        self._fitted: dict[tuple, DeploymentProfile] = {}

    def fitted(self, runs: Sequence[TracedGeneration], rtt_ms: float) -> DeploymentProfile:
        key = (tuple(id(run) for run in runs), rtt_ms)
        if key not in self._fitted:
            link = LinkConditions(rtt_ms=rtt_ms, uplink_kbps=self.uplink_kbps, downlink_kbps=self.downlink_kbps)
            self._fitted[key] = measured_profile(runs, link=link)
        return self._fitted[key]


def _error(projected: float, measured: float) -> float | None:
    return projected / measured - 1 if measured else None


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
    generation spent outside passes and link waits becomes a host overhead, the same per logits row and
    per message sent on either side. Projecting the runs with it as they ran (:data:`AS_RECORDED`,
    and ``link`` set to the conditions they ran under) reproduces their measured total time -- the model's
    self-check. The Cloud's passes are one after the other, as they ran here.
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
    units = sum(_host_units(as_trace(run.trace)) for run in runs)
    overhead = max(0.0, outside) / units if units else 0.0
    for number in ("link.rtt_ms", "link.uplink_kbps", "link.downlink_kbps", "link.overhead_bytes"):
        sources.append(Source(number, "the conditions the measured runs ran under"))
    sources.append(Source("cloud_parallel", "measured here: in process the Cloud's passes run one after the other"))
    host_source = f"measured here: time outside passes and link waits over {units} logits rows and messages"
    sources += [Source(number, host_source) for number in HOST_NUMBERS]
    host = HostOverhead(overhead, overhead)
    return DeploymentProfile(
        name,
        label,
        costs[SPECIALIST],
        costs[GENERALIST],
        costs[GENERIC],
        link,
        tuple(sources),
        cloud_parallel=False,
        edge_host=host,
        cloud_host=host,
    )


def _host_units(steps) -> int:
    """The logits rows and messages of a trace, the units its host overhead is charged in."""
    seen: set[str] = set()
    units = 0
    for step in steps:
        if step.kind == "forward":
            units += host_rows(step, step.who not in seen)
            seen.add(step.who)
        else:
            units += 1
    return units
