"""A first click as fast as the second: the app's default pairing loaded, and its default request's
prompts read once, in the background while the page is already served.

:class:`WarmUp` runs one piece of work in a ``Background`` thread and keeps its :class:`WarmUpState`
(what it is doing, for a progress line; ready or failed). ``AppService.warm_up`` gives it the work: load
the pair, then run the default request for a single token without saving anything, so that every stream
of the first real generation (the Specialist on the private prompt, the Cloud's Generalist and generic
copy on the plain one) finds its prompt in the model's prefix cache. A click while it runs waits for it
(``AppService._load``): two generations at once would share the same cores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from specsteer.util.background import Background

Phase = Literal["loading", "reading", "ready", "failed"]


@dataclass(frozen=True)
class WarmUpState:
    """Where the warm-up stands: ``message`` is one line for the page; ``seconds`` since it started."""

    phase: Phase
    message: str
    seconds: float

    @property
    def done(self) -> bool:
        return self.phase in ("ready", "failed")


class WarmUp:
    """``work(say, cancel)`` in the background; ``say(phase, message)`` updates the state it reports."""

    def __init__(self, work: Callable[[Callable[[Phase, str], None], threading.Event], str], name: str) -> None:
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._phase: Phase = "loading"
        self._message = "Loading the models…"
        self._work: Background[None, str] = Background(lambda _emit, cancel: self._run(work, cancel), name=name)

    def _run(self, work, cancel: threading.Event) -> str:
        try:
            message = work(self._say, cancel)
        except BaseException as error:  # kept as the state; a click then loads (and reports) on its own
            self._say("failed", f"Getting the models ready failed ({type(error).__name__}): {error}")
            raise
        self._say("ready", message)
        return message

    def _say(self, phase: Phase, message: str) -> None:
        with self._lock:
            self._phase, self._message = phase, message

    @property
    def state(self) -> WarmUpState:
        with self._lock:
            return WarmUpState(self._phase, self._message, time.monotonic() - self._started)

    @property
    def done(self) -> bool:
        return self._work.done

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds; True once it has ended (ready or failed)."""
        return self._work.wait(timeout)

    def stop(self, timeout: float | None = None) -> None:
        self._work.stop(timeout)
