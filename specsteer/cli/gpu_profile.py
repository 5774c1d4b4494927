"""``specsteer gpu-profile COSTS.json``: the Cloud's costs measured on a GPU (benchmarks/gpu_costs.py) as a deployment
profile beside the published one it is paired with, and stored traces re-projected with both (by default the
example runs' LongLaMP grid, read-only); with ``--engine-bench BENCH.json`` also the engine benchmark's runs
(benchmarks/engine_bench.py) beside their own traces projected with the same GPU's measured passes."""

from __future__ import annotations

import argparse
import json
import sys

from specsteer.evaluation.deployment import GENERALIST, GENERIC, DeploymentProfile
from specsteer.evaluation.deployment_profiles import PROFILES, get_profile
from specsteer.evaluation.deployment_rows import DEFAULT_RTTS_MS
from specsteer.evaluation.gpu_engine_bench import (
    bench_comparison,
    format_bench_comparison,
    load_engine_bench,
    one_gpu_profile,
)
from specsteer.evaluation.gpu_profile import (
    choose_context,
    cost_rows,
    format_costs,
    format_projection,
    load_costs,
    measured_cloud_profile,
    projection_comparison,
)


def _numbers(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, not {text!r}") from None


def _stored_traces(args) -> tuple[list, int]:
    """The traces to project, read the way ``bench project`` reads them (its composition root), with sound
    timing, and how many were left out."""
    from specsteer.cli.bench import timed_traces, traces_to_project

    return timed_traces(traces_to_project(args.from_bench, args.database, args.run))


def _published_text(profile: DeploymentProfile, number: str) -> str | None:
    try:
        return profile.source(number)
    except KeyError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specsteer gpu-profile", description=__doc__.splitlines()[0])
    parser.add_argument("costs", help="the JSON of benchmarks/gpu_costs.py")
    parser.add_argument("--pair", default="qwen3", help="which measured pair prices the Cloud (default qwen3)")
    parser.add_argument("--base", default="paper", help=f"the published profile to pair with: {', '.join(PROFILES)}")
    parser.add_argument("--context", type=int, default=None, help="the measured pass context to use")
    parser.add_argument("--rtt-ms", type=_numbers, default=list(DEFAULT_RTTS_MS))
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="an evaluation database (default: the example runs, assets/example_runs.db)",
    )
    parser.add_argument(
        "--run", action="append", default=[], metavar="NAME", help="an evaluation run; repeat for several"
    )
    parser.add_argument("--from-bench", default=None, metavar="FILE", help="the JSON of `bench link --json`")
    parser.add_argument("--no-projection", action="store_true", help="only the costs, no stored traces")
    parser.add_argument(
        "--engine-bench",
        default=None,
        metavar="FILE",
        help="the JSON of benchmarks/engine_bench.py: its runs beside their traces projected with these costs",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        costs = load_costs(args.costs)
        published = get_profile(args.base)
        measured = measured_cloud_profile(costs, args.pair, published, args.context, origin=args.costs)
        runs, left_out = ([], 0) if args.no_projection else _stored_traces(args)
        bench = load_engine_bench(args.engine_bench) if args.engine_bench else None
        one_gpu = one_gpu_profile(costs, args.pair, args.context, origin=args.costs) if bench else None
    except (ValueError, OSError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    small, large = costs.pairs[args.pair]
    context = choose_context(costs, (small, large), args.context)
    sizes = sorted({tokens for tokens, _, _ in costs.models[large].passes_at(context)})
    prompts = sorted(costs.models[large].prefill)
    costs_table = cost_rows(published, measured, sizes, prompts)
    projection = projection_comparison(runs, published, measured, args.rtt_ms) if runs else []
    beside = bench_comparison(bench, one_gpu, args.pair) if bench is not None and one_gpu is not None else []
    if args.json:
        result = {
            "costs_file": args.costs,
            "device": costs.describe(),
            "dry_run": costs.dry_run,
            "pair": {"pair": args.pair, "small": small, "large": large, "context": context},
            "published": {"name": published.name, "label": published.label},
            "measured": {
                "name": measured.name,
                "label": measured.label,
                "sources": {s.number: s.text for s in measured.sources},
            },
            "costs": costs_table,
            "projection": projection,
            "generations": len(runs),
            "left_out": left_out,  # generations whose timing was disturbed (not projected)
            "engine_bench": {
                "file": args.engine_bench,
                "device": bench.device if bench else None,
                "dry_run": bench.dry_run if bench else None,
                "profile": {"name": one_gpu.name, "sources": {s.number: s.text for s in one_gpu.sources}}
                if one_gpu
                else None,
                "rows": beside,
            },
        }
        print(json.dumps(result, indent=1))
        return 0
    names = {GENERALIST: f"generalist ({large})", GENERIC: f"generic specialist ({small})"}
    if costs.dry_run:
        print("*** DRY RUN: tiny shapes on a CPU; these numbers are not a GPU figure ***\n")
    print(f"Measured: {args.costs}: {costs.describe()}")
    print(f"Profile {measured.name!r}: {measured.label}; passes priced at a {context}-token prefix\n")
    print(format_costs(costs_table, published.name, names))
    print("\nSources of the measured numbers (the rest are the published profile's):")
    for source in measured.sources:
        if source.text != _published_text(published, source.number):
            print(f"- {source.number}: {source.text}")
    if projection:
        print(f"\nStored traces ({len(runs)} generations) projected with {published.name!r} and {measured.name!r}:")
        print(format_projection(projection, published.name))
    if bench is not None and one_gpu is not None:
        dry = " (DRY RUN: not a figure)" if bench.dry_run else ""
        print(
            f"\nThe engine benchmark {args.engine_bench} on {bench.device}{dry}, beside its own traces projected with"
        )
        print(f"{one_gpu.name!r}: {one_gpu.label}; no host overhead charged")
        print(format_bench_comparison(beside) if beside else f"(no run of the pair {args.pair!r} in it)")
    return 0
