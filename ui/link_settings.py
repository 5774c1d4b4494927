"""The Generate tab's link emulation settings: the round-trip time and each direction's bandwidth every message
waits for (specsteer.protocol.emulation), inside this app or against a remote Cloud."""

from __future__ import annotations

import gradio as gr

from specsteer.engine.settings import MAX_RTT_MS, GenerationSettings


def link_widgets(defaults: GenerationSettings) -> dict[str, gr.components.Component]:
    """Three numbers in one row and a note, keyed by their GenerationSettings field (built inside the caller's
    layout)."""
    with gr.Row():
        rtt_ms = gr.Number(
            value=defaults.rtt_ms, minimum=0, maximum=MAX_RTT_MS, label="RTT (ms)", min_width=90, elem_id="rtt-ms"
        )
        uplink_kbps = gr.Number(
            value=defaults.uplink_kbps, minimum=0, label="Uplink (kbps)", min_width=90, elem_id="uplink-kbps"
        )
        downlink_kbps = gr.Number(
            value=defaults.downlink_kbps, minimum=0, label="Downlink (kbps)", min_width=90, elem_id="downlink-kbps"
        )
    gr.Markdown(
        "Link emulation: every message waits as it would on that network, inside this app or against "
        "a remote Cloud. 0 kbps is unlimited; 0 ms and unlimited emulate nothing.",
        elem_classes="ss-note",
    )
    return {"rtt_ms": rtt_ms, "uplink_kbps": uplink_kbps, "downlink_kbps": downlink_kbps}
