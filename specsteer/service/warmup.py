"""The first Generate without the wait for models: the app's default pairing loaded, and its default request's
prompts read once, in the background while the page is already served. What it spares is said for what was
measured only: the loading, and the default sample's prompts (``benchmarks/bench_first_click.py`` measured a
first click with them as fast as the second, and one with another sample waiting seconds for its own prompts).

:class:`WarmUp` runs one piece of work in a ``Background`` thread and keeps its :class:`WarmUpState`
(what it is doing, for a progress line; ready or failed). ``GenerationService.warm_up`` gives it the work,
:func:`warm`: load the pair, then run the default request for a single token without saving anything, so
that every stream of the first real generation (the Specialist on the private prompt, the Cloud's
Generalist and generic copy on the plain one) finds its prompt in the model's prefix cache. A click while
it runs waits for it (``PairLoader.load``): two generations at once would share the same cores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD
from specsteer.engine.generate import generate
from specsteer.engine.request import Prepared
from specsteer.engine.settings import GenerationSettings
from specsteer.method.events import Finished
from specsteer.service.pair_catalog import PairCatalog
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


def warm(
    pairs: PairCatalog,
    settings: GenerationSettings,
    prepared: Prepared,
    say: Callable[[Phase, str], None],
    cancel: threading.Event,
) -> str:
    """The start-up warm-up's work (:class:`WarmUp`): load the pair of ``settings``, then read the prepared
    request's prompts once, one token long, saving nothing."""
    started = time.monotonic()
    pair = pairs.load(
        settings.pairing,
        settings.runtime,
        lambda line: say("loading", f"Loading the models: {line}"),
        edge_only=settings.remote,
        method=settings.method,
    )
    loaded = time.monotonic() - started
    if settings.remote or cancel.is_set():  # a remote Cloud reads its own prompts; only the Edge is here
        return f"Models ready ({loaded:.0f} s)."
    say("reading", f"Models loaded in {loaded:.0f} s; reading the default sample's prompts…")
    config = replace(settings.decode_config(), max_new_tokens=1)
    reading = time.monotonic()
    for event in generate(
        pair, prepared, config, cancel=cancel, cloud=InProcessCloud(pair, read_ahead=DEFAULT_READ_AHEAD)
    ):
        if isinstance(event, Finished):
            break
    read_s = time.monotonic() - reading
    return (
        f"Models ready ({time.monotonic() - started:.0f} s). The default sample's prompts are read ({read_s:.0f} s "
        "here): a Generate with that sample and input skips that wait; another history or input reads its own "
        "prompts first."
    )
