"""The Cloud as an HTTP service in its own process: same output as in process, many Edges, faults, secrets.

Every server here is ``python -m specsteer cloud --pairing tiny-test`` on a free 127.0.0.1 port,
stopped by its own pid. The tiny test pair is deterministic, so the Edge's in-process run of the
same request is the reference for every remote one.
"""

from __future__ import annotations

import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from specsteer import cli
from specsteer.cloud.api import EXCHANGE_PATH
from specsteer.cloud.client import RemoteCloud, check_cloud
from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.process import free_loopback_port, start_cloud_process
from specsteer.cloud.server import bind_problem, read_capture
from specsteer.data.history import HistoryItem
from specsteer.data.privacy import audit_wire
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate, generate_ids
from specsteer.engine.request import Request, chat_ids, prepare
from specsteer.method.p3 import P3Params
from specsteer.models.tiny import tiny_pair
from specsteer.protocol import wire
from specsteer.protocol.link import CloudRefused, CloudUnreachable, Link, SessionGone, VersionMismatch
from specsteer.protocol.wire import PROTOCOL_VERSION, Draft, Open, Verdict, encode

# Each module server costs a process start (~10 s on a loaded 2-core machine): `-m "not slow"` skips them.
pytestmark = pytest.mark.slow

CANARY = "QUOKKA-canary-4417 purple kazoo"
SECRET_ENV = "SPECSTEER_TEST_CLOUD_SECRET"
SECRET = "correct horse battery staple"

# The tiny models are dominated by per-op overhead; one thread keeps the Cloud's arithmetic the same
# as the test process's (conftest sets one there) and the shared machine's cores free.
SERVER_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", SECRET_ENV: SECRET}


def serve(tmp_path, *arguments, port=None):
    log = (tmp_path / f"cloud-{time.monotonic_ns()}.log").open("wb")
    return start_cloud_process(
        "--pairing", "tiny-test", *arguments, port=port, env=SERVER_ENV, stderr=log, ready_timeout_s=180
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One Cloud for the tests that leave it running, capturing every body it exchanges."""
    directory = tmp_path_factory.mktemp("cloud")
    # No prefix reuse: every generation reads its whole prompt on both sides, so traces compare.
    child = serve(
        directory,
        "--capture",
        str(directory / "capture.bin"),
        "--max-sessions",
        "12",
        "--max-sessions-per-client",
        "12",
        "--no-prefix-reuse",
    )
    child.capture = directory / "capture.bin"
    try:
        yield child
    finally:
        child.stop()


@pytest.fixture
def remote(server):
    with RemoteCloud(server.url) as cloud:
        yield cloud


def prompts(pair, text="Write about the weather and the sea."):
    plain = pair.tokenizer.encode(text)
    private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
    return plain, private


CONFIGS = [
    DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.5),
    DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.5, adaptive_draft=True, draft_len=6),
    DecodeConfig(method="specsteer", max_new_tokens=16, sample=True, temperature=0.8, seed=3),
    DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.1, cda_lambda=1.0),  # CDA: the Cloud's own rule
    DecodeConfig(method="specsteer", max_new_tokens=12, sample=True, exact=True, seed=5),
    DecodeConfig(method="sd", max_new_tokens=24),
    DecodeConfig(method="lightcosteer", max_new_tokens=16),
    DecodeConfig(method="costeer", max_new_tokens=12),
    DecodeConfig(method="llm", max_new_tokens=24),
    DecodeConfig(method="llm", max_new_tokens=16, sample=True, seed=2),
    DecodeConfig(method="slm+", max_new_tokens=8),
    DecodeConfig(method="p3", max_new_tokens=24, p3=P3Params(3, 0.01)),
]


def shape(finished):
    """What must not depend on where the Cloud runs: tokens, bytes, message sizes, the passes run."""
    stats = finished.stats
    return (
        finished.token_ids,
        finished.text,
        stats.rounds,
        stats.accepted,
        stats.uplink_bytes,
        stats.downlink_bytes,
        [m.bytes for m in finished.transcript],
        stats.forward_calls,
        [(step.kind, step.who, step.size) for step in stats.trace],
    )


@pytest.mark.parametrize(
    "config",
    CONFIGS,
    ids=lambda c: (
        f"{c.method}{'-sample' if c.sample else ''}{'-exact' if c.exact else ''}{'-auto' if c.adaptive_draft else ''}"
        f"{'-cda' if c.cda_lambda is not None else ''}"
    ),
)
def test_the_http_cloud_gives_the_in_process_output(pair, remote, config):
    plain, private = prompts(pair)
    pair.clear_prefix_caches()
    # the HTTP Cloud reads its prompts ahead (`specsteer cloud`), as the app's in-process Cloud does
    tokens, here = collect(generate_ids(pair, plain, private, config, cloud=InProcessCloud(pair, read_ahead=True)))
    pair.clear_prefix_caches()
    remote_tokens, there = collect(generate_ids(pair, plain, private, config, cloud=remote))
    assert shape(there) == shape(here)
    assert [(t.id, t.kind, t.round) for t in remote_tokens] == [(t.id, t.kind, t.round) for t in tokens]


def test_the_http_cloud_applies_cda_as_asked(pair, remote):
    """Its description offers CDA, and its rounds follow the Open's rule: CDA's rounds are not the fixed α's
    (the in-process comparison above shows they are the in-process Cloud's)."""
    plain, private = prompts(pair)
    assert remote.info().acceptance == ("fixed", "cda")
    logs = {}
    for strength in (None, 1.0):
        config = DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.1, cda_lambda=strength)
        _, finished = collect(generate_ids(pair, plain, private, config, cloud=remote))
        logs[strength] = [(step.drafted, step.accepted) for step in finished.stats.round_log]
    assert logs[1.0] != logs[None]
    assert sum(kept for _, kept in logs[1.0]) > sum(kept for _, kept in logs[None])  # here CDA kept more


def test_socket_bytes_equal_the_transcript_and_carry_no_history(pair, server, remote):
    history = [
        HistoryItem({"text": f"My secret phrase is {CANARY}; headphones matter to me."}),
        HistoryItem({"text": "I review headphones and always mention battery life."}),
    ]
    prepared = prepare(Request(task="free", input_text="Write about headphones and battery life.", history=history))
    assert CANARY in prepared.prompts.private
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain)
    canary_ids = pair.tokenizer.encode(CANARY)
    canary_as_wire_ids = struct.pack(f"<{len(canary_ids)}I", *canary_ids)
    for method in ("specsteer", "sd", "lightcosteer", "costeer", "llm", "p3"):
        before = len(read_capture(server.capture))
        tokens, finished = collect(
            generate(pair, prepared, DecodeConfig(method=method, max_new_tokens=20, alpha=0.5), cloud=remote)
        )
        exchanges = read_capture(server.capture)[before:]
        assert exchanges and all(e.status == 200 for e in exchanges)
        uplink = [e.uplink for e in exchanges]
        downlink = [e.downlink for e in exchanges]
        assert sum(map(len, uplink)) == finished.stats.uplink_bytes
        assert sum(map(len, downlink)) == finished.stats.downlink_bytes
        audit = audit_wire(uplink, downlink, plain_ids, tokens)
        assert audit.ok, audit.problems
        received = b"".join(uplink)
        assert CANARY.encode() not in received and canary_as_wire_ids not in received


def test_eight_edges_five_generations_each_at_once(pair, server):
    texts = [
        "Write about the weather and the sea.",
        "A short note on trains.",
        "Describe a quiet morning.",
        "Tell me about apples.",
        "Why do cats purr?",
        "Explain tides.",
        "A poem about rain.",
        "Rate these headphones.",
    ]
    methods = ["specsteer", "llm", "sd", "lightcosteer", "specsteer"]
    jobs = []
    for edge, text in enumerate(texts):
        plain, private = prompts(pair, text)
        for run, method in enumerate(methods):
            config = DecodeConfig(
                method=method, max_new_tokens=12 + edge % 3, alpha=(0.1, 0.5, 1.0)[run % 3], draft_len=2 + edge % 4
            )
            jobs.append((edge, plain, private, config))
    expected = [collect(generate_ids(pair, plain, private, config))[1].token_ids for _, plain, private, config in jobs]

    def run_edge(edge: int) -> list:
        with RemoteCloud(server.url) as cloud:  # each Edge its own connection
            return [
                (index, collect(generate_ids(pair, plain, private, config, cloud=cloud))[1])
                for index, (owner, plain, private, config) in enumerate(jobs)
                if owner == edge
            ]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [item for items in pool.map(run_edge, range(8)) for item in items]
    assert len(results) == 40
    for index, finished in results:
        assert finished.token_ids == expected[index], f"generation {index} differs from its in-process run"
        assert finished.stats.stop_reason in ("eos", "length")
    assert httpx.get(f"{server.url}/v1/health").json()["sessions"] == 0  # every session closed


@pytest.mark.parametrize(
    "body, status, code",
    [
        (b"garbage that is not a frame", 400, "version"),
        (b"", 400, "truncated"),
        (None, 400, "truncated"),  # a real Draft frame cut short
        (bytes([PROTOCOL_VERSION + 1]) + bytes(60), 400, "version"),
        (bytes([PROTOCOL_VERSION, 42]) + bytes(60), 400, "malformed"),
        (b"x" * 40_000, 413, "too-large"),
    ],
)
def test_bad_frames_get_a_4xx_and_the_service_keeps_serving(pair, server, remote, body, status, code):
    if body is None:
        body = encode(Draft(bytes(16), [1, 2, 3]))[:-5]
    answer = httpx.post(server.url + EXCHANGE_PATH, content=body)
    assert answer.status_code == status
    assert answer.json()["error"] == code and answer.json()["message"]
    plain, private = prompts(pair)
    config = DecodeConfig(method="specsteer", max_new_tokens=6)
    assert (
        collect(generate_ids(pair, plain, private, config, cloud=remote))[1].token_ids
        == collect(generate_ids(pair, plain, private, config))[1].token_ids
    )


def test_unknown_and_closed_sessions(server, remote):
    unknown = httpx.post(server.url + EXCHANGE_PATH, content=encode(Draft(os.urandom(16), [1])))
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown-session"
    link = Link(remote.transport())
    with pytest.raises(SessionGone, match="does not know"):
        link.verify(Draft(link.session, [1, 2]))  # never opened
    link.open(Open(link.session, "ratio", [1, 2, 3], 8))
    assert isinstance(link.verify(Draft(link.session, [4])), Verdict)
    assert link.close()
    with pytest.raises(SessionGone, match="already ended"):
        link.verify(Draft(link.session, [5]))
    assert httpx.delete(f"{server.url}/v1/sessions/not-hex").status_code == 400


def test_a_cloud_of_another_protocol_version_is_named(pair, remote, monkeypatch):
    monkeypatch.setattr(wire, "PROTOCOL_VERSION", PROTOCOL_VERSION + 1)  # this Edge is newer
    plain, private = prompts(pair)
    with pytest.raises(VersionMismatch, match="protocol version") as caught:
        collect(generate_ids(pair, plain, private, DecodeConfig(max_new_tokens=4), cloud=remote))
    assert caught.value.partial.token_ids == []


def test_a_cloud_of_another_pairing_is_refused(pair, remote, monkeypatch):
    other = tiny_pair()
    other.pairing_id = "something-else"
    plain, private = prompts(other)
    with pytest.raises(CloudRefused, match="pairing"):
        collect(generate_ids(other, plain, private, DecodeConfig(max_new_tokens=4), cloud=remote))


def test_secret_expiry_and_binding(pair, tmp_path):
    assert bind_problem("0.0.0.0", None) and bind_problem("192.168.1.5", "") and not bind_problem("0.0.0.0", "s")
    assert not bind_problem("127.0.0.1", None) and not bind_problem("::1", None) and not bind_problem("localhost", None)
    assert cli.main(["cloud", "--host", "0.0.0.0", "--port", "1"]) == 2  # refused before loading anything
    assert cli.main(["cloud", "--secret-env", "SPECSTEER_TEST_UNSET_VARIABLE"]) == 2
    child = serve(tmp_path, "--secret-env", SECRET_ENV, "--idle-timeout-s", "1")
    try:
        plain, private = prompts(pair)
        config = DecodeConfig(method="specsteer", max_new_tokens=8)
        for secret in (None, "wrong secret"):
            with RemoteCloud(child.url, secret) as cloud, pytest.raises(CloudRefused, match="secret") as caught:
                collect(generate_ids(pair, plain, private, config, cloud=cloud))
            assert caught.value.status == 401 and caught.value.code == "unauthorized"
        assert httpx.get(f"{child.url}/v1/health").status_code == 200  # health needs no secret
        with RemoteCloud(child.url, SECRET) as cloud:
            assert (
                collect(generate_ids(pair, plain, private, config, cloud=cloud))[1].token_ids
                == collect(generate_ids(pair, plain, private, config))[1].token_ids
            )
            assert check_cloud(child.url, SECRET).pairing == pair.pairing_id
            link = Link(cloud.transport())
            link.open(Open(link.session, "ratio", plain, 8))
            time.sleep(2.5)  # past the 1 s idle timeout (no timing is asserted: only that it expired)
            with pytest.raises(SessionGone, match="without a message"):
                link.verify(Draft(link.session, [1]))
    finally:
        child.stop()


def drain(events, into: list) -> None:
    for event in events:
        into.append(event)


def settled(events):
    """The generation's events without the drafts shown before their verdict."""
    return (event for event in events if not getattr(event, "pending", False))


def test_a_cloud_killed_or_restarted_mid_generation(pair, tmp_path):
    port = free_loopback_port()
    plain, private = prompts(pair)
    config = DecodeConfig(method="specsteer", max_new_tokens=200, draft_len=2, alpha=0.5)
    first = serve(tmp_path, port=port)
    second = None
    try:
        # Restarted: the session lived in the process that is gone.
        with RemoteCloud(first.url) as cloud:
            events = settled(generate_ids(pair, plain, private, config, cloud=cloud))
            emitted = [next(events) for _ in range(3)]
            first.kill()
            second = serve(tmp_path, port=port)
            with pytest.raises(SessionGone, match="restarted"):
                drain(events, emitted)
        # Killed: the Edge says so at once and keeps what it had.
        with RemoteCloud(second.url) as cloud:
            events = settled(generate_ids(pair, plain, private, config, cloud=cloud))
            emitted = [next(events) for _ in range(4)]
            second.kill()
            killed_at = time.monotonic()
            with pytest.raises(CloudUnreachable, match="Lost the connection") as caught:
                drain(events, emitted)
            assert time.monotonic() - killed_at < 5.0
        partial = caught.value.partial
        shown = [e for e in emitted if e.emitted]
        assert partial.token_ids == [e.id for e in shown] and len(shown) >= 2
        assert partial.text == "".join(e.text for e in shown)
        assert partial.stats.stop_reason == "cloud-error"
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_generate_cli_runs_the_edge_against_the_cloud(pair, server, monkeypatch, capsys):
    import json
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "assets" / "samples" / "review_user.jsonl"
    loads = []
    monkeypatch.setattr("specsteer.models.loading.load_pair", lambda *a, **k: loads.append(k) or pair)
    arguments = [
        "generate",
        "--history",
        str(sample),
        "--task",
        "review",
        "--input",
        "Write a review of earbuds.",
        "--max-new-tokens",
        "10",
        "--json",
    ]

    def run(*extra) -> dict:
        assert cli.main([*arguments, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    here = run("--cloud", "")
    assert loads.pop()["edge_only"] is False
    there = run("--cloud", server.url)
    assert loads.pop()["edge_only"] is True  # an Edge alone never loads the Generalist
    monkeypatch.setenv("SPECSTEER_CLOUD_URL", server.url)
    from_env = run()
    assert loads.pop()["edge_only"] is True
    assert here["text"] == there["text"] == from_env["text"]
    assert here["stats"]["uplink_bytes"] == there["stats"]["uplink_bytes"]
    emulated = run("--cloud", "", "--rtt-ms", "20", "--uplink-kbps", "1000")
    waits = [step[3] for step in emulated["stats"]["trace"] if step[0] == "message"]
    assert emulated["text"] == here["text"] and sum(waits) >= 0.020 * emulated["stats"]["rounds"] - 1e-9
    # A Cloud that is not there: exit 3 with a message, before any model is loaded.
    loads.clear()
    assert cli.main([*arguments, "--cloud", f"http://127.0.0.1:{free_loopback_port()}"]) == 3
    assert "Lost the connection" in capsys.readouterr().err and not loads


# --- slow, broken and greedy clients -----------------------------------------------------------------------


def raw_exchange(url: str, data: bytes, wait_s: float = 10.0) -> tuple[float, bytes]:
    """Send ``data`` on a fresh connection and read what comes back (seconds waited, the first bytes)."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port)) as connection:
        connection.sendall(data)
        connection.settimeout(wait_s)
        started = time.monotonic()
        try:
            answer = connection.recv(4096)
        except TimeoutError:
            answer = b""
        return time.monotonic() - started, answer


def test_slow_clients_get_408_and_a_disconnect_is_one_log_line(tmp_path):
    log_path = tmp_path / "cloud.log"
    child = start_cloud_process(
        "--pairing",
        "tiny-test",
        "--header-timeout-s",
        "1",
        "--body-timeout-s",
        "1",
        env=SERVER_ENV,
        stderr=log_path.open("wb"),
        ready_timeout_s=180,
    )
    try:
        half_headers = b"POST /v1/exchange HTTP/1.1\r\nHost: cloud\r\n"
        short_body = b"POST /v1/exchange HTTP/1.1\r\nHost: cloud\r\nContent-Length: 100\r\n\r\n0123456789"
        for request in (half_headers, short_body, b""):
            waited, answer = raw_exchange(child.url, request)
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert waited < 5.0  # was: no answer for over 120 s
        for body in (b"0123", None):  # gone mid-body; gone mid-stream
            import socket

            with socket.create_connection(("127.0.0.1", child.port)) as connection:
                if body is None:
                    frame = encode(Open(os.urandom(16), "generate", (1, 2, 3), 200))
                    connection.sendall(
                        b"POST /v1/exchange HTTP/1.1\r\nHost: cloud\r\nContent-Length: %d\r\n\r\n" % len(frame) + frame
                    )
                    connection.recv(64)
                else:
                    connection.sendall(
                        b"POST /v1/exchange HTTP/1.1\r\nHost: cloud\r\nContent-Length: 100\r\n\r\n" + body
                    )
                    time.sleep(0.2)
            time.sleep(1.0)
        assert httpx.get(f"{child.url}/v1/health").status_code == 200  # still serving
    finally:
        child.stop()
    log = log_path.read_text()
    assert "Traceback" not in log, log
    assert log.count("disconnected during POST /v1/exchange") == 1, log  # the stream's end is not an error


def test_an_open_without_room_gets_503_with_retry_after(tmp_path):
    child = serve(tmp_path, "--max-sessions-per-client", "2")
    try:
        opened = [
            httpx.post(child.url + EXCHANGE_PATH, content=encode(Open(os.urandom(16), "ratio", (1, 2, 3), 8)))
            for _ in range(3)
        ]
        assert [answer.status_code for answer in opened] == [200, 200, 503]
        assert int(opened[2].headers["retry-after"]) >= 1 and opened[2].json()["error"] == "busy"
    finally:
        child.stop()
    budget = serve(tmp_path, "--memory-budget-mb", "0.001")  # smaller than any session's caches
    try:
        answer = httpx.post(budget.url + EXCHANGE_PATH, content=encode(Open(os.urandom(16), "ratio", (1, 2, 3), 8)))
        assert answer.status_code == 503 and "more than its whole budget" in answer.json()["message"]
        assert "retry-after" in answer.headers
    finally:
        budget.stop()


def test_a_secret_that_is_not_ascii_is_refused_at_start_up_on_both_sides(monkeypatch, capsys):
    monkeypatch.setenv(SECRET_ENV, "pässwörd")
    assert cli.main(["cloud", "--pairing", "tiny-test", "--secret-env", SECRET_ENV]) == 2
    assert "not printable ASCII" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not printable ASCII"):
        RemoteCloud("http://127.0.0.1:1", "pässwörd")
    monkeypatch.setenv("SPECSTEER_CLOUD_SECRET", "pässwörd")
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "assets", "samples", "review_user.jsonl")
    assert (
        cli.main(["generate", "--history", sample, "--task", "review", "--input", "x", "--cloud", "http://127.0.0.1:1"])
        == 2
    )
    err = capsys.readouterr().err
    assert "$SPECSTEER_CLOUD_SECRET holds a character that is not printable ASCII" in err and "pässwörd" not in err


def test_an_answer_that_is_not_a_clouds_is_summarised_not_echoed():
    import http.server
    import threading

    class Leaky(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"API_TOKEN=hunter2 internal admin page"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    listener = http.server.HTTPServer(("127.0.0.1", 0), Leaky)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    try:
        with pytest.raises(CloudRefused) as caught:
            check_cloud(f"http://127.0.0.1:{listener.server_port}")
    finally:
        listener.shutdown()
    assert "HTTP 404" in str(caught.value) and "hunter2" not in str(caught.value)
