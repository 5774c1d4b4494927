"""The privacy panel: its headline (amber naming the phrases of the history that crossed, green only when
none did), which of a persona's private facts crossed, and every message of the device-cloud link with its
ids decoded, the tokens that carried a phrase of the history marked.

The rule of this module, as of every module that builds HTML: each piece of text that came from a user, a
file or a model goes through :func:`ui.markup.esc` before it is placed in markup. Histories and decoded
tokens are untrusted: a history item reading ``<img src=x onerror=...>`` must show up as those characters
and run nothing. Only this module's own literals (class names, labels, numbers it formats) are trusted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specsteer.data.crossing import HistoryCrossing
from specsteer.data.facts import FactExposure
from specsteer.method.events import LinkMessage
from specsteer.service.events import PrivacyReport
from ui.markup import esc
from ui.render import message_box

_MAX_TRANSCRIPT_ROWS = 300


def _decoded_marked(ids: Sequence[int], decode, marked: frozenset[int], quoted: bool = True) -> str:
    """The ids decoded (``quoted``: as a Python string literal), the runs at ``marked`` positions (they carried a
    phrase of the history) highlighted: each run decoded on its own, so a word cut between runs may read a
    little apart."""
    runs: list[tuple[bool, list[int]]] = []
    for position, token in enumerate(ids):
        inside = position in marked
        if runs and runs[-1][0] == inside:
            runs[-1][1].append(token)
        else:
            runs.append((inside, [token]))
    pieces = []
    for inside, run in runs:
        decoded = str(decode(run))
        text = esc(repr(decoded)[1:-1] if quoted else decoded)
        pieces.append(f'<mark class="ss-crossed">{text}</mark>' if inside else text)
    return "'" + "".join(pieces) + "'" if quoted else "".join(pieces)


def _ids_cell(ids: Sequence[int], decode, marked: frozenset[int] = frozenset()) -> str:
    if not ids:
        return '<span class="ss-muted">none</span>'
    shown = ", ".join(str(int(i)) for i in ids[:64]) + (" …" if len(ids) > 64 else "")
    text = _decoded_marked(ids, decode, marked) if marked else esc(repr(decode(ids)))
    return f'<code class="ss-ids">[{esc(shown)}]</code> <span class="ss-decoded">{text}</span>'


def _payload_cell(message: LinkMessage, decode, marked: Mapping[str, frozenset[int]] | None = None) -> str:
    marked = marked or {}
    payload = message.payload
    if message.kind == "open":
        prompt = list(payload.get("prompt", []))
        settings = ", ".join(
            f"{key}={payload[key]}"
            for key in ("rule", "alpha", "beta", "acceptance", "cda_lambda", "top_k", "bonus")
            if key in payload
        )
        return (
            f'<div>settings: <code>{esc(settings)}</code></div>'
            f'<details class="ss-details"><summary>plain prompt: {len(prompt)} token ids (no history)</summary>'
            f'<code class="ss-ids">{esc(prompt)}</code><pre class="ss-pre">{_prompt_text(prompt, decode, marked)}</pre>'
            "</details>"
        )
    if message.kind == "draft":
        drafted = _ids_cell(list(payload.get("draft", [])), decode, marked.get("draft", frozenset()))
        parts = [f"<div>drafted: {drafted}</div>"]
        if payload.get("append"):
            chosen = _ids_cell(list(payload["append"]), decode, marked.get("append", frozenset()))
            parts.append(f"<div>chosen on device: {chosen}</div>")
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


def _prompt_text(prompt: Sequence[int], decode, marked: Mapping[str, frozenset[int]]) -> str:
    """An opening message's prompt decoded; for a method that sends the private prompt, its phrases of the
    history highlighted."""
    if marked.get("prompt"):
        return _decoded_marked(prompt, decode, marked["prompt"], quoted=False)
    return esc(decode(prompt))


def transcript_html(transcript: Sequence[LinkMessage], decode, crossing: HistoryCrossing | None = None) -> str:
    """Every message that crossed the device-cloud link: direction, kind, bytes and ids (decoded); the tokens
    that carried a phrase of the history highlighted."""
    if not transcript:
        return message_box("Nothing crossed the link: this method runs entirely on the device.", "ok")
    shown = transcript[:_MAX_TRANSCRIPT_ROWS]
    sent = crossing.sent_positions() if crossing is not None else {}
    marked: dict[int, dict[str, frozenset[int]]] = {}
    for (message, field), positions in sent.items():
        marked.setdefault(message, {})[field] = positions
    rows = "".join(
        f'<tr class="ss-{esc(message.direction)}"><td>{number}</td>'
        f'<td>{"↑ up" if message.direction == "uplink" else "↓ down"}</td>'
        f"<td>{esc(message.kind)}</td><td class=\"ss-num\">{message.bytes:,}</td>"
        f"<td>{_payload_cell(message, decode, marked.get(number - 1))}</td></tr>"
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
    """The panel's headline (``PrivacyReport.verdict``: amber naming the phrases of the history that crossed,
    green only when none did), then the facts audit and every message with its ids decoded."""
    if report is None:
        return transcript_html([], None)
    return (
        f'<div id="privacy-headline">{_headline(report)}</div>'
        + facts_html(report.facts)
        + transcript_html(report.transcript, report.token_text, report.crossing)
    )


def _headline(report: PrivacyReport) -> str:
    audit, crossing, verdict = report.audit, report.crossing, report.verdict
    if verdict == "failed":
        prefix = "Not private. " if audit.private_prompt_sent else "Privacy check FAILED. "
        return message_box(prefix + audit.summary(), "error")
    if verdict == "not private":
        return message_box("Not private. " + audit.summary(), "warning")
    if verdict == "passed":
        none_crossed = f"{crossing.headline()} " if crossing is not None else ""
        return message_box("Privacy check passed. " + none_crossed + audit.summary(), "ok")
    assert crossing is not None  # the verdict says phrases crossed
    phrases = "".join(
        f'<li><mark class="ss-crossed">{esc(phrase.text)}</mark> <span class="ss-muted">— {esc(phrase.where())}'
        "</span></li>"
        for phrase in crossing.phrases
    )
    offer = (
        f" The button above generates again with the private-span guard on (n = {report.guard_offer.private_guard}"
        " tokens): the device then never sends a token that would copy that many tokens of your history."
        if report.guard_offer is not None
        else ""
    )
    return (
        message_box(f"History crossed. {crossing.headline()}{offer}", "warning")
        + f'<ul class="ss-crossed-list">{phrases}</ul>'
        + f'<p class="ss-muted">Protocol check passed: {esc(audit.summary())}</p>'
    )


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
