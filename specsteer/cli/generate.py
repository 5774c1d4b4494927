"""``python -m specsteer generate``: personalized generation from the command line;
``python -m specsteer cloud``: the Cloud as an HTTP service for Edges elsewhere;
``python -m specsteer edge-key NAME``: the key of one Edge on a Cloud with a secret (specsteer.cloud.admission).

``generate --cloud URL`` (or $SPECSTEER_CLOUD_URL) runs only the Edge here -- the Specialist and
the history -- against a Cloud service; without it both run in this process. ``--rtt-ms``,
``--uplink-kbps`` and ``--downlink-kbps`` make the link behave like that network either way.

Exit status: 0 on success, 2 for bad input (history, arguments), 1 when the
models cannot be loaded, 3 when the Cloud failed (what was generated before is kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
from pathlib import Path

from specsteer.method.events import Finished, TokenEvent
from specsteer.protocol.emulation import LinkConditions


def _float(text: str) -> float:
    value = float(text)
    if math.isnan(value):
        raise argparse.ArgumentTypeError("NaN is not a number here")
    return value


def runtime_argument(text: str) -> str:
    """``--runtime``'s type wherever a command takes one: "auto", a runtime's name, or a split such as
    transformers/llama.cpp (specsteer.runtimes.base.check_runtime, the one spelling)."""
    from specsteer.runtimes.base import check_runtime

    try:
        return check_runtime(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    from specsteer.cloud.admission import CLOUD_CLIENT_SHARE
    from specsteer.cloud.api import CLOUD_SECRET_ENV, DEFAULT_PORT
    from specsteer.cloud.server import BODY_TIMEOUT_S, HEADER_TIMEOUT_S
    from specsteer.cloud.service import ServiceLimits
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
        "--alpha", type=_float, default=0.1, help="verification threshold (0 accepts all, inf rejects all)"
    )
    gen.add_argument("--beta", type=_float, default=1.0, help="steering strength")
    gen.add_argument("--draft-len", type=int, default=4)
    gen.add_argument(
        "--adaptive-draft",
        action="store_true",
        help="choose each round's draft length (at most --draft-len) from the speed bound",
    )
    gen.add_argument(
        "--draft-confidence",
        type=_float,
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
    gen.add_argument("--temperature", type=_float, default=1.0)
    gen.add_argument("--top-p", type=_float, default=1.0)
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
    cloud = commands.add_parser("cloud", help="serve the Cloud (Generalist + generic Specialist) over HTTP")
    cloud.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    cloud.add_argument("--port", type=int, default=DEFAULT_PORT)
    cloud.add_argument("--pairing", default=None, help="pairing id (see `python -m specsteer pairings`)")
    cloud.add_argument(
        "--runtime",
        type=runtime_argument,
        default="auto",
        help="llama.cpp, transformers, auto, or a split such as transformers/llama.cpp (the generic Specialist "
        "on the first, the Generalist on the second)",
    )
    cloud.add_argument("--dtype", choices=("bf16", "fp32"), default=None, help="transformers runtime only")
    cloud.add_argument(
        "--secret-env",
        default=None,
        metavar="NAME",
        help="environment variable holding a shared secret Edges must send; required to listen beyond loopback",
    )
    limits = ServiceLimits()
    cloud.add_argument("--max-sessions", type=int, default=limits.max_sessions)
    cloud.add_argument("--max-prompt-tokens", type=int, default=limits.max_prompt_tokens)
    cloud.add_argument("--max-new-tokens", type=int, default=limits.max_new_tokens)
    cloud.add_argument("--max-draft-len", type=int, default=limits.max_draft_len)
    cloud.add_argument(
        "--idle-timeout-s",
        type=_float,
        default=limits.idle_timeout_s,
        help="end a session after this long without a message",
    )
    cloud.add_argument(
        "--max-sessions-per-client",
        type=int,
        default=limits.max_sessions_per_client,
        help="sessions one client (credential: the shared secret, an Edge key) may hold at once, whatever its address",
    )
    cloud.add_argument(
        "--max-client-share",
        type=_float,
        default=CLOUD_CLIENT_SHARE,
        help="share of the memory budget one client's sessions may reserve together (default: %(default)s)",
    )
    cloud.add_argument(
        "--reclaim-idle-s",
        type=_float,
        default=limits.reclaim_idle_s,
        help="a session this long without a message gives its room to an Open that needs it, oldest-idle first",
    )
    cloud.add_argument(
        "--max-session-life-s",
        type=_float,
        default=limits.max_session_life_s,
        help="end a session this long after it opened, whatever it does",
    )
    cloud.add_argument(
        "--unstarted-timeout-s",
        type=_float,
        default=limits.unstarted_timeout_s,
        help="a session that has not drafted this long after opening gives its room to a new one",
    )
    cloud.add_argument(
        "--memory-budget-mb",
        type=_float,
        default=None,
        help="memory for all sessions' caches together; an Open that does not fit gets 503 "
        "(default: half the memory available once the models are loaded)",
    )
    cloud.add_argument(
        "--header-timeout-s",
        type=_float,
        default=HEADER_TIMEOUT_S,
        help="answer 408 to a connection that has not sent a request's headers within this",
    )
    cloud.add_argument(
        "--body-timeout-s",
        type=_float,
        default=BODY_TIMEOUT_S,
        help="answer 408 to a request whose body has not arrived within this",
    )
    cloud.add_argument(
        "--no-prefix-reuse",
        action="store_true",
        help="forget cached prompts when a session ends (benchmarks time every prompt's reading)",
    )
    from specsteer.cli.vllm_cloud import add_arguments as add_vllm_arguments

    add_vllm_arguments(cloud)
    cloud.add_argument(
        "--capture",
        default=None,
        metavar="FILE",
        help="append every exchanged body to FILE: what this Cloud received, for privacy audits",
    )
    key = commands.add_parser("edge-key", help="print the key of one Edge on a Cloud with a secret")
    key.add_argument("name", help="the Edge's name: 1 to 64 letters, digits, '-' or '_'")
    key.add_argument(
        "--secret-env",
        default=CLOUD_SECRET_ENV,
        metavar="NAME",
        help="environment variable holding the Cloud's secret (default: %(default)s)",
    )
    return parser


def add_lora_argument(parser: argparse.ArgumentParser, per_record: str = "") -> None:
    """``--specialist-lora DIR`` (generate, evaluate, bench); ``per_record``: more help (evaluate's per-record)."""
    parser.add_argument(
        "--specialist-lora",
        default=None,
        metavar="DIR",
        help="the Edge's Specialist with this LoRA adapter (specsteer lora train) merged in; transformers "
        "runtime only (auto picks it). The Cloud's generic copy stays the base model" + per_record,
    )


def _link_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rtt-ms", type=_float, default=None, help="emulate a link with this round-trip time")
    parser.add_argument("--uplink-kbps", type=_float, default=None, help="emulated uplink bandwidth (kbit/s)")
    parser.add_argument("--downlink-kbps", type=_float, default=None, help="emulated downlink bandwidth (kbit/s)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pairings":
        return _list_pairings()
    if args.command == "cloud":
        return _serve_cloud(args)
    if args.command == "edge-key":
        return _edge_key(args)
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


def prompt_style_argument(parser: argparse.ArgumentParser) -> None:
    """``--prompt-style``, as generate and evaluate read it."""
    from specsteer.data.tasks import DEFAULT_PROMPT_STYLE, PROMPT_STYLES

    parser.add_argument(
        "--prompt-style",
        choices=PROMPT_STYLES,
        default=DEFAULT_PROMPT_STYLE,
        help="paper: the paper's Table 13 templates (default, comparable); clean: the retrieved "
        "texts without their field labels, and an instruction to write only the text (the app's persona default)",
    )


def p3_arguments(parser: argparse.ArgumentParser) -> None:
    """P³'s two settings (method p3; specsteer.method.p3), for generate, evaluate and bench alike."""
    from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU

    parser.add_argument(
        "--p3-draft-len",
        type=int,
        default=DEFAULT_DRAFT_LEN,
        metavar="K",
        help="P³: tokens the Cloud drafts per round (default: %(default)s, the public code's)",
    )
    parser.add_argument(
        "--p3-tau",
        type=_float,
        default=DEFAULT_TAU,
        metavar="TAU",
        help="P³: the Edge keeps a Cloud draft while p(draft) / max p >= TAU, in [0, 1] (default: %(default)s)",
    )


def acceptance_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """SpecSteer's acceptance rule (specsteer.method.acceptance), for generate, evaluate and bench alike: the fixed
    α (the paper's), or CDA, α·exp(−λ·JSD(p_L, p_S0)) per draft; ``several``: a grid or benchmark may run both,
    and several λ (each its own point)."""
    parser.add_argument(
        "--acceptance",
        choices=("fixed", "cda", "fixed,cda") if several else ("fixed", "cda"),
        metavar="fixed|cda|fixed,cda" if several else "fixed|cda",  # argparse's own list would repeat the comma
        default="fixed",
        help="SpecSteer's acceptance threshold: fixed (α, the paper's), or cda (α adapted per draft to the "
        "divergence of the Cloud's two models: α·exp(−λ·JSD(p_L, p_S0)), computed on the Cloud)"
        + ("; fixed,cda runs both" if several else ""),
    )
    parser.add_argument(
        "--cda-lambda",
        type=_float_list if several else _float,
        default=(1.0,) if several else 1.0,
        metavar="λ" + (",..." if several else ""),
        help="CDA's λ, >= 0 (default 1, AsymSpec's): α is lowered to at most α·2^−λ where the two models "
        "disagree most" + ("; comma-separated for several" if several else ""),
    )


def _float_list(text: str) -> tuple[float, ...]:
    values = tuple(_float(part) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


def acceptance_rules(args) -> list[float | None]:
    """The rules ``acceptance_arguments``' values name, as the engine does: None for the fixed α, λ for CDA."""
    rules = args.acceptance.split(",")
    lambdas = args.cda_lambda if isinstance(args.cda_lambda, tuple) else (args.cda_lambda,)
    return [None] * ("fixed" in rules) + (list(lambdas) if "cda" in rules else [])


def p3_params(args):
    """The P3Params of ``p3_arguments``' values."""
    from specsteer.method.p3 import P3Params

    return P3Params(args.p3_draft_len, args.p3_tau)


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _generate(args) -> int:
    from specsteer.data.crossing import history_texts
    from specsteer.data.crossing_replay import history_crossing
    from specsteer.data.history import HistoryError, parse_history
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
        return _fail(f"history file not found: {args.history}", 2)
    except (HistoryError, ValueError) as error:
        return _fail(str(error), 2)

    from specsteer.cloud.client import cloud_from_environment
    from specsteer.protocol.exposure import secret_problem
    from specsteer.protocol.link import CloudError

    secret = os.environ.get(args.cloud_secret_env)
    problem = secret_problem(secret, f"${args.cloud_secret_env}")
    if problem:
        return _fail(problem, 2)
    cloud = cloud_from_environment(args.cloud, secret)
    try:
        if cloud is not None:
            cloud.info()  # before loading anything: an unreachable or mismatched Cloud fails at once
        pair = _test_pair_or_load(args, edge_only=cloud is not None)
        if isinstance(pair, int):
            return pair
        unavailable = cross_tokenizer_problem(pair, config)
        if unavailable:
            return _fail(unavailable, 2)
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
    return _fail(f"the Cloud failed{kept}: {error}", 3)


def _load(args, edge_only: bool = False):
    from specsteer.models.loading import load_pair
    from specsteer.models.lora import LoraError
    from specsteer.models.registry import resolve_pairing
    from specsteer.models.weights import ModelLoadError

    try:
        pairing = resolve_pairing(args.pairing, specialist=args.specialist, generalist=args.generalist)
        progress = None if args.json else (lambda line: print(f"[models] {line}", file=sys.stderr))
        return load_pair(
            pairing,
            dtype=args.dtype,
            progress=progress,
            runtime=args.runtime,
            edge_only=edge_only,
            method=getattr(args, "method", "specsteer"),
            specialist_lora=specialist_lora_arg(args),
        )
    except (KeyError, ValueError) as error:
        return _fail(str(error.args[0]) if error.args else str(error), 2)
    except LoraError as error:  # the adapter given is bad input, not a model that failed to load
        return _fail(str(error), 2)
    except ModelLoadError as error:
        return _fail(str(error), 1)


def _serve_cloud(args) -> int:
    from dataclasses import replace

    from specsteer.cloud.server import bind_problem, serve
    from specsteer.cloud.service import CloudService, ServiceLimits, default_memory_budget
    from specsteer.protocol.exposure import secret_problem

    secret = None
    if args.secret_env:
        secret = os.environ.get(args.secret_env, "")
        if not secret:
            return _fail(f"--secret-env {args.secret_env}: that environment variable is empty or unset", 2)
    problem = bind_problem(args.host, secret) or secret_problem(secret, f"${args.secret_env}")
    if problem:
        return _fail(problem, 2)
    budget = None if args.memory_budget_mb is None else int(args.memory_budget_mb * 2**20)
    try:
        limits = ServiceLimits(
            max_sessions=args.max_sessions,
            max_prompt_tokens=args.max_prompt_tokens,
            max_new_tokens=args.max_new_tokens,
            max_draft_len=args.max_draft_len,
            idle_timeout_s=args.idle_timeout_s,
            max_sessions_per_client=args.max_sessions_per_client,
            unstarted_timeout_s=args.unstarted_timeout_s,
            memory_budget_bytes=budget,
            reclaim_idle_s=args.reclaim_idle_s,
            max_session_life_s=args.max_session_life_s,
            max_client_share=args.max_client_share,
        )
    except ValueError as error:
        return _fail(str(error), 2)
    if args.engine == "vllm":
        from specsteer.cli.vllm_cloud import serve_from_arguments

        return serve_from_arguments(args, limits, secret, args.header_timeout_s, args.body_timeout_s)
    pair = _cloud_pair(args)
    if isinstance(pair, int):
        return pair
    if budget is None:  # measured now, with the models in memory
        device = pair.generalist.device if pair.generalist is not None else "cpu"
        limits = replace(limits, memory_budget_bytes=default_memory_budget(device=device))
    # An Open starts reading its prompts at once, while the Edge reads its own on its machine.
    service = CloudService(
        pair,
        limits,
        reuse_prefixes=not args.no_prefix_reuse,
        notice=lambda line: print(f"[cloud] {line}", file=sys.stderr, flush=True),
        read_ahead="concurrent",
    )
    serve(
        service,
        args.host,
        args.port,
        secret,
        args.capture,
        announce=lambda line: print(f"[cloud] {line} on http://{args.host}:{args.port}", file=sys.stderr, flush=True),
        header_timeout_s=args.header_timeout_s,
        body_timeout_s=args.body_timeout_s,
    )
    return 0


def _edge_key(args) -> int:
    from specsteer.cloud.admission import edge_key

    try:
        print(edge_key(os.environ.get(args.secret_env, ""), args.name))
    except ValueError as error:
        return _fail(f"{error} (${args.secret_env})", 2)
    return 0


def _cloud_pair(args):
    args.specialist = args.generalist = None
    args.json = False
    return _test_pair_or_load(args)


def _test_pair_or_load(args, edge_only: bool = False):
    """The pair ``args.pairing`` names: a test pairing's random tiny models (``tiny-test``,
    ``tiny-cross-test``: the test hook of the evaluate CLI and the app), else :func:`_load`."""
    from specsteer.models.tiny import shared_test_pair

    test_pair = shared_test_pair(args.pairing)
    if test_pair is None:
        return _load(args, edge_only=edge_only)
    from specsteer.models.loading import with_specialist_lora
    from specsteer.models.planning import lora_plan
    from specsteer.models.weights import ModelLoadError

    try:
        lora = specialist_lora_arg(args)
        if lora is None:
            return test_pair
        plan = lora_plan(getattr(args, "runtime", "auto"))
        adapted = with_specialist_lora(test_pair, lora)
        adapted.runtime_plan, adapted.runtime_choice = plan, plan.reason
        return adapted
    except ModelLoadError as error:
        return _fail(str(error), 2)


def specialist_lora_arg(args):
    """The adapter ``--specialist-lora`` names, read and checked (a LoraError, a ModelLoadError, if not)."""
    from specsteer.models.lora import read_lora

    directory = getattr(args, "specialist_lora", None)
    return read_lora(directory) if directory else None


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
