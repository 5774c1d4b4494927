"""``specsteer lora train``: teach the Edge's Specialist a history (a LoRA adapter, ``specsteer.edge.lora``);
``specsteer lora show DIR``: an adapter's manifest; ``specsteer lora table --base RUN --lora RUN``: paper
Appendix A.2's table from a base run and a per-record-LoRA run (``specsteer.evaluation.lora_table``).

The adapter serves with ``generate``, ``evaluate`` and ``bench`` through ``--specialist-lora DIR`` (the
transformers runtime). Progress goes to stderr, one line per step. Ctrl-C stops it: nothing is written (the
directory is written whole at the end or not at all).

Exit status: 0 on success, 2 for bad input (history, arguments, output directory), 1 when the model cannot
be loaded, 130 when stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specsteer.cli import DATABASE_HELP, fail


def build_parser() -> argparse.ArgumentParser:
    from specsteer.edge.lora import ITEM_INPUTS, LoraSettings

    defaults = LoraSettings()
    parser = argparse.ArgumentParser(prog="specsteer lora", description="a LoRA Specialist trained on a history")
    commands = parser.add_subparsers(dest="action", required=True)
    train = commands.add_parser("train", help="train an adapter for the pairing's Specialist on a history")
    train.add_argument("--history", required=True, help="the history file (as for generate)")
    train.add_argument("--task", required=True, choices=tuple(ITEM_INPUTS))
    train.add_argument("--out", required=True, help="the adapter's directory (new, empty, or an earlier adapter)")
    train.add_argument("--pairing", default=None, help="pairing id whose Specialist is trained (default: the default)")
    train.add_argument("--specialist", default=None, help="override the Specialist: local dir, .gguf file or hub id")
    train.add_argument(
        "--dtype",
        choices=("bf16", "fp32"),
        default=None,
        help="default: bf16 where this CPU computes it fast, else fp32",
    )
    train.add_argument("--epochs", type=int, default=defaults.epochs)
    train.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: every epoch)")
    train.add_argument("--rank", type=int, default=defaults.rank)
    train.add_argument("--alpha", type=int, default=defaults.alpha)
    train.add_argument("--dropout", type=float, default=defaults.dropout)
    train.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    train.add_argument(
        "--max-length", type=int, default=defaults.max_length, help="tokens per sequence (paper B.5: 1024)"
    )
    train.add_argument("--seed", type=int, default=defaults.seed)
    train.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="TEXT",
        help="leave out any item whose input or text is TEXT (what an evaluation asks about); repeatable",
    )
    train.add_argument("--quiet", action="store_true", help="no progress lines")
    show = commands.add_parser("show", help="print an adapter's manifest (JSON)")
    show.add_argument("directory")
    table = commands.add_parser(
        "table",
        help="Appendix A.2's table: a base evaluate run (slm+, llm, specsteer) and a per-record-LoRA run "
        "(slm+, specsteer; --specialist-lora per-record:DIR) over the same records",
    )
    table.add_argument("--base", required=True, help="the base run's name")
    table.add_argument("--lora", required=True, help="the per-record-LoRA run's name")
    table.add_argument("--alpha", type=float, default=None, help="SpecSteer's alpha (when the runs share several)")
    table.add_argument("--beta", type=float, default=None, help="SpecSteer's beta (when the runs share several)")
    table.add_argument("--database", default=None, help=DATABASE_HELP)
    table.add_argument("--json", action="store_true", help="print the table as one JSON document")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "show":
        return _show(args.directory)
    if args.action == "table":
        return _table(args)
    return _train(args)


def _show(directory: str) -> int:
    from specsteer.models.lora import LoraError, read_lora

    try:
        lora = read_lora(directory)
    except LoraError as error:
        return fail(str(error), 2)
    print(json.dumps({"label": lora.label, **lora.details()}, indent=1))
    return 0


def _table(args) -> int:
    """Read-only: the two runs' cells, their prompts and the records' facts rebuilt from the records file."""
    import storage  # the composition root: the one place here that reads the SQL store
    from specsteer.data.record_files import DataError
    from specsteer.evaluation.grid import run_facts, run_prompts
    from specsteer.evaluation.lora_table import lora_table, table_json, table_text

    missing = storage.missing_sqlite_file(args.database)
    if missing is not None:
        return fail(f"no database file at {missing}", 2)
    url = storage.read_only_url(args.database)  # a read-only command: the file is never changed
    runs = {name: storage.get_run_by_name(name, url=url) for name in (args.base, args.lora)}
    absent = [name for name, run in runs.items() if run is None]
    if absent:
        return fail(f"no run named {absent[0]!r} in this database", 2)
    base, lora = runs[args.base], runs[args.lora]
    assert base is not None and lora is not None
    try:
        table = lora_table(
            storage.run_cells(base.id, url=url),
            storage.run_cells(lora.id, url=url),
            task=str(base.config.get("task", "")),
            base_config=base.config,
            lora_config=lora.config,
            base_prompts=run_prompts(base.config),
            lora_prompts=run_prompts(lora.config),
            facts=run_facts(base.config),
            alpha=args.alpha,
            beta=args.beta,
        )
    except (DataError, ValueError) as error:
        return fail(str(error), 2)
    if args.json:
        print(json.dumps({"base": base.name, "lora": lora.name, **table_json(table)}, ensure_ascii=False))
    else:
        title = f"A.2: base run {base.name!r} ({base.status}), per-record-LoRA run {lora.name!r} ({lora.status})"
        print(table_text(table, title))
    return 0


def _train(args) -> int:
    from specsteer.data.history import HistoryError
    from specsteer.data.history_upload import parse_history
    from specsteer.edge.lora import LoraSettings, LoraTrainingError, TrainingProgress, TrainingStopped, train_lora

    try:
        settings = LoraSettings(
            rank=args.rank,
            alpha=args.alpha,
            dropout=args.dropout,
            learning_rate=args.learning_rate,
            epochs=args.epochs,
            max_length=args.max_length,
            max_steps=args.max_steps,
            seed=args.seed,
        ).validate()
        history = parse_history(Path(args.history).read_bytes(), filename=args.history)
    except FileNotFoundError:
        return fail(f"history file not found: {args.history}", 2)
    except (HistoryError, LoraTrainingError, ValueError) as error:
        return fail(str(error), 2)
    pair = _specialist(args)
    if isinstance(pair, int):
        return pair
    base_name, base_sha = _base_identity(args)

    def report(step: TrainingProgress) -> None:
        if not args.quiet:
            print(
                f"[lora] step {step.step}/{step.total_steps} (epoch {step.epoch}) loss {step.loss:.4f} "
                f"{step.elapsed_s:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    try:
        result = train_lora(
            pair,
            args.task,
            history.items,
            args.out,
            settings,
            exclude=args.exclude,
            base_name=base_name,
            base_sha256=base_sha,
            progress=report,
        )
    except LoraTrainingError as error:
        return fail(str(error), 2)
    except (KeyboardInterrupt, TrainingStopped):
        return fail(f"stopped; nothing was written to {args.out}", 130)
    details = result.lora.details()
    print(
        f"adapter {result.lora.label} written to {result.lora.path}: {details['items_used']} items, "
        f"{details['steps']} steps in {result.seconds:.1f} s ({details['seconds_per_step']} s/step), "
        f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}, peak memory {details['peak_rss_mb']} MB"
    )
    return 0


def _specialist(args):
    """The pairing's Specialist on transformers (a test pairing's tiny model as it is)."""
    from specsteer.cli.loading import pair_from_arguments

    args.generalist, args.runtime, args.json, args.method = None, "transformers", False, "slm+"
    return pair_from_arguments(args, edge_only=True)


def _base_identity(args) -> tuple[str, str]:
    """The Specialist's registry name and GGUF sha256, where the pairing names them."""
    from specsteer.models.registry import resolve_pairing

    try:
        spec = resolve_pairing(args.pairing, specialist=args.specialist).specialist
    except (KeyError, ValueError):
        return "", ""
    return spec.name, spec.sha256
