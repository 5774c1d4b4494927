"""``specsteer models prepare``: make an offline pairing ready to load (verify, assemble, convert)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS, cross_tokenizer_message, get_pairing
from specsteer.models.weights import ModelLoadError, load_tokenizer, offline_gguf, prepare_offline
from specsteer.runtimes.base import RUNTIME_CHOICES


def _directory_size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _prepare_command(pairing_id: str, runtime: str) -> int:
    """Everything a pairing needs before its first load on ``runtime``: the verified GGUF files and
    tokenizers (llama.cpp), or the converted weights (transformers)."""
    from specsteer.models.loading import runtime_plan  # the pair loader builds on this module

    pairing = get_pairing(pairing_id)
    if pairing.cross_tokenizer:
        print(cross_tokenizer_message(pairing), file=sys.stderr)
        return 1
    say = lambda line: print(f"  {line}", flush=True)  # noqa: E731
    try:
        plan = runtime_plan(pairing, runtime, say)
    except ModelLoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    chosen = plan.runtime
    print(f"preparing {pairing.id} for the {chosen} runtime", flush=True)
    small, _, large = chosen.partition("/")  # a split plan: the Specialist's runtime, then the Generalist's
    for spec, runtime_of_spec in ((pairing.specialist, small), (pairing.generalist, large or small)):
        if spec.kind != "offline":
            print(f"{spec.name}: a {spec.kind} model, nothing to prepare")
            continue
        started = time.perf_counter()
        try:
            load_tokenizer(spec, say)
            path = offline_gguf(spec, say) if runtime_of_spec == "llama.cpp" else prepare_offline(spec, say)
        except ModelLoadError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        size = path.stat().st_size if path.is_file() else _directory_size(path)
        print(f"{spec.name}: {path} ({size / 1e9:.2f} GB, {time.perf_counter() - started:.1f} s)", flush=True)
    spec = pairing.specialist
    if plan.specialist.prompt_reader and spec.kind == "offline":
        # The calibration measured the Specialist's fp32 conversion reading prompts faster than llama.cpp here:
        # auto hands its long prompts over, so the conversion is made now rather than at the first load.
        started = time.perf_counter()
        try:
            path = prepare_offline(spec, say)
        except ModelLoadError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        print(f"{spec.name}: {path} (fp32 prompt reader, {time.perf_counter() - started:.1f} s)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specsteer models", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="make an offline pairing ready to load (verify, assemble, convert)")
    prepare.add_argument("--pairing", default=DEFAULT_PAIRING, choices=sorted(PAIRINGS))
    prepare.add_argument(
        "--runtime",
        default="auto",
        choices=RUNTIME_CHOICES,
        help="llama.cpp needs the verified GGUF files; transformers a one-time conversion",
    )
    args = parser.parse_args(argv)
    return _prepare_command(args.pairing, args.runtime)
