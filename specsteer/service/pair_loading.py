"""Loading a pair for a workflow: in a worker thread with its progress as ``Loading`` events, after the
start-up warm-up when one runs, with a page's taught Specialist merged in when the settings name one.
"""

from __future__ import annotations

import time
from collections.abc import Generator

from specsteer.engine.settings import GenerationSettings
from specsteer.models.loading import with_specialist_lora
from specsteer.models.pair import LoadedPair
from specsteer.models.planning import lora_plan
from specsteer.models.weights import ModelLoadError
from specsteer.service.events import Loading
from specsteer.service.lora_teaching import LoraTeacher
from specsteer.service.pair_catalog import PairCatalog
from specsteer.service.warmup import WarmUp, WarmUpState
from specsteer.util.background import Background


class PairLoader:
    """Loads pairs from the catalog for the workflows; ``loading_quiet_s``: a pair loaded this fast reports no
    progress. Holds the start-up warm-up (``GenerationService.warm_up``) that a load waits for."""

    def __init__(self, pairs: PairCatalog, teacher: LoraTeacher, loading_quiet_s: float = 0.3) -> None:
        self.pairs = pairs
        self.teacher = teacher
        self.loading_quiet_s = loading_quiet_s
        self._warm_up: WarmUp | None = None  # the start-up warm-up, while one was asked for

    def hold_warm_up(self, warm_up: WarmUp) -> WarmUp:
        """Keep ``warm_up`` as the one every load waits for first."""
        self._warm_up = warm_up
        return warm_up

    def warm_up_state(self) -> WarmUpState | None:
        """How the start-up warm-up stands; None when none was started."""
        return self._warm_up.state if self._warm_up is not None else None

    def load(
        self, pairing_id: str, runtime: str, edge_only: bool = False, method: str = "specsteer"
    ) -> Generator[Loading, None, LoadedPair]:
        """For ``pair = yield from ...``: loads in a worker thread, reporting the loader's progress.

        A pair already loaded comes back at once without a word. Every failure is a ModelLoadError.
        While the start-up warm-up runs, it waits for it first (saying so): it uses the same cores.
        """
        warm = self._warm_up
        if warm is not None and not warm.wait(self.loading_quiet_s):
            while True:
                state = warm.state
                yield Loading(
                    f"Waiting for the start-up warm-up ({state.seconds:.0f} s since the app started): {state.message}"
                )
                if warm.wait(1.0):
                    break
        loading: Background[str, LoadedPair] = Background(
            lambda emit, _cancel: self.pairs.load(pairing_id, runtime, emit, edge_only=edge_only, method=method),
            name="specsteer-load-pair",
        )
        started = time.monotonic()
        if not loading.wait(self.loading_quiet_s):
            yield Loading("Loading the models (first use; this takes a while once)…")
            for line in loading.items():
                yield Loading(f"Loading the models ({time.monotonic() - started:.0f} s): {line}")
        try:
            return loading.result()
        except ModelLoadError:
            raise
        except (ValueError, KeyError, OSError) as error:
            raise ModelLoadError(str(error.args[0]) if error.args else str(error)) from error

    def for_settings(
        self, settings: GenerationSettings, method: str = "specsteer"
    ) -> Generator[Loading, None, LoadedPair]:
        """For ``pair = yield from ...``: the pair ``settings`` run on, with the page's taught Specialist merged
        in when they name one (transformers only: "auto" loads it there, llama.cpp is refused; the Cloud's
        generic copy stays the base). Every failure is a ModelLoadError."""
        lora = self.teacher.adapter(settings.specialist_lora) if settings.specialist_lora else None
        plan = lora_plan(settings.runtime) if lora is not None else None
        runtime = plan.runtime if plan is not None else settings.runtime
        pair = yield from self.load(settings.pairing, runtime, edge_only=settings.remote, method=method)
        if lora is None or plan is None:
            return pair
        adapted = with_specialist_lora(pair, lora)
        adapted.runtime_plan, adapted.runtime_choice = plan, plan.reason
        return adapted
