"""``python -m specsteer generate``: personalized generation from the command line.

Exit status: 0 on success, 2 for bad input (history, arguments), 1 when the
models cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
from pathlib import Path

from .events import Finished, TokenEvent

# ANSI styles per token kind; rejected drafts are struck through.
_STYLES = {
    "accepted": "\033[32m",
    "rejected": "\033[9;31m",
    "recovered": "\033[33m",
    "bonus": "\033[36m",
    "plain": "",
}
_RESET = "\033[0m"


def _float(text: str) -> float:
    value = float(text)
    if math.isnan(value):
        raise argparse.ArgumentTypeError("NaN is not a number here")
    return value


def build_parser() -> argparse.ArgumentParser:
    from .engine import METHODS
    from .runtime import RUNTIME_CHOICES
    from .tasks import TASKS

    parser = argparse.ArgumentParser(prog="python -m specsteer", description="SpecSteer: personalized device-cloud speculative decoding")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="generate personalized text from a history file")
    gen.add_argument("--history", required=True, help="JSON, JSONL, CSV or plain-text history")
    gen.add_argument("--task", required=True, choices=TASKS)
    gen.add_argument("--input", required=True, help="the task input (instruction or topic)")
    gen.add_argument("--pairing", default=None, help="pairing id (see `python -m specsteer pairings`)")
    gen.add_argument("--specialist", default=None, help="override the Specialist: local dir, .gguf file or hub id")
    gen.add_argument("--generalist", default=None, help="override the Generalist: local dir, .gguf file or hub id")
    gen.add_argument("--method", default="specsteer", choices=METHODS)
    gen.add_argument("--alpha", type=_float, default=0.1, help="verification threshold (0 accepts all, inf rejects all)")
    gen.add_argument("--beta", type=_float, default=1.0, help="steering strength")
    gen.add_argument("--draft-len", type=int, default=4)
    gen.add_argument("--adaptive-draft", action="store_true",
                     help="choose each round's draft length (at most --draft-len) from the speed bound")
    gen.add_argument("--draft-confidence", type=_float, default=0.0,
                     help="end a round's drafting after a draft the Specialist gave less than this probability (0 = off)")
    gen.add_argument("--top-k", type=int, default=64, help="downlink top-k entries on recovery (0 = whole vocabulary)")
    gen.add_argument("--no-bonus", action="store_true", help="no steered bonus token after a fully accepted round")
    gen.add_argument("--exact", action="store_true", help="exact-target sampling variant of SpecSteer")
    gen.add_argument("--retrieval-k", type=int, default=3, help="history items retrieved by BM25")
    gen.add_argument("--max-new-tokens", type=int, default=256)
    gen.add_argument("--runtime", choices=RUNTIME_CHOICES, default="auto",
                     help="llama.cpp (GGUF files read directly, CPU), transformers, or auto (default): llama.cpp "
                          "where it can run the pairing")
    gen.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                     help="transformers runtime only; default: bf16 where this CPU computes it fast, else fp32")
    gen.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    gen.add_argument("--temperature", type=_float, default=1.0)
    gen.add_argument("--top-p", type=_float, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of coloured text")
    gen.add_argument("--no-color", action="store_true", help="plain text (also when NO_COLOR is set)")
    commands.add_parser("pairings", help="list the model pairings and whether they can load here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pairings":
        return _list_pairings()
    return _generate(args)


def _list_pairings() -> int:
    from .models import ModelLoadError, choose_runtime
    from .registry import PAIRINGS, pairing_status

    for pairing_id, pairing in PAIRINGS.items():
        ok, reason = pairing_status(pairing)
        runtime = ""
        if ok:
            try:
                runtime = f" [runtime: {choose_runtime(pairing)}]"
            except ModelLoadError:
                pass
        print(f"{pairing_id:32s} {'available' if ok else 'unavailable'}  {reason}{runtime}")
    return 0


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _generate(args) -> int:
    from .engine import DecodeConfig, Request, generate
    from .history import HistoryError, parse_history

    config = DecodeConfig(
        method=args.method, alpha=args.alpha, beta=args.beta, draft_len=args.draft_len,
        adaptive_draft=args.adaptive_draft, draft_confidence=args.draft_confidence,
        downlink_top_k=args.top_k, bonus=not args.no_bonus, max_new_tokens=args.max_new_tokens,
        sample=args.sample, temperature=args.temperature, top_p=args.top_p, seed=args.seed, exact=args.exact,
    )
    try:
        config.validate()
        history = parse_history(Path(args.history).read_bytes(), filename=args.history)
        request = Request(task=args.task, input_text=args.input, history=history.items, retrieval_k=args.retrieval_k)
        from .engine import prepare

        prepared = prepare(request)
    except FileNotFoundError:
        return _fail(f"history file not found: {args.history}", 2)
    except (HistoryError, ValueError) as error:
        return _fail(str(error), 2)

    pair = _load(args)
    if isinstance(pair, int):
        return pair
    events = generate(pair, prepared, config, threading.Event())
    if args.json:
        return _print_json(events)
    return _print_coloured(events, colour=not (args.no_color or os.environ.get("NO_COLOR")))


def _load(args):
    from .models import ModelLoadError, load_pair
    from .registry import resolve_pairing

    try:
        pairing = resolve_pairing(args.pairing, specialist=args.specialist, generalist=args.generalist)
        progress = None if args.json else (lambda line: print(f"[models] {line}", file=sys.stderr))
        return load_pair(pairing, dtype=args.dtype, progress=progress, runtime=args.runtime)
    except (KeyError, ValueError) as error:
        return _fail(str(error.args[0]) if error.args else str(error), 2)
    except ModelLoadError as error:
        return _fail(str(error), 1)


def _print_json(events) -> int:
    tokens: list[dict] = []
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append({"id": event.id, "text": event.text, "kind": event.kind})
            continue
        document = {
            "text": event.text,
            "tokens": tokens,
            "stats": event.stats.to_dict(),
            "transcript": [
                {"direction": m.direction, "bytes": m.bytes, "payload": {"kind": m.kind, **m.payload}} for m in event.transcript
            ],
        }
        print(json.dumps(document, ensure_ascii=False))
    return 0


def _print_coloured(events, colour: bool) -> int:
    out = sys.stdout
    for event in events:
        if isinstance(event, Finished):
            out.write("\n")
            print(format_stats(event), file=out)
            break
        style = _STYLES[event.kind] if colour else ""
        text = event.text if event.kind != "rejected" or colour else ""
        if text:
            out.write(f"{style}{text}{_RESET}" if style else text)
            out.flush()
    return 0


def format_stats(finished: Finished) -> str:
    s = finished.stats
    acceptance = f"{s.acceptance_rate:.0%}" if s.acceptance_rate is not None else "n/a"
    first = f"{s.ttft_s:.2f}s" if s.ttft_s is not None else "n/a"
    return (
        f"[{s.method}] {s.new_tokens} tokens in {s.seconds:.1f}s ({s.tok_per_s:.2f} tok/s, first token after {first}), "
        f"rounds {s.rounds}, acceptance {acceptance} ({s.accepted}/{s.drafted}), "
        f"uplink {s.uplink_bytes} B, downlink {s.downlink_bytes} B, stop: {s.stop_reason}, "
        f"runtime {s.runtime} ({s.precision})"
    )
