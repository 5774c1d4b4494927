"""``specsteer evaluate``: a grid of methods and settings over a records file; results stored per cell, resumable.

The command's composition root: it picks the SQL run store (``storage``) and hands it to
``specsteer.evaluation.grid.run_grid_events``, which only knows the RunStore protocol."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace

from specsteer.cli import DATABASE_HELP, fail
from specsteer.cli.arguments import (
    acceptance_arguments,
    add_lora_argument,
    p3_arguments,
    prompt_style_argument,
    runtime_argument,
)
from specsteer.data.datasets import EVALUATION_TASKS
from specsteer.data.sources import resolve_data_source
from specsteer.edge.lora import LoraSettings
from specsteer.evaluation.grid import EvalResult, EvalSpec, GridProgress, failures_text, json_rows, run_grid_events
from specsteer.evaluation.grid.ray_executor import RayCluster, connected, run_grid_on_ray
from specsteer.evaluation.record_lora import PER_RECORD_PREFIX
from specsteer.evaluation.timing import disturbed_count, left_out_sentence
from specsteer.method.catalog import PRIVATE_METHODS, SPEED_REFERENCE
from specsteer.models.registry import DEFAULT_PAIRING
from specsteer.models.tiny import CROSS_PAIRING_ID, TEST_PAIRING_ID, shared_test_pair, shared_tiny_pair
from specsteer.util.background import stop_signals_handled


def _number_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(value != value for value in values):  # NaN is not a grid value
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


def _point_list(text: str) -> tuple[tuple[float, float], ...]:
    points = []
    for part in filter(None, (part.strip() for part in text.split(","))):
        alpha, colon, beta = part.partition(":")
        if not colon:
            raise argparse.ArgumentTypeError(f"expected alpha:beta pairs such as 0.5:2, got {part!r}")
        points.append((_number_list(alpha)[0], _number_list(beta)[0]))
    return tuple(points)


def _shard(text: str) -> tuple[int, int]:
    index, slash, count = text.partition("/")
    try:
        shard = int(index), int(count)
    except ValueError:
        shard = None
    if not slash or shard is None or not 0 <= shard[0] < shard[1]:
        raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N, got {text!r}")
    return shard


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())  # checked by EvalSpec.validate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsteer evaluate",
        description="Evaluate methods on LongLaMP records: ROUGE, speed, acceptance; results stored per cell.",
    )
    parser.add_argument(
        "--data",
        required=True,
        help="records file (JSONL/JSON/parquet), or 'shared' (the real records: LongLaMP, or "
        "CoGenesis's test split; 'shared:dev' its dev split) or 'sample'",
    )
    parser.add_argument("--task", required=True, choices=EVALUATION_TASKS)
    parser.add_argument("--limit", type=int, default=None, help="first N records of the file")
    parser.add_argument(
        "--methods",
        type=_name_list,
        default=PRIVATE_METHODS,
        help="comma-separated; default: all but llm+ (which sends the private context to the cloud)",
    )
    parser.add_argument("--alpha", type=_number_list, default=(1.0, 0.5, 0.1), help="alpha values (SpecSteer)")
    parser.add_argument("--beta", type=_number_list, default=(1.0,), help="beta values (SpecSteer, LightCoSteer)")
    parser.add_argument(
        "--extra-grid",
        type=_point_list,
        default=(),
        help="extra alpha:beta pairs for SpecSteer only, e.g. 0.5:0.5,0.5:2",
    )
    parser.add_argument(
        "--pairing",
        default=DEFAULT_PAIRING,
        help=f"pairing id (default {DEFAULT_PAIRING}); '{TEST_PAIRING_ID}', '{CROSS_PAIRING_ID}' (two "
        "tokenizers): random models, for tests only",
    )
    parser.add_argument(
        "--runtime",
        type=runtime_argument,
        default="auto",
        help="llama.cpp (GGUF files, CPU), transformers, auto (from this machine's calibration), or a split "
        "such as transformers/llama.cpp (the Specialist pair on the first, the Generalist on the second)",
    )
    parser.add_argument(
        "--dtype",
        choices=("bf16", "fp32"),
        default=None,
        help="transformers runtime only; default: bf16 where this CPU computes it fast, else fp32",
    )
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--draft-len", type=int, default=4)
    p3_arguments(parser)
    acceptance_arguments(parser, several=True)
    parser.add_argument("--retrieval-k", type=int, default=3, help="profile items retrieved by BM25")
    parser.add_argument("--noise", type=int, default=0, help="low-similarity items of other users appended")
    prompt_style_argument(parser)
    parser.add_argument(
        "--private-guard",
        type=int,
        default=0,
        metavar="N",
        help="the Edge never sends a token completing N tokens copied from the private prompt "
        "(recovered locally instead); 0 = off",
    )
    add_lora_argument(
        parser,
        per_record="; per-record:DIR: an adapter per record, trained on the record's own texts (never its "
        "reference) before its cells, kept in DIR and read back on resume",
    )
    _lora_training_arguments(parser)
    parser.add_argument("--run-name", default=None, help="name of the run; the same name resumes it")
    parser.add_argument("--database", default=None, help=DATABASE_HELP)
    parser.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        metavar="I/N",
        help="run only records I, I+N, ... of the run, so that N workers share it (0-based)",
    )
    _ray_arguments(parser)
    parser.add_argument("--json", action="store_true", help='print {"rows": [...]} instead of a table')
    parser.add_argument("--plot", default=None, help="write the figures as one standalone HTML file")
    return parser


def _ray_arguments(parser: argparse.ArgumentParser) -> None:
    """The grid's cells on a Ray cluster (the optional extra, requirements-ray.txt)."""
    group = parser.add_argument_group("Ray (pip install -r requirements-ray.txt)")
    group.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run the cells on the Ray cluster at ADDRESS (HOST:PORT, or ray://HOST:PORT), or 'auto': the "
        "cluster RAY_ADDRESS names or `ray start` started on this machine, else a local one for this run; "
        "each worker loads the pair once, and this process stores every cell",
    )
    group.add_argument("--ray-workers", type=int, default=None, metavar="N", help="default: one per node")
    group.add_argument(
        "--ray-worker-cpus",
        type=int,
        default=None,
        metavar="N",
        help="CPUs each worker reserves and computes on; default: a node's CPUs shared by its workers",
    )


def _ray_cluster(args: argparse.Namespace) -> RayCluster | None:
    if args.ray is None:
        if args.ray_workers is not None or args.ray_worker_cpus is not None:
            raise ValueError("--ray-workers and --ray-worker-cpus go with --ray")
        return None
    cluster = RayCluster(args.ray, args.ray_workers, args.ray_worker_cpus)
    cluster.check()
    return cluster


def _lora_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The per-record adapters' training settings: ``lora train``'s defaults, three of them settable."""
    defaults = LoraSettings()
    group = parser.add_argument_group("per-record LoRA training (with --specialist-lora per-record:DIR)")
    group.add_argument("--lora-epochs", type=int, default=None, metavar="N", help=f"default {defaults.epochs}")
    group.add_argument(
        "--lora-max-steps", type=int, default=None, metavar="N", help="stop after this many steps (default: none)"
    )
    group.add_argument("--lora-max-length", type=int, default=None, metavar="N", help=f"default {defaults.max_length}")


def _lora_settings(args: argparse.Namespace) -> LoraSettings | None:
    given = {"epochs": args.lora_epochs, "max_steps": args.lora_max_steps, "max_length": args.lora_max_length}
    chosen = {key: value for key, value in given.items() if value is not None}
    if not (args.specialist_lora or "").startswith(PER_RECORD_PREFIX):
        if chosen:
            raise ValueError(
                "--lora-epochs, --lora-max-steps and --lora-max-length go with --specialist-lora per-record:DIR"
            )
        return None
    return replace(LoraSettings(), **chosen)


def spec_from_args(args: argparse.Namespace) -> EvalSpec:
    return EvalSpec(
        data=resolve_data_source(args.data, args.task),
        task=args.task,
        methods=args.methods,
        alphas=args.alpha,
        betas=args.beta,
        extra_points=args.extra_grid,
        limit=args.limit,
        pairing=args.pairing,
        runtime=args.runtime,
        dtype=args.dtype,
        max_new_tokens=args.max_new_tokens,
        draft_len=args.draft_len,
        retrieval_k=args.retrieval_k,
        noise=args.noise,
        prompt_style=args.prompt_style,
        private_guard=args.private_guard,
        specialist_lora=args.specialist_lora or "",
        lora_settings=_lora_settings(args),
        p3_draft_len=args.p3_draft_len,
        p3_tau=args.p3_tau,
        acceptance=args.acceptance,
        cda_lambdas=args.cda_lambda,
        run_name=args.run_name,
    )


def _cancel_on_signals(cancel: threading.Event):
    """Ctrl-C / SIGTERM end the run cleanly as cancelled; a second Ctrl-C aborts at once."""

    def handle(signum, _frame) -> None:
        if cancel.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        cancel.set()
        print("\ncancelling after the current token (Ctrl-C again to abort)", file=sys.stderr)

    return stop_signals_handled(handle)


def _print_progress(events: Iterator[GridProgress | EvalResult]) -> EvalResult:
    """Prints each progress event on stderr; returns the result that ends the events."""
    for event in events:
        if isinstance(event, EvalResult):
            return event
        print(event.describe(), file=sys.stderr, flush=True)
    raise RuntimeError("the grid ended without a result")


def main(argv: list[str] | None = None) -> int:
    # The composition root of the command: the one place in specsteer that imports storage, here
    # and not at module level, so that the library itself never depends on a database.
    from specsteer.models.lora import LoraError
    from specsteer.models.weights import ModelLoadError
    from storage import SqlRunStore

    args = build_parser().parse_args(argv)
    cancel = threading.Event()
    try:
        spec = spec_from_args(args)
        if SPEED_REFERENCE not in spec.methods:
            print(f"warning: {SPEED_REFERENCE} is not among the methods, so speedup is null", file=sys.stderr)
        cluster = _ray_cluster(args)
        pair = shared_tiny_pair() if spec.pairing == TEST_PAIRING_ID else shared_test_pair(spec.pairing)
        store = SqlRunStore(args.database)
        if cluster is None:
            with _cancel_on_signals(cancel):
                result = _print_progress(run_grid_events(spec, store, pair=pair, cancel=cancel, shard=args.shard))
        else:
            with connected(cluster), _cancel_on_signals(cancel):  # ray.init first: it takes SIGTERM
                result = _print_progress(run_grid_on_ray(spec, store, cluster, pair, cancel, args.shard))
    except LoraError as error:  # the adapter given is bad input
        return fail(str(error), 2)
    except ModelLoadError as error:
        return fail(str(error), 1)
    except ValueError as error:  # bad data (DataError), arguments, unknown pairing, reused run name
        return fail(str(error), 2)
    except KeyboardInterrupt:
        return fail("aborted; run again with the same --run-name to resume", 130)
    except Exception as error:  # noqa: BLE001 -- a message, not a traceback; the stored cells survive
        return fail(f"{type(error).__name__}: {error} (run again with the same --run-name to resume)", 1)
    _report(result, spec, args)
    if result.failures:
        print(f"error: {failures_text(result.failures)}", file=sys.stderr)
        return 1
    if result.status == "cancelled":
        print(f"cancelled: run {result.run_name!r} is resumable with --run-name", file=sys.stderr)
        return 130
    if result.status == "running":
        print(f"this shard is done; run {result.run_name!r} finishes when the other shards do", file=sys.stderr)
    return 0


def _report(result: EvalResult, spec: EvalSpec, args: argparse.Namespace) -> None:
    from specsteer.evaluation import plots, result_table
    from specsteer.evaluation.claims import claim_sentences

    # What the run's own intervals show against SLM+ and LLM: after the table, or on stderr beside --json.
    claims = claim_sentences(result.cells)
    if args.json:
        print(json.dumps({"rows": json_rows(result.rows)}, ensure_ascii=False, allow_nan=False))
        if claims:
            print("\n".join(claims), file=sys.stderr)
    else:
        print(result_table.text_table(result.rows))
        if claims:
            print("\n" + "\n".join(claims))
    print(
        f"run {result.run_name!r} (id {result.run_id}): {result.status}, {result.computed} cells computed, "
        f"{len(result.cells)} stored",
        file=sys.stderr,
    )
    disturbed = disturbed_count(result.cells)
    if disturbed:
        print(
            f"timing: {left_out_sentence(disturbed)} Run again with the same --run-name to re-time "
            f"{'it' if disturbed == 1 else 'them'}.",
            file=sys.stderr,
        )
    if args.plot:
        title = f"SpecSteer evaluation: {spec.task}, run {result.run_name}"
        from specsteer.evaluation.sweep import sweep_report

        sweep = (
            sweep_report(result.cells, spec.points()) if any(p.method == "specsteer" for p in spec.points()) else None
        )
        plots.write_html(args.plot, result.rows, title=title, sweep=sweep)
        print(f"plot written to {args.plot}", file=sys.stderr)
