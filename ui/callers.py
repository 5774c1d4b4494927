"""Who is calling, as Gradio's request tells it: the page's session and the client's address.

Neither proves a person. A session hash is whatever the caller sends (a page makes a new one on each load;
an API caller makes up as many as it likes), so what is keyed by it is labelled unverified where it is
shown. The address is the connection's (behind a proxy, the proxy's, unless the server is told to trust
its forwarding header), which a caller cannot choose but many people may share.
"""

from __future__ import annotations

from typing import Any


def page_session(request: Any) -> str | None:
    """The caller's page session (Gradio's session hash), or None for a call without one (a test)."""
    session = getattr(request, "session_hash", None)
    return str(session) if session else None


def client_address(request: Any) -> str:
    """The client's address as the connection shows it, or "" when there is none (a direct call)."""
    client = getattr(request, "client", None)
    return str(getattr(client, "host", "") or "")
