"""Long-running handlers: work in a worker thread, streamed to the page, stoppable from a Stop button.

Why a worker thread: the Stop buttons use Gradio's ``cancels=``, which drops a waiting request from
the queue and abandons a running streaming handler at once. Anything that handler would still have
done (final statistics, saving the partial output, drawing the partial results) would then never
happen, and the page would be left half-updated. So the work runs in a :class:`BackgroundRun` (a
``specsteer.util.background.Background`` producing frames): the streaming handler only relays its
frames, and the Stop handler sets the run's ``threading.Event`` (which ``generate()`` /
``run_grid_events()`` check every token), waits for the run to wind down, and returns the run's
final view itself.

A *frame* is the tuple of an event's outputs; fields left unchanged are ``gr.skip()``. Frames are
merged field by field, so a consumer that polls (at most every ``min_interval`` seconds, which also
keeps the browser from re-rendering after every token) never loses an update. This merging is the
Gradio-specific part; the thread, the hand-over and the stop flag are the generic helper's.

A producer may also yield a :class:`Toast` (a warning for the page). It is not shown in the worker:
``gr.Warning`` finds the request it belongs to in context variables that Gradio sets on the handler's
thread, and a worker thread starts without them (there, ``gr.Warning`` only prints a Python warning
on the server). :meth:`BackgroundRun.frames` shows it from the handler's thread instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import gradio as gr

from specsteer.method.events import TokenEvent
from specsteer.protocol.emulation import LinkConditions
from specsteer.util.background import Background
from ui.stats_html import StatsView

log = logging.getLogger(__name__)

MODELS_CONCURRENCY_ID = "models"  # every interactive event that runs a model shares one slot (memory, CPU)
# An evaluation grid has a slot of its own: its cells take turns with the interactive events in the
# service (specsteer.util.turns), so a grid never keeps a generation in Gradio's queue behind it.
GRID_CONCURRENCY_ID = "grid"
# Teaching the Specialist (LoRA training) runs one at a time on the machine (service.lora_teaching): a second
# waits in the queue with its position shown, not in a worker thread.
TEACHING_CONCURRENCY_ID = "teaching"
# The model jobs: what a client's fair share of the queue counts (ui.fair_queue). Every other event is quick
# (a sample, an upload, a stored run) and has a group of its own, so it never waits behind these.
MODEL_LANES = (MODELS_CONCURRENCY_ID, GRID_CONCURRENCY_ID, TEACHING_CONCURRENCY_ID)
NOT_YOURS = (
    "Nothing of yours is running here: a run can be stopped only from the page (browser session) that started it."
)

_SKIP = gr.skip()


def _is_skip(value: object) -> bool:
    return isinstance(value, dict) and value == _SKIP


def _detached(frame: tuple) -> tuple:
    """The frame with its update dicts copied. Gradio pops "value" out of an update dict it sends, so a
    frame kept here (the page's latest state, sent again at the end and by Stop) must never be the
    object handed to Gradio, or its values would be gone the second time."""
    return tuple(dict(value) if isinstance(value, dict) else value for value in frame)


def merge_frames(older: tuple, newer: tuple) -> tuple:
    """``newer`` over ``older``, field by field; skipped fields keep the older value."""
    return tuple(old if _is_skip(new) else new for old, new in zip(older, newer, strict=True))


@dataclass(frozen=True)
class Toast:
    """A warning toast a run's producer yields between frames (HTML: escape what it quotes)."""

    message: str


@dataclass(frozen=True)
class _Update:
    """What the worker hands to the handler: a frame, and the toasts yielded since the previous one."""

    frame: tuple
    toasts: tuple[str, ...] = ()

    @staticmethod
    def merged(older: _Update, newer: _Update) -> _Update:
        return _Update(merge_frames(older.frame, newer.frame), older.toasts + newer.toasts)


Produce = Callable[[threading.Event], Iterator["tuple | Toast"]]


class BackgroundRun:
    """Drives a frame producer in a worker thread; ``frames()`` streams it, ``stop()`` ends it."""

    def __init__(self, produce: Produce, width: int, name: str) -> None:
        self._width = width
        self._lock = threading.Lock()
        self._everything: tuple = (_SKIP,) * width  # every frame merged: the page's latest state
        self._work = Background.iterate(self._recorded(produce), name=name, merge=_Update.merged)

    def _recorded(self, produce: Produce):
        """``produce`` with each frame checked and merged into the page's latest state as it passes."""

        def updates(flag: threading.Event) -> Iterator[_Update]:
            try:
                for item in produce(flag):
                    if isinstance(item, Toast):
                        yield _Update((_SKIP,) * self._width, (item.message,))
                        continue
                    frame = tuple(item)
                    if len(frame) != self._width:
                        raise ValueError(f"a frame has {len(frame)} fields, expected {self._width}")
                    with self._lock:
                        self._everything = merge_frames(self._everything, frame)
                    yield _Update(frame)
            except Exception:  # the consumer shows it without a stack trace; the log keeps one
                log.exception("background run failed")
                raise

        return updates

    @property
    def done(self) -> bool:
        return self._work.done

    @property
    def finished_at(self) -> float | None:
        return self._work.finished_at

    def frames(self, min_interval: float = 0.05) -> Iterator[tuple]:
        """The run's frames as they come (merged when they come faster than ``min_interval``).

        Abandoning this stream (the page went away, or Stop dropped the handler) stops the work.
        """
        for update in self._work.items(min_interval):
            for message in update.toasts:  # here, on the handler's thread, where Gradio finds the page
                gr.Warning(message)
            yield _detached(update.frame)
        self._work.result()  # the run's error, raised in the handler's thread
        # Gradio repeats a stream's last frame when it completes. After a Stop that frame may be
        # older than what the Stop handler showed, so end on the complete latest state instead.
        yield self.state

    @property
    def state(self) -> tuple:
        """Every frame so far merged: what the page should show now."""
        with self._lock:
            return _detached(self._everything)

    def stop(self, timeout: float) -> None:
        """Set the flag and wait up to ``timeout`` s for the run to end (a model load cannot be cut short).

        Frames not yet streamed are dropped: the Stop handler shows the state itself.
        """
        self._work.stop(timeout)


class RunRegistry:
    """The current run of each (browser session, tab), so that a Stop button finds its own run only.

    A finished run stays findable for a while (a Stop that races the end of a run then still gets
    the final state), then is forgotten so that long uptimes do not pile up old outputs.
    """

    KEEP_FINISHED_S = 600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], BackgroundRun] = {}

    def _forget_old(self) -> None:
        horizon = time.monotonic() - self.KEEP_FINISHED_S
        for key, run in list(self._runs.items()):
            if run.finished_at is not None and run.finished_at < horizon:
                del self._runs[key]

    @staticmethod
    def _key(request, scope: str) -> tuple[str, str] | None:
        """The run's key: its browser session (Gradio's session hash) and tab. None without a session: a
        caller that names none owns no run, so no two such callers can reach each other's."""
        session = getattr(request, "session_hash", None)
        return (str(session), scope) if session else None

    def start(self, request, scope: str, produce: Produce, width: int) -> BackgroundRun:
        run = BackgroundRun(produce, width, name=f"specsteer-{scope}")
        key = self._key(request, scope)
        if key is not None:  # a direct call (tests) has no page, so no Stop button to find it
            with self._lock:
                self._forget_old()
                self._runs[key] = run
        return run

    def stop(self, request, scope: str, timeout: float = 10.0) -> BackgroundRun | None:
        """Stop the session's run of that tab and return it (None when the session has none: a Stop from
        another session never reaches it)."""
        key = self._key(request, scope)
        if key is None:
            return None
        with self._lock:
            run = self._runs.get(key)
        if run is not None:
            run.stop(timeout)
        return run


RUNS = RunRegistry()


class Throttle:
    """Says when to publish a frame: every ``every`` items or ``seconds``, whichever comes first.

    Rendering the whole output after every token costs time proportional to its length, so doing it
    for each of n tokens would cost n² overall.
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
    runtime: str = ""
    precision: str = ""
    started: float = field(default_factory=time.perf_counter)
    emitted: int = 0
    accepted: int = 0
    rejected: int = 0
    rounds: int = 0
    first_token_s: float | None = None
    first_visible_s: float | None = None  # the first token on screen, a pending draft included
    # Link bytes so far, where the engine's events carry running totals (``uplink_bytes`` /
    # ``downlink_bytes``); otherwise they are known only from the Finished statistics.
    uplink_bytes: int | None = None
    downlink_bytes: int | None = None
    cloud: str = ""  # where the Cloud runs ("" in process), as the settings say
    link: LinkConditions | None = None  # the emulated network, if any

    def add(self, event: TokenEvent) -> None:
        if self.first_visible_s is None:
            self.first_visible_s = self.seconds
        if event.pending:  # counted when its verdict settles it
            return
        if event.emitted:
            self.emitted += 1
            if self.first_token_s is None:
                self.first_token_s = self.seconds
        if event.kind == "accepted":
            self.accepted += 1
        elif event.kind == "rejected":
            self.rejected += 1
        self.rounds = max(self.rounds, event.round)
        self.uplink_bytes = event.uplink_bytes
        self.downlink_bytes = event.downlink_bytes

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def view(self, state: str) -> StatsView:
        """The strip as it stands; the prefix cache's reuse is known only at the end."""
        return StatsView(
            method=self.method,
            tokens=self.emitted,
            seconds=self.seconds,
            accepted=self.accepted,
            drafted=self.accepted + self.rejected,
            rounds=self.rounds,
            uplink_bytes=self.uplink_bytes,
            downlink_bytes=self.downlink_bytes,
            state=state,
            runtime=self.runtime,
            precision=self.precision,
            ttft_s=self.first_token_s,
            first_visible_s=self.first_visible_s,
            cloud=self.cloud,
            link=self.link,
        )
