"""A deployment profile whose Cloud costs are measured on a GPU (``specsteer.evaluation.gpu_costs``), not quoted.

The bundled profiles (``specsteer.evaluation.deployment_profiles.PROFILES``) price the Cloud's passes from published
tokens/s tables: a one-token pass from a decode rate, every further token of a verification pass at
a prompt rate derived from 6,144-token rows. ``specsteer.evaluation.gpu_costs`` measures those passes directly
on a GPU with the real models' shapes: the decode step, (k+1)-token verification passes for each k on
a cached prefix, and prefill at several prompt lengths. :func:`measured_cloud_profile` puts those
numbers into a :class:`~specsteer.evaluation.deployment.DeploymentProfile`:

* the Generalist is the pair's large model, the generic Specialist its small one, both as measured;
* the device Specialist, the link, ``cloud_parallel`` and the host overhead stay those of the
  published profile it is paired with (``--base``, the paper's setting by default), with their
  sources;
* each measured number's source names the device, the library versions, the file and the medians.

A measured pass cost (:class:`MeasuredPassCost`) is exact at every measured size: a projection of a
trace whose rounds verify k drafts charges the median measured for k + 1 tokens. Between measured
sizes it interpolates linearly; beyond them it follows the least-squares line's slope.

``specsteer gpu-profile benchmarks/results/gpu_costs_h100.json`` prints the measured costs beside the
published ones and the stored traces (``bench project``'s) projected with both profiles; the engine benchmark's runs
beside the same passes are ``specsteer.evaluation.gpu_engine_bench``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specsteer.evaluation.deployment import GENERALIST, GENERIC, DeploymentProfile, Source, StreamCost
from specsteer.evaluation.deployment_profiles import get_profile
from specsteer.evaluation.deployment_rows import group_runs, projection_rows
from specsteer.evaluation.gpu_costs import SCHEMA
from specsteer.method.costs import PassCost, PassSample, fit_pass_cost, flat_cost, proportional_cost

# The stored LongLaMP traces read 657-880 prompt tokens and write up to 256: their passes run at
# roughly 0.7k-1.1k tokens of context, so the measured context nearest this one prices them.
TRACE_CONTEXT = 1024


# --------------------------------------------------------------------------- a measured pass cost


@dataclass(frozen=True)
class MeasuredPassCost(PassCost):
    """A pass cost that returns the measured seconds at every measured size.

    ``points``: (tokens, seconds) measured, sizes distinct and ascending. ``base_s``/``per_token_s``
    hold the least-squares line over them. Between two measured sizes the cost is interpolated
    linearly; outside them it moves from the nearest measured point along the line's slope (and
    never below zero).
    """

    points: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.points:
            raise ValueError("a measured pass cost needs at least one measured pass")
        sizes = [tokens for tokens, _ in self.points]
        if sizes != sorted(set(sizes)) or sizes[0] < 1:
            raise ValueError(f"measured sizes must be distinct, ascending and >= 1, got {sizes}")
        for tokens, seconds in self.points:
            if not (isinstance(seconds, (int, float)) and seconds > 0):
                raise ValueError(f"the pass of {tokens} tokens needs a positive time, got {seconds!r}")

    def seconds(self, tokens: int) -> float:
        first_tokens, first_seconds = self.points[0]
        last_tokens, last_seconds = self.points[-1]
        if tokens <= first_tokens:
            return max(0.0, first_seconds - self.per_token_s * (first_tokens - tokens))
        if tokens >= last_tokens:
            return last_seconds + self.per_token_s * (tokens - last_tokens)
        for (low, low_s), (high, high_s) in zip(self.points, self.points[1:]):
            if low <= tokens <= high:
                return low_s + (high_s - low_s) * (tokens - low) / (high - low)
        raise AssertionError("unreachable: the sizes are ascending")  # pragma: no cover

    @classmethod
    def from_points(cls, points: Sequence[tuple[int, float]], single_size=flat_cost) -> MeasuredPassCost:
        ordered = tuple(sorted((int(tokens), float(seconds)) for tokens, seconds in points))
        if not ordered:
            raise ValueError("a measured pass cost needs at least one measured pass")
        line = fit_pass_cost([PassSample(t, s) for t, s in ordered], single_size)
        return cls(line.base_s, line.per_token_s, ordered)


# --------------------------------------------------------------------------- reading the JSON


@dataclass(frozen=True)
class MeasuredModel:
    """One model's measured passes from the JSON: medians by (context, tokens) and by prompt length."""

    name: str
    passes: Mapping[tuple[int, int], tuple[float, int]]  # (context, tokens) -> (median s, reps)
    prefill: Mapping[int, tuple[float, int]]  # prompt tokens -> (median s, reps)
    shape_source: str

    def contexts(self) -> list[int]:
        return sorted({context for context, _ in self.passes})

    def passes_at(self, context: int) -> list[tuple[int, float, int]]:
        return sorted((tokens, median, reps) for (c, tokens), (median, reps) in self.passes.items() if c == context)


@dataclass(frozen=True)
class GpuCosts:
    """The measured JSON of ``specsteer.evaluation.gpu_costs``, checked."""

    device: str
    torch: str
    transformers: str
    dtype: str
    dry_run: bool
    pairs: Mapping[str, tuple[str, str]]  # pair -> (small, large)
    models: Mapping[str, MeasuredModel]
    execution: str

    def describe(self) -> str:
        what = f"{self.device}, torch {self.torch}, transformers {self.transformers}, {self.dtype}"
        return f"DRY RUN on tiny shapes ({what}; not a GPU figure)" if self.dry_run else what


def _median(row: Mapping, where: str) -> tuple[float, int]:
    median, reps = row.get("median_s"), row.get("reps")
    if isinstance(median, bool) or not isinstance(median, (int, float)) or not median > 0:
        raise ValueError(f"{where}: median_s must be a positive number, got {median!r}")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"{where}: reps must be a positive integer, got {reps!r}")
    return float(median), reps


def _model(name: str, data: Mapping) -> MeasuredModel:
    passes: dict[tuple[int, int], tuple[float, int]] = {}
    for kind in ("decode", "verify"):
        for row in data.get(kind) or []:
            key = (int(row["context"]), int(row["tokens"]))
            if kind == "verify" and int(row["tokens"]) != int(row["k"]) + 1:
                raise ValueError(f"{name}: a verify pass of k={row['k']} must read k + 1 tokens")
            if key in passes:
                raise ValueError(f"{name}: two passes of {key[1]} tokens at context {key[0]}")
            passes[key] = _median(row, f"{name} {kind} {key}")
    prefill = {}
    for row in data.get("prefill") or []:
        prefill[int(row["tokens"])] = _median(row, f"{name} prefill {row.get('tokens')}")
    return MeasuredModel(name, passes, prefill, str(data.get("shape_source", "")))


def parse_costs(data: Mapping) -> GpuCosts:
    """Check and read the JSON; a clear ValueError for anything it cannot use."""
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a gpu_costs result (schema {SCHEMA!r} expected)")
    try:
        device = data["device"]
        pairs = {row["pair"]: (row["small"], row["large"]) for row in data["pairs"]}
        models = {name: _model(name, model) for name, model in data["models"].items()}
        return GpuCosts(
            device=str(device["name"]),
            torch=str(data["torch"]),
            transformers=str(data["transformers"]),
            dtype=str(data["dtype"]),
            dry_run=bool(data.get("dry_run", False)),
            pairs=pairs,
            models=models,
            execution=str(data.get("execution", "")),
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed gpu_costs result: missing or wrong field {error}") from None


def load_costs(path: str | Path) -> GpuCosts:
    return parse_costs(json.loads(Path(path).read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- the profile


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def measured_stream(model: MeasuredModel, context: int, costs: GpuCosts, origin: str) -> tuple[StreamCost, str, str]:
    """A model's measured StreamCost and the source texts of its decode and prefill costs."""
    passes = model.passes_at(context)
    if not passes:
        raise ValueError(f"{model.name} has no measured pass at context {context} (measured: {model.contexts()})")
    if not model.prefill:
        raise ValueError(f"{model.name} has no measured prefill")
    decode = MeasuredPassCost.from_points([(tokens, median) for tokens, median, _ in passes], flat_cost)
    prefill = MeasuredPassCost.from_points(
        [(tokens, median) for tokens, (median, _) in model.prefill.items()], proportional_cost
    )
    head = (
        f"measured: {model.name} shape ({model.shape_source}), random weights, {costs.execution or 'transformers'}, "
        f"on {costs.describe()}{f', {origin}' if origin else ''}"
    )
    listed = ", ".join(
        f"{tokens} {'token (decode step)' if tokens == 1 else 'tokens'} {_ms(median)} ({reps} reps)"
        for tokens, median, reps in passes
    )
    line = f"least-squares line {_ms(decode.base_s)} + {_ms(decode.per_token_s)}/token"
    decode_source = (
        f"{head}: medians of passes at a {context}-token cached prefix: {listed}; "
        f"other sizes interpolated, beyond them along the {line}"
    )
    prompts = ", ".join(
        f"{tokens} tokens {_ms(median)} = {tokens / median:.0f} tok/s ({reps} reps)"
        for tokens, (median, reps) in sorted(model.prefill.items())
    )
    prefill_source = (
        f"{head}: medians of prompt prefills into an empty cache: {prompts}; "
        f"other lengths interpolated, beyond them along the least-squares line "
        f"{_ms(prefill.base_s)} + {_ms(prefill.per_token_s)}/token"
    )
    return StreamCost(decode, prefill), decode_source, prefill_source


def choose_context(costs: GpuCosts, names: Sequence[str], context: int | None = None) -> int:
    """The pass context to price with: ``context`` if both models measured it, else the shared
    measured context nearest :data:`TRACE_CONTEXT`."""
    shared = set.intersection(*(set(costs.models[name].contexts()) for name in names))
    if not shared:
        raise ValueError(f"{' and '.join(names)} share no measured context")
    if context is not None:
        if context not in shared:
            raise ValueError(f"context {context} was not measured for both models (measured: {sorted(shared)})")
        return context
    return min(shared, key=lambda c: (abs(c - TRACE_CONTEXT), c))


def measured_cloud_profile(
    costs: GpuCosts,
    pair: str = "qwen3",
    base: str | DeploymentProfile = "paper",
    context: int | None = None,
    origin: str = "",
) -> DeploymentProfile:
    """``base`` with its Cloud's two models priced by the measured passes of ``pair``.

    The Generalist is the pair's large model, the generic Specialist its small one; everything else
    (the device Specialist, the link, ``cloud_parallel``, the host overhead) and its sources stay the
    base profile's. ``origin`` (the JSON's path) goes into the measured numbers' sources.
    """
    published = get_profile(base) if isinstance(base, str) else base
    if pair not in costs.pairs:
        raise ValueError(f"pair {pair!r} was not measured (measured: {', '.join(costs.pairs) or 'none'})")
    small, large = costs.pairs[pair]
    missing = [name for name in (small, large) if name not in costs.models]
    if missing:
        raise ValueError(f"pair {pair!r}: no measurements of {', '.join(missing)}")
    at = choose_context(costs, (small, large), context)
    generalist, generalist_decode, generalist_prefill = measured_stream(costs.models[large], at, costs, origin)
    generic, generic_decode, generic_prefill = measured_stream(costs.models[small], at, costs, origin)
    replaced = {
        f"{GENERALIST}.decode": generalist_decode,
        f"{GENERALIST}.prefill": generalist_prefill,
        f"{GENERIC}.decode": generic_decode,
        f"{GENERIC}.prefill": generic_prefill,
    }
    sources = tuple(Source(s.number, replaced.get(s.number, s.text)) for s in published.sources)
    sources += tuple(Source(n, t) for n, t in replaced.items() if n not in {s.number for s in published.sources})
    device = costs.device + (" (dry run)" if costs.dry_run else "")
    return replace(
        published,
        name=f"{published.name}+measured",
        label=f"{published.label}; the Cloud's {large} and {small} passes measured on {device}",
        generalist=generalist,
        generic_specialist=generic,
        sources=sources,
    )


def profile_from_file(
    path: str | Path, pair: str = "qwen3", base: str | DeploymentProfile = "paper", context: int | None = None
) -> DeploymentProfile:
    """:func:`measured_cloud_profile` of a ``specsteer.evaluation.gpu_costs`` JSON file, its path in the sources."""
    return measured_cloud_profile(load_costs(path), pair, base, context, origin=str(path))


# --------------------------------------------------------------------------- side by side


def cost_rows(
    published: DeploymentProfile, measured: DeploymentProfile, tokens: Sequence[int], prompts: Sequence[int]
) -> list[dict]:
    """Seconds of the Cloud's passes under both profiles: later passes of each size, and prompts."""
    rows = []
    for role in (GENERALIST, GENERIC):
        for kind, sizes in (("pass", tokens), ("prefill", prompts)):
            for size in sizes:
                first = kind == "prefill"
                rows.append(
                    {
                        "role": role,
                        "kind": kind,
                        "tokens": size,
                        "published_s": published.cost(role).seconds(size, first),
                        "measured_s": measured.cost(role).seconds(size, first),
                    }
                )
    return rows


def projection_comparison(runs: Sequence, published: DeploymentProfile, measured: DeploymentProfile, rtts_ms) -> list:
    """The stored runs projected under both profiles, row by row (method, alpha, beta, RTT)."""
    groups = group_runs(runs)
    before = projection_rows(groups, published, rtts_ms)
    after = projection_rows(groups, measured, rtts_ms)
    rows = []
    for old, new in zip(before, after):
        rows.append(
            {
                **{key: old[key] for key in ("method", "alpha", "beta", "rtt_ms", "measured_tok_per_s", "rounds")},
                "tokens": old["tokens"],
                "runs": old["runs"],
                "published_tok_per_s": old["projected_tok_per_s"],
                "published_speedup": old["projected_speedup"],
                "gpu_measured_tok_per_s": new["projected_tok_per_s"],
                "gpu_measured_speedup": new["projected_speedup"],
                "gpu_measured_device_share": new["device_s"] / (new["device_s"] + new["cloud_s"] + new["link_s"])
                if new["device_s"] + new["cloud_s"] + new["link_s"] > 0
                else None,
            }
        )
    return rows


def format_costs(rows: Sequence[Mapping], published: str, names: Mapping[str, str]) -> str:
    lines = [
        f"{'Cloud model':34s} {'pass':>8s} {'tokens':>7s} {published + ' ms':>14s} {'measured ms':>12s} {'ratio':>7s}"
    ]
    for row in rows:
        ratio = row["measured_s"] / row["published_s"] if row["published_s"] > 0 else float("nan")
        lines.append(
            f"{names[row['role']]:34s} {row['kind']:>8s} {row['tokens']:7d} {row['published_s'] * 1e3:14.2f} "
            f"{row['measured_s'] * 1e3:12.2f} {ratio:7.2f}"
        )
    return "\n".join(lines)


def format_projection(rows: Sequence[Mapping], published: str) -> str:
    def speedup(value) -> str:
        return "" if value is None else f"{value:.2f}x"

    lines = [
        f"{'method':22s} {'rtt ms':>7s} {published + ' tok/s':>16s} {'speedup':>8s} {'measured tok/s':>15s} "
        f"{'speedup':>8s} {'device share':>13s}"
    ]
    for row in rows:
        name = row["method"] + "".join(
            f" {short}={row[key]:g}" for key, short in (("alpha", "a"), ("beta", "b")) if row.get(key) is not None
        )
        share = row["gpu_measured_device_share"]
        lines.append(
            f"{name:22s} {row['rtt_ms']:7.0f} {row['published_tok_per_s']:16.2f} "
            f"{speedup(row['published_speedup']):>8s} {row['gpu_measured_tok_per_s']:15.2f} "
            f"{speedup(row['gpu_measured_speedup']):>8s} {'' if share is None else f'{share:.0%}':>13s}"
        )
    return "\n".join(lines)
