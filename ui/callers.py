"""Who is calling, as Gradio's request tells it: the page's session and the client's address.

Neither proves a person. A session hash is whatever the caller sends (a page makes a new one on each load;
an API caller makes up as many as it likes), so what is keyed by it is labelled unverified where it is
shown. The address is the connection's, which a caller cannot choose but many people may share; on a
Hugging Face Space every connection is the Space's proxy's, and the client is the address the proxy
reports in ``X-Forwarded-For`` (``specsteer.service.fair_share.client_key``), trusted there alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from specsteer.protocol.exposure import SPACE_ENV
from specsteer.service.fair_share import client_key


def behind_space_proxy(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the app runs on a Hugging Face Space (``$SPACE_ID`` set), whose proxy is the only peer of
    every connection and reports the client's address in ``X-Forwarded-For``."""
    return bool((os.environ if environ is None else environ).get(SPACE_ENV))


def page_session(request: Any) -> str | None:
    """The caller's page session (Gradio's session hash), or None for a call without one (a test)."""
    session = getattr(request, "session_hash", None)
    return str(session) if session else None


def client_address(request: Any, on_space: bool | None = None) -> str:
    """The client a request counts against (``fair_share.client_key``): the connection's address, or on a Space
    (``on_space``; by default ``behind_space_proxy()``) the one its proxy reports."""
    peer = getattr(getattr(request, "client", None), "host", None)
    headers = getattr(request, "headers", None)
    # A proxy may add its own header line rather than extend the caller's: read them all, in order.
    forwarded = ", ".join(headers.getlist("x-forwarded-for")) if headers is not None else ""
    on_space = behind_space_proxy() if on_space is None else on_space
    return client_key(peer, forwarded, on_space)
