"""Long work in a worker thread, followed from another thread as an iterator of what it reports.

The app needs this three ways: a streamed handler whose work must outlive the handler (a Stop
button abandons the handler, but the work has to finish its run and leave a final state), a model
pair that reports its loading progress through a callback, and an evaluation grid run from the
dashboard. :class:`Background` serves them all: the *work* runs in a daemon thread and hands items
to ``emit``; the consumer iterates :meth:`Background.items`, then reads :meth:`Background.result`
(the work's return value, or its exception raised again in the consumer's thread).

It knows nothing of any GUI: ``ui.streaming`` builds Gradio's frame streaming on top of it.

A process that is asked to stop (``app.py`` on SIGTERM or SIGINT) calls :func:`cancel_all`, then
:func:`wait_all`: every work still running gets its cancel flag, so a generation ends at its next token
and saves what it produced, and an evaluation run ends cancelled with its finished cells stored; work
started after that is cancelled as it starts.
"""

from __future__ import annotations

import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

Emit = Callable[[Item], None]


class Background(Generic[Item, Result]):
    """Runs ``work(emit, cancel)`` in a daemon thread, started at once.

    ``merge``: when given, items the consumer has not taken yet are merged into one
    (``merge(older, newer)``), so a slow consumer gets the latest state rather than a backlog;
    without it every item is delivered. ``cancel`` is the work's stop flag: set by :meth:`stop`, and
    by a consumer that abandons :meth:`items` before the end (the work must not go on alone).
    """

    def __init__(
        self,
        work: Callable[[Emit[Item], threading.Event], Result],
        *,
        name: str,
        merge: Callable[[Item, Item], Item] | None = None,
    ) -> None:
        self.cancel = threading.Event()
        self._merge = merge
        self._condition = threading.Condition()
        self._pending: list[Item] = []  # emitted, not yet taken by the consumer
        self._done = False
        self._result: Result | None = None
        self._error: BaseException | None = None
        self.finished_at: float | None = None  # time.monotonic() when the work ended
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        with _registry_lock:
            _running.add(self)
            if _closing.is_set():  # the process is shutting down: the work sees its flag set at once
                self.cancel.set()
        self._thread.start()

    @classmethod
    def iterate(
        cls,
        produce: Callable[[threading.Event], Iterable[Item]],
        *,
        name: str,
        merge: Callable[[Item, Item], Item] | None = None,
    ) -> Background[Item, None]:
        """Runs an iterator instead of a callback-style work: every item it yields is emitted."""

        def work(emit: Emit[Item], cancel: threading.Event) -> None:
            for item in produce(cancel):
                emit(item)

        return Background(work, name=name, merge=merge)

    def _run(self, work: Callable[[Emit[Item], threading.Event], Result]) -> None:
        try:
            self._result = work(self._emit, self.cancel)
        except BaseException as error:  # raised again in the consumer's thread by result()
            self._error = error
        finally:
            with self._condition:
                self._done = True
                self.finished_at = time.monotonic()
                self._condition.notify_all()

    def _emit(self, item: Item) -> None:
        with self._condition:
            if self._merge is not None and self._pending:
                self._pending[-1] = self._merge(self._pending[-1], item)
            else:
                self._pending.append(item)
            self._condition.notify_all()

    @property
    def name(self) -> str:
        return self._thread.name

    @property
    def done(self) -> bool:
        with self._condition:
            return self._done

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the work to end; True if it has."""
        self._thread.join(timeout)
        return self.done

    def items(self, min_interval: float = 0.0, poll: float = 0.25) -> Iterator[Item]:
        """The emitted items as they come, until the work ends (at most one batch per ``min_interval``)."""
        exhausted = False
        try:
            while True:
                with self._condition:
                    # Read "done" before taking: everything emitted before the end is then taken.
                    done_before = self._done
                    if not self._pending and not done_before:
                        self._condition.wait(poll)
                    taken, self._pending = self._pending, []
                if taken:
                    yield from taken
                    time.sleep(min_interval)
                elif done_before:
                    break
            exhausted = True
        finally:
            if not exhausted:  # the consumer went away: the work must not go on alone
                self.cancel.set()

    def result(self, timeout: float | None = None) -> Result:
        """The work's return value, once it has ended; its exception is raised here instead."""
        if not self.wait(timeout):
            raise TimeoutError(f"{self._thread.name} is still running")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def stop(self, timeout: float | None = None) -> None:
        """Set ``cancel``, wait up to ``timeout`` seconds for the work to end, and drop untaken items.

        A consumer that stops the work shows the final state itself; items still pending would
        otherwise reach an abandoned stream and repeat older states after it.
        """
        self.cancel.set()
        self._thread.join(timeout)
        with self._condition:
            self._pending.clear()


# --------------------------------------------------------------------------- shutting the process down

_registry_lock = threading.Lock()
# Every work started; a running one is held alive by its thread, a finished one is dropped when unused.
_running: weakref.WeakSet[Background] = weakref.WeakSet()
_closing = threading.Event()


def cancel_all() -> None:
    """Set the cancel flag of every running work and of every work started from now on (the process
    is shutting down). Returns at once; :func:`wait_all` waits for the works to end."""
    with _registry_lock:
        _closing.set()
        works = list(_running)
    for work in works:
        work.cancel.set()


def wait_all(timeout: float) -> tuple[str, ...]:
    """Wait up to ``timeout`` seconds in all for every work to end; the names of those still running
    (a model load cannot be cut short, for one)."""
    deadline = time.monotonic() + timeout
    with _registry_lock:
        works = list(_running)
    for work in works:
        work.wait(max(0.0, deadline - time.monotonic()))
    return tuple(work.name for work in works if not work.done)


@contextmanager
def stop_signals_handled(handler: Callable[[int, object], None]) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM while the block runs, the previous handlers after it. Off the
    main thread (which alone may set handlers) the block runs with the handlers as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, earlier in previous.items():
            signal.signal(number, earlier)
