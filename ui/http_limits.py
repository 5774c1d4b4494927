"""The app's HTTP server limits: request sizes and read timeouts, for every route, uploads included.

Gradio serves the app with uvicorn, which by default waits for a request's header and body as long
as the client keeps the connection open, and reads a body of any announced length. A client that
sends half a header, or announces 10 GB and sends 6 bytes, holds a connection (and, for an upload,
a temporary file) for as long as it likes. The limits come from ``specsteer.service.limits.VisitorLimits``:

* **Header**: a connection whose request header is not complete ``header_timeout_s`` after its first
  byte (or after the previous response, on a kept-alive connection) gets 408 and is closed. This is
  below the application (uvicorn's protocol: :class:`HeaderDeadlineProtocol`), since the app sees a
  request only once its header is complete.
* **Body**: :class:`RequestLimits`, an ASGI middleware around every route. A body announced larger
  than the route's cap gets 413 at once, before a byte of it is read; a body that grows past the cap
  (chunked, or lying about its length) is cut off there with 413; one that pauses for
  ``body_idle_timeout_s``, or takes longer than ``body_timeout_s`` in all, gets 408. The cap is
  ``max_upload_bytes`` (plus room for the form's framing) on the upload route and
  ``max_request_bytes`` everywhere else. A route's handler sees a disconnected client; the upload
  route sees instead the error its own parser raises for a broken form, on which Gradio removes the
  files it had begun to write, so an upload cut off this way leaves nothing in its temporary folder.

:func:`server_options` wires both into ``demo.launch()``: the middleware through FastAPI's
``middleware`` argument, the protocol through the uvicorn ``Config`` that Gradio builds inside
``launch`` (Gradio has no option for it: :func:`install_protocol` puts a ``Server`` class that sets it
into ``gradio.http_server``, where ``launch`` looks its server class up).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from specsteer.service.limits import VisitorLimits

log = logging.getLogger(__name__)

UPLOAD_FRAMING_BYTES = 64 * 1024  # a multipart form's boundaries and part headers around the file itself
UPLOAD_PATH_SUFFIX = "/upload"  # Gradio's upload route: /gradio_api/upload


def _plain_response(status: int, reason: str, text: str) -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request header (set ``header_timeout_s`` on a
    subclass: :func:`install_protocol` does). The deadline is armed when a header is awaited and not
    moved by bytes that trickle in, so a client cannot hold it open a byte at a time."""

    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch_header()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_header()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_header()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def _watch_header(self) -> None:
        """Arm the deadline while a header is awaited (the peer's state is IDLE), cancel it once one is in."""
        awaiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if awaiting and self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.header_timeout_s, self._header_timed_out)
        elif not awaiting:
            self._cancel_header_deadline()

    def _cancel_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_timed_out(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is None or self.cycle.response_complete:  # nothing of ours is being sent
            message = f"The request header did not arrive within {self.header_timeout_s:g} s."
            self.transport.write(_plain_response(408, "Request Timeout", message))
        self.transport.close()


class _Refused(Exception):
    """The body broke a limit; the middleware answers ``status`` instead of the route."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _LimitedBody:
    """A route's ``receive``: the body as it arrives, within the size cap and the timeouts."""

    def __init__(self, receive: Receive, cap: int, limits: VisitorLimits, abort: type[Exception] | None = None) -> None:
        self._receive = receive
        self._abort = abort  # raised into the route when it breaks a limit, instead of a disconnect
        self._cap = cap
        self._limits = limits
        self._deadline = time.monotonic() + limits.body_timeout_s
        self._received = 0
        self._body_done = False
        self.refused: _Refused | None = None

    async def __call__(self) -> Message:
        if self.refused is not None:
            return {"type": "http.disconnect"}
        message = await self._next()
        if self.refused is not None and self._abort is not None:
            raise self._abort(self.refused.message)
        return message

    async def _next(self) -> Message:
        if self._body_done:  # after the body, a route waits for the client to go away: no deadline then
            return await self._receive()
        wait = min(self._limits.body_idle_timeout_s, self._deadline - time.monotonic())
        try:
            message = await asyncio.wait_for(self._receive(), timeout=max(wait, 0.0))
        except TimeoutError:
            self.refused = _Refused(408, "The request body did not arrive in time.")
            return {"type": "http.disconnect"}
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._cap:
                self.refused = _Refused(413, f"The request body is larger than {self._cap:,} bytes.")
                return {"type": "http.disconnect"}
            self._body_done = not message.get("more_body", False)
        return message


class RequestLimits:
    """ASGI middleware: the size cap and body timeouts of every HTTP route (see the module doc)."""

    def __init__(self, app: ASGIApp, limits: VisitorLimits) -> None:
        self.app = app
        self.limits = limits

    def cap(self, path: str) -> int:
        if path.rstrip("/").endswith(UPLOAD_PATH_SUFFIX):
            return self.limits.max_upload_bytes + UPLOAD_FRAMING_BYTES
        return self.limits.max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.cap(scope.get("path", ""))
        announced = _content_length(scope)
        if announced is not None and (announced < 0 or announced > cap):
            await _refuse(send, _Refused(413, f"The request body is larger than {cap:,} bytes."))
            return
        upload = scope.get("path", "").rstrip("/").endswith(UPLOAD_PATH_SUFFIX)
        body = _LimitedBody(receive, cap, self.limits, _upload_abort() if upload else None)
        started = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if body.refused is not None and not started:
                return  # the route's own answer to a cut-off body is replaced by ours
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, body, guarded_send)
        except Exception:
            if body.refused is None or started:
                raise
        if body.refused is not None and not started:
            log.info("refused a request to %s: %s", scope.get("path", ""), body.refused.message)
            await _refuse(send, body.refused)


def _upload_abort() -> type[Exception] | None:
    """The error Gradio's upload parser cleans up after (it removes the files it began), or None when
    this Gradio has none by that name (the route then sees a disconnect)."""
    try:
        from gradio.route_utils import MultiPartException
    except ImportError:
        return None
    return MultiPartException


def _content_length(scope: Scope) -> int | None:
    """The announced body length; -1 for a value that is not a number (refused like an oversize one)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else -1
    return None


async def _refuse(send: Send, refused: _Refused) -> None:
    body = refused.message.encode()
    await send(
        {
            "type": "http.response.start",
            "status": refused.status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def install_protocol(limits: VisitorLimits) -> None:
    """Make ``gradio``'s next ``launch()`` serve with :class:`HeaderDeadlineProtocol` at ``limits``' header
    timeout: Gradio builds uvicorn's Config inside ``launch`` and offers no option for its protocol, so a
    Server class that sets it (before uvicorn reads it, when the server starts) replaces Gradio's own in
    ``gradio.http_server``, where ``launch`` looks it up. Idempotent; the latest limits win."""
    from gradio import http_server

    gradio_server = getattr(http_server.Server, "gradio_server", http_server.Server)
    protocol = type(
        "AppHeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": limits.header_timeout_s}
    )

    class LimitedServer(gradio_server):  # type: ignore[misc, valid-type]
        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            config.http = protocol
            super().__init__(config, *args, **kwargs)

    LimitedServer.gradio_server = gradio_server
    http_server.Server = LimitedServer  # type: ignore[misc]


def server_options(limits: VisitorLimits) -> dict[str, Any]:
    """``launch()`` options for ``limits``: the upload cap Gradio checks itself, and the middleware; installs
    the header deadline (:func:`install_protocol`)."""
    install_protocol(limits)
    return {
        "max_file_size": limits.max_upload_bytes,
        "app_kwargs": {"middleware": [Middleware(RequestLimits, limits=limits)]},
    }
