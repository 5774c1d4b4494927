"""``specsteer bench speed | link | project``: tokens/s of every method, the link's self-check, and stored runs
projected onto a deployment profile. The command's composition root (it alone reads stored runs)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from specsteer.cli.arguments import (
    acceptance_arguments,
    acceptance_rules,
    add_lora_argument,
    p3_arguments,
    p3_params,
    runtime_argument,
)
from specsteer.cli.loading import specialist_lora_arg
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD, READ_AHEAD_MODES, ReadAhead, parse_read_ahead
from specsteer.data.sources import EXAMPLE_RUNS_DB
from specsteer.engine.decode_config import DecodeConfig
from specsteer.evaluation.bench import load_prompts, prefix_reuse, run_speed
from specsteer.evaluation.bench_plan import DEFAULT_METHODS, bench_cases
from specsteer.evaluation.bench_report import auto_rows, format_rows, format_table
from specsteer.evaluation.deployment_profiles import PROFILES, get_profile
from specsteer.evaluation.deployment_rows import DEFAULT_RTTS_MS, DEFAULT_RUNS
from specsteer.runtimes.base import TransformersModel, parse_split
from specsteer.runtimes.machine import machine_info
from specsteer.util.jsonable import to_jsonable


def _runtimes(text: str) -> list[str]:
    """Comma-separated runtime requests, each as every command spells one (cli.arguments.runtime_argument)."""
    names = [runtime_argument(name) for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one runtime, comma-separated")
    return names


def _read_ahead(text: str) -> list[ReadAhead]:
    try:
        return parse_read_ahead(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _log(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


def _numbers(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, not {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specsteer bench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    speed = commands.add_parser("speed", help="tokens/s of every method on the offline pair")
    speed.add_argument("--json", action="store_true")
    speed.add_argument("--prompts", type=int, default=5)
    speed.add_argument("--max-new-tokens", type=int, default=128)
    speed.add_argument("--methods", default=DEFAULT_METHODS)
    speed.add_argument("--alpha", default="0.1", help="comma-separated alphas for specsteer")
    speed.add_argument(
        "--draft-len",
        default="4,auto",
        help="comma-separated draft lengths for sd and specsteer: K, 'auto' (adapts k), "
        "'auto:N' (adapts k up to N), each with '@C' to stop drafting after a draft of probability < C "
        "(e.g. 12@0.4)",
    )
    p3_arguments(speed)
    acceptance_arguments(speed, several=True)
    speed.add_argument("--pairing", default=None)
    speed.add_argument(
        "--runtime",
        type=_runtimes,
        default=["auto"],
        help="comma-separated runtimes, each benchmarked on the same prompts in this run "
        "(llama.cpp, transformers, auto, or a split: transformers/llama.cpp runs the Specialist and its "
        "generic copy on transformers and the Generalist on llama.cpp)",
    )
    speed.add_argument(
        "--dtype",
        choices=("bf16", "fp32"),
        default=None,
        help="transformers runtime only; default: bf16 where this CPU computes it fast, else fp32",
    )
    speed.add_argument("--data", default=None, help="a LongLaMP file (default: the shared real records)")
    speed.add_argument(
        "--task",
        choices=("longlamp", "cogenesis"),
        default="longlamp",
        help="longlamp: review and writing records alternately; cogenesis: CoGenesis test records",
    )
    speed.add_argument("--no-reference", action="store_true", help="skip transformers' assisted generation")
    add_lora_argument(speed)
    speed.add_argument(
        "--read-ahead",
        type=_read_ahead,
        default=[DEFAULT_READ_AHEAD],
        help="comma-separated: when the in-process Cloud reads its prompts, each a case of this run "
        f"({', '.join(READ_AHEAD_MODES)}; default {DEFAULT_READ_AHEAD}, as the app)",
    )
    speed.add_argument(
        "--no-read-ahead",
        action="store_const",
        const=["off"],
        dest="read_ahead",
        help="the same as --read-ahead off: the in-process Cloud reads its prompts with the first Draft",
    )
    speed.add_argument(
        "--no-prefix-reuse", action="store_true", help="skip the measurement of a repeated request's first token"
    )
    speed.add_argument(
        "--attention",
        choices=("packed", "sdpa", "eager"),
        default="packed",
        help="transformers runtime: 'packed' (default; specsteer.runtimes.attention) or a transformers one",
    )

    link = commands.add_parser(
        "link",
        help="methods through a Cloud service at each emulated RTT, measured "
        "against the deployment projection with this machine's own profile",
    )
    link.add_argument("--json", action="store_true")
    link.add_argument("--rtt-ms", type=_numbers, default=[0.0, 20.0, 50.0, 100.0])
    link.add_argument("--methods", default="llm,lightcosteer,specsteer")
    link.add_argument("--alpha", type=float, default=0.1, help="specsteer's alpha")
    link.add_argument("--draft-len", type=int, default=4)
    p3_arguments(link)
    link.add_argument("--prompts", type=int, default=3)
    link.add_argument("--max-new-tokens", type=int, default=64)
    link.add_argument("--uplink-kbps", type=float, default=math.inf)
    link.add_argument("--downlink-kbps", type=float, default=math.inf)
    link.add_argument("--pairing", default=None, help="pairing id ('tiny-test': random tiny models, for tests)")
    link.add_argument("--runtime", type=runtime_argument, default="auto")
    link.add_argument("--dtype", choices=("bf16", "fp32"), default=None)
    add_lora_argument(link)
    link.add_argument("--data", default=None, help="a LongLaMP file (default: the shared real records)")
    link.add_argument(
        "--task",
        choices=("longlamp", "cogenesis"),
        default="longlamp",
        help="longlamp: review and writing records alternately; cogenesis: CoGenesis test records",
    )

    project = commands.add_parser("project", help="stored runs projected onto a bundled deployment profile")
    project.add_argument("--json", action="store_true")
    project.add_argument("--profile", required=True, help=f"one of {', '.join(PROFILES)}")
    project.add_argument("--rtt-ms", type=_numbers, default=list(DEFAULT_RTTS_MS))
    project.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help=f"an evaluation database (default: the example runs, assets/example_runs.db, run {DEFAULT_RUNS[0]})",
    )
    project.add_argument(
        "--run", action="append", default=[], metavar="NAME", help="an evaluation run's name; repeat for several"
    )
    project.add_argument("--from-bench", default=None, metavar="FILE", help="the JSON of `bench link --json`")
    args = parser.parse_args(argv)
    command = {"speed": _speed, "link": _link, "project": _project}[args.command]
    return command(args)


def _speed(args) -> int:
    from specsteer.engine.decode_config import cross_tokenizer_problem
    from specsteer.models.loading import load_planned, with_specialist_lora
    from specsteer.models.planning import lora_plan, runtime_plan
    from specsteer.models.registry import DEFAULT_PAIRING, get_pairing
    from specsteer.models.tiny import shared_test_pair
    from specsteer.models.weights import ModelLoadError

    log = _log
    try:
        cases = bench_cases(
            args.methods.split(","),
            [float(a) for a in args.alpha.split(",")],
            args.draft_len.split(","),
            args.max_new_tokens,
            p3_params(args),
            acceptance_rules(args),
        )
        pairing = args.pairing or DEFAULT_PAIRING
        test_pair = shared_test_pair(pairing)  # random tiny models (tests): transformers, one row per case
        lora = specialist_lora_arg(args)  # only transformers serves one: llama.cpp refused, auto picks transformers
        if lora is not None:
            for runtime in args.runtime:
                lora_plan(runtime)
            test_pair = with_specialist_lora(test_pair, lora) if test_pair is not None else None
        # "auto" is a row of its own: for each method, the row of the runtime auto picks for it (both are
        # measured in this run, so the auto row is a measurement, not an estimate).
        auto_plans = (
            {
                case.config.method: runtime_plan(
                    get_pairing(pairing), "auto", log, case.config.method, lora=lora is not None
                )
                for case in cases
            }
            if "auto" in args.runtime and test_pair is None
            else {}
        )
        auto_picks = {method: plan.label for method, plan in auto_plans.items()}
        pairs = [test_pair] if test_pair is not None else []
        # Each fixed runtime as named, then each plan auto made that no fixed runtime is (a hand-off to
        # llama.cpp is llama.cpp's label with "+handoff"), each planned once and loaded once.
        fixed = [r for r in args.runtime if r != "auto"] if test_pair is None else []
        plans = [runtime_plan(get_pairing(pairing), r, log, lora=lora is not None) for r in fixed]
        for plan in [*plans, *auto_plans.values()]:
            if plan.label in {p.runtime_label for p in pairs}:
                continue
            pair = load_planned(get_pairing(pairing), plan, args.dtype, log, specialist_lora=lora)
            if pair.runtime_label not in {p.runtime_label for p in pairs}:  # a refused split: its fallback's label
                pairs.append(pair)
        unavailable = next(
            filter(None, (cross_tokenizer_problem(pair, case.config) for pair in pairs for case in cases)), None
        )
        if unavailable:  # a cross-tokenizer pair runs only some methods: refused before any is timed
            raise ValueError(unavailable)
    except (ValueError, KeyError, ModelLoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.attention != "packed":
        for pair in pairs:
            for model in (pair.specialist, pair.generalist):
                if isinstance(model, TransformersModel):  # the transformers runtime
                    model.model.set_attn_implementation(args.attention)
    log(machine_info().describe())
    prompts = load_prompts(args.prompts, args.data, args.task)
    result = run_speed(pairs, prompts, cases, reference=not args.no_reference, progress=log, read_ahead=args.read_ahead)
    result["rows"].extend(auto_rows(result["rows"], auto_picks, auto_plans))
    result["specialist_lora"] = lora.label if lora is not None else None  # the Edge's adapter, if any
    if not args.no_prefix_reuse:
        config = DecodeConfig(method="specsteer", alpha=0.1, max_new_tokens=8)
        result["prefix_reuse"] = {pair.runtime_label: prefix_reuse(pair, prompts[0], config) for pair in pairs}
    print(json.dumps(result) if args.json else format_table(result))
    return 0


def _link(args) -> int:
    """``bench link``: a Cloud service in a child process on a free loopback port, stopped by its pid."""
    from specsteer.cloud.client import RemoteCloud
    from specsteer.cloud.process import start_cloud_process
    from specsteer.evaluation.bench_link import link_rows, run_link_bench
    from specsteer.models.loading import load_pair, with_specialist_lora
    from specsteer.models.planning import lora_plan
    from specsteer.models.registry import DEFAULT_PAIRING
    from specsteer.models.runtime_plan import plan_record
    from specsteer.models.tiny import shared_test_pair
    from specsteer.models.weights import ModelLoadError

    pairing = args.pairing or DEFAULT_PAIRING
    try:
        configs = [
            DecodeConfig(
                method=method,
                alpha=args.alpha,
                draft_len=args.draft_len,
                max_new_tokens=args.max_new_tokens,
                p3=p3_params(args),
            ).validate()
            for method in args.methods.split(",")
        ]
        # The Edge alone here: the Generalist's weights are read by the Cloud process only (and the
        # Cloud is started without the Edge's adapter: its generic copy is the base Specialist).
        lora = specialist_lora_arg(args)
        if lora is not None:
            lora_plan(args.runtime)
        test_pair = shared_test_pair(pairing)
        if test_pair is not None:
            edge = test_pair if lora is None else with_specialist_lora(test_pair, lora)
        else:
            edge = load_pair(
                pairing, dtype=args.dtype, progress=_log, runtime=args.runtime, edge_only=True, specialist_lora=lora
            )
    except (ValueError, KeyError, ModelLoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # A split asked for is the Cloud's too (its generic copy on the first runtime, its Generalist on the second).
    cloud_runtime = args.runtime if parse_split(args.runtime) is not None else edge.runtime
    cloud_arguments = ["--pairing", pairing, "--runtime", cloud_runtime, "--no-prefix-reuse"]
    if args.dtype:
        cloud_arguments += ["--dtype", args.dtype]
    _log(machine_info().describe())
    prompts = load_prompts(args.prompts, args.data, args.task)
    _log(f"starting the Cloud: {' '.join(cloud_arguments)}")
    child = start_cloud_process(*cloud_arguments)
    try:
        with RemoteCloud(child.url) as cloud:
            runs = run_link_bench(
                edge, cloud, prompts, configs, args.rtt_ms, args.uplink_kbps, args.downlink_kbps, progress=_log
            )
    finally:
        child.stop()
    timed, left_out = timed_traces(runs)
    result: dict[str, Any] = {
        "rows": link_rows(timed, args.uplink_kbps, args.downlink_kbps),
        "left_out": left_out,  # generations whose timing was disturbed (in "runs", not in the rows)
        "machine": machine_info().to_dict(),
        "settings": {
            "pairing": pairing,
            "runtime": edge.runtime,
            "runtime_plan": plan_record(edge.runtime_plan) if edge.runtime_plan is not None else None,
            "precision": edge.precision,
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "draft_len": args.draft_len,
            "alpha": args.alpha,
            "uplink_kbps": args.uplink_kbps,
            "downlink_kbps": args.downlink_kbps,
            "specialist_lora": lora.label if lora is not None else None,
        },
        "runs": [run.to_json() for run in runs],
    }
    print(json.dumps(to_jsonable(result)) if args.json else format_rows(result["rows"]))
    return 0


def _project(args) -> int:
    from specsteer.evaluation.deployment_rows import group_runs, projection_rows

    try:
        profile = get_profile(args.profile)
        if args.from_bench and (args.database or args.run):
            raise ValueError("give either --from-bench FILE or --database URL with --run NAME")
        traced = traces_to_project(args.from_bench, args.database, args.run)
    except (ValueError, OSError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs, left_out = timed_traces(traced)
    if not runs:
        print("error: no stored generation with sound timing has a trace to project", file=sys.stderr)
        return 2
    rows = projection_rows(group_runs(runs), profile, args.rtt_ms)
    result = {
        "rows": rows,
        "profile": {
            "name": profile.name,
            "label": profile.label,
            "sources": {s.number: s.text for s in profile.sources},
        },
        "source": args.from_bench
        or {"database": args.database or str(EXAMPLE_RUNS_DB), "runs": args.run or list(DEFAULT_RUNS)},
        "generations": len(runs),
        "left_out": left_out,  # generations whose timing was disturbed (not projected)
    }
    print(json.dumps(to_jsonable(result)) if args.json else format_rows(rows))
    return 0


def traces_to_project(from_bench: str | None, database: str | None, runs: list[str]) -> list:
    """The traces a projection reads: a ``bench link`` result, an evaluation database's runs, or by default
    the example runs' traced LongLaMP grid (read-only)."""
    if from_bench:
        return _bench_runs(from_bench)
    if not database and not EXAMPLE_RUNS_DB.is_file():
        raise ValueError(f"no {EXAMPLE_RUNS_DB} (the example runs): give --database URL --run NAME, or --from-bench")
    return _stored_runs(database or str(EXAMPLE_RUNS_DB), runs or list(DEFAULT_RUNS))


def timed_traces(runs: list) -> tuple[list, int]:
    """The traces with sound timing (``deployment.timed_runs``), saying on stderr how many were left out."""
    from specsteer.evaluation.deployment_rows import timed_runs
    from specsteer.evaluation.timing import left_out_sentence

    kept, left_out = timed_runs(runs)
    if left_out:
        _log(left_out_sentence(left_out, noun="generation", quality_kept=False))
    return kept, left_out


def _bench_runs(path: str) -> list:
    """The lowest-RTT runs of a ``bench link`` result: the same generations measured without link delay."""
    from specsteer.evaluation.deployment_rows import TracedGeneration

    runs = [TracedGeneration.from_json(run) for run in json.loads(Path(path).read_text())["runs"]]
    base = min((run.rtt_ms for run in runs), default=0.0)
    return [run for run in runs if run.rtt_ms == base]


def _stored_runs(url: str | None, names: list[str]) -> list:
    """The traced cells of evaluation runs, read through storage: this command's composition root."""
    import storage
    from specsteer.evaluation.deployment_rows import TracedGeneration

    if not names:
        raise ValueError("name at least one --run")
    missing = storage.missing_sqlite_file(url)
    if missing:
        raise ValueError(f"no database at {missing}")
    url = storage.read_only_url(url)  # only read: the example runs, or a database another process writes
    runs = []
    for name in names:
        stored = storage.get_run_by_name(name, url=url)
        if stored is None:
            raise ValueError(f"no evaluation run named {name!r} in {url or 'the default database'}")
        runs += [
            TracedGeneration.of(cell.stats, cell.point.alpha, cell.point.beta)
            for cell in storage.run_cells(stored.id, url=url)
            if cell.stats.trace
        ]
    return runs
