"""Helpers for long-running handlers: per-session stop flags, update throttling, live statistics."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from specsteer.events import TokenEvent


class StopFlags:
    """One ``threading.Event`` per (browser session, task), so Stop cancels only its own run.

    The Stop button's handler sets the flag; the running generator passed the same Event to
    ``generate()``/``run_grid()``, which stop at their next step. Gradio's ``cancels=`` also drops
    the event from the queue, but it cannot interrupt a model call in a worker thread: the flag can.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flags: dict[tuple[str, str], threading.Event] = {}

    @staticmethod
    def _key(request, scope: str) -> tuple[str, str]:
        session = getattr(request, "session_hash", None) or "no-session"
        return (str(session), scope)

    def start(self, request, scope: str) -> threading.Event:
        """A fresh flag for a run that is starting (replacing the session's previous one)."""
        flag = threading.Event()
        if request is None:  # a direct call (tests): nobody else can reach this flag
            return flag
        with self._lock:
            self._flags[self._key(request, scope)] = flag
        return flag

    def stop(self, request, scope: str) -> bool:
        """Set the session's flag; False when it has no run of that kind."""
        with self._lock:
            flag = self._flags.get(self._key(request, scope))
        if flag is None:
            return False
        flag.set()
        return True

    def finish(self, request, scope: str, flag: threading.Event) -> None:
        if request is None:
            return
        with self._lock:
            if self._flags.get(self._key(request, scope)) is flag:
                del self._flags[self._key(request, scope)]


STOP_FLAGS = StopFlags()


class Throttle:
    """Says when to push an update: every ``every`` items or ``seconds``, whichever comes first.

    Re-rendering a long output after every token makes the browser's work quadratic in the length.
    """

    def __init__(self, every: int = 8, seconds: float = 0.05) -> None:
        self.every = every
        self.seconds = seconds
        self._count = 0
        self._last = time.monotonic()

    def due(self) -> bool:
        self._count += 1
        now = time.monotonic()
        if self._count >= self.every or now - self._last >= self.seconds:
            self._count = 0
            self._last = now
            return True
        return False


@dataclass
class LiveStats:
    """Statistics counted from the token events while a generation runs."""

    method: str
    started: float = field(default_factory=time.perf_counter)
    emitted: int = 0
    accepted: int = 0
    rejected: int = 0
    rounds: int = 0

    def add(self, event: TokenEvent) -> None:
        if event.emitted:
            self.emitted += 1
        if event.kind == "accepted":
            self.accepted += 1
        elif event.kind == "rejected":
            self.rejected += 1
        self.rounds = max(self.rounds, event.round)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started
