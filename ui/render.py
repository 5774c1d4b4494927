"""HTML for everything the app shows, built from domain objects.

The one rule of this module: every piece of text that came from a user, a file or a model goes
through :func:`esc` before it is placed in markup. Histories, inputs and model outputs are
untrusted: a history item reading ``<img src=x onerror=...>`` must show up as those characters and
run nothing. Only this module's own literals (class names, labels, numbers it formats) are trusted.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specsteer.data.facts import FactExposure
from specsteer.evaluation.deployment import DeploymentProfile
from specsteer.method.catalog import METHOD_INFO, method_label
from specsteer.method.events import GenerationStats, LinkMessage, TokenEvent
from specsteer.protocol.emulation import LinkConditions
from specsteer.service.events import CloudCheck, PrivacyReport, RetrievalPreview

TASK_LABELS = {
    "review": "Product review",
    "abstract": "Paper abstract",
    "writing": "Reddit-style post",
    "free": "Free text",
    "cogenesis": "Persona task (CoGenesis)",
}
KIND_LABELS = {
    "accepted": "accepted draft",
    "rejected": "rejected draft",
    "recovered": "recovered",
    "bonus": "bonus",
    "plain": "single model",
    "pending": "pending draft",
}
KIND_EXPLANATIONS = {
    "accepted": "proposed by the on-device Specialist and accepted by the cloud (P³: the cloud's draft, kept by "
    "the device)",
    "rejected": "proposed by the Specialist, refused by the cloud, not part of the output (P³: a cloud draft the "
    "device refused)",
    "recovered": "chosen on the device from the steered logits after a rejection (P³: the device's correction)",
    "bonus": "extra steered token after a fully accepted round",
    "plain": "token of a method without drafting",
    "pending": "drafted on the device and shown at once; recoloured when the cloud's verdict arrives",
}

# C0 control characters (other than newline and tab) and DEL are invisible or break the layout;
# show them as their Unicode "control picture" so random or odd output stays readable.
_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(32) if chr(code) not in "\n\t"}
_CONTROL_PICTURES[0x7F] = "\u2421"


def esc(text: object) -> str:
    """Escaped text for HTML content and attribute values (quotes included)."""
    return html.escape(str(text), quote=True).translate(_CONTROL_PICTURES)


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


# --------------------------------------------------------------------------- tokens


def _visible_whitespace(text: str) -> str:
    # A struck-through draft made only of spaces or newlines would be invisible.
    return text.replace(" ", "\u2423").replace("\n", "\u21b5")


def token_span(event: TokenEvent) -> str:
    """One token as a span whose CSS class names its kind (ss-tok-accepted, ...)."""
    text = event.text
    if not text:
        return ""  # a token ending inside a multi-byte character; a later one carries it
    if event.kind == "rejected" and not text.strip():
        text = _visible_whitespace(text)
    title = f"{KIND_LABELS.get(event.kind, event.kind)} · token {event.id}"
    if event.round:
        title += f" · round {event.round}"
    if event.ratio is not None and math.isfinite(event.ratio):
        title += f" · ratio {event.ratio:.3g}"
    tag = "del" if event.kind == "rejected" else "span"
    place = "" if event.position is None else f' data-round="{event.round}" data-position="{event.position}"'
    return f'<{tag} class="ss-tok ss-tok-{esc(event.kind)}"{place} title="{esc(title)}">{esc(text)}</{tag}>'


def segment_title(event: TokenEvent) -> str:
    """The tooltip of a drafted segment on a cross-tokenizer pair (``event`` is its first token)."""
    size = event.segment.size if event.segment is not None else 1
    title = (
        f"{KIND_LABELS.get(event.kind, event.kind)} · one segment of {size} Specialist "
        f"token{'' if size == 1 else 's'}: the text between two offsets where both tokenizers cut, "
        "which the cloud accepts or refuses whole"
    )
    if event.round:
        title += f" · round {event.round}"
    if event.ratio is not None and math.isfinite(event.ratio):
        title += f" · ratio {event.ratio:.3g}"
    return title


def _segment_open(event: TokenEvent) -> tuple[str, str]:
    """(the opening tag of a segment's element, its closing tag)."""
    tag = "del" if event.kind == "rejected" else "span"
    size = event.segment.size if event.segment is not None else 1
    return (
        f'<{tag} class="ss-tok ss-tok-{esc(event.kind)} ss-seg" data-segment-size="{size}" '
        f'title="{esc(segment_title(event))}">',
        f"</{tag}>",
    )


def _segment_piece(event: TokenEvent) -> str:
    """One Specialist token inside its segment's element (the segment's tooltip covers it)."""
    text = event.text
    if not text:
        return ""
    if event.kind == "rejected" and not text.strip():
        text = _visible_whitespace(text)
    return f'<span class="ss-seg-tok" data-token="{event.id}">{esc(text)}</span>'


class TokenHtml:
    """The token stream as HTML that only ever grows at its end, but for the pending drafts.

    Appending keeps each update a pure extension of the previous value, so re-rendering stays
    proportional to what is new on the Python side, and Gradio's diff of a streamed string value
    is an append. Pending drafts (shown before the Cloud's verdict) are a tail after the settled
    tokens: a round's settled events replace the whole tail, and :meth:`end` drops what is left
    (drafts never sent).

    On a cross-tokenizer pair a draft's event names its segment (``TokenEvent.segment``): the
    segment is one coloured element, opened at its first token and closed after its last, holding
    a piece per Specialist token. Until it closes, the HTML parser closes it (the output panel is
    left unclosed the same way, :func:`output_html`).
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._html = ""
        self._closing = ""  # the open segment's closing tag, "" when none is open
        self._expected: tuple[int, str, int] | None = None  # (round, kind, position) that continues it
        self._pending: list[str] = []  # the current round's drafts awaiting their verdict

    def add(self, event: TokenEvent) -> None:
        if event.pending:
            self._pending.append(token_span(event))
            return
        self._pending.clear()  # the verdict is back: its settled events take the drafts' place
        segment = event.segment
        continues = segment is not None and self._expected == (event.round, event.kind, segment.position)
        if self._closing and not continues:
            self._close()
        if segment is None:
            self._parts.append(token_span(event))
            return
        if not continues:
            opening, self._closing = _segment_open(event)
            self._parts.append(opening)
        self._parts.append(_segment_piece(event))
        self._expected = (event.round, event.kind, segment.position + 1)
        if segment.last:
            self._close()

    def _close(self) -> None:
        self._parts.append(self._closing)
        self._closing = ""
        self._expected = None

    def end(self) -> None:
        """The output is over: drafts still pending were never sent."""
        self._pending.clear()

    @property
    def html(self) -> str:
        if self._parts:
            self._html += "".join(self._parts)
            self._parts.clear()
        return self._html + "".join(self._pending) if self._pending else self._html


def legend_html(kinds: Sequence[str] = ("pending", "accepted", "rejected", "recovered", "bonus", "plain")) -> str:
    items = "".join(
        f'<span class="ss-legend-item" title="{esc(KIND_EXPLANATIONS[kind])}">'
        f'<span class="ss-tok ss-tok-{kind}">{"abc" if kind != "rejected" else "xyz"}</span> '
        f"{esc(KIND_LABELS[kind])}</span>"
        for kind in kinds
    )
    return f'<div class="ss-legend" aria-label="token colours">{items}</div>'


def output_html(body: str, placeholder: str = "The output appears here, token by token.") -> str:
    """The output panel around token spans (already escaped).

    The wrapper is deliberately left unclosed (the HTML parser closes it): successive values
    while streaming are then pure extensions of each other, which Gradio sends as an append
    instead of the whole output again.
    """
    if not body:
        return f'<div class="ss-output ss-output-empty">{esc(placeholder)}</div>'
    return f'<div class="ss-output">{body}'


# --------------------------------------------------------------------------- statistics


def _fmt_rate(value: float | None) -> str:
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
            view.cloud or "in process",
            "where the Generalist verified: the Cloud service at this address (only the Specialist ran here)"
            if view.cloud
            else "where the Generalist verified: in this process, beside the Specialist",
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


def _stat_cell(name: str, value: str, hint: str) -> str:
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
        ("acceptance", f"{_fmt_rate(acceptance)}" + (f" ({view.accepted}/{view.drafted})" if view.drafted else ""), ""),
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
    body = "".join(_stat_cell(name, value, hint) for name, value, hint in cells)
    return f'<div class="ss-stats" data-state="{esc(view.state)}">{body}</div>'


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


# --------------------------------------------------------------------------- privacy


_MAX_TRANSCRIPT_ROWS = 300


def _ids_cell(ids: Sequence[int], decode) -> str:
    if not ids:
        return '<span class="ss-muted">none</span>'
    shown = ", ".join(str(int(i)) for i in ids[:64]) + (" …" if len(ids) > 64 else "")
    text = decode(ids)
    return f'<code class="ss-ids">[{esc(shown)}]</code> <span class="ss-decoded">{esc(repr(text))}</span>'


def _payload_cell(message: LinkMessage, decode) -> str:
    payload = message.payload
    if message.kind == "open":
        prompt = list(payload.get("prompt", []))
        settings = ", ".join(
            f"{key}={payload[key]}" for key in ("rule", "alpha", "beta", "top_k", "bonus") if key in payload
        )
        return (
            f'<div>settings: <code>{esc(settings)}</code></div>'
            f'<details class="ss-details"><summary>plain prompt: {len(prompt)} token ids (no history)</summary>'
            f'<code class="ss-ids">{esc(prompt)}</code><pre class="ss-pre">{esc(decode(prompt))}</pre></details>'
        )
    if message.kind == "draft":
        parts = [f"<div>drafted: {_ids_cell(list(payload.get('draft', [])), decode)}</div>"]
        if payload.get("append"):
            parts.append(f"<div>chosen on device: {_ids_cell(list(payload['append']), decode)}</div>")
        return "".join(parts)
    if message.kind == "verdict":
        entries = len(payload.get("ids", []))
        extra = len(payload.get("extra", []))
        text = f"accepted {payload.get('accepted', 0)} draft(s)"
        if entries:
            text += f"; top-{entries} recovery logits (generic, no history)"
        if extra:
            text += f"; {extra} extra values"
        return esc(text)
    if message.kind == "tokens":
        return f"Generalist tokens: {_ids_cell(list(payload.get('ids', [])), decode)}"
    return esc(message.kind)


def transcript_html(transcript: Sequence[LinkMessage], decode) -> str:
    """Every message that crossed the device-cloud link: direction, kind, bytes and ids (decoded)."""
    if not transcript:
        return message_box("Nothing crossed the link: this method runs entirely on the device.", "ok")
    shown = transcript[:_MAX_TRANSCRIPT_ROWS]
    rows = "".join(
        f'<tr class="ss-{esc(message.direction)}"><td>{number}</td>'
        f'<td>{"↑ up" if message.direction == "uplink" else "↓ down"}</td>'
        f"<td>{esc(message.kind)}</td><td class=\"ss-num\">{message.bytes:,}</td>"
        f"<td>{_payload_cell(message, decode)}</td></tr>"
        for number, message in enumerate(shown, start=1)
    )
    more = ""
    if len(transcript) > len(shown):
        more = f'<p class="ss-muted">{len(transcript) - len(shown)} later messages not shown (all are saved).</p>'
    return (
        '<div class="ss-transcript"><table><thead><tr><th>#</th><th>direction</th><th>kind</th>'
        f"<th>bytes</th><th>payload</th></tr></thead><tbody>{rows}</tbody></table>{more}</div>"
    )


def privacy_html(report: PrivacyReport | None) -> str:
    """The audit's verdict on what crossed to the cloud, then every message with its ids decoded."""
    if report is None:
        return transcript_html([], None)
    audit = report.audit
    if audit.private_prompt_sent:
        verdict = message_box("Not private. " + audit.summary(), "warning" if audit.ok else "error")
    else:
        verdict = message_box(
            ("Privacy check passed. " if audit.ok else "Privacy check FAILED. ") + audit.summary(),
            "ok" if audit.ok else "error",
        )
    return verdict + facts_html(report.facts) + transcript_html(report.transcript, report.token_text)


def facts_html(exposure: FactExposure | None) -> str:
    """Which of the persona's private facts crossed to the cloud, each named, with where it was found."""
    if exposure is None:
        return ""
    notes = []
    for fact, task, sent, rejected in zip(
        exposure.facts, exposure.in_task, exposure.sent, exposure.rejected_only, strict=True
    ):
        if not sent:
            continue
        where = (
            "named in your task"
            if task
            else "in your private prompt"
            if exposure.private_prompt_sent
            else "only in rejected drafts (not in the output)"
            if rejected
            else "in the drafted text"
        )
        notes.append(f'<li><span class="ss-fact">{esc(fact)}</span> <span class="ss-muted">— {esc(where)}</span></li>')
    listed = f'<ul class="ss-facts">{"".join(notes)}</ul>' if notes else ""
    kept = exposure.total - len(exposure.sent_facts)
    return (
        f'<div class="ss-facts-box" id="privacy-facts"><p><b>{esc(exposure.headline())}{":" if notes else "."}</b></p>'
        f"{listed}<p class=\"ss-muted\">{kept} stayed on your device. {sum(exposure.in_output)} of {exposure.total} "
        "appear in the output. Facts are matched by their content words (docs/research/COGENESIS.md gives the matcher's "
        "measured precision and recall), so read these as estimates.</p></div>"
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
            f'acceptance {esc(_fmt_rate(stats.acceptance_rate))}</div>'
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
    cells = "".join(_stat_cell(name, value, hint) for name, value, hint in facts)
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
