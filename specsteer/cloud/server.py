"""The Cloud's HTTP server: ``python -m specsteer cloud`` serves a CloudService at the API of
``specsteer.cloud.api`` (uvicorn and FastAPI; the bodies are the protocol's frames, byte for byte).

Slow and broken clients: a connection gets ``HEADER_TIMEOUT_S`` to send a request's headers and
``BODY_TIMEOUT_S`` to send its body, else it is answered 408 and closed (a Content-Length larger
than the body sent, or half-sent headers, held a connection open for minutes); a client that goes
away mid-request costs one log line; one that goes away mid-stream ends its session at once (its
room is free for the next Edge) and that is one log line too. A 503 (no room) carries ``Retry-After``.

Who is asking is the credential the request carries (``specsteer.cloud.admission``: the shared secret, an
Edge key, or anonymous on a Cloud without a secret), not its source address: the per-client caps
count by it.

An audit can capture every exchange's bodies as the socket carried them (:class:`BodyCapture`,
``--capture FILE``; :func:`read_capture` reads the file back).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations (``Request``,
# imported inside create_app) as objects.
import asyncio
import contextlib
import json
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specsteer.cloud.admission import bearer_token, credential
from specsteer.cloud.api import DEFAULT_PORT, EXCHANGE_PATH, OCTET_STREAM, REPORT_HEADER
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.protocol.exposure import is_loopback, secret_problem
from specsteer.protocol.wire import PROTOCOL_VERSION, SESSION_BYTES
from specsteer.util.background import stop_signals_handled

HEADER_TIMEOUT_S = 10.0  # from a connection's first byte (or its opening) to the end of a request's headers
BODY_TIMEOUT_S = 30.0  # for a whole request body (a frame is at most tens of kilobytes)


# --------------------------------------------------------------------------- binding


def bind_problem(host: str, secret: str | None) -> str | None:
    """Why the Cloud must not listen on ``host`` as configured, or None."""
    if not is_loopback(host) and not secret:
        return (
            f"refusing to listen on {host} without a shared secret: anyone who can reach it could use the "
            "models. Set one with --secret-env NAME (the environment variable NAME holds it), or listen on "
            "127.0.0.1."
        )
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
        exchanges.append(CapturedExchange(status, data[offset : offset + up], data[offset + up : offset + up + down]))
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


def create_app(
    service: CloudService,
    secret: str | None = None,
    capture: Callable[[CapturedExchange], None] | None = None,
    announce: Callable[[str], None] | None = None,
    body_timeout_s: float = BODY_TIMEOUT_S,
):
    """The ASGI application serving ``service`` (see the module docstring for the endpoints)."""
    from fastapi import Depends, FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse, Response

    session_stream = _session_stream_class()

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        sweeper = asyncio.create_task(_expire_periodically(service))
        if announce:
            budget = service.limits.memory_budget_bytes
            memory = f", {budget / 2**20:,.0f} MB for the sessions' caches" if budget is not None else ""
            announce(
                f"Cloud ready: pairing {service.pair.pairing_id} ({service.pair.runtime}), instance "
                f"{service.instance}, protocol {PROTOCOL_VERSION}{memory}"
            )
        try:
            yield
        finally:
            sweeper.cancel()
            service.close_all()

    app = FastAPI(title="SpecSteer Cloud", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    def authorized(request: Request) -> str:
        """The request's credential (what the per-client caps count); 401 without a valid one."""
        who = credential(bearer_token(request.headers.get("authorization", "")), secret)
        if who is None:
            raise ServiceError(401, "unauthorized", "The Cloud refused the request: missing or wrong shared secret.")
        return who

    @app.exception_handler(ServiceError)
    async def refused(_request, error: ServiceError):
        headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else None
        return JSONResponse(
            {"error": error.code, "message": str(error), "instance": service.instance},
            status_code=error.status,
            headers=headers,
        )

    @app.exception_handler(Exception)
    async def failed(_request, error: Exception):
        if _disconnected(error):  # nobody is left to answer; QuietDisconnects logs it (Starlette re-raises)
            return Response(status_code=400)
        print(f"[cloud] request failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return JSONResponse(
            {
                "error": "internal",
                "message": f"The Cloud failed: {type(error).__name__}: {error}",
                "instance": service.instance,
            },
            status_code=500,
        )

    @app.get("/v1/health")
    def health():
        return {"ok": True, "sessions": service.open_sessions, "instance": service.instance}

    @app.get("/v1/info", dependencies=[Depends(authorized)])
    def info():
        return service.info().to_json()

    @app.post(EXCHANGE_PATH)
    async def exchange(request: Request, client: str = Depends(authorized)):
        frame = await _read_frame(request, service.frame_limit, body_timeout_s)
        answer = await run_in_threadpool(service.handle, frame, client)
        if answer.report is None:  # a stream: each frame leaves as soon as it is computed
            peer = request.client or ("?", 0)
            return session_stream(service, answer, f"{peer[0]}:{peer[1]}")
        body = b"".join(answer.frames)
        return Response(
            body,
            media_type=OCTET_STREAM,
            headers={REPORT_HEADER: json.dumps(answer.report.to_json(), separators=(",", ":"))},
        )

    @app.delete("/v1/sessions/{session_hex}", dependencies=[Depends(authorized)])
    def close(session_hex: str):
        try:
            session = bytes.fromhex(session_hex)
        except ValueError:
            session = b""
        if len(session) != SESSION_BYTES:
            raise ServiceError(400, "malformed", f"A session id is {SESSION_BYTES} bytes written in hexadecimal.")
        return service.close(session).to_json()

    quiet = QuietDisconnects(app)
    return BodyCapture(quiet, capture) if capture is not None else quiet


def _session_stream_class():
    from starlette.responses import StreamingResponse

    class SessionStream(StreamingResponse):
        """A session's token stream; a reader that goes away before its end ends the session at once
        (its caches and its room), with one log line, instead of leaving it to the idle expiry."""

        def __init__(self, service: CloudService, answer, peer: str):
            self.service, self.session, self.peer = service, answer.session, peer
            self.complete = False
            super().__init__(self._frames(iter(answer.frames)), media_type=OCTET_STREAM)

        async def _frames(self, frames):
            from starlette.concurrency import run_in_threadpool

            while (frame := await run_in_threadpool(next, frames, None)) is not None:
                yield frame
            self.complete = True

        async def __call__(self, scope, receive, send):
            try:
                await super().__call__(scope, receive, send)
            finally:
                if not self.complete and self.session is not None:
                    # Not awaited: a pass in flight finishes first, and a cancelled request cannot wait.
                    asyncio.get_running_loop().run_in_executor(None, self._abandon)

        def _abandon(self) -> None:
            if self.service.abandon(self.session):
                print(
                    f"[cloud] {self.peer} went away mid-stream: ended its session {self.session.hex()[:8]}",
                    file=sys.stderr,
                    flush=True,
                )

    return SessionStream


async def _read_frame(request, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ServiceError(
            413, "too-large", f"A frame of {declared} bytes is larger than this Cloud accepts ({limit} bytes)."
        )
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > limit:
                    raise ServiceError(
                        413, "too-large", f"The frame is larger than this Cloud accepts ({limit} bytes)."
                    )
    except TimeoutError:
        raise ServiceError(
            408, "timeout", f"The request's body did not arrive within {timeout_s:g} s ({len(body)} bytes came)."
        ) from None
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
    print(
        f"[cloud] {client[0]}:{client[1]} disconnected during {scope.get('method')} {scope.get('path')}",
        file=sys.stderr,
        flush=True,
    )


def header_timeout_protocol(timeout_s: float = HEADER_TIMEOUT_S):
    """uvicorn's h11 protocol with a deadline on each request's headers: a connection that opens (or starts
    a request) and does not finish its headers in ``timeout_s`` is answered 408 and closed."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    body = json.dumps(
        {"error": "timeout", "message": f"The request's headers did not arrive within {timeout_s:g} s."}
    ).encode()
    answer = (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )

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
    limits = service.limits
    period = min(30.0, *(value / 2 for value in (limits.idle_timeout_s, limits.max_session_life_s) if value))
    while True:
        await asyncio.sleep(period)
        await asyncio.to_thread(service.expire_idle)


SHUTDOWN_GRACE_S = 5  # seconds; on SIGTERM / SIGINT, requests in flight get this long to finish


def serve(
    service: CloudService,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    secret: str | None = None,
    capture: str | Path | None = None,
    announce: Callable[[str], None] | None = None,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully and return. Refuses a non-loopback address
    without a secret, and a secret that is not printable ASCII."""
    import uvicorn

    problem = bind_problem(host, secret) or secret_problem(secret, "the shared secret")
    if problem:
        raise ValueError(problem)
    app = create_app(service, secret, CaptureFile(capture) if capture else None, announce, body_timeout_s)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http=header_timeout_protocol(header_timeout_s),
        timeout_keep_alive=5,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
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
