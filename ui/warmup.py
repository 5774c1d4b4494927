"""The start-up warm-up on the page: ``start`` asks the service to get the Generate tab's default request
ready (its pairing loaded, its prompts read; ``GenerationService.warm_up``), ``build`` puts a progress line under
the header that each page follows until the models are ready.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace

import gradio as gr

from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS
from specsteer.data.tasks import TASK_FOR_SCHEMA
from specsteer.service import pairings
from specsteer.service.app_service import AppService
from specsteer.service.page import PAGE_DEFAULTS, environment_cloud, read_sample
from specsteer.service.warmup import WarmUp
from ui import render

log = logging.getLogger(__name__)

POLL_S = 0.5
MAX_FOLLOW_S = 1800.0  # a page stops following a warm-up that takes longer than this


def start(service: AppService) -> WarmUp | None:
    """Warm the Generate tab's first request as its widgets start (sample, task, input, settings); None
    when that request cannot run here (the reason is logged; a click then reports it)."""
    history = read_sample(DEFAULT_SAMPLE)
    task = TASK_FOR_SCHEMA.get(history.history.schema, "free")
    settings = replace(PAGE_DEFAULTS, pairing=pairings.default_pairing_id(service.pairs), cloud=environment_cloud()[0])
    try:
        return service.warm_up(history, task, SAMPLE_USERS[DEFAULT_SAMPLE].input_text, settings)
    except ValueError as error:
        log.warning("no start-up warm-up: %s", error)
        return None


def status_html(service: AppService) -> str:
    state = service.warm_up_state()
    if state is None:
        return ""
    if state.phase == "ready":
        return render.message_box(state.message, "ok")
    if state.phase == "failed":
        return render.message_box(state.message, "warning")
    return render.message_box(f"{state.message} ({state.seconds:.0f} s since the app started)", "busy")


def follow(service: AppService) -> Iterator[str]:
    """The progress line, updated until the warm-up ends (then its last word)."""
    started = time.monotonic()
    while True:
        state = service.warm_up_state()
        yield status_html(service)
        if state is None or state.done or time.monotonic() - started > MAX_FOLLOW_S:
            return
        time.sleep(POLL_S)


def build(demo: gr.Blocks, service: AppService) -> gr.HTML:
    """The progress line (under the header), followed by every page that opens."""
    line = gr.HTML(status_html(service), elem_id="warm-up")
    demo.load(lambda: (yield from follow(service)), outputs=line, concurrency_limit=None, show_progress="hidden")
    return line
