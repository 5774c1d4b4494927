"""The Generate tab's P³ settings (method p3; specsteer.method.p3): the Cloud's draft length and the Edge's τ."""

from __future__ import annotations

import gradio as gr

from specsteer.engine.settings import GenerationSettings
from specsteer.protocol.wire import MAX_DRAFT_LEN


def p3_widgets(defaults: GenerationSettings, elem_prefix: str = "") -> dict[str, gr.components.Component]:
    """Two sliders in one row, keyed by their GenerationSettings field (built inside the caller's layout; the
    Dashboard's grid builds its own under ``elem_prefix``, for EvalSpec's fields of the same names)."""
    with gr.Row():
        draft_len = gr.Slider(
            1,
            MAX_DRAFT_LEN,
            value=defaults.p3_draft_len,
            step=1,
            label="P³: Cloud draft length k",
            elem_id=f"{elem_prefix}p3-draft-len",
            info="P³ only: tokens the cloud drafts per round",
        )
        tau = gr.Slider(
            0,
            1,
            value=defaults.p3_tau,
            step=0.01,
            label="P³: τ",
            elem_id=f"{elem_prefix}p3-tau",
            info="P³ only: the device keeps a cloud draft while p / max p ≥ τ (0 keeps all, 1 only its own best)",
        )
    return {"p3_draft_len": draft_len, "p3_tau": tau}
