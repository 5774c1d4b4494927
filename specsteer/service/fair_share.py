"""A fair share of the app's queue: who a client is, how many model jobs it may hold, and what it is told.

On a public deployment one client could otherwise fill the queue with model jobs (a generation, a
comparison, a grid, a campaign's generation, a LoRA training) and keep every other visitor out until
they drain. Three rules hold it (docs/THREAT_MODEL.md, "A fair share of the queue"):

* **The share**: a client holds at most ``QueuePolicy.share`` model jobs, queued or running, across
  every endpoint together; one more is refused at once, before it takes a place in the queue, with a
  sentence saying how many it holds and when one should end (:class:`FairShare`, :func:`share_refusal`).
* **The client** is what it cannot forge (:func:`client_key`): the connection's address, or on a
  Hugging Face Space, where every connection comes from the Space's proxy, the address that proxy
  reports in ``X-Forwarded-For``. A session hash is chosen by the caller, so it is never part of the key.
* **The whole queue** holds at most ``QueuePolicy.max_waiting`` waiting model jobs; beyond it a caller
  is told the app is busy and about how long until a place frees (:func:`busy_refusal`), estimated
  from what is queued and running and how long such jobs have taken here (:class:`Lane`).

The ledger keeps no counter to decrement: it remembers each admitted job's id and asks, whenever it
counts, whether the queue still holds that job (``alive``). A job that ends, fails, is cancelled or
is dropped with its client's connection stops counting as soon as the queue lets it go.

This module is light (standard library only); ``ui.fair_queue`` fits it to Gradio's queue.
"""

from __future__ import annotations

import heapq
import ipaddress
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

UNKNOWN_CLIENT = "unknown"
IPV6_CLIENT_PREFIX = 64  # one IPv6 subscriber commonly holds a whole /64: its addresses are one client


@dataclass(frozen=True)
class QueuePolicy:
    """How much of the queue model jobs may take (the numbers are argued in docs/THREAT_MODEL.md)."""

    share: int = 4  # model jobs one client may hold, queued or running, all endpoints together
    max_waiting: int = 64  # model jobs that may wait at once, all clients together


@dataclass(eq=False)
class Reservation:
    """A place one client holds while its job is being put in the queue (before it has an id)."""

    client: str


class FairShare:
    """The jobs each client holds; refuses one beyond ``share``.

    ``alive(job_id)``: whether the queue still holds that job (waiting or running). Admission is two
    steps so that two calls of one client cannot both slip under the share while the queue takes the
    first: :meth:`reserve` (counted at once), then :meth:`bind` to the job's id, or :meth:`release`
    when the queue did not take it.
    """

    def __init__(self, share: int, alive: Callable[[str], bool]) -> None:
        if share < 1:
            raise ValueError(f"a client's share must be at least one job, not {share}")
        self.share = share
        self._alive = alive
        self._lock = threading.Lock()
        self._reserved: dict[str, set[Reservation]] = {}
        self._jobs: dict[str, list[str]] = {}

    def reserve(self, client: str) -> Reservation | None:
        """A place for one more job of ``client``, or None when it already holds its share."""
        with self._lock:
            if self._held(client) >= self.share:
                return None
            reservation = Reservation(client)
            self._reserved.setdefault(client, set()).add(reservation)
            return reservation

    def bind(self, reservation: Reservation, job_id: str) -> None:
        """The reserved place is now the queue's job ``job_id``."""
        with self._lock:
            self._drop_reservation(reservation)
            self._jobs.setdefault(reservation.client, []).append(job_id)

    def release(self, reservation: Reservation) -> None:
        """The queue did not take the job: its place is free again."""
        with self._lock:
            self._drop_reservation(reservation)

    def held(self, client: str) -> int:
        """How many jobs ``client`` holds now (queued, running, or being queued)."""
        with self._lock:
            return self._held(client)

    def jobs(self, client: str) -> tuple[str, ...]:
        """The ids of ``client``'s jobs the queue still holds, oldest first."""
        with self._lock:
            self._forget_ended(client)
            return tuple(self._jobs.get(client, ()))

    def _held(self, client: str) -> int:
        self._forget_ended(client)
        return len(self._jobs.get(client, ())) + len(self._reserved.get(client, ()))

    def _forget_ended(self, client: str) -> None:
        jobs = self._jobs.get(client)
        if jobs is None:
            return
        jobs[:] = [job for job in jobs if self._alive(job)]
        if not jobs:
            del self._jobs[client]

    def _drop_reservation(self, reservation: Reservation) -> None:
        reserved = self._reserved.get(reservation.client)
        if reserved is None:
            return
        reserved.discard(reservation)
        if not reserved:
            del self._reserved[reservation.client]


# --------------------------------------------------------------------------- who a client is


def client_key(peer: str | None, forwarded_for: str | None, behind_space_proxy: bool) -> str:
    """The client a request counts against.

    ``peer``: the connection's address. ``forwarded_for``: the request's ``X-Forwarded-For``, read only
    when ``behind_space_proxy`` (the app runs on a Hugging Face Space, where every connection is the
    proxy's and the proxy reports its client there). A caller may send an ``X-Forwarded-For`` of its own,
    which a proxy keeps to the left of the addresses it adds, so the client is the rightmost address
    that is global (the proxies' own hops are private addresses); with none global, the rightmost
    address. Anywhere else the header is the caller's to invent and is ignored.

    An IPv6 address counts by its /64 (one subscriber's usual allocation), an IPv4-mapped one as IPv4.
    """
    if behind_space_proxy and forwarded_for:
        hops = [address for address in map(_address, forwarded_for.split(",")) if address is not None]
        if hops:
            chosen = next((hop for hop in reversed(hops) if hop.is_global), hops[-1])
            return _client_of(chosen)
    address = _address(peer or "")
    if address is not None:
        return _client_of(address)
    return (peer or "").strip() or UNKNOWN_CLIENT


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip().strip('"')
    if text.startswith("[") and "]" in text:  # "[v6]:port"
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # "v4:port"
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _client_of(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False))
    return str(address)


# --------------------------------------------------------------------------- how long until


@dataclass(frozen=True)
class Lane:
    """One concurrency group of the queue as the estimates see it. Durations are in seconds and come
    from how long jobs of the same endpoint have taken here; None where none has finished yet."""

    slots: int | None  # how many of its jobs run at once (None: as many as come)
    running_left_s: tuple[float | None, ...] = ()  # for each running job, the time it should still take
    waiting_s: tuple[float | None, ...] = ()  # each waiting job's expected duration, in queue order

    def starts_s(self) -> list[float | None]:
        """When each waiting job should start, from now: the running jobs end as expected, and each
        waiting job takes the first slot that frees (None from the first unknown duration on)."""
        if self.slots is None:
            return [0.0] * len(self.waiting_s)
        free: list[float] = [0.0] * max(self.slots - len(self.running_left_s), 0)
        for left in self.running_left_s:
            if left is None:
                return [None] * len(self.waiting_s)
            free.append(max(left, 0.0))
        if not free:  # more running than slots (the group's limit was lowered): one frees first
            return [None] * len(self.waiting_s)
        heapq.heapify(free)
        starts: list[float | None] = []
        for duration in self.waiting_s:
            start = heapq.heappop(free)
            starts.append(start)
            if duration is None:
                return starts + [None] * (len(self.waiting_s) - len(starts))
            heapq.heappush(free, start + duration)
        return starts

    def waiting_end_s(self, position: int) -> float | None:
        """When the waiting job at ``position`` should end, from now."""
        start = self.starts_s()[position]
        duration = self.waiting_s[position]
        return None if start is None or duration is None else start + duration

    def running_end_s(self) -> float | None:
        """When its first running job should end, from now (the one running job in a one-slot lane)."""
        known = [left for left in self.running_left_s if left is not None]
        return max(min(known), 0.0) if known else None


def soonest_place_s(lanes: Sequence[Lane]) -> float | None:
    """When a waiting job should next leave the queue (so a place in it frees), from now; None when
    nothing waits or no lane with waiting jobs has an estimate."""
    starts = [lane.starts_s()[0] for lane in lanes if lane.waiting_s]
    known = [start for start in starts if start is not None]
    return min(known) if known else None


def soonest(times_s: Sequence[float | None]) -> float | None:
    """The soonest of several estimates, None when none is known."""
    known = [time for time in times_s if time is not None]
    return min(known) if known else None


# --------------------------------------------------------------------------- what the caller is told


def _about(seconds: float | None) -> str:
    if seconds is None:
        return "no job of this kind has finished here yet, so there is no estimate: try again in a minute"
    return f"about {max(math.ceil(seconds), 1)} s from now, judging by how long such jobs have taken here"


def retry_after_s(seconds: float | None) -> int:
    """A ``Retry-After`` value for an estimate: whole seconds, at least 1; 60 without an estimate."""
    return 60 if seconds is None else max(math.ceil(seconds), 1)


def share_refusal(held: int, share: int, ends_in_s: float | None) -> str:
    """The sentence for a client that holds its share; ``ends_in_s``: when its first job should end."""
    jobs = "job" if held == 1 else "jobs"
    return (
        f"You already hold {held} model {jobs} here (queued or running), the most one client may hold at once "
        f"({share}), so this one was not queued. Try again when one of yours has ended: {_about(ends_in_s)}."
    )


def busy_refusal(waiting: int, place_in_s: float | None) -> str:
    """The sentence for a caller when the queue is full; ``place_in_s``: when a place should free."""
    return (
        f"The app is busy: {waiting} jobs are waiting, the most its queue holds, so this one was not queued. "
        f"A place should free {_about(place_in_s)}."
    )
