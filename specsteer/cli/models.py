"""``specsteer models prepare``: make an offline pairing ready to load (verify, assemble, convert)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS, get_pairing
from specsteer.models.runtime_plan import PROMPT_READER
from specsteer.models.weights import ModelLoadError, load_tokenizer, offline_gguf, prepare_offline
from specsteer.runtimes.base import RUNTIME_CHOICES


def _directory_size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _prepare_command(pairing_id: str, runtime: str) -> int:
    """Every file a pairing's plan reads on ``runtime`` before its first load: the verified GGUF files and
    tokenizers (llama.cpp), the converted weights (transformers, and the Specialist's prompt reader)."""
    from specsteer.models.planning import runtime_plan  # the plan reads the calibration and llama.cpp's check

    pairing = get_pairing(pairing_id)
    say = lambda line: print(f"  {line}", flush=True)  # noqa: E731
    try:
        plan = runtime_plan(pairing, runtime, say)
    except ModelLoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"preparing {pairing.id} for the {plan.runtime} runtime", flush=True)
    for model in plan.models(pairing):
        spec = model.spec
        if spec.kind != "offline":
            print(f"{spec.name}: a {spec.kind} model, nothing to prepare")
            continue
        started = time.perf_counter()
        try:
            load_tokenizer(spec, say)
            path = offline_gguf(spec, say) if model.runtime == "llama.cpp" else prepare_offline(spec, say)
        except ModelLoadError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        size = path.stat().st_size if path.is_file() else _directory_size(path)
        # The prompt reader: the calibration measured the Specialist's conversion reading prompts faster than
        # llama.cpp here, so auto hands its long prompts over; the conversion is made now, not at the first load.
        what = f"{model.dtype} prompt reader, " if model.role == PROMPT_READER else ""
        print(f"{spec.name}: {path} ({what}{size / 1e9:.2f} GB, {time.perf_counter() - started:.1f} s)", flush=True)
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
