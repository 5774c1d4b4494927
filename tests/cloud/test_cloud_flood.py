"""A flood of Opens from many addresses against a real Cloud process, on the tiny pair and a time scale of seconds.

One holder of a credential opens 40 sessions (512-token prompts, the largest token budget) from 10
loopback addresses and keeps the admitted ones alive with Drafts; a real Edge's generation must
complete meanwhile, with the output it has in process. And a client that goes away mid-stream ends
its session at once, with a log line. Every server is ``python -m specsteer cloud --pairing tiny-test``
on a free 127.0.0.1 port, stopped by its pid.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter

import httpx
import pytest

from specsteer.cloud.admission import edge_key
from specsteer.cloud.api import EXCHANGE_PATH
from specsteer.cloud.client import RemoteCloud
from specsteer.cloud.process import start_cloud_process
from specsteer.cloud.service import CloudService
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.protocol.wire import MAX_NEW_TOKENS, Draft, Open, encode

pytestmark = pytest.mark.slow

SECRET_ENV = "SPECSTEER_TEST_FLOOD_SECRET"
SECRET = "flood test secret"
SERVER_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", SECRET_ENV: SECRET}
OPENS, ADDRESSES, PROMPT_TOKENS = 40, 10, 512
BUDGET_IN_FLOOD_SESSIONS = 12  # the memory budget holds this many of the flood's sessions


def flood_prompt(pair) -> tuple[int, ...]:
    return tuple(3 + i % (pair.vocab_size - 3) for i in range(PROMPT_TOKENS))


class Flood:
    """Opens ``OPENS`` sessions from ``ADDRESSES`` loopback addresses, then drafts on each admitted one
    every ``period_s`` until stopped (the issue's holder kept them alive the same way, every 2 minutes)."""

    def __init__(self, url: str, token: str, prompt: tuple[int, ...], period_s: float):
        headers = {"Authorization": f"Bearer {token}"}
        self.clients = [
            httpx.Client(
                base_url=url,
                headers=headers,
                timeout=60,
                transport=httpx.HTTPTransport(local_address=f"127.0.0.{2 + n}"),
            )
            for n in range(ADDRESSES)
        ]
        self.prompt, self.period_s = prompt, period_s
        self.opened: Counter[int] = Counter()
        self.drafts: Counter[int] = Counter()
        self.rounds = 0  # keep-alive rounds finished
        self.admitted: list[tuple[httpx.Client, bytes]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._keep_alive, daemon=True)

    def open_all(self) -> None:
        for n in range(OPENS):
            client, session = self.clients[n % ADDRESSES], os.urandom(16)
            frame = encode(Open(session, "ratio", self.prompt, MAX_NEW_TOKENS))
            status = client.post(EXCHANGE_PATH, content=frame).status_code
            self.opened[status] += 1
            if status == 200:
                self.admitted.append((client, session))
                self._draft(client, session)  # its prompt is read: its caches fill
        self.thread.start()

    def _draft(self, client: httpx.Client, session: bytes) -> None:
        self.drafts[client.post(EXCHANGE_PATH, content=encode(Draft(session, (self.prompt[0],)))).status_code] += 1

    def _keep_alive(self) -> None:
        while not self.stop.wait(self.period_s):
            for client, session in self.admitted:
                self._draft(client, session)
            self.rounds += 1

    def wait_for_rounds(self, rounds: int, timeout_s: float) -> None:
        """Waits until ``rounds`` keep-alive rounds have run: a fast machine finishes the Edge's
        generation before the first one, and the test is about a flood that keeps drafting."""
        deadline = time.monotonic() + timeout_s
        while self.rounds < rounds and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)
        for client in self.clients:
            client.close()


@pytest.mark.parametrize(
    "flood_token, edge_token, keep_alive_s, reclaim_idle_s",
    [
        # The flood holds its own Edge key and drafts on every session every 0.3 s (never idle):
        # its credential's caps (8 sessions, half the budget) leave the rest to the real Edge.
        (edge_key(SECRET, "flood"), edge_key(SECRET, "app"), 0.3, "60"),
        # The flood holds the shared secret, as does the real Edge (one credential): its sessions,
        # idle between Drafts as the were, give their room oldest-idle first.
        (SECRET, SECRET, 3.0, "1"),
    ],
    ids=["own-edge-key", "shared-secret"],
)
def test_a_real_edge_gets_its_generation_under_the_flood(
    pair, tmp_path, flood_token, edge_token, keep_alive_s, reclaim_idle_s
):
    probe = CloudService(pair)
    prompt = flood_prompt(pair)
    flood_session = probe.session_bytes(Open(bytes(16), "ratio", prompt, MAX_NEW_TOKENS))
    budget_mb = BUDGET_IN_FLOOD_SESSIONS * flood_session / 2**20
    log = tmp_path / "cloud.log"
    child = start_cloud_process(
        "--pairing", "tiny-test", "--secret-env", SECRET_ENV, "--max-sessions", "64",
        "--memory-budget-mb", f"{budget_mb:.6f}", "--reclaim-idle-s", reclaim_idle_s,
        env=SERVER_ENV, stderr=log.open("wb"), ready_timeout_s=180,
    )  # fmt: skip
    flood = Flood(child.url, flood_token, prompt, keep_alive_s)
    try:
        flood.open_all()
        # 10 addresses do not multiply the cap: one credential holds at most half the budget (6 of 12).
        held = httpx.get(f"{child.url}/v1/health").json()["sessions"]
        assert held == BUDGET_IN_FLOOD_SESSIONS // 2, flood.opened
        if flood_token != edge_token:  # never idle: none gave its room, the other Opens were refused
            assert flood.opened == {200: 6, 503: OPENS - 6}, flood.opened
        plain = pair.tokenizer.encode("Write about the weather and the sea.")
        private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
        config = DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.5)
        time.sleep(2 * float(reclaim_idle_s) if float(reclaim_idle_s) < 10 else 0.5)
        with RemoteCloud(child.url, edge_token) as cloud:
            remote = collect(generate_ids(pair, plain, private, config, cloud=cloud))[1]
        assert remote.token_ids == collect(generate_ids(pair, plain, private, config))[1].token_ids
        assert remote.stats.stop_reason in ("length", "eos")
        flood.wait_for_rounds(1, timeout_s=10 * keep_alive_s)
        assert flood.rounds >= 1 and sum(flood.drafts.values()) > len(flood.admitted)  # it kept drafting
    finally:
        flood.close()
        child.stop()
    text = log.read_text()
    assert "Traceback" not in text, text
    if flood_token == edge_token:  # the room it took is said in the log
        assert "gave the room of session" in text and "to an Open of shared" in text, text


def test_a_client_gone_mid_stream_ends_its_session_at_once(tmp_path):
    log = tmp_path / "cloud.log"
    child = start_cloud_process(
        "--pairing", "tiny-test", env=SERVER_ENV, stderr=log.open("wb"), ready_timeout_s=180
    )  # fmt: skip
    try:
        frame = encode(Open(os.urandom(16), "generate", (1, 2, 3), MAX_NEW_TOKENS))
        with socket.create_connection(("127.0.0.1", child.port)) as connection:
            connection.sendall(
                b"POST /v1/exchange HTTP/1.1\r\nHost: cloud\r\nContent-Length: %d\r\n\r\n" % len(frame) + frame
            )
            assert connection.recv(64).startswith(b"HTTP/1.1 200")
            assert httpx.get(f"{child.url}/v1/health").json()["sessions"] == 1
        deadline = time.monotonic() + 10  # at once: was 300 s (the idle expiry), with no log line
        while httpx.get(f"{child.url}/v1/health").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.get(f"{child.url}/v1/health").json()["sessions"] == 0
    finally:
        child.stop()
    text = log.read_text()
    assert text.count("went away mid-stream: ended its session") == 1 and "Traceback" not in text, text


def test_an_edge_asks_a_full_cloud_again_after_its_retry_after_within_a_bound():
    import http.server
    import json

    from specsteer.protocol.link import CloudRefused

    answers: list[int] = []

    class Full(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            busy = len(answers) < self.server.busy_answers
            body = json.dumps({"error": "busy", "message": "No room. Try again in 1 s.", "instance": "x"}).encode()
            if not busy:
                body = b""
            answers.append(503 if busy else 200)
            self.send_response(503 if busy else 200)
            if busy:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    listener = http.server.HTTPServer(("127.0.0.1", 0), Full)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{listener.server_port}"
    try:
        listener.busy_answers = 2
        with RemoteCloud(url, busy_wait_s=5) as cloud:
            assert cloud.request("POST", EXCHANGE_PATH, content=b"open").status_code == 200
        assert answers == [503, 503, 200]
        answers.clear()
        listener.busy_answers = 10
        with RemoteCloud(url, busy_wait_s=2) as cloud, pytest.raises(CloudRefused, match="No room") as caught:
            cloud.request("POST", EXCHANGE_PATH, content=b"open")
        assert caught.value.code == "busy" and answers == [503, 503, 503]  # 2 s of waits, then the refusal
    finally:
        listener.shutdown()
