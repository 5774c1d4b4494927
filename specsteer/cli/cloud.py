"""``python -m specsteer cloud``: the Cloud (the Generalist and the generic Specialist) as an HTTP service for
Edges elsewhere (specsteer.cloud.server; ``--engine vllm``: over vLLM engines, specsteer.cli.vllm_cloud);
``python -m specsteer edge-key NAME``: the key of one Edge on a Cloud with a secret (specsteer.cloud.admission).

Exit status: 0 once the service stops, 2 for bad input (arguments, the secret, listening beyond loopback
without one), 1 when the models cannot be loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from typing import TYPE_CHECKING

from specsteer.cli import fail
from specsteer.cli.arguments import float_argument, runtime_argument
from specsteer.cli.loading import pair_from_arguments

if TYPE_CHECKING:
    from specsteer.cloud.service import CloudService


def build_parser() -> argparse.ArgumentParser:
    from specsteer.cloud.admission import CLOUD_CLIENT_SHARE
    from specsteer.cloud.api import CLOUD_SECRET_ENV, DEFAULT_PORT
    from specsteer.cloud.limits import ServiceLimits
    from specsteer.cloud.server import BODY_TIMEOUT_S, HEADER_TIMEOUT_S

    parser = argparse.ArgumentParser(
        prog="specsteer", description="SpecSteer: personalized device-cloud speculative decoding"
    )
    commands = parser.add_subparsers(dest="command", required=True)
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
        type=float_argument,
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
        type=float_argument,
        default=CLOUD_CLIENT_SHARE,
        help="share of the memory budget one client's sessions may reserve together (default: %(default)s)",
    )
    cloud.add_argument(
        "--reclaim-idle-s",
        type=float_argument,
        default=limits.reclaim_idle_s,
        help="a session this long without a message gives its room to an Open that needs it, oldest-idle first",
    )
    cloud.add_argument(
        "--max-session-life-s",
        type=float_argument,
        default=limits.max_session_life_s,
        help="end a session this long after it opened, whatever it does",
    )
    cloud.add_argument(
        "--unstarted-timeout-s",
        type=float_argument,
        default=limits.unstarted_timeout_s,
        help="a session that has not drafted this long after opening gives its room to a new one",
    )
    cloud.add_argument(
        "--memory-budget-mb",
        type=float_argument,
        default=None,
        help="memory for all sessions' caches together; an Open that does not fit gets 503 "
        "(default: half the memory available once the models are loaded)",
    )
    cloud.add_argument(
        "--header-timeout-s",
        type=float_argument,
        default=HEADER_TIMEOUT_S,
        help="answer 408 to a connection that has not sent a request's headers within this",
    )
    cloud.add_argument(
        "--body-timeout-s",
        type=float_argument,
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "edge-key":
        return _edge_key(args)
    return _serve_cloud(args)


def _serve_cloud(args) -> int:
    from dataclasses import replace

    from specsteer.cloud.limits import ServiceLimits, default_memory_budget
    from specsteer.cloud.server import bind_problem
    from specsteer.cloud.service import CloudService
    from specsteer.protocol.exposure import secret_problem

    secret = None
    if args.secret_env:
        secret = os.environ.get(args.secret_env, "")
        if not secret:
            return fail(f"--secret-env {args.secret_env}: that environment variable is empty or unset", 2)
    problem = bind_problem(args.host, secret) or secret_problem(secret, f"${args.secret_env}")
    if problem:
        return fail(problem, 2)
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
        return fail(str(error), 2)
    if args.engine == "vllm":
        from specsteer.cli.vllm_cloud import serve_from_arguments

        return serve_from_arguments(args, limits, partial(_serve_over_http, args, secret))
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
    _serve_over_http(args, secret, service)
    return 0


def _serve_over_http(args, secret: str | None, service: CloudService) -> None:
    """Serve ``service`` at ``--host``:``--port`` with the command's secret, capture file and timeouts, until
    stopped; whichever engine verifies."""
    from specsteer.cloud.server import serve

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


def _edge_key(args) -> int:
    from specsteer.cloud.admission import edge_key

    try:
        print(edge_key(os.environ.get(args.secret_env, ""), args.name))
    except ValueError as error:
        return fail(f"{error} (${args.secret_env})", 2)
    return 0


def _cloud_pair(args):
    """The pair ``--pairing`` names, its listed models (the Cloud takes no overrides), loading progress on stderr;
    or the exit status of a refusal, already printed."""
    args.specialist = args.generalist = None
    args.json = False
    return pair_from_arguments(args)
