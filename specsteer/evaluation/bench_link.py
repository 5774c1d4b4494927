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
``projected_tok_per_s`` replays each method's runs at one RTT under this machine's own profile
(``deployment.measured_profile``: the passes' costs fitted on those runs, the time outside passes
and link waits as a per-step host overhead) with the link they ran over. The fit preserves the
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

from collections.abc import Callable, Sequence

from specsteer.evaluation.deployment import DeploymentProfile, measured_profile, project_runs
from specsteer.evaluation.deployment_rows import TracedGeneration, acceptance_summary, group_runs, measured_tok_per_s
from specsteer.method.catalog import METHOD_INFO
from specsteer.protocol.emulation import LinkConditions


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
            own = project_runs(at, profiles.fitted(at, rtt))
            shared = project_runs(at, profiles.fitted(every_method, rtt))
            predicted = project_runs(at, profiles.fitted(lowest, base_rtt).at_rtt(rtt))
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
