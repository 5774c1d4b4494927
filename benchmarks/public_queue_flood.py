"""One client floods the public app's queue; does another still get its sample and its generation?

The reproduction of the queue-fill attack, bounded and on loopback only. It serves ``app.py`` of a
source tree (this one by default, or ``--app-root`` another checkout, to measure before a change) in
public mode with the tiny test pairing, then:

1. **the flood**: ``--calls`` (70) permitted one-cell ``/gradio_api/call/evaluate`` calls, each with a
   made-up ``session_hash``, all from one client address (``--flood-from``, 127.0.0.2), sent as fast as
   ``--workers`` (16) threads can; each answer's status is counted (200 queued, anything else refused);
2. **the other visitor**, right after, from another address (``--visitor-from``, 127.0.0.3): its
   ``/load_sample`` and then its ``/generate`` (40 tokens, on the loaded sample) as the API offers them,
   each timed from its POST to its result (or its refusal).

It prints one JSON object (and writes it to ``--out`` if given): the flood's counts and seconds, the
first refusal's text of each status, the visitor's statuses and seconds, the machine's load average.
The server is stopped by its pid at the end; every wait is bounded (``--timeout-s`` per call).

    python benchmarks/public_queue_flood.py                          # this tree
    python benchmarks/public_queue_flood.py --app-root /work/main    # another checkout (before)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
API = "/gradio_api"
ONE_CELL = {"source": "sample", "records": 1, "methods": ["slm"], "alphas": "1", "betas": "1", "max_new_tokens": 24}
GENERATE = {
    "task": "review",
    "input_text": "Write a review of a power bank with great battery life",
    "method": "specsteer",
    "max_new_tokens": 40,
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(app_root: Path, data: Path, port: int, log: Path) -> subprocess.Popen:
    """``app.py`` of ``app_root`` in public mode with the tiny pairing, on 127.0.0.1:``port``."""
    env = {
        **os.environ,
        "SPECSTEER_PUBLIC": "1",
        "SPECSTEER_TEST_PAIR": "tiny",
        "SPECSTEER_DATA_DIR": str(data),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(app_root),
    }
    env.pop("DATABASE_URL", None)
    with log.open("wb") as output:
        return subprocess.Popen([sys.executable, "app.py"], cwd=app_root, env=env, stdout=output, stderr=output)


def wait_until_up(url: str, server: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the app exited with status {server.returncode} before it answered")
        try:
            if httpx.get(f"{url}{API}/info", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the app did not answer within {timeout_s:g} s")


def client(local_address: str, timeout_s: float) -> httpx.Client:
    """An HTTP client whose connections leave from ``local_address`` (a loopback address of its own)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=local_address), timeout=timeout_s)


def arguments(info: dict, endpoint: str, values: dict[str, Any]) -> list[Any]:
    """The endpoint's API parameters in order: ``values`` by name, the API's defaults elsewhere."""
    parameters = info["named_endpoints"][f"/{endpoint}"]["parameters"]
    return [values.get(p["parameter_name"], p.get("parameter_default")) for p in parameters]


def post(http: httpx.Client, url: str, endpoint: str, data: list, session: str) -> httpx.Response:
    return http.post(f"{url}{API}/call/{endpoint}", json={"data": data, "session_hash": session})


def result(http: httpx.Client, url: str, endpoint: str, event_id: str, timeout_s: float) -> tuple[str, str]:
    """The event's outcome from its stream: ("complete" or "error" or "timeout", the start of its first
    output as plain text)."""
    deadline = time.monotonic() + timeout_s
    outcome = ""
    with http.stream("GET", f"{url}{API}/call/{endpoint}/{event_id}") as stream:
        for line in stream.iter_lines():
            if line.startswith("event: ") and line[7:] in ("complete", "error"):
                outcome = line[7:]
            elif outcome and line.startswith("data: "):
                return outcome, plain_start(line[6:])
            if time.monotonic() > deadline:
                break
    return outcome or "timeout", ""


def plain_start(data: str, chars: int = 160) -> str:
    """The start of an event's first output, markup removed (a status message, usually)."""
    try:
        first = json.loads(data)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        first = data
    return " ".join(re.sub(r"<[^>]*>", " ", str(first)).split())[:chars]


def timed_call(http: httpx.Client, url: str, endpoint: str, data: list, session: str, timeout_s: float) -> dict:
    started = time.monotonic()
    answer = post(http, url, endpoint, data, session)
    outcome: dict[str, Any] = {"status": answer.status_code}
    if answer.status_code == 200:
        outcome["result"], outcome["shows"] = result(http, url, endpoint, answer.json()["event_id"], timeout_s)
    else:
        outcome["refusal"] = answer.text[:400]
    outcome["seconds"] = round(time.monotonic() - started, 3)
    return outcome


def flood(url: str, info: dict, args: argparse.Namespace) -> dict:
    data = arguments(info, "evaluate", {**ONE_CELL, "pairing": "tiny-test"})

    def one(index: int) -> tuple[int, str]:
        with client(args.flood_from, args.timeout_s) as http:
            answer = post(http, url, "evaluate", data, f"made-up-{index}-{uuid.uuid4().hex[:8]}")
            return answer.status_code, answer.text[:400]

    started = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        answers = list(pool.map(one, range(args.calls)))
    seconds = time.monotonic() - started
    statuses: dict[str, int] = {}
    first_refusal: dict[str, str] = {}
    for status, text in answers:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status != 200:
            first_refusal.setdefault(str(status), text)
    return {
        "calls": args.calls,
        "from": args.flood_from,
        "seconds": round(seconds, 2),
        "accepted": statuses.get("200", 0),
        "refused": args.calls - statuses.get("200", 0),
        "statuses": statuses,
        "first_refusal": first_refusal,
    }


def visitor(url: str, info: dict, args: argparse.Namespace) -> dict:
    session = f"visitor-{uuid.uuid4().hex[:8]}"
    with client(args.visitor_from, args.timeout_s) as http:
        sample = timed_call(
            http, url, "load_sample", arguments(info, "load_sample", {"sample": "review"}), session, args.timeout_s
        )
        values = {**GENERATE, "pairing": "tiny-test"}
        generate = timed_call(http, url, "generate", arguments(info, "generate", values), session, args.timeout_s)
    return {"from": args.visitor_from, "load_sample": sample, "generate": generate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app-root", type=Path, default=ROOT, help="the source tree whose app.py is served")
    parser.add_argument("--calls", type=int, default=70)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--flood-from", default="127.0.0.2")
    parser.add_argument("--visitor-from", default="127.0.0.3")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="the longest wait for any one answer")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.calls <= 200:
        parser.error("--calls is 1 to 200")
    with tempfile.TemporaryDirectory(prefix="queue-flood-") as folder:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = Path(folder) / "server.log"
        server = serve(args.app_root.resolve(), Path(folder) / "data", port, log)
        try:
            wait_until_up(url, server, args.timeout_s)
            info = httpx.get(f"{url}{API}/info", timeout=10.0).json()
            report = {
                "app_root": str(args.app_root),
                "load_average": os.getloadavg(),
                "flood": flood(url, info, args),
                "visitor": visitor(url, info, args),
            }
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
