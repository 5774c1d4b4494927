"""The app on a GPU: a GPU Space, or a ZeroGPU Space through Hugging Face's ``spaces`` package. On a CPU
nothing here changes anything: :func:`on_gpu` returns each handler as it is and the catalog stays on the CPU.

Three cases, told apart by :func:`detect` when ``app.py`` starts, before anything touches CUDA:

* **CPU** (a CPU Space, Docker, a laptop): as before. Auto picks the runtime from the machine's calibration.
* **A GPU** (a GPU Space, or any machine where torch reports CUDA): the service's ``PairCatalog`` gets a
  ``Placement`` on ``cuda`` in bf16 (fp32 before Ampere; ``specsteer.runtimes.hardware.cuda_dtype``), auto picks
  transformers (the project's llama.cpp is the CPU build) and the runtime note says where the models run.
* **ZeroGPU** (``$SPACES_ZERO_GPU`` true, read the way the ``spaces`` package reads it): a GPU is lent to a
  function only while a function decorated with ``spaces.GPU`` runs, in a process forked for it (arguments
  and every streamed frame cross a pipe, pickled). So ``spaces`` is imported first (it must be, before
  CUDA is initialised: it makes torch report a GPU and records what is moved to "cuda" outside a GPU
  task), the default pairing is loaded on the main thread before the server starts (:func:`preload`:
  the weights are handed to the GPU at each task's start), and the handlers that run models (Generate,
  Compare and an evaluation grid, which ``ui.wiring.wire_run`` wires, and a campaign's generation) are
  decorated with ``spaces.GPU(duration=...)``, the duration read from each request (:class:`GpuBudget`).
  What the app cannot do there is listed in docs/SPACES.md.

The decoration happens where the handlers are wired (``ui.wiring``, ``ui.campaign_tab``); the handlers stay as they are.
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported only after ``spaces`` (see detect)
    from specsteer.runtimes.placement import Placement
    from specsteer.service.app_service import AppService

log = logging.getLogger(__name__)

ZERO_GPU_ENV = "SPACES_ZERO_GPU"  # set by Hugging Face on ZeroGPU hardware; ``spaces`` reads the same variable


def zero_gpu_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this is a ZeroGPU Space: ``$SPACES_ZERO_GPU`` is 1 / t / true (any case), as ``spaces`` reads it."""
    value = (os.environ if environ is None else environ).get(ZERO_GPU_ENV)
    return value is not None and value.strip().lower() in ("1", "t", "true")


def import_spaces() -> ModuleType:
    """The ``spaces`` package (installed on every ZeroGPU Space; ``pip install spaces`` elsewhere)."""
    try:
        return importlib.import_module("spaces")
    except ImportError as error:
        raise RuntimeError(
            f"${ZERO_GPU_ENV} says this is a ZeroGPU Space, but the `spaces` package cannot be imported "
            f"({error}). ZeroGPU Spaces install it themselves; elsewhere unset ${ZERO_GPU_ENV}."
        ) from error


@dataclass(frozen=True)
class SpaceHardware:
    """What the app runs on: ``kind`` "cpu", "gpu" or "zerogpu", and where the transformers runtime puts models."""

    kind: str
    placement: Placement

    @property
    def zero_gpu(self) -> bool:
        return self.kind == "zerogpu"

    def describe(self) -> str:
        if self.zero_gpu:
            return f"ZeroGPU: model handlers run in GPU tasks, models on {self.placement.describe()}"
        if self.kind == "gpu":
            return f"a GPU: models on {self.placement.describe()}"
        return "the CPU"


def detect(environ: Mapping[str, str] | None = None) -> SpaceHardware:
    """The hardware this app runs on. On ZeroGPU it imports ``spaces`` first, before torch is asked about
    CUDA: from then on torch reports the GPU that each task will get, so the placement is cuda there too."""
    zero = zero_gpu_requested(environ)
    if zero:
        import_spaces()
    from specsteer.runtimes.placement import Placement

    placement = Placement.detect()
    if zero:
        return SpaceHardware("zerogpu", placement)
    return SpaceHardware("gpu" if placement.on_gpu else "cpu", placement)


# --------------------------------------------------------------------------- how long a GPU task asks for

# What a task asks ZeroGPU for is counted against the visitor's GPU quota, and a shorter request is
# scheduled sooner; a task that runs past it is ended. So each asks for what the request itself may
# need: a fixed part plus a time per token for the most tokens it may generate, bounded by the
# visitor limits (specsteer.service.limits). The two figures are budgets, not measurements (no GPU was
# at hand where this was written): a Python-loop decode of the 0.5B/1.5B pair takes a few tens of
# milliseconds per round on an A100-class GPU, and 0.1 s per token leaves room for the generic
# Specialist's pass and the recovery. Revise them from `specsteer bench speed` on the Space's GPU.
FIXED_S = 30.0  # the pairing's weights moved to the task's GPU, the prompts read
PER_TOKEN_S = 0.1
GRID_CEILING_S = 300  # the most an evaluation grid asks for at once; a grid cut there keeps its finished cells


@dataclass(frozen=True)
class GpuBudget:
    """Seconds a GPU task asks for: ``fixed_s + per_token_s × tokens × outputs``, rounded up and at most
    ``ceiling_s``. ``tokens`` is the request's own ``max_new_tokens`` (clamped to ``max_tokens``, the
    visitor limit; the limit itself when the value is missing or not a number). Called with the handler's
    arguments, as ``spaces.GPU(duration=...)`` calls a callable duration; ``methods_arg``: the position of
    the handler's list of methods, when each method is one output (a comparison)."""

    outputs: int  # the most generations one call may run (1; a comparison's methods; a grid's cells)
    max_tokens: int
    ceiling_s: int
    fixed_s: float = FIXED_S
    per_token_s: float = PER_TOKEN_S
    methods_arg: int | None = None

    def seconds(self, max_new_tokens: object = None, outputs: int | None = None) -> int:
        tokens = self.max_tokens
        if isinstance(max_new_tokens, (int, float)) and not isinstance(max_new_tokens, bool):
            if math.isfinite(max_new_tokens):
                tokens = min(max(int(max_new_tokens), 1), self.max_tokens)
        count = self.outputs if outputs is None else min(max(outputs, 1), self.outputs)
        return min(self.ceiling_s, math.ceil(self.fixed_s + self.per_token_s * tokens * count))

    def __call__(self, *args: object, **kwargs: object) -> int:
        methods = args[self.methods_arg] if self.methods_arg is not None and len(args) > self.methods_arg else None
        outputs = len(methods) if isinstance(methods, (list, tuple)) else None
        return self.seconds(kwargs.get("max_new_tokens"), outputs)


def budgets(public: bool | None = None) -> dict[str, GpuBudget]:
    """The budget of each handler ``wire_run`` wires, by its API name, from the visitor limits of a public
    (default: as the environment says) or a local app."""
    from specsteer.method.catalog import PRIVATE_METHODS
    from specsteer.protocol.exposure import Exposure
    from specsteer.service.campaign_checks import MAX_RECORDS
    from specsteer.service.limits import limits_for

    limits = limits_for(Exposure.from_environment().public if public is None else public)
    tokens = limits.max_new_tokens
    one = GpuBudget(1, tokens, ceiling_s=math.ceil(FIXED_S + PER_TOKEN_S * tokens))
    return {
        "generate": one,
        # CompareTab.compare(history, task, input_text, methods, blind, ...): one output per method chosen.
        "compare": GpuBudget(
            len(PRIVATE_METHODS), tokens, ceiling_s=one.ceiling_s * len(PRIVATE_METHODS), methods_arg=3
        ),
        "evaluate": GpuBudget(limits.open_grid_cells, tokens, ceiling_s=GRID_CEILING_S),
        # An operator's campaign: up to MAX_RECORDS comparisons; one cut at the ceiling keeps the comparisons
        # it stored, and Generate resumes it.
        "campaign_generate": GpuBudget(MAX_RECORDS * len(PRIVATE_METHODS), tokens, ceiling_s=GRID_CEILING_S),
    }


def on_gpu(work: Callable, api_name: str, environ: Mapping[str, str] | None = None) -> Callable:
    """``work`` as the event should run it: on ZeroGPU decorated with ``spaces.GPU`` and the budget of
    ``api_name`` (a generator stays a generator: ``spaces`` streams what it yields); anywhere else unchanged."""
    if not zero_gpu_requested(environ):
        return work
    budget = budgets().get(api_name)
    if budget is None:
        raise ValueError(f"no GPU budget for the handler {api_name!r}; add one to ui.gpu_space.budgets")
    return import_spaces().GPU(duration=budget)(work)


GPU_TASK_STOPPED = (
    "Stopped. On ZeroGPU a run is a GPU task in a process of its own: it ends at its next step, and this page "
    "keeps what it had streamed."
)


def stop_on_gpu(stop_work: Callable, environ: Mapping[str, str] | None = None) -> Callable:
    """A Stop handler as the event should run it. On ZeroGPU the run lives in its GPU task's process, so this
    process's Stop handler never finds it (``ui.streaming.RUNS``) and would say that nothing of the page's is
    running; Gradio's cancel still ends the task (``spaces`` stops the handler at its next frame), so that
    message is replaced by one that says so. Anywhere else unchanged."""
    if not zero_gpu_requested(environ):
        return stop_work
    from ui import render
    from ui.streaming import NOT_YOURS

    not_found = render.message_box(NOT_YOURS, "warning")
    stopped = render.message_box(GPU_TASK_STOPPED, "warning")

    @functools.wraps(stop_work)
    def stop(*args: object, **kwargs: object) -> object:
        view = stop_work(*args, **kwargs)
        if not isinstance(view, tuple) or not view or view[0] != not_found:
            return view
        if hasattr(view, "_replace"):  # a named view: its first field is the status
            return view._replace(**{view._fields[0]: stopped})  # type: ignore[attr-defined]
        return (stopped, *view[1:])

    return stop


def preload(service: AppService, pairing_id: str) -> str:
    """On ZeroGPU, load ``pairing_id`` now, on the main thread, before the server starts: ``spaces`` records
    the weights moved to "cuda" here (it intercepts that on the thread that imported it) and hands them to
    each GPU task, whose process starts with the pair already loaded. Returns what happened, for the log;
    a failure is logged, not raised (a click then reports it, as on a CPU)."""
    try:
        pair = service.pairs.load(pairing_id, "auto", lambda line: log.info("preload: %s", line))
    except Exception as error:  # the app still starts; the first request says what is wrong
        log.warning("ZeroGPU preload of %s failed: %s", pairing_id, error)
        return f"preload of {pairing_id} failed: {error}"
    return f"{pairing_id} loaded ({pair.runtime}, {pair.precision})"
