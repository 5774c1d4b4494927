"""The Cloud's HTTP API, shared by its server and its client (the contract, no code).

``python -m specsteer cloud`` serves a CloudService over it (``specsteer.cloud.server``);
``specsteer.cloud.client.RemoteCloud`` reaches it (``specsteer.cloud.process`` starts one as a child).

The bodies are the protocol's frames, byte for byte, so what the transcript counts is what the
socket carries (besides HTTP's own headers):

================================  ==========================================================
``GET /v1/health``                ``{"ok": true, "sessions": n, "instance": ...}`` (no secret needed)
``GET /v1/info``                  the Cloud's :class:`~specsteer.protocol.cloud_reports.CloudInfo` as JSON
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
goes on). ``cloud_client.HttpTransport`` turns each into the Edge's ``CloudError`` subclass, and a refused
or broken connection into ``CloudUnreachable``.

Why HTTP rather than WebSocket: a kept-alive HTTP/1.1 exchange on loopback costs a few
milliseconds more than a call in process (3.8 ms median on a loaded 2-core machine, against 0.02 ms
for a bare TCP echo: the most any TCP transport could save; ``benchmarks/http_exchange_overhead.py``),
against a Generalist pass of tens to hundreds of milliseconds; a streamed response gives the
``llm`` baseline its one-way stream, and
each request stays independent, so a lost Cloud or a bad frame fails exactly one request with a
status code. WebSocket would also need a client library this project does not otherwise install.

A shared secret (``--secret-env NAME``) is required to listen beyond loopback; Edges send it as
``Authorization: Bearer <secret>`` and the Cloud compares it in constant time. Both sides refuse at
start-up a secret that is not printable ASCII (an HTTP header cannot carry it).
"""

DEFAULT_PORT = 8700
CLOUD_SECRET_ENV = "SPECSTEER_CLOUD_SECRET"  # the shared secret, for Edges (the Cloud names its own: --secret-env)
EXCHANGE_PATH = "/v1/exchange"
REPORT_HEADER = "X-SpecSteer-Report"
OCTET_STREAM = "application/octet-stream"
