"""One client sends a Cloud many Opens that each ask the most it allows; how much memory does the Cloud take?

Starts ``python -m specsteer cloud`` on a free loopback port (the pairing given, its default memory
budget unless ``--memory-budget-mb``), sends ``--opens`` Open frames one after another, each with a
short prompt and the largest token budget the Cloud's limits allow (the reproduction of issue 15: a
session's caches are sized for prompt + budget), never drafts, and records each answer's status
and the Cloud's peak resident memory (VmHWM of its /proc status). A Cloud reads a session's prompt
at its first Draft, and its contexts grow as they read: ``--draft`` sends each admitted session one
Draft, so that every admitted prompt is read and its caches are filled. Loopback only, a bounded
loop; the Cloud is stopped by its pid at the end. Prints JSON.

    python scripts/cloud_open_flood.py [--pairing offline-qwen2.5-coder] [--opens 40] [--prompt-tokens 16] [--draft]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from specsteer.cloud.api import EXCHANGE_PATH  # noqa: E402
from specsteer.cloud.process import start_cloud_process  # noqa: E402
from specsteer.protocol.wire import Draft, Open, encode  # noqa: E402
from specsteer.runtimes.machine import machine_info  # noqa: E402


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairing", default="offline-qwen2.5-coder")
    parser.add_argument("--runtime", default="auto")
    parser.add_argument("--opens", type=int, default=40)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--draft", action="store_true", help="one Draft per admitted session: its prompt is read")
    parser.add_argument("--memory-budget-mb", default=None, help="passed to the Cloud (default: its own)")
    parser.add_argument(
        "--max-sessions-per-client",
        default="64",
        help="passed to the Cloud; high by default so that the memory budget is what binds",
    )
    args = parser.parse_args()
    extra = ["--memory-budget-mb", args.memory_budget_mb] if args.memory_budget_mb else []
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"cloud-open-flood-{os.getpid()}.log"
    child = start_cloud_process(
        "--pairing",
        args.pairing,
        "--runtime",
        args.runtime,
        "--max-sessions",
        "64",
        "--max-sessions-per-client",
        args.max_sessions_per_client,
        *extra,
        stderr=log.open("wb"),
    )
    try:
        ready_kb = status_kb(child.pid, "VmRSS")
        limits = httpx.get(child.url + "/v1/info", timeout=30).json()["limits"]
        prompt = tuple(range(1000, 1000 + args.prompt_tokens))
        statuses: Counter[int] = Counter()
        started = time.monotonic()
        drafted: Counter[int] = Counter()
        for _ in range(args.opens):
            session = os.urandom(16)
            frame = encode(Open(session, "ratio", prompt, limits["max_new_tokens"]))
            answer = httpx.post(child.url + EXCHANGE_PATH, content=frame, timeout=600)
            statuses[answer.status_code] += 1
            if args.draft and answer.status_code == 200:
                draft = encode(Draft(session, (prompt[0],)))
                drafted[httpx.post(child.url + EXCHANGE_PATH, content=draft, timeout=600).status_code] += 1
        seconds = time.monotonic() - started
        result = {
            "command": " ".join(sys.argv),
            "pairing": args.pairing,
            "opens": args.opens,
            "prompt_tokens": args.prompt_tokens,
            "max_new_tokens": limits["max_new_tokens"],
            "statuses": dict(statuses),
            "drafts": dict(drafted),
            "memory_budget_mb": round(limits["memory_budget_bytes"] / 2**20),
            "rss_ready_mb": round(ready_kb / 1024),
            "rss_after_mb": round(status_kb(child.pid, "VmRSS") / 1024),
            "peak_rss_mb": round(status_kb(child.pid, "VmHWM") / 1024),
            "seconds": round(seconds, 1),
            "machine": machine_info().describe(),
        }
    finally:
        child.stop()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
