"""HTML for the app's smaller views, built from domain objects: message boxes, the history that was read and
what retrieval picked, a comparison's outputs, progress, a remote Cloud's check and a deployment profile. The
larger views have their own modules: the token stream (:mod:`ui.token_html`), the statistics strip
(:mod:`ui.stats_html`) and the privacy panel (:mod:`ui.privacy_html`).

The rule of this module, as of every module that builds HTML: each piece of text that came from a user, a
file or a model goes through :func:`ui.markup.esc` before it is placed in markup. Histories, inputs and
model outputs are untrusted: a history item reading ``<img src=x onerror=...>`` must show up as those
characters and run nothing. Only this module's own literals (class names, labels, numbers it formats) are
trusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specsteer.evaluation.deployment import DeploymentProfile
from specsteer.method.catalog import method_label
from specsteer.method.events import GenerationStats
from specsteer.service.events import CloudCheck, RetrievalPreview
from ui.markup import esc
from ui.stats_html import fmt_rate, link_text, stat_cell
from ui.token_html import KIND_LABELS

TASK_LABELS = {
    "review": "Product review",
    "abstract": "Paper abstract",
    "writing": "Reddit-style post",
    "free": "Free text",
    "cogenesis": "Persona task (CoGenesis)",
}


# --------------------------------------------------------------------------- messages


def message_box(message: str, kind: str = "info") -> str:
    """A coloured box with one message; kind is info, ok, warning or error."""
    icon = {"info": "ℹ", "ok": "✓", "warning": "!", "error": "✕", "busy": "●"}.get(kind, "ℹ")
    return (
        f'<div class="ss-box ss-box-{esc(kind)}" role="{"alert" if kind == "error" else "status"}">'
        f'<span class="ss-box-icon" aria-hidden="true">{icon}</span><span>{esc(message)}</span></div>'
    )


def queued_status() -> str:
    return message_box("Queued: the models serve one request at a time; this one starts when they are free.", "busy")


# --------------------------------------------------------------------------- history and retrieval


def history_summary_html(
    name: str, items: int, schema: str, user_id: str | None, profile: str | None = None, titles: Sequence[str] = ()
) -> str:
    """What was read; a persona's profile and the titles of its texts are shown as well (all of it private)."""
    user = f", user {user_id}" if user_id else ""
    summary = message_box(f"Read {items} item{'s' if items != 1 else ''} from {name} (schema: {schema}{user}).", "ok")
    if not profile:
        return summary
    texts = "".join(f"<li>{esc(title)}</li>" for title in titles)
    return (
        f'{summary}<div class="ss-persona" id="persona-profile"><p class="ss-muted">This persona\'s profile and '
        "texts stay on your device: only the Specialist reads them.</p>"
        f'<pre class="ss-pre">{esc(profile)}</pre>'
        + (f'<p class="ss-muted">Texts they wrote before:</p><ol>{texts}</ol>' if texts else "")
        + "</div>"
    )


def retrieved_html(preview: RetrievalPreview) -> str:
    """The items BM25 picked (as rendered into the Specialist's prompt) with their scores, and both prompts."""
    if preview.total == 0:
        return message_box("No history loaded: the Specialist sees only your input, like the cloud does.", "info")
    if preview.prompts is None:
        return message_box("Type an input to see which history items BM25 retrieves for it.", "info")
    if preview.retrieval_k <= 0:
        return message_box("Retrieval is off (k = 0): the Specialist sees only your input.", "info")
    rows = "".join(
        f'<li class="ss-retrieved-item"><div class="ss-retrieved-head"><span class="ss-rank">#{rank}</span>'
        f'<span class="ss-score">BM25 {item.score:.3f}</span></div>'
        f'<div class="ss-retrieved-text">{esc(item.text)}</div></li>'
        for rank, item in enumerate(preview.items, start=1)
    )
    prompts = (
        "<details class=\"ss-details\"><summary>The Specialist's full prompt (stays on the device)</summary>"
        f'<pre class="ss-pre">{esc(preview.prompts.private)}</pre></details>'
        "<details class=\"ss-details\"><summary>The cloud's prompt (your input only)</summary>"
        f'<pre class="ss-pre">{esc(preview.prompts.plain)}</pre></details>'
    )
    return (
        f'<div class="ss-retrieved"><p class="ss-muted">BM25 retrieved {len(preview.items)} of {preview.total} '
        f"history items for this input ({esc(preview.task)} task). These are placed in the Specialist's prompt, "
        f'on your device.</p><ol class="ss-retrieved-list">{rows}</ol>{prompts}</div>'
    )


# --------------------------------------------------------------------------- comparisons


def comparison_slot_html(
    label: str,
    text: str | None,
    method: str | None = None,
    stats: GenerationStats | None = None,
    state: str = "",
    pending: str = "",
) -> str:
    """One output of a comparison; ``method`` is None while the judgement is blind. ``pending``: drafts
    after ``text`` awaiting the cloud's verdict, in the pending look."""
    title = f"Output {esc(label)}"
    if method:
        title += f' <span class="ss-method">— {esc(method_label(method))}</span>'
    footer = ""
    if method and stats is not None:
        footer = (
            f'<div class="ss-slot-stats">{stats.new_tokens} tokens · {stats.tok_per_s:.1f} tok/s · '
            f'acceptance {esc(fmt_rate(stats.acceptance_rate))}</div>'
        )
    if state:
        footer += f'<div class="ss-slot-state">{esc(state)}</div>'
    if text is None:
        body = '<div class="ss-output ss-output-empty">waiting…</div>'
    else:
        shown = esc(text) or ("" if pending else '<span class="ss-muted">(empty output)</span>')
        if pending:
            shown += f'<span class="ss-tok ss-tok-pending" title="{esc(KIND_LABELS["pending"])}">{esc(pending)}</span>'
        body = f'<div class="ss-output">{shown}</div>'
    return f'<div class="ss-slot"><div class="ss-slot-title">{title}</div>{body}{footer}</div>'


# --------------------------------------------------------------------------- progress


def progress_html(done: int, total: int, text: str) -> str:
    """A progress bar with a line of text (the dashboard's batch progress)."""
    total = max(total, 1)
    percent = max(0.0, min(1.0, done / total)) * 100
    return (
        f'<div class="ss-progress" role="progressbar" aria-valuemin="0" aria-valuemax="{total}" '
        f'aria-valuenow="{done}"><div class="ss-progress-bar" style="width:{percent:.1f}%"></div></div>'
        f'<div class="ss-progress-text">{done} / {total} cells · {esc(text)}</div>'
    )


# --------------------------------------------------------------------------- a remote Cloud


_LIMITS = {  # CloudInfo.limits key -> (label, unit)
    "max_sessions": ("sessions at once", ""),
    "max_sessions_per_client": ("sessions per client", ""),
    "max_prompt_tokens": ("prompt tokens", ""),
    "max_new_tokens": ("new tokens", ""),
    "max_draft_len": ("draft length", ""),
    "idle_timeout_s": ("idle timeout", " s"),
}


def cloud_check_html(check: CloudCheck) -> str:
    """What "Test connection" found: the verdict, then what the Cloud serves (all of it escaped)."""
    kind = "ok" if check.ok else "error"
    box = message_box(check.message, kind if check.address or not check.ok else "info")
    if check.info is None:
        return box
    info = check.info
    facts = [
        ("pairing", info.pairing, ""),
        ("protocol", str(info.protocol), "protocol version"),
        ("runtime", info.runtime or "–", ""),
        ("vocabulary", f"{info.vocab_size:,}", "ids its logits cover"),
        ("instance", info.instance or "–", "changes when the Cloud restarts"),
    ]
    facts += [
        (label, f"{info.limits[key]:,g}{unit}", "the most this Cloud accepts")
        for key, (label, unit) in _LIMITS.items()
        if isinstance(info.limits.get(key), (int, float))
    ]
    cells = "".join(stat_cell(name, value, hint) for name, value, hint in facts)
    return f'{box}<div class="ss-stats ss-cloud-facts" aria-label="what the Cloud serves">{cells}</div>'


# --------------------------------------------------------------------------- deployment profiles


def profile_html(profile: DeploymentProfile) -> str:
    """A deployment profile's label, link and the source of every number (escaped: plain text, no links)."""
    link = profile.link
    network = (
        "no network (both sides on one server)"
        if link.rtt_ms == 0 and math.isinf(link.uplink_kbps)
        else f"{link_text(link)}; the RTT is swept 0–200 ms, the bandwidths are kept"
    )
    rows = "".join(
        f"<tr><th><code>{esc(source.number)}</code></th><td>{esc(source.text)}</td></tr>" for source in profile.sources
    )
    cloud = "side by side" if profile.cloud_parallel else "one after the other"
    return (
        f'<div class="ss-profile"><p><strong>{esc(profile.label)}</strong> (<code>{esc(profile.name)}</code>). '
        f"Link: {esc(network)}. The Cloud's two passes of a round run {esc(cloud)}.</p>"
        f'<table class="ss-sources"><thead><tr><th>number</th><th>source</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )
