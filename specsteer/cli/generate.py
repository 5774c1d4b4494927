"""``python -m specsteer generate``: personalized generation from the command line, printed as coloured text
or one JSON document; ``python -m specsteer pairings``: the pairings to pass it, and whether each loads here.
The Cloud as a service for Edges elsewhere is ``specsteer cloud`` (specsteer.cli.cloud).

``generate --cloud URL`` (or $SPECSTEER_CLOUD_URL) runs only the Edge here -- the Specialist and
the history -- against a Cloud service; without it both run in this process. ``--rtt-ms``,
``--uplink-kbps`` and ``--downlink-kbps`` make the link behave like that network either way.

Exit status: 0 on success, 2 for bad input (history, arguments), 1 when the
models cannot be loaded, 3 when the Cloud failed (what was generated before is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from specsteer.cli import fail
from specsteer.cli.arguments import (
    acceptance_arguments,
    acceptance_rules,
    add_lora_argument,
    float_argument,
    p3_arguments,
    p3_params,
    prompt_style_argument,
    runtime_argument,
)
from specsteer.cli.loading import pair_from_arguments
from specsteer.method.events import Finished, TokenEvent
from specsteer.protocol.emulation import LinkConditions


def build_parser() -> argparse.ArgumentParser:
    from specsteer.cloud.api import CLOUD_SECRET_ENV
    from specsteer.data.tasks import TASKS
    from specsteer.method.catalog import METHODS
    from specsteer.protocol.exposure import CLOUD_URL_ENV

    parser = argparse.ArgumentParser(
        prog="specsteer", description="SpecSteer: personalized device-cloud speculative decoding"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="generate personalized text from a history file")
    gen.add_argument(
        "--history",
        required=True,
        help="JSON, JSONL, CSV or plain-text history; or a CoGenesis record (a persona: profile and texts)",
    )
    gen.add_argument("--task", required=True, choices=TASKS)
    gen.add_argument("--input", required=True, help="the task input (instruction or topic)")
    gen.add_argument("--pairing", default=None, help="pairing id (see `python -m specsteer pairings`)")
    gen.add_argument("--specialist", default=None, help="override the Specialist: local dir, .gguf file or hub id")
    gen.add_argument("--generalist", default=None, help="override the Generalist: local dir, .gguf file or hub id")
    gen.add_argument("--method", default="specsteer", choices=METHODS)
    add_lora_argument(gen)
    gen.add_argument(
        "--alpha", type=float_argument, default=0.1, help="verification threshold (0 accepts all, inf rejects all)"
    )
    gen.add_argument("--beta", type=float_argument, default=1.0, help="steering strength")
    gen.add_argument("--draft-len", type=int, default=4)
    gen.add_argument(
        "--adaptive-draft",
        action="store_true",
        help="choose each round's draft length (at most --draft-len) from the speed bound",
    )
    gen.add_argument(
        "--draft-confidence",
        type=float_argument,
        default=0.0,
        help="end a round's drafting after a draft the Specialist gave less than this probability (0 = off)",
    )
    gen.add_argument("--top-k", type=int, default=64, help="downlink top-k entries on recovery (0 = whole vocabulary)")
    p3_arguments(gen)
    acceptance_arguments(gen)
    gen.add_argument("--no-bonus", action="store_true", help="no steered bonus token after a fully accepted round")
    gen.add_argument("--exact", action="store_true", help="exact-target sampling variant of SpecSteer")
    gen.add_argument("--retrieval-k", type=int, default=3, help="history items retrieved by BM25")
    prompt_style_argument(gen)
    gen.add_argument(
        "--private-guard",
        type=int,
        default=0,
        metavar="N",
        help="keep drafts and chosen tokens that would copy N tokens of the private prompt verbatim "
        "off the link (the Edge recovers another token locally); 0 = off",
    )
    gen.add_argument("--max-new-tokens", type=int, default=256)
    gen.add_argument(
        "--runtime",
        type=runtime_argument,
        default="auto",
        help="llama.cpp (GGUF files read directly, CPU), transformers, auto (default: from this machine's "
        "calibration, per stream), or a split such as transformers/llama.cpp (the Specialist and its generic "
        "copy on the first, the Generalist on the second)",
    )
    gen.add_argument(
        "--dtype",
        choices=("bf16", "fp32"),
        default=None,
        help="transformers runtime only; default: bf16 where this CPU computes it fast, else fp32",
    )
    gen.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    gen.add_argument("--temperature", type=float_argument, default=1.0)
    gen.add_argument("--top-p", type=float_argument, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of coloured text")
    gen.add_argument("--no-color", action="store_true", help="plain text (also when NO_COLOR is set)")
    gen.add_argument(
        "--cloud",
        default=None,
        metavar="URL",
        help=f"run the Edge here against the Cloud service at URL (default: ${CLOUD_URL_ENV}; empty or "
        "unset: the Cloud runs in this process)",
    )
    gen.add_argument(
        "--cloud-secret-env",
        default=CLOUD_SECRET_ENV,
        metavar="NAME",
        help="environment variable holding the Cloud's shared secret (default: %(default)s)",
    )
    _link_arguments(gen)
    commands.add_parser("pairings", help="list the model pairings and whether they can load here")
    return parser


def _link_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rtt-ms", type=float_argument, default=None, help="emulate a link with this round-trip time")
    parser.add_argument("--uplink-kbps", type=float_argument, default=None, help="emulated uplink bandwidth (kbit/s)")
    parser.add_argument(
        "--downlink-kbps", type=float_argument, default=None, help="emulated downlink bandwidth (kbit/s)"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pairings":
        return _list_pairings()
    return _generate(args)


def _list_pairings() -> int:
    from specsteer.models.planning import runtime_plan
    from specsteer.models.registry import PAIRINGS, pairing_status
    from specsteer.models.weights import ModelLoadError

    for pairing_id, pairing in PAIRINGS.items():
        ok, reason = pairing_status(pairing)
        runtime = ""
        if ok:
            try:
                picks = {method: runtime_plan(pairing, method=method) for method in ("specsteer", "llm")}
                plan = picks["specsteer"]
                streams = f"Specialist pair {plan.specialist.runtime}, Generalist {plan.generalist.runtime}"
                runtime = f" [runtime: {plan.runtime}{f'; {streams}' if plan.mixed else ''}]"
                why = f"auto: {plan.reason}"
                if picks["llm"].runtime != picks["specsteer"].runtime:
                    why += f"; for llm alone: {picks['llm'].runtime}"
            except ModelLoadError:
                why = ""
        print(f"{pairing_id:32s} {'available' if ok else 'unavailable'}  {reason}{runtime}")
        if runtime and why:
            print(f"{'':32s} {why}")
    return 0


def _generate(args) -> int:
    from specsteer.data.crossing import history_texts
    from specsteer.data.crossing_replay import history_crossing
    from specsteer.data.history import HistoryError
    from specsteer.data.history_upload import parse_history
    from specsteer.engine.decode_config import DecodeConfig, cross_tokenizer_problem
    from specsteer.engine.generate import generate
    from specsteer.engine.request import Request

    config = DecodeConfig(
        method=args.method,
        alpha=args.alpha,
        beta=args.beta,
        draft_len=args.draft_len,
        adaptive_draft=args.adaptive_draft,
        draft_confidence=args.draft_confidence,
        downlink_top_k=args.top_k,
        bonus=not args.no_bonus,
        max_new_tokens=args.max_new_tokens,
        sample=args.sample,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        exact=args.exact,
        private_guard=args.private_guard,
        p3=p3_params(args),
        cda_lambda=acceptance_rules(args)[0],
    )
    try:
        config.validate()
        history = parse_history(Path(args.history).read_bytes(), filename=args.history)
        request = Request(
            task=args.task,
            input_text=args.input,
            history=history.items,
            retrieval_k=args.retrieval_k,
            profile=history.profile,
            prompt_style=args.prompt_style,
        )
        from specsteer.engine.request import prepare

        prepared = prepare(request)
        conditions = LinkConditions.requested(args.rtt_ms, args.uplink_kbps, args.downlink_kbps)
    except FileNotFoundError:
        return fail(f"history file not found: {args.history}", 2)
    except (HistoryError, ValueError) as error:
        return fail(str(error), 2)

    from specsteer.cloud.client import cloud_from_environment
    from specsteer.protocol.exposure import secret_problem
    from specsteer.protocol.link import CloudError

    secret = os.environ.get(args.cloud_secret_env)
    problem = secret_problem(secret, f"${args.cloud_secret_env}")
    if problem:
        return fail(problem, 2)
    cloud = cloud_from_environment(args.cloud, secret)
    try:
        if cloud is not None:
            cloud.info()  # before loading anything: an unreachable or mismatched Cloud fails at once
        pair = pair_from_arguments(args, edge_only=cloud is not None)
        if isinstance(pair, int):
            return pair
        unavailable = cross_tokenizer_problem(pair, config)
        if unavailable:
            return fail(unavailable, 2)
        from specsteer.cloud.in_process import InProcessCloud
        from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD

        # In process the Cloud reads its prompts when DEFAULT_READ_AHEAD says (specsteer.cloud.read_ahead).
        endpoint = cloud or InProcessCloud(pair, read_ahead=DEFAULT_READ_AHEAD)
        events = generate(pair, prepared, config, threading.Event(), cloud=endpoint, conditions=conditions)
        texts = history_texts(history.items, history.profile)
        audit = lambda finished, tokens: history_crossing(  # noqa: E731 -- what crossed, once per generation
            finished, tokens, pair.tokenizer, texts, prepared.prompts.plain, config.private_guard
        )
        if args.json:
            return _print_json(events, audit)
        return _print_coloured(events, audit, colour=not (args.no_color or os.environ.get("NO_COLOR")))
    except CloudError as error:
        return _cloud_failed(error, args.json)
    finally:
        if cloud is not None:
            cloud.close()


def _cloud_failed(error, as_json: bool) -> int:
    """Exit 3; what was generated before the Cloud failed has been printed already."""
    partial = error.partial
    kept = f" after {partial.stats.new_tokens} tokens, which are kept" if partial is not None else ""
    if not as_json:
        print()
    return fail(f"the Cloud failed{kept}: {error}", 3)


def _print_json(events, audit) -> int:
    """One JSON document; ``audit(finished, tokens)`` is the generation's history that crossed."""
    from specsteer.protocol.link import CloudError

    tokens: list[TokenEvent] = []
    try:
        for event in events:
            if isinstance(event, TokenEvent):
                if not event.pending:  # the document lists settled tokens; a draft's verdict follows it
                    tokens.append(event)
                continue
            print(json.dumps(_document(event, tokens, audit), ensure_ascii=False))
    except CloudError as error:  # the document of what was generated, and why it stopped
        if error.partial is not None:
            failure = {"code": error.code, "message": str(error)}
            print(json.dumps({**_document(error.partial, tokens, audit), "error": failure}, ensure_ascii=False))
        raise
    return 0


def _document(finished: Finished, tokens: list[TokenEvent], audit) -> dict:
    return {
        "text": finished.text,
        "tokens": [{"id": token.id, "text": token.text, "kind": token.kind} for token in tokens],
        "history_crossed": audit(finished, tokens).to_dict(),
        "stats": finished.stats.to_dict(),
        "transcript": [
            {"direction": m.direction, "bytes": m.bytes, "payload": {"kind": m.kind, **m.payload}}
            for m in finished.transcript
        ],
    }


def _print_coloured(events, audit, colour: bool) -> int:
    from specsteer.cli.terminal import TerminalStream

    out = sys.stdout
    stream = TerminalStream(out, colour)
    tokens: list[TokenEvent] = []
    for event in events:
        if isinstance(event, Finished):
            stream.end()
            out.write("\n")
            print(format_stats(event), file=out)
            print(f"[history crossed] {audit(event, tokens).headline()}", file=out)
            break
        stream.add(event)
        if not event.pending:
            tokens.append(event)
    return 0


def format_stats(finished: Finished) -> str:
    s = finished.stats
    acceptance = f"{s.acceptance_rate:.0%}" if s.acceptance_rate is not None else "n/a"
    first = f"{s.ttft_s:.2f}s" if s.ttft_s is not None else "n/a"
    visible = f"{s.first_visible_s:.2f}s" if s.first_visible_s is not None else "n/a"
    return (
        f"[{s.method}] {s.new_tokens} tokens in {s.seconds:.1f}s ({s.tok_per_s:.2f} tok/s, "
        f"first visible after {visible}, first verified token after {first}), "
        f"rounds {s.rounds}, acceptance {acceptance} ({s.accepted}/{s.drafted}), "
        f"uplink {s.uplink_bytes} B, downlink {s.downlink_bytes} B, stop: {s.stop_reason}, "
        f"runtime {s.runtime} ({s.precision})"
        + (f", Specialist LoRA {s.specialist_lora}" if s.specialist_lora else "")
        + (
            f", chosen on the device {s.device_chosen}/{s.new_tokens} ({s.device_share:.0%})"
            if s.device_share is not None
            else ""
        )
        + (f", timing disturbed: paused {s.paused_s:.1f} s (not the time it computed)" if s.timing_disturbed else "")
    )
