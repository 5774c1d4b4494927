"""The Generate tab's "Teach the Specialist my history" panel: a button, its progress, and the taught
Specialist's label, kept per page (a ``gr.State``) and sent with every generation as the ``specialist_lora``
setting. The decisions (bounds, runtime, which adapters exist) are the service's
(``specsteer.service.lora_teaching``); this module lays out, wires and renders."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from specsteer.service.app_service import AppService
from specsteer.service.lora_teaching import TeachDone, TeachFailed
from specsteer.stores.generations import NamedHistory
from ui import render
from ui.streaming import TEACHING_CONCURRENCY_ID
from ui.wiring import QUIET

BASE_NOTE = (
    "The Specialist is the base model. Teaching trains a small LoRA adapter on this history here, on the "
    "device (minutes on a CPU; transformers runtime); the cloud never receives it."
)


@dataclass
class TeachControls:
    label: gr.State  # the taught Specialist's label, "" for the base model: the ``specialist_lora`` setting


class TeachPanel:
    """The panel's handlers (tested without a server)."""

    def __init__(self, service: AppService) -> None:
        self.service = service

    def teach(
        self, history: NamedHistory | None, task: str, pairing: str, runtime: str, request: gr.Request | None = None
    ) -> Iterator[tuple[str, str | gr.components.Component]]:
        """(status HTML, the label) as training goes; the label changes only when an adapter is ready."""
        session = str(getattr(request, "session_hash", None) or id(request))
        skip = gr.skip()
        for event in self.service.teach_specialist(session, history, task, pairing or "", runtime or "auto"):
            if isinstance(event, TeachDone):
                yield render.message_box(event.message, "ok"), event.label
            elif isinstance(event, TeachFailed):
                yield render.message_box(event.message, "error"), skip
            else:
                yield render.message_box(event.message, "busy"), skip

    @staticmethod
    def forget() -> tuple[str, str]:
        """Another history or pairing: the page's taught Specialist no longer applies."""
        return render.message_box(BASE_NOTE, "info"), ""


def build(
    service: AppService, history: gr.State, task: gr.Dropdown, pairing: gr.Dropdown, runtime: gr.components.Component
) -> TeachControls:
    """The panel, under the history's widgets; cleared when the history or the pairing changes."""
    panel = TeachPanel(service)
    with gr.Accordion("Teach the Specialist my history (LoRA, on the device)", open=False, elem_id="lora-teach"):
        button = gr.Button("Teach the Specialist my history", size="md", elem_id="lora-teach-button")
        status = gr.HTML(render.message_box(BASE_NOTE, "info"), elem_id="lora-teach-status")
    label = gr.State("")
    button.click(
        panel.teach,
        [history, task, pairing, runtime],
        [status, label],
        api_name="teach_specialist",
        concurrency_id=TEACHING_CONCURRENCY_ID,
        concurrency_limit=1,
    )
    for trigger in (history.change, pairing.change):
        trigger(panel.forget, None, [status, label], **QUIET)
    return TeachControls(label)
