"""The Cloud over HTTP: ``python -m specsteer cloud`` serves a CloudService, :class:`RemoteCloud` reaches it.

The bodies are the protocol's frames, byte for byte, so what the transcript counts is what the
socket carries (besides HTTP's own headers):

================================  ==========================================================
``GET /v1/health``                ``{"ok": true, "sessions": n, "instance": ...}`` (no secret needed)
``GET /v1/info``                  the Cloud's :class:`~specsteer.wire.CloudInfo` as JSON
``POST /v1/exchange``             body: one uplink frame. 200: the answering frames -- none (an
                                  Open), one Verdict (a Draft), or, after an Open with the
                                  ``generate`` rule, a streamed body of Tokens frames, each sent
                                  as soon as it is decoded. The report rides in the
                                  ``X-SpecSteer-Report`` header (JSON), except on a stream.
``DELETE /v1/sessions/{hex id}``  ends a session; 200: the rest of its report as JSON
================================  ==========================================================

Errors are JSON ``{"error": code, "message": ..., "instance": ...}`` with a 4xx status (400 an
unreadable frame, a wrong protocol version or a value out of bounds; 401 the shared secret; 404 an
unknown session; 409 a reused session id; 410 an expired or closed session; 413 an oversized frame;
503 no room for another session) or 500 when a model pass failed (that session ends, the service
goes on). :class:`HttpTransport` turns each into the Edge's ``CloudError`` subclass, and a refused
or broken connection into ``CloudUnreachable``.

Why HTTP rather than WebSocket: a kept-alive HTTP/1.1 exchange on loopback costs a few
milliseconds more than a call in process (3.8 ms median on a loaded 2-core machine, against 0.02 ms
for a bare TCP echo: the most any TCP transport could save; ``scripts/http_exchange_overhead.py``),
against a Generalist pass of tens to hundreds of milliseconds; a streamed response gives the
``llm`` baseline its one-way stream, and
each request stays independent, so a lost Cloud or a bad frame fails exactly one request with a
status code. WebSocket would also need a client library this project does not otherwise install.

A shared secret (``--secret-env NAME``) is required to listen beyond loopback; Edges send it as
``Authorization: Bearer <secret>`` and the Cloud compares it in constant time. Both sides refuse at
start-up a secret that is not printable ASCII (an HTTP header cannot carry it).

Slow and broken clients: a connection gets ``HEADER_TIMEOUT_S`` to send a request's headers and
``BODY_TIMEOUT_S`` to send its body, else it is answered 408 and closed (a Content-Length larger
than the body sent, or half-sent headers, held a connection open for minutes); a client that goes
away mid-request or mid-stream costs one log line. A 503 (no room) carries ``Retry-After``.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations (``Request``,
# imported inside create_app) as objects.
import asyncio
import contextlib
import hmac
import json
import os
import queue
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .background import stop_signals_handled
from .cloudservice import CloudService, ServiceError
from .exposure import CLOUD_URL_ENV, is_loopback, secret_problem
from .link import Arrival, CloudError, CloudUnreachable, Reply, SessionGone, VersionMismatch, cloud_error
from .wire import (
    DOWNLINK,
    PROTOCOL_VERSION,
    SESSION_BYTES,
    CloudInfo,
    CloudReport,
    FrameError,
    TruncatedFrame,
    decode_prefix,
)

CLOUD_SECRET_ENV = "SPECSTEER_CLOUD_SECRET"
EXCHANGE_PATH = "/v1/exchange"
REPORT_HEADER = "X-SpecSteer-Report"
OCTET_STREAM = "application/octet-stream"
DEFAULT_PORT = 8700
HEADER_TIMEOUT_S = 10.0  # from a connection's first byte (or its opening) to the end of a request's headers
BODY_TIMEOUT_S = 30.0  # for a whole request body (a frame is at most tens of kilobytes)


# --------------------------------------------------------------------------- binding


def bind_problem(host: str, secret: str | None) -> str | None:
    """Why the Cloud must not listen on ``host`` as configured, or None."""
    if not is_loopback(host) and not secret:
        return (f"refusing to listen on {host} without a shared secret: anyone who can reach it could use the "
                "models. Set one with --secret-env NAME (the environment variable NAME holds it), or listen on "
                "127.0.0.1.")
    return None


# --------------------------------------------------------------------------- capture (audits)


@dataclass(frozen=True)
class CapturedExchange:
    """One ``/v1/exchange`` request as the Cloud's socket carried it: the body received and the body sent."""

    status: int
    uplink: bytes
    downlink: bytes


_CAPTURE_RECORD = struct.Struct("<HII")


class CaptureFile:
    """Appends each captured exchange to a file: status, both lengths, then both bodies."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def __call__(self, exchange: CapturedExchange) -> None:
        record = _CAPTURE_RECORD.pack(exchange.status, len(exchange.uplink), len(exchange.downlink))
        with self._lock, self.path.open("ab") as file:
            file.write(record + exchange.uplink + exchange.downlink)


def read_capture(path: str | Path) -> list[CapturedExchange]:
    data = Path(path).read_bytes() if Path(path).exists() else b""
    exchanges, offset = [], 0
    while offset < len(data):
        status, up, down = _CAPTURE_RECORD.unpack_from(data, offset)
        offset += _CAPTURE_RECORD.size
        exchanges.append(CapturedExchange(status, data[offset:offset + up], data[offset + up:offset + up + down]))
        offset += up + down
    return exchanges


class BodyCapture:
    """ASGI middleware: hands the bodies of every ``/v1/exchange`` request, as received and as sent, to
    ``sink``. It sits outside the application, so it sees the bytes uvicorn read off the socket."""

    def __init__(self, app, sink: Callable[[CapturedExchange], None]):
        self.app = app
        self.sink = sink

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != EXCHANGE_PATH:
            await self.app(scope, receive, send)
            return
        uplink, downlink, status = bytearray(), bytearray(), [0]

        async def receiving():
            message = await receive()
            if message["type"] == "http.request":
                uplink.extend(message.get("body", b""))
            return message

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                downlink.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            self.sink(CapturedExchange(status[0], bytes(uplink), bytes(downlink)))


# --------------------------------------------------------------------------- the server


def create_app(service: CloudService, secret: str | None = None,
               capture: Callable[[CapturedExchange], None] | None = None, announce: Callable[[str], None] | None = None,
               body_timeout_s: float = BODY_TIMEOUT_S):
    """The ASGI application serving ``service`` (see the module docstring for the endpoints)."""
    from fastapi import Depends, FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        sweeper = asyncio.create_task(_expire_periodically(service))
        if announce:
            budget = service.limits.memory_budget_bytes
            memory = f", {budget / 2**20:,.0f} MB for the sessions' caches" if budget is not None else ""
            announce(f"Cloud ready: pairing {service.pair.pairing_id} ({service.pair.runtime}), instance "
                     f"{service.instance}, protocol {PROTOCOL_VERSION}{memory}")
        try:
            yield
        finally:
            sweeper.cancel()
            service.close_all()

    app = FastAPI(title="SpecSteer Cloud", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    def authorized(request: Request) -> None:
        if secret is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), secret.encode()):
            raise ServiceError(401, "unauthorized", "The Cloud refused the request: missing or wrong shared secret.")

    @app.exception_handler(ServiceError)
    async def refused(_request, error: ServiceError):
        headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else None
        return JSONResponse({"error": error.code, "message": str(error), "instance": service.instance},
                            status_code=error.status, headers=headers)

    @app.exception_handler(Exception)
    async def failed(_request, error: Exception):
        if _disconnected(error):  # nobody is left to answer; QuietDisconnects logs it (Starlette re-raises)
            return Response(status_code=400)
        print(f"[cloud] request failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return JSONResponse({"error": "internal", "message": f"The Cloud failed: {type(error).__name__}: {error}",
                             "instance": service.instance}, status_code=500)

    @app.get("/v1/health")
    def health():
        return {"ok": True, "sessions": service.open_sessions, "instance": service.instance}

    @app.get("/v1/info", dependencies=[Depends(authorized)])
    def info():
        return service.info().to_json()

    @app.post(EXCHANGE_PATH, dependencies=[Depends(authorized)])
    async def exchange(request: Request):
        frame = await _read_frame(request, service.frame_limit, body_timeout_s)
        client = request.client.host if request.client else ""
        answer = await run_in_threadpool(service.handle, frame, client)
        if answer.report is None:  # a stream: each frame leaves as soon as it is computed
            return StreamingResponse(answer.frames, media_type=OCTET_STREAM)
        body = b"".join(answer.frames)
        return Response(body, media_type=OCTET_STREAM,
                        headers={REPORT_HEADER: json.dumps(answer.report.to_json(), separators=(",", ":"))})

    @app.delete("/v1/sessions/{session_hex}", dependencies=[Depends(authorized)])
    def close(session_hex: str):
        try:
            session = bytes.fromhex(session_hex)
        except ValueError:
            session = b""
        if len(session) != SESSION_BYTES:
            raise ServiceError(400, "malformed", f"A session id is {SESSION_BYTES} bytes written in hexadecimal.")
        return service.close(session).to_json()

    app = QuietDisconnects(app)
    return BodyCapture(app, capture) if capture is not None else app


async def _read_frame(request, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ServiceError(413, "too-large", f"A frame of {declared} bytes is larger than this Cloud accepts "
                                             f"({limit} bytes).")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > limit:
                    raise ServiceError(413, "too-large", f"The frame is larger than this Cloud accepts ({limit} "
                                                         "bytes).")
    except TimeoutError:
        raise ServiceError(408, "timeout", f"The request's body did not arrive within {timeout_s:g} s "
                                           f"({len(body)} bytes came).") from None
    return bytes(body)


def _disconnected(error: BaseException) -> bool:
    """Whether ``error`` only says that the client went away."""
    from starlette.requests import ClientDisconnect

    return isinstance(error, (ClientDisconnect, ConnectionError)) or type(error).__name__ == "ClientDisconnected"


class QuietDisconnects:
    """ASGI middleware: a client that goes away mid-request or mid-stream is one log line, not a traceback."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        try:
            await self.app(scope, receive, send)
        except BaseException as error:
            group = error.exceptions if isinstance(error, BaseExceptionGroup) else (error,)
            if not all(_disconnected(part) for part in group):
                raise
            _log_disconnect(scope)


def _log_disconnect(scope) -> None:
    client = scope.get("client") or ("?", 0)
    print(f"[cloud] {client[0]}:{client[1]} disconnected during {scope.get('method')} {scope.get('path')}",
          file=sys.stderr, flush=True)


def header_timeout_protocol(timeout_s: float = HEADER_TIMEOUT_S):
    """uvicorn's h11 protocol with a deadline on each request's headers: a connection that opens (or starts
    a request) and does not finish its headers in ``timeout_s`` is answered 408 and closed."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    body = json.dumps({"error": "timeout", "message": f"The request's headers did not arrive within "
                                                      f"{timeout_s:g} s."}).encode()
    answer = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
              b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    class HeaderTimeoutProtocol(H11Protocol):
        _header_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._between_requests():
                self._arm()
            super().data_received(data)
            if not self._between_requests():
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._header_deadline is None:
                self._header_deadline = self.loop.call_later(timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _timed_out(self) -> None:
            self._header_deadline = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

    return HeaderTimeoutProtocol


async def _expire_periodically(service: CloudService) -> None:
    """Free the caches of Edges that went away without closing, even when no request comes."""
    period = min(30.0, service.limits.idle_timeout_s / 2)
    while True:
        await asyncio.sleep(period)
        await asyncio.to_thread(service.expire_idle)


SHUTDOWN_GRACE_S = 5.0  # on SIGTERM / SIGINT, requests in flight get this long to finish


def serve(service: CloudService, host: str = "127.0.0.1", port: int = DEFAULT_PORT, secret: str | None = None,
          capture: str | Path | None = None, announce: Callable[[str], None] | None = None,
          header_timeout_s: float = HEADER_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully and return. Refuses a non-loopback address
    without a secret, and a secret that is not printable ASCII."""
    import uvicorn

    problem = bind_problem(host, secret) or secret_problem(secret, "the shared secret")
    if problem:
        raise ValueError(problem)
    app = create_app(service, secret, CaptureFile(capture) if capture else None, announce, body_timeout_s)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            http=header_timeout_protocol(header_timeout_s), timeout_keep_alive=5,
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    with _stop_signals_end_normally():
        uvicorn.Server(config).run()


def _stop_signals_end_normally():
    """uvicorn stops gracefully on SIGTERM / SIGINT, then raises the signal again under the handlers it
    found, so that by default the process dies of it (status 143 or 130, or a KeyboardInterrupt) after
    a clean stop. Handlers that ignore the signal are what it finds here: a requested stop returns, and
    the command exits 0, like the app."""
    return stop_signals_handled(_ignore)


def _ignore(_number: int, _frame: object) -> None:
    """A signal handler that does nothing (the signal has been acted on already)."""


# --------------------------------------------------------------------------- the Edge's side


class RemoteCloud:
    """A Cloud service at ``url``: pass it as ``generate(..., cloud=RemoteCloud(url))``.

    One HTTP client (kept-alive connections, thread-safe) serves every generation that uses this
    object. ``timeout_s`` bounds one answer (a long prompt's first pass on a CPU takes a while);
    a Cloud that is not there fails at once (connection refused), and one that stops midway fails
    its open request as soon as the connection breaks.
    """

    def __init__(self, url: str, secret: str | None = None, timeout_s: float = 600.0, connect_timeout_s: float = 5.0):
        import httpx

        problem = secret_problem(secret, f"${CLOUD_SECRET_ENV}")
        if problem:
            raise ValueError(problem)
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self.client = httpx.Client(base_url=self.url, headers=headers,
                                   timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s))
        self.timeout_s = timeout_s
        self.instance: str | None = None  # the instance that answered last: a new one means it restarted

    def transport(self) -> "HttpTransport":
        return HttpTransport(self)

    def info(self) -> CloudInfo:
        """What the Cloud serves; raises VersionMismatch when it speaks another protocol version."""
        response = self.request("GET", "/v1/info")
        try:
            info = CloudInfo.from_json(response.json())
        except (FrameError, ValueError) as error:
            raise cloud_error("malformed", f"The Cloud at {self.url} described itself unreadably: {error}.") from None
        if info.protocol != PROTOCOL_VERSION:
            raise VersionMismatch(f"The Cloud at {self.url} speaks protocol version {info.protocol}; this Edge speaks "
                                  f"version {PROTOCOL_VERSION}. Update the Edge or the Cloud so that both run the "
                                  "same SpecSteer version.", "version")
        self.instance = info.instance
        return info

    def request(self, method: str, path: str, stream: bool = False, **kwargs):
        """One HTTP request; an answer other than 200 or a broken connection raises the CloudError it means."""
        import httpx

        try:
            response = self.client.send(self.client.build_request(method, path, **kwargs), stream=stream)
        except httpx.TimeoutException:
            raise CloudUnreachable(f"The Cloud at {self.url} did not answer within {self.timeout_s:g} s.",
                                   "timeout") from None
        except httpx.TransportError as error:
            raise CloudUnreachable(f"Lost the connection to the Cloud at {self.url} ({_reason(error)}).",
                                   "unreachable") from None
        if response.status_code != 200:
            response.read()
            response.close()
            raise self._refusal(response)
        return response

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "RemoteCloud":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _refusal(self, response) -> CloudError:
        try:
            body = response.json()
            code, message, instance = str(body["error"]), str(body["message"]), body.get("instance")
        except (ValueError, KeyError, TypeError):
            # Summarised, never echoed: whatever answers at an address must not be relayed to the user.
            return cloud_error("http", f"The Cloud at {self.url} answered HTTP {response.status_code} with "
                                       f"{len(response.content)} bytes that are not a SpecSteer Cloud's error.",
                               response.status_code)
        if code == "unknown-session" and self.instance and instance and instance != self.instance:
            return SessionGone(f"The Cloud at {self.url} restarted during this generation and lost its session. "
                               "Run the generation again.", code, response.status_code)
        return cloud_error(code[:40], message[:_MESSAGE_CHARS], response.status_code)


class HttpTransport:
    """One generation's frames over HTTP (see the module docstring)."""

    def __init__(self, remote: RemoteCloud):
        self.remote = remote

    def info(self) -> CloudInfo:
        return self.remote.info()

    def exchange(self, frame: bytes) -> Reply:
        response = self.remote.request("POST", EXCHANGE_PATH, stream=True, content=frame,
                                       headers={"Content-Type": OCTET_STREAM})
        header = response.headers.get(REPORT_HEADER)
        if header is None:
            return Reply(self._stream(response), None)
        try:
            body = response.read()
        except Exception as error:
            raise CloudUnreachable(f"Lost the connection to the Cloud at {self.remote.url} ({_reason(error)}).",
                                   "unreachable") from None
        finally:
            response.close()
        try:
            report = CloudReport.from_json(json.loads(header))
        except (ValueError, FrameError) as error:
            raise cloud_error("malformed", f"The Cloud's report was unreadable: {error}.") from None
        return Reply([Arrival(body)] if body else [], report)

    def close_session(self, session: bytes) -> CloudReport:
        response = self.remote.request("DELETE", f"/v1/sessions/{session.hex()}")
        try:
            return CloudReport.from_json(response.json())
        except (ValueError, FrameError) as error:
            raise cloud_error("malformed", f"The Cloud's report was unreadable: {error}.") from None

    def _stream(self, response) -> Iterator[Arrival]:
        """The frames of a streamed body, each stamped when it reached this process.

        A reader thread takes the bytes off the socket as they come, so that a frame's time is when
        it arrived even while the link emulator holds the consumer (the Cloud does not wait for it).
        """
        chunks: queue.Queue = queue.Queue()
        stop = threading.Event()
        reader = threading.Thread(target=_read_chunks, args=(response, chunks, stop), daemon=True,
                                  name="specsteer-cloud-stream")
        reader.start()
        buffer, arrived = b"", None
        try:
            while (item := chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise CloudUnreachable(f"Lost the connection to the Cloud at {self.remote.url} during its "
                                           f"stream ({_reason(item)}).", "unreachable")
                arrived, chunk = item
                buffer += chunk
                while buffer:
                    try:
                        _, end = decode_prefix(buffer, DOWNLINK)
                    except TruncatedFrame:
                        break  # the rest of the frame is still on its way
                    except FrameError:
                        end = len(buffer)  # the Link reports what is wrong with it
                    yield Arrival(buffer[:end], arrived)
                    buffer = buffer[end:]
            if buffer:
                raise CloudUnreachable(f"The Cloud at {self.remote.url} broke off its stream inside a message.",
                                       "unreachable")
        finally:
            stop.set()


def _read_chunks(response, chunks: queue.Queue, stop: threading.Event) -> None:
    try:
        for chunk in response.iter_raw():
            chunks.put((time.perf_counter(), chunk))
            if stop.is_set():
                break
    except Exception as error:  # handed to the consumer, which raises CloudUnreachable
        chunks.put(error)
    finally:
        response.close()
        chunks.put(None)


_MESSAGE_CHARS = 400  # a Cloud's error message is a sentence or two; more is not one


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:200]


def cloud_from_environment(url: str | None = None, secret: str | None = None) -> RemoteCloud | None:
    """The Cloud an Edge should use: ``url`` or $SPECSTEER_CLOUD_URL (empty: in process, None returned),
    with ``secret`` or $SPECSTEER_CLOUD_SECRET. What the CLI and the app's setting call."""
    url = os.environ.get(CLOUD_URL_ENV, "") if url is None else url
    if not url.strip():
        return None
    secret = os.environ.get(CLOUD_SECRET_ENV) if secret is None else secret
    return RemoteCloud(url.strip(), secret or None)


def check_cloud(url: str, secret: str | None = None) -> CloudInfo:
    """Whether a Cloud answers at ``url`` and what it serves (a settings page's "test" button);
    raises a CloudError with a message for the user otherwise."""
    with RemoteCloud(url, secret, timeout_s=10.0) as remote:
        return remote.info()


# --------------------------------------------------------------------------- a Cloud in a child process


def free_loopback_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class CloudProcess:
    """``python -m specsteer cloud`` running as a child process on a loopback port (benchmarks, tests)."""

    process: object  # subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask it to stop (SIGTERM to its pid), then kill it if it has not within ``timeout_s``."""
        import subprocess

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """Stop it the hard way (SIGKILL to its pid): a Cloud that dies mid-generation."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def start_cloud_process(*arguments: str, port: int | None = None, env: dict | None = None, stderr=None,
                        ready_timeout_s: float = 900.0) -> CloudProcess:
    """Start a Cloud service on 127.0.0.1 (``arguments`` go to ``python -m specsteer cloud``) and wait
    until it answers; a child that exits or does not answer in time is stopped and reported."""
    import subprocess

    import httpx

    port = port or free_loopback_port()
    command = [sys.executable, "-m", "specsteer", "cloud", "--host", "127.0.0.1", "--port", str(port), *arguments]
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                               cwd=Path(__file__).resolve().parents[1])
    child = CloudProcess(process, port)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Cloud process exited with status {process.returncode} before it was ready")
        try:
            if httpx.get(f"{child.url}/v1/health", timeout=2.0).status_code == 200:
                return child
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"the Cloud process did not answer within {ready_timeout_s:g} s")
