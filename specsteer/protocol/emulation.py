"""Link emulation: an in-process link made to feel like a network (the round-trip time and bandwidths
of :class:`LinkConditions`), at run time. ``specsteer.protocol.link.Link`` holds its thread through a
:class:`LinkEmulator` at each message it carries.

Link emulation in one thread
----------------------------
In process, Edge and Cloud share one thread, so :class:`LinkEmulator` can only delay that thread,
at the moment a message is sent. It applies the deployment projection's rule (``specsteer.evaluation.deployment``,
"The replay rule"): a message that starts an exchange (the
first one, or a reply) leaves at the thread's clock, because its sender was the side waiting for
the last message; a message that continues a one-direction stream (no reply in between) leaves at
its sender's own clock, which runs behind the thread's by the time the thread slept on the sender's
earlier messages (a real sender would not have waited for them). Each message then makes the
thread wait until its arrival, so emitted tokens appear when a real Edge would have them. A streamed
Generalist therefore waits once for the latency and afterwards only where its tokens outrun the
bandwidth, while lockstep rounds wait a full round trip each. This assumes the time between two
messages of one direction is the sender's -- true of every method here, whose receivers are idle
while a stream flows. One approximation remains: the thread already sleeps through the first message
of a stream before its sender goes on computing, so that message's transmission time is paid once
more than a real sender would pay it when the next message is smaller (a few hundred bytes'
worth: the prompt's upload before the first draft).

A sender in another process (the Cloud service streaming the ``llm`` tokens over HTTP) does not
pause while this thread sleeps, so the inference above does not hold for it: the transport stamps
each such message with the time it reached the Edge (``carry(..., sent_at=...)``; on loopback that
is when it was sent), and the wire and latency rule applies from there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from specsteer.protocol.wire import DIRECTIONS, DOWNLINK, UPLINK


def check_number(name: str, value: float, *, positive: bool = False, allow_inf: bool = False) -> None:
    """Raise ValueError unless ``value`` is a number >= 0 (> 0 if ``positive``; infinite only if ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if math.isinf(value) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


# --------------------------------------------------------------------------- the link


@dataclass(frozen=True)
class LinkConditions:
    """A network path between Edge and Cloud.

    ``rtt_ms`` is the round-trip time; each direction takes half of it (a symmetric path).
    Bandwidths are in kilobits per second (1 kbit = 1000 bits); ``math.inf`` means unlimited.
    ``overhead_bytes`` are added to every message's payload for its transmission time (transport
    framing: IP, TCP, TLS and WebSocket headers); they are not part of the reported byte counts.
    """

    rtt_ms: float = 0.0
    uplink_kbps: float = math.inf
    downlink_kbps: float = math.inf
    overhead_bytes: int = 0

    def __post_init__(self) -> None:
        check_number("rtt_ms", self.rtt_ms)
        check_number("uplink_kbps", self.uplink_kbps, positive=True, allow_inf=True)
        check_number("downlink_kbps", self.downlink_kbps, positive=True, allow_inf=True)
        if isinstance(self.overhead_bytes, bool) or not isinstance(self.overhead_bytes, int) or self.overhead_bytes < 0:
            raise ValueError(f"overhead_bytes must be an integer >= 0, got {self.overhead_bytes!r}")

    @classmethod
    def requested(
        cls, rtt_ms: float | None, uplink_kbps: float | None, downlink_kbps: float | None
    ) -> LinkConditions | None:
        """The link a user asks for (CLI flags, app settings), where 0 or nothing means no delay and
        unlimited bandwidth; None when nothing is to be emulated."""
        if not (rtt_ms or uplink_kbps or downlink_kbps):
            return None
        return cls(rtt_ms=rtt_ms or 0.0, uplink_kbps=uplink_kbps or math.inf, downlink_kbps=downlink_kbps or math.inf)

    @property
    def one_way_s(self) -> float:
        return self.rtt_ms / 2000.0

    def transmission_s(self, direction: str, size: int) -> float:
        """Seconds to put a message of ``size`` payload bytes on the wire in ``direction``."""
        kbps = self.uplink_kbps if direction == UPLINK else self.downlink_kbps
        return (size + self.overhead_bytes) * 8 / (kbps * 1000.0)

    def with_rtt(self, rtt_ms: float) -> LinkConditions:
        return replace(self, rtt_ms=rtt_ms)


NO_LINK = LinkConditions()  # in process: no latency, unlimited bandwidth


class LinkEmulator:
    """Delays an in-process link's messages as ``conditions`` say (see the module docstring).

    ``clock`` and ``sleep`` are injectable so that tests can run on a virtual clock.
    """

    def __init__(
        self,
        conditions: LinkConditions,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.conditions = conditions
        self._clock = clock
        self._sleep = sleep
        self._last_direction: str | None = None
        self._sender_lag = 0.0  # how far the current stream's sender's clock trails the thread's
        self._wire_free = {UPLINK: -math.inf, DOWNLINK: -math.inf}

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the emulator reads (a transport stamps concurrent arrivals with it)."""
        return self._clock

    def carry(self, direction: str, size: int, sent_at: float | None = None) -> float:
        """Hold the thread until the message would have arrived; return the seconds waited.

        ``sent_at`` is when a sender that runs concurrently with this thread (a Cloud in another
        process streaming tokens) handed the message over, on this emulator's clock; without it the
        sender is taken to share the thread, and its clock is inferred as described above.
        """
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown link direction {direction!r}")
        now = self._clock()
        if direction != self._last_direction:
            # A reply (or the first message): its sender was the side waiting for the last
            # message, so it is exactly where the thread is.
            self._sender_lag = 0.0
        if sent_at is None:
            sent_at = now - self._sender_lag
        start = max(sent_at, self._wire_free[direction])
        self._wire_free[direction] = start + self.conditions.transmission_s(direction, size)
        arrival = self._wire_free[direction] + self.conditions.one_way_s
        wait = max(0.0, arrival - now)
        if wait > 0:
            self._sleep(wait)
        # The sender would not have waited: it falls that much further behind the thread.
        self._sender_lag += wait
        self._last_direction = direction
        return wait
