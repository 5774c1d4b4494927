"""The app's server against slow and oversize requests, over raw sockets (an HTTP client library would
send a well-formed request, or wait forever itself): the header and body timeouts, the size caps of
the upload route and of every other route, and an oversize upload that leaves nothing behind.

The app runs in public mode on loopback with the tiny test pair, with the public limits made small
(timeouts of a second or two, a 1 MiB upload) so that the checks are quick.
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace

import pytest

from specsteer.service.limits import PUBLIC_LIMITS

pytestmark = pytest.mark.slow  # the public app served on loopback

LIMITS = replace(
    PUBLIC_LIMITS,
    header_timeout_s=1.5,
    body_idle_timeout_s=1.5,
    body_timeout_s=6.0,
    max_upload_bytes=1024 * 1024,
    max_request_bytes=256 * 1024,
)
ANSWER_WITHIN_S = 5.0  # far below the 150 s+ the probe's connections stayed open with no answer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(port, Gradio's temporary folder) of a public app with LIMITS."""
    import storage
    from specsteer.service import pairings
    from testkit import free_port

    data = tmp_path_factory.mktemp("data")
    temp = tmp_path_factory.mktemp("gradio-temp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(pairings.TEST_PAIR_ENV, "tiny")
        patch.setenv("SPECSTEER_DATA_DIR", str(data))
        patch.setenv("SPECSTEER_PUBLIC", "1")
        patch.setenv("GRADIO_TEMP_DIR", str(temp))
        patch.delenv("DATABASE_URL", raising=False)
        storage.reset_engines()
        import app

        demo = app.build_app()
        port = free_port()
        demo.launch(
            prevent_thread_lock=True,
            server_name="127.0.0.1",
            server_port=port,
            quiet=True,
            **app.launch_options(LIMITS),
        )
        try:
            yield port, temp
        finally:
            demo.close()
            storage.reset_engines()


def exchange(port: int, parts: list[bytes], wait_s: float = ANSWER_WITHIN_S) -> tuple[bytes, float, bool]:
    """Send ``parts`` and read until the server closes or ``wait_s`` passes: (answer, seconds, closed)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as connection:
        for part in parts:
            try:
                connection.sendall(part)
            except OSError:  # the server answered and closed before taking everything
                break
        answer = b""
        deadline = started + wait_s
        while time.monotonic() < deadline:
            connection.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                break
            except OSError:
                return answer, time.monotonic() - started, True
            if not chunk:
                return answer, time.monotonic() - started, True
            answer += chunk
        return answer, time.monotonic() - started, False


def upload_head(length: str, boundary: str = "b0undary") -> bytes:
    return (
        f"POST /gradio_api/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
        f"boundary={boundary}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def multipart(payload: bytes, boundary: str = "b0undary") -> bytes:
    return (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="records.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )


def files_in(folder) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def test_a_ten_gigabyte_announcement_with_six_bytes_is_refused_at_once(server):
    port, _temp = server
    answer, seconds, _closed = exchange(port, [upload_head("10000000000") + b"abcdef"])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert seconds < ANSWER_WITHIN_S


def test_a_half_sent_header_is_closed_within_the_header_timeout(server):
    port, _temp = server
    answer, seconds, closed = exchange(port, [b"POST /gradio_api/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
    assert closed and answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert LIMITS.header_timeout_s - 0.2 <= seconds < LIMITS.header_timeout_s + 2.0


def test_a_header_sent_a_byte_at_a_time_does_not_move_the_deadline(server):
    port, _temp = server
    started = time.monotonic()
    closed_at = None
    with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
        for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
            try:
                connection.sendall(bytes([byte]))
            except OSError:
                closed_at = time.monotonic()
                break
            time.sleep(0.05)
            if time.monotonic() - started > ANSWER_WITHIN_S + 3:
                break
    assert closed_at is not None and closed_at - started < LIMITS.header_timeout_s + 2.0


def test_a_body_that_stops_arriving_gets_408(server):
    port, _temp = server
    started = multipart(b"the first bytes of a file")[:120]  # a well-formed start, then nothing more
    answer, seconds, _closed = exchange(port, [upload_head("100000") + started])
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert seconds < LIMITS.body_idle_timeout_s + 2.0


def test_an_oversize_upload_is_refused_and_nothing_stays_in_the_temp_folder(server):
    port, temp = server
    before = files_in(temp)
    body = multipart(b"x" * (2 * 1024 * 1024))
    answer, _seconds, _closed = exchange(port, [upload_head(str(len(body))), body])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # The same body without a length (chunked): cut off once past the cap.
    chunks = [
        b"POST /gradio_api/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
        b"boundary=b0undary\r\nTransfer-Encoding: chunked\r\n\r\n"
    ]
    for start in range(0, len(body), 64 * 1024):
        piece = body[start : start + 64 * 1024]
        chunks.append(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    chunks.append(b"0\r\n\r\n")
    answer, _seconds, _closed = exchange(port, chunks)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    time.sleep(0.5)
    assert files_in(temp) == before


def test_an_upload_within_the_cap_is_accepted(server):
    port, temp = server
    body = multipart(b'{"a": 1}\n')
    answer, _seconds, _closed = exchange(port, [upload_head(str(len(body))), body], wait_s=3.0)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert any(name.endswith("records.jsonl") for name in files_in(temp))


def test_other_routes_have_their_own_smaller_cap(server):
    port, _temp = server
    body = b'{"data": ["' + b"x" * (LIMITS.max_request_bytes + 10) + b'"]}'
    head = (
        "POST /gradio_api/call/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer, seconds, _closed = exchange(port, [head, body])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert seconds < ANSWER_WITHIN_S
