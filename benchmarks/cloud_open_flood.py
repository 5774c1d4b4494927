"""One client sends a Cloud many Opens that each ask the most it allows; how much memory does the Cloud take,
and does a real Edge still get its generation?

Starts ``python -m specsteer cloud`` on a free loopback port (the pairing given, its default memory
budget unless ``--memory-budget-mb``), sends ``--opens`` Open frames one after another, each with a
``--prompt-tokens`` prompt and the largest token budget the Cloud's limits allow (a session's caches
are sized for prompt + budget, so this is what a greedy client can make it hold), and records each answer's status and
the Cloud's peak resident memory (VmHWM of its /proc status). A Cloud reads a session's prompt at
its first Draft, and its contexts grow as they read: ``--draft`` sends each admitted session one
Draft, so that every admitted prompt is read and its caches are filled.

A flood from many addresses: ``--addresses N`` sends the Opens from N loopback addresses (127.0.0.2, ...) in
turn; ``--secret`` starts the Cloud with a shared secret, which the flood holds; ``--keep-alive-s
T --keep-alive-every-s P`` then keeps the admitted sessions alive for T seconds with one Draft per
session every P seconds (a session given to another answers 410, and the flood opens a new one in
its place, as a holder that wants to keep its room would); ``--edge-at-s 60,540`` runs a real
``python -m specsteer generate --cloud`` (its own Edge key, or the shared secret with
``--edge-credential shared``) at those seconds into the keep-alive and records how it ended.
``--threads 1`` runs the Cloud and the Edge on one thread each. Loopback only, bounded loops; the
Cloud is stopped by its pid at the end. Prints JSON.

    python benchmarks/cloud_open_flood.py [--pairing offline-qwen2.5-coder] [--opens 40] [--prompt-tokens 16] [--draft]
    python benchmarks/cloud_open_flood.py --opens 40 --addresses 10 --prompt-tokens 512 --draft --secret \\
        --max-sessions-per-client 8 --keep-alive-s 600 --keep-alive-every-s 120 --edge-at-s 60,540 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from specsteer.cloud.admission import edge_key  # noqa: E402
from specsteer.cloud.api import EXCHANGE_PATH  # noqa: E402
from specsteer.cloud.process import start_cloud_process  # noqa: E402
from specsteer.protocol.wire import Draft, Open, encode  # noqa: E402
from specsteer.runtimes.machine import machine_info  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SECRET_ENV = "SPECSTEER_FLOOD_SECRET"
EDGE_HISTORY = REPO / "assets" / "samples" / "review_user.jsonl"
EDGE_INPUT = "Write a short review of a quiet cafe by the sea."


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class Flood:
    """The flood's sessions: opened from several addresses, drafted on now and then, reopened when lost."""

    def __init__(self, url: str, secret: str | None, addresses: int, prompt: tuple[int, ...], budget: int):
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        sources = [None] if addresses <= 1 else [f"127.0.0.{2 + n}" for n in range(addresses)]
        self.clients = [
            httpx.Client(
                base_url=url, headers=headers, timeout=900, transport=httpx.HTTPTransport(local_address=source)
            )
            for source in sources
        ]
        self.prompt, self.budget = prompt, budget
        self.opens: Counter[int] = Counter()
        self.drafts: Counter[int] = Counter()
        self.sessions: list[tuple[httpx.Client, bytes]] = []
        self._turn = 0

    def open(self, draft: bool) -> int:
        client = self.clients[self._turn % len(self.clients)]
        self._turn += 1
        session = os.urandom(16)
        status = client.post(
            EXCHANGE_PATH, content=encode(Open(session, "ratio", self.prompt, self.budget))
        ).status_code
        self.opens[status] += 1
        if status == 200:
            self.sessions.append((client, session))
            if draft:
                self.draft(client, session)
        return status

    def draft(self, client: httpx.Client, session: bytes) -> int:
        status = client.post(EXCHANGE_PATH, content=encode(Draft(session, (self.prompt[0],)))).status_code
        self.drafts[status] += 1
        return status

    def keep_alive_round(self, wanted: int) -> None:
        """One Draft per session; the lost ones are dropped and as many new Opens tried."""
        for client, session in list(self.sessions):
            if self.draft(client, session) == 410:
                self.sessions.remove((client, session))
        for _ in range(wanted - len(self.sessions)):
            self.open(draft=True)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def run_edge(url: str, token: str, pairing: str, runtime: str, max_new_tokens: int, env: dict) -> dict:
    """A real ``generate --cloud``: its exit status, its seconds, and what it printed (JSON) or its error."""
    command = [
        sys.executable, "-m", "specsteer", "generate", "--history", str(EDGE_HISTORY), "--task", "review",
        "--input", EDGE_INPUT, "--pairing", pairing, "--runtime", runtime, "--max-new-tokens", str(max_new_tokens),
        "--cloud", url, "--json",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command, env={**env, "SPECSTEER_CLOUD_SECRET": token}, capture_output=True, text=True, cwd=REPO, timeout=1800
    )
    result: dict = {"exit": done.returncode, "seconds": round(time.monotonic() - started, 1)}
    try:
        document = json.loads(done.stdout.strip().splitlines()[-1])
        stats = document.get("stats", {})
        result.update(
            new_tokens=stats.get("new_tokens"), tok_per_s=stats.get("tok_per_s"), stop=stats.get("stop_reason")
        )
        if "error" in document:
            result["error"] = document["error"]
    except (ValueError, IndexError, AttributeError):
        result["stderr_tail"] = done.stderr.strip().splitlines()[-3:]
    return result


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
    parser.add_argument("--addresses", type=int, default=1, help="loopback source addresses the Opens come from")
    parser.add_argument("--secret", action="store_true", help="the Cloud has a shared secret, and the flood holds it")
    parser.add_argument("--keep-alive-s", type=float, default=0.0, help="keep the flood's sessions alive this long")
    parser.add_argument("--keep-alive-every-s", type=float, default=120.0)
    parser.add_argument("--edge-at-s", default="", help="seconds into the keep-alive to run a real generate --cloud")
    parser.add_argument(
        "--edge-credential",
        default="key",
        help="the Edge's credential: key (its own Edge key) or shared; a comma list is taken in turn, one per Edge run",
    )
    parser.add_argument("--edge-max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="SPECSTEER_THREADS for the Cloud and the Edge")
    args = parser.parse_args()
    extra = ["--memory-budget-mb", args.memory_budget_mb] if args.memory_budget_mb else []
    env = dict(os.environ)
    if args.threads:
        env.update(SPECSTEER_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    secret = secrets.token_urlsafe(24) if args.secret or args.edge_at_s else None
    if secret:
        env[SECRET_ENV] = secret
        extra += ["--secret-env", SECRET_ENV]
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"cloud-open-flood-{os.getpid()}.log"
    child = start_cloud_process(
        "--pairing", args.pairing, "--runtime", args.runtime, "--max-sessions", "64",
        "--max-sessions-per-client", args.max_sessions_per_client, *extra,
        env=env, stderr=log.open("wb"),
    )  # fmt: skip
    flood = None
    try:
        ready_kb = status_kb(child.pid, "VmRSS")
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        limits = httpx.get(child.url + "/v1/info", headers=headers, timeout=30).json()["limits"]
        prompt = tuple(range(1000, 1000 + args.prompt_tokens))
        flood = Flood(child.url, secret if args.secret else None, args.addresses, prompt, limits["max_new_tokens"])
        started = time.monotonic()
        for _ in range(args.opens):
            flood.open(draft=args.draft)
        opening_s = time.monotonic() - started
        result = {
            "command": " ".join(sys.argv),
            "pairing": args.pairing,
            "opens": args.opens,
            "addresses": args.addresses,
            "prompt_tokens": args.prompt_tokens,
            "max_new_tokens": limits["max_new_tokens"],
            "statuses": dict(flood.opens),
            "drafts": dict(flood.drafts),
            "admitted_at_once": len(flood.sessions),
            "memory_budget_mb": round(limits["memory_budget_bytes"] / 2**20),
            "limits": {
                key: limits.get(key) for key in ("max_sessions_per_client", "max_client_share", "reclaim_idle_s")
            },
            "rss_ready_mb": round(ready_kb / 1024),
            "seconds": round(opening_s, 1),
        }
        if args.keep_alive_s > 0:
            result["keep_alive"] = keep_alive(args, child, flood, secret, env)
            result["statuses_after"] = dict(flood.opens)
            result["drafts_after"] = dict(flood.drafts)
        result.update(
            rss_after_mb=round(status_kb(child.pid, "VmRSS") / 1024),
            peak_rss_mb=round(status_kb(child.pid, "VmHWM") / 1024),
            machine=machine_info().describe(),
        )
    finally:
        if flood is not None:
            flood.close()
        child.stop()
    text = log.read_text(errors="replace")
    result["cloud_log"] = {
        "rooms_given": text.count("gave the room of session"),
        "streams_abandoned": text.count("went away mid-stream"),
        "tracebacks": text.count("Traceback"),
    }
    print(json.dumps(result, indent=2))
    return 0


def keep_alive(args, child, flood: Flood, secret: str, env: dict) -> dict:
    """The keep-alive phase, with the Edge's generations at their times (in threads, so the flood goes on)."""
    credentials = [name.strip() for name in args.edge_credential.split(",")]
    tokens = {"shared": secret, "key": edge_key(secret, "real-edge")}
    edge_times = sorted(float(t) for t in args.edge_at_s.split(",") if t.strip())
    edges: list[dict] = []
    threads: list[threading.Thread] = []
    held: list[int] = []
    started = time.monotonic()
    wanted = args.opens

    def edge(at: float, credential: str) -> None:
        then = held[-1] if held else None
        outcome = run_edge(child.url, tokens[credential], args.pairing, args.runtime, args.edge_max_new_tokens, env)
        edges.append({"at_s": at, "credential": credential, "cloud_sessions_then": then, **outcome})

    next_round = started + args.keep_alive_every_s
    while (now := time.monotonic()) < started + args.keep_alive_s:
        while edge_times and now - started >= edge_times[0]:
            at = edge_times.pop(0)
            credential = credentials[len(threads) % len(credentials)]
            thread = threading.Thread(target=edge, args=(at, credential), daemon=True)
            thread.start()
            threads.append(thread)
        if now >= next_round:
            flood.keep_alive_round(wanted)
            next_round += args.keep_alive_every_s
        held.append(httpx.get(child.url + "/v1/health", timeout=30).json()["sessions"])
        time.sleep(min(5.0, max(0.1, next_round - time.monotonic())))
    for thread in threads:
        thread.join(timeout=1800)
    return {
        "seconds": round(time.monotonic() - started, 1),
        "every_s": args.keep_alive_every_s,
        "cloud_sessions_max": max(held, default=0),
        "cloud_sessions_min": min(held, default=0),
        "flood_sessions_end": len(flood.sessions),
        "edges": sorted(edges, key=lambda e: e["at_s"]),
    }


if __name__ == "__main__":
    raise SystemExit(main())
