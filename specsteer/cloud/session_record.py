"""One session the Cloud service holds: its Open, its Cloud, its state, and the part of its report not yet sent.

``specsteer.cloud.service.CloudService`` keeps one :class:`SessionRecord` per open session and changes it
under the record's ``lock`` (one request of a session at a time); the record itself decides nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from specsteer.cloud import admission
from specsteer.cloud.verifier import Cloud, CrossCloud
from specsteer.method.decoding import ForwardLog
from specsteer.method.token_details import CloudScores
from specsteer.protocol.cloud_reports import CloudPass, CloudReport
from specsteer.protocol.wire import Open


@dataclass(eq=False)
class SessionRecord:
    """A session's state; :meth:`report` hands out each pass once, and the prefix reuse with the first report."""

    id: bytes
    opened: Open
    cloud: Cloud | CrossCloud
    log: ForwardLog
    last_used: float
    client: str = ""  # who opened it (the credential, specsteer.cloud.admission): the per-client caps count these
    reserved: int = 0  # bytes of the budget its caches may come to hold
    started: bool = False  # it has drafted or read a token since its Open
    lock: threading.Lock = field(default_factory=threading.Lock)
    messages: int = 0  # frames received and sent so far; a pass is tagged with it
    passes: list[CloudPass] = field(default_factory=list)
    logged: int = 0  # trace steps of ``log`` already turned into passes
    delivered: int = 0  # passes already reported
    reused_reported: bool = False
    emitted: int = 0  # tokens streamed (generate rule)
    finished: bool = False  # the stream reached its budget or an end id
    closed: bool = False
    opened_at: float = 0.0  # its life is bounded from here (ServiceLimits.max_session_life_s)
    reading: threading.Thread | None = None  # the read-ahead of its prompts (CloudService.read_ahead)
    read_error: BaseException | None = None
    # The read-ahead starts once this is set: at once, or (after-first-draft) when the Edge has drafted.
    read_gate: threading.Event = field(default_factory=threading.Event)
    skip_reading: bool = False  # closing before the read-ahead began: it reads nothing

    def holding(self) -> admission.Holding:
        """What it holds, as admission sees it (busy while a request of it is being served)."""
        busy = self.lock.locked()
        return admission.Holding(self.id, self.client, self.reserved, self.last_used, self.started, busy)

    def collect_passes(self) -> None:
        for step in self.log.trace[self.logged :]:
            self.passes.append(CloudPass(self.messages, step.who, step.size, step.seconds))
        self.logged = len(self.log.trace)

    def report(self, ratios: Iterable[float] = (), details: Iterable[CloudScores] = ()) -> CloudReport:
        self.collect_passes()
        passes, self.delivered = tuple(self.passes[self.delivered :]), len(self.passes)
        reused = () if self.reused_reported else tuple(sorted(self.log.reused.items()))
        self.reused_reported = True
        return CloudReport(passes, tuple(ratios), reused, tuple(details))
