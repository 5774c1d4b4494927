"""The Cloud in the Edge's own process: a CloudService reached through the same Transport interface as an
HTTP Cloud, so a generation runs the same protocol, frames and errors whichever side of a network the
Cloud is on. The one module where the Cloud meets the Edge's link."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.read_ahead import ReadAhead, read_ahead_mode
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.method.acceptance import RATIO_TEST, AcceptancePolicy
from specsteer.models.pair import LoadedPair
from specsteer.protocol.cloud_reports import CloudInfo, CloudReport
from specsteer.protocol.link import Arrival, Reply, Transport, cloud_error


class LocalTransport:
    """A Cloud service in this process: frames are handed over as bytes, errors raised as the remote
    transport would raise them."""

    def __init__(self, service: CloudService) -> None:
        self.service = service

    def info(self) -> CloudInfo:
        return self.service.info()

    def exchange(self, frame: bytes) -> Reply:
        answer = self._call(self.service.handle, frame)
        return Reply(self._frames(answer.frames), answer.report)

    def close_session(self, session: bytes) -> CloudReport:
        return self._call(self.service.close, session)

    def ask_details(self) -> None:
        """Each draft's numbers in the Cloud's reports (``Link.ask_details``): this process's own Cloud only."""
        self.service.details = True

    def edge_ready(self, session: bytes) -> None:
        """The Edge has drafted (``Link.edge_ready``): told to the service directly, no frame."""
        self.service.edge_ready(session)

    def _frames(self, frames: Iterable[bytes]) -> Iterator[Arrival]:
        iterator = iter(frames)
        try:
            while True:
                frame = self._call(next, iterator, None)
                if frame is None:
                    return
                yield Arrival(frame)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    @staticmethod
    def _call(function, *args):
        try:
            return function(*args)
        except ServiceError as error:
            raise cloud_error(error.code, str(error), error.status) from None


class InProcessCloud:
    """The default Cloud: a service over the pair's own Generalist and Specialist, one per generation.

    Its one session never expires for idleness nor age: the process that would wait for it is the
    one that holds it, so a pause (a laptop asleep, a stopped process) must not cost the generation.
    ``read_ahead`` (specsteer.cloud.read_ahead): when the Cloud reads its prompts, in a thread of its own
    (``CloudService``; llama.cpp and torch release the GIL while they compute): ``concurrent`` (or True)
    while the Edge reads its private prompt, as on two machines; ``after-first-draft`` once the Edge has
    drafted; ``off`` (or False) with the first Draft. ``acceptance``: who decides SpecSteer's rounds
    (specsteer.method.acceptance: the ratio test, or a measurement's scripted verdicts)."""

    def __init__(
        self, pair: LoadedPair, read_ahead: ReadAhead | bool = False, acceptance: AcceptancePolicy = RATIO_TEST
    ) -> None:
        self.pair = pair
        self.read_ahead: ReadAhead = read_ahead_mode(read_ahead)
        self.acceptance = acceptance

    def transport(self) -> Transport:
        limits = ServiceLimits(idle_timeout_s=None, max_session_life_s=None)
        return LocalTransport(CloudService(self.pair, limits, read_ahead=self.read_ahead, acceptance=self.acceptance))
