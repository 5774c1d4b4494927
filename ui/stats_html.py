"""The statistics strip: what a generation did (speed, acceptance, bytes on the link, runtime, where the
Generalist verified), live from the token events or final from the generation's stats. :func:`stat_cell` is
the cell of every such strip (a remote Cloud's facts use it too).

The rule of this module, as of every module that builds HTML: each piece of text that came from a user, a
file or a model goes through :func:`ui.markup.esc` before it is placed in markup; here that covers method
names, a Cloud's address and runtime choices. Only this module's own literals (class names, labels, numbers
it formats) are trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from specsteer.method.catalog import METHOD_INFO, method_label
from specsteer.method.events import GenerationStats
from specsteer.protocol.emulation import LinkConditions
from ui.markup import esc


def fmt_rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _fmt_bytes(value: int | None) -> str:
    if value is None:
        return "–"
    if value < 10_000:
        return f"{value:,} B"
    return f"{value / 1024:,.1f} KiB"


@dataclass(frozen=True)
class StatsView:
    """What the statistics strip shows, live (from the token events) or final (from the generation's stats)."""

    method: str
    tokens: int
    seconds: float
    accepted: int
    drafted: int
    rounds: int
    uplink_bytes: int | None  # None while unknown
    downlink_bytes: int | None
    state: str  # "running", or the stop reason: "eos", "length", "cancelled", "failed"
    runtime: str = ""  # "llama.cpp" | "transformers"; "" before the pair is loaded
    precision: str = ""
    runtime_choice: str = ""  # why that runtime ran it (auto picks per machine and method)
    ttft_s: float | None = None  # seconds to the first emitted (verified) token
    first_visible_s: float | None = None  # seconds to the first token on screen (a pending draft counts)
    reused_tokens: Mapping[str, int] | None = None  # prompt tokens served from the prefix cache, per stream
    cloud: str = ""  # GenerationSettings.cloud: "" in process, else the Cloud service's address
    link: LinkConditions | None = None  # the emulated network, None when none was emulated
    specialist_lora: str = ""  # the taught Specialist's label (GenerationStats.specialist_lora), "" for the base model

    @classmethod
    def final(
        cls, stats: GenerationStats, state: str | None = None, cloud: str = "", link: LinkConditions | None = None
    ) -> StatsView:
        return cls(
            method=stats.method,
            tokens=stats.new_tokens,
            seconds=stats.seconds,
            accepted=stats.accepted,
            drafted=stats.drafted,
            rounds=stats.rounds,
            uplink_bytes=stats.uplink_bytes,
            downlink_bytes=stats.downlink_bytes,
            state=state or stats.stop_reason,
            runtime=stats.runtime,
            precision=stats.precision,
            runtime_choice=stats.runtime_choice,
            ttft_s=stats.ttft_s,
            first_visible_s=stats.first_visible_s,
            reused_tokens=dict(stats.reused_tokens),
            cloud=cloud,
            link=link,
            specialist_lora=stats.specialist_lora,
        )


def _specialist_cells(view: StatsView) -> list[tuple[str, str, str]]:
    """A taught Specialist is named once the generation ends (the live strip does not know it yet)."""
    if not view.specialist_lora:
        return []
    return [("Specialist", "taught (LoRA)", f"the Edge's Specialist with the adapter {view.specialist_lora}")]


def _fmt_reused(reused: Mapping[str, int] | None) -> tuple[str, str]:
    """(the cell's value, a tooltip with the count per model stream)."""
    if reused is None:
        return "–", "known when the generation ends"
    total = sum(reused.values())
    detail = ", ".join(f"{stream}: {count:,}" for stream, count in reused.items()) or "no model stream"
    return (f"{total:,} tokens" if total else "none"), f"prompt tokens read from the prefix cache ({detail})"


def _kbps(value: float) -> str:
    return "unlimited" if math.isinf(value) else f"{value:,.0f} kbps"


def link_text(link: LinkConditions) -> str:
    """An emulated network in a few words: "RTT 50 ms · up 2,000 kbps · down unlimited"."""
    return f"RTT {link.rtt_ms:g} ms · up {_kbps(link.uplink_kbps)} · down {_kbps(link.downlink_kbps)}"


def _cloud_cells(view: StatsView) -> list[tuple[str, str, str]]:
    if METHOD_INFO.get(view.method) is not None and METHOD_INFO[view.method].device_only:
        return [("cloud", "not used", "this method runs on the device alone: nothing crosses the link")]
    cells = [
        (
            "cloud",
            view.cloud or "inside this app",
            "where the Generalist verified: the Cloud service at this address (only the Specialist ran here)"
            if view.cloud
            else "where the Generalist verified: inside this app, beside the Specialist (no network between them)",
        )
    ]
    if view.link is not None:
        cells.append(
            (
                "emulated link",
                link_text(view.link),
                "every message waited as it would on this network (link_emulation.LinkEmulator)",
            )
        )
    return cells


def stat_cell(name: str, value: str, hint: str) -> str:
    title = f' title="{esc(hint)}"' if hint else ""
    return (
        f'<div class="ss-stat"{title}><div class="ss-stat-name">{esc(name)}</div>'
        f'<div class="ss-stat-value">{esc(value)}</div></div>'
    )


def stats_html(view: StatsView) -> str:
    """The live (or final) statistics strip."""
    speed = view.tokens / view.seconds if view.seconds > 0 else 0.0
    acceptance = view.accepted / view.drafted if view.drafted else None
    runtime = " · ".join(part for part in (view.runtime, view.precision) if part) or "–"
    reused, reused_detail = _fmt_reused(view.reused_tokens)
    cells = [
        ("method", method_label(view.method), ""),
        ("tokens", f"{view.tokens}", ""),
        ("speed", f"{speed:.1f} tok/s", ""),
        (
            "first visible",
            "–" if view.first_visible_s is None else f"{view.first_visible_s:.2f} s",
            "time from the request to the first token on screen (a draft awaiting the cloud's verdict counts)",
        ),
        (
            "first token",
            "–" if view.ttft_s is None else f"{view.ttft_s:.2f} s",
            "time from the request to the first verified token",
        ),
        ("acceptance", f"{fmt_rate(acceptance)}" + (f" ({view.accepted}/{view.drafted})" if view.drafted else ""), ""),
        ("rounds", f"{view.rounds}" if view.rounds else "–", ""),
        ("uplink", _fmt_bytes(view.uplink_bytes), ""),
        ("downlink", _fmt_bytes(view.downlink_bytes), ""),
        (
            "runtime",
            runtime,
            view.runtime_choice or "the runtime that computed the logits, and the precision of its weights",
        ),
        ("prefix cache", reused, reused_detail),
        *_specialist_cells(view),
        *_cloud_cells(view),
        ("state", view.state, ""),
    ]
    body = "".join(stat_cell(name, value, hint) for name, value, hint in cells)
    return f'<div class="ss-stats" data-state="{esc(view.state)}">{body}</div>'
