"""How a tab's long task is wired to its buttons, the same way on every tab.

A Run button first shows "Queued" at once (before the queue: the queue position appears beside it
while others run first), then starts the long handler in the one queue slot every model shares;
the tab's Stop (or Cancel) button ends that run through its own handler, which shows where the run
ended (see ``ui.streaming``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from ui import render
from ui.gpu_space import on_gpu, stop_on_gpu
from ui.streaming import MODELS_CONCURRENCY_ID

# Events of the page's own bookkeeping: not part of the public API, no spinner over their outputs.
QUIET: dict[str, Any] = {"api_visibility": "private", "show_progress": "hidden"}


def wire_run(
    run: gr.Button,
    stop: gr.Button,
    status: gr.components.Component,
    work: Callable,
    inputs: Sequence[gr.components.Component],
    outputs: Sequence[gr.components.Component],
    *,
    api_name: str,
    stop_work: Callable,
    stop_api_name: str,
    inputs_kwargs: dict[str, gr.components.Component] | None = None,
    concurrency_id: str = MODELS_CONCURRENCY_ID,
) -> gr.events.Dependency:
    """Run → queued status → ``work`` (the long handler, in the ``concurrency_id`` queue slot: the models'
    by default; on ZeroGPU a GPU task, ``ui.gpu_space.on_gpu``); Stop → ``stop_work``, which cancels it. Both
    write ``outputs``; ``status`` is the one the queued message goes to."""
    queued = run.click(render.queued_status, None, status, queue=False, **QUIET)
    started = queued.then(
        on_gpu(work, api_name),
        list(inputs),
        list(outputs),
        inputs_kwargs=inputs_kwargs,
        api_name=api_name,
        concurrency_id=concurrency_id,
        concurrency_limit=1,
    )
    stop.click(stop_on_gpu(stop_work), None, list(outputs), cancels=[started], api_name=stop_api_name, queue=False)
    return started


@dataclass(frozen=True)
class PageRefresh:
    """What a tab shows of stored data and how to read it afresh when a page opens (other users, or an
    earlier run of the app, may have stored more since the page was built)."""

    read: Callable[[], Any]
    outputs: Sequence[gr.components.Component]

    def on_load(self, page: gr.Blocks) -> None:
        page.load(self.read, None, list(self.outputs), **QUIET)


@dataclass
class GenerateControls:
    """The components the Compare tab reuses: it runs on the same history, input and settings."""

    history: gr.State
    task: gr.Dropdown
    input_text: gr.Textbox
    settings: dict[str, gr.components.Component]  # GenerationSettings field name -> its widget
    pairing: gr.Dropdown  # settings["pairing"]: the pairing picker
