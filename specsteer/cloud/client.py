"""The Edge's HTTP client of a Cloud service (the API of ``specsteer.cloud.api``).

:class:`RemoteCloud` is one Cloud at a URL (kept-alive connections shared by every generation that
uses it); :class:`HttpTransport` carries one generation's frames over it, as the Link's transport
(``specsteer.protocol.link``), and turns every refusal or broken connection into the Edge's ``CloudError``
subclass that says what happened.
"""

import json
import os
import queue
import threading
import time
from collections.abc import Iterator

from specsteer.cloud.api import CLOUD_SECRET_ENV, EXCHANGE_PATH, OCTET_STREAM, REPORT_HEADER
from specsteer.protocol.cloud_reports import CloudInfo, CloudReport
from specsteer.protocol.exposure import CLOUD_URL_ENV, secret_problem
from specsteer.protocol.link import (
    Arrival,
    CloudError,
    CloudUnreachable,
    Reply,
    SessionGone,
    VersionMismatch,
    cloud_error,
)
from specsteer.protocol.wire import DOWNLINK, PROTOCOL_VERSION, FrameError, TruncatedFrame, decode_prefix


class RemoteCloud:
    """A Cloud service at ``url``: pass it as ``generate(..., cloud=RemoteCloud(url))``.

    One HTTP client (kept-alive connections, thread-safe) serves every generation that uses this
    object. ``timeout_s`` bounds one answer (a long prompt's first pass on a CPU takes a while);
    a Cloud that is not there fails at once (connection refused), and one that stops midway fails
    its open request as soon as the connection breaks. A Cloud without room now (503, only ever for
    an Open) is asked again after its Retry-After, while the waits add up to at most ``busy_wait_s``:
    a full Cloud gives an idle session's room within its ``reclaim_idle_s`` (specsteer.cloud.admission).
    """

    def __init__(
        self,
        url: str,
        secret: str | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        busy_wait_s: float = 45.0,
    ):
        import httpx

        problem = secret_problem(secret, f"${CLOUD_SECRET_ENV}")
        if problem:
            raise ValueError(problem)
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self.client = httpx.Client(
            base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s)
        )
        self.timeout_s = timeout_s
        self.busy_wait_s = busy_wait_s
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
            raise VersionMismatch(
                f"The Cloud at {self.url} speaks protocol version {info.protocol}; this Edge speaks "
                f"version {PROTOCOL_VERSION}. Update the Edge or the Cloud so that both run the "
                "same SpecSteer version.",
                "version",
            )
        self.instance = info.instance
        return info

    def request(self, method: str, path: str, stream: bool = False, **kwargs):
        """One HTTP request; an answer other than 200 or a broken connection raises the CloudError it means."""
        import httpx

        waited = 0.0
        while True:
            try:
                response = self.client.send(self.client.build_request(method, path, **kwargs), stream=stream)
            except httpx.TimeoutException:
                raise CloudUnreachable(
                    f"The Cloud at {self.url} did not answer within {self.timeout_s:g} s.", "timeout"
                ) from None
            except httpx.TransportError as error:
                raise CloudUnreachable(
                    f"Lost the connection to the Cloud at {self.url} ({_reason(error)}).", "unreachable"
                ) from None
            if response.status_code == 200:
                return response
            response.read()
            response.close()
            pause = _retry_after(response) if response.status_code == 503 else None
            if pause is None or waited + pause > self.busy_wait_s:
                raise self._refusal(response)
            time.sleep(pause)
            waited += pause

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
            return cloud_error(
                "http",
                f"The Cloud at {self.url} answered HTTP {response.status_code} with "
                f"{len(response.content)} bytes that are not a SpecSteer Cloud's error.",
                response.status_code,
            )
        if code == "unknown-session" and self.instance and instance and instance != self.instance:
            return SessionGone(
                f"The Cloud at {self.url} restarted during this generation and lost its session. "
                "Run the generation again.",
                code,
                response.status_code,
            )
        return cloud_error(code[:40], message[:_MESSAGE_CHARS], response.status_code)


class HttpTransport:
    """One generation's frames over HTTP (see the module docstring)."""

    def __init__(self, remote: RemoteCloud):
        self.remote = remote

    def info(self) -> CloudInfo:
        return self.remote.info()

    def exchange(self, frame: bytes) -> Reply:
        response = self.remote.request(
            "POST", EXCHANGE_PATH, stream=True, content=frame, headers={"Content-Type": OCTET_STREAM}
        )
        header = response.headers.get(REPORT_HEADER)
        if header is None:
            return Reply(self._stream(response), None)
        try:
            body = response.read()
        except Exception as error:
            raise CloudUnreachable(
                f"Lost the connection to the Cloud at {self.remote.url} ({_reason(error)}).", "unreachable"
            ) from None
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
        reader = threading.Thread(
            target=_read_chunks, args=(response, chunks, stop), daemon=True, name="specsteer-cloud-stream"
        )
        reader.start()
        buffer, arrived = b"", None
        try:
            while (item := chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise CloudUnreachable(
                        f"Lost the connection to the Cloud at {self.remote.url} during its stream ({_reason(item)}).",
                        "unreachable",
                    )
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
                raise CloudUnreachable(
                    f"The Cloud at {self.remote.url} broke off its stream inside a message.", "unreachable"
                )
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


def _retry_after(response) -> float | None:
    """The seconds of a Retry-After header (a whole number, as the Cloud sends), or None."""
    value = response.headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else None


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
