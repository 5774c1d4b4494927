"""Audit of what left the device: every uplink message checked against what the Edge chose.

The rule (DESIGN §2): the uplink may carry the plain prompt once, and after
that only ids of tokens the Specialist proposed (drafts, shown as accepted or
rejected) or chose (recovered and bonus tokens). Anything else is a leak.

Under P³ (the ``cloud-draft`` rule: the Cloud drafts, the Edge checks) the Edge drafts nothing: after the
plain prompt it sends only the output's tokens, the Cloud drafts it kept and its corrections, in order
(the last round's are never sent: the generation ends before another round).

A method that declares it sends the private context (``llm+``, the privacy-violating reference)
passes the private prompt's ids as ``private_prompt_ids``: its prompt is then checked against those,
and the summary says that the whole private prompt crossed.

One draft may go unshown: the last one, when no answer came back (a remote Cloud
failed while verifying it). Its ids are counted and named in the summary; they
are in the transcript, which is what the privacy panel lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specsteer.method.events import LinkMessage, TokenEvent


@dataclass
class UplinkAudit:
    messages: int = 0
    bytes: int = 0
    prompt_tokens: int = 0
    draft_tokens: int = 0
    chosen_tokens: int = 0
    unanswered_tokens: int = 0  # drafted ids of a last draft that got no verdict (among draft_tokens)
    private_prompt_sent: bool = False  # the prompt sent was the Specialist's private one (llm+)
    cloud_drafted: bool = (
        False  # P³: the Cloud drafted; the chosen tokens are the Cloud drafts the Edge kept and its corrections
    )
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """What crossed, and the claim the audit (and the canary tests) make about it, in one paragraph.

        The claim is about raw history text only: the drafted and chosen ids are computed by the
        Specialist reading the history, so they carry something of it by design; rejected drafts,
        which never reach the output, are among them.
        """
        if self.private_prompt_sent:
            sent = (
                f"{self.messages} uplink message{'s' if self.messages != 1 else ''} ({self.bytes:,} bytes): "
                f"the whole private prompt ({self.prompt_tokens} token ids: your profile, your retrieved history "
                "and the task) crossed to the cloud."
            )
            if not self.ok:
                return f"{sent} Also: {'; '.join(self.problems)}."
            return (
                f"{sent} This method is not private by design: it shows what sending your data to the cloud "
                "would give, and everything in that prompt is now known to the cloud."
            )
        crossed = (
            f"{self.messages} uplink message{'s' if self.messages != 1 else ''} ({self.bytes:,} bytes): "
            f"the plain prompt ({self.prompt_tokens} token ids of your input, without the history), "
            f"{self.draft_tokens} drafted token ids and {self.chosen_tokens} chosen token ids."
        )
        if self.cloud_drafted:
            crossed = (
                f"{self.messages} uplink message{'s' if self.messages != 1 else ''} ({self.bytes:,} bytes): "
                f"the plain prompt ({self.prompt_tokens} token ids of your input, without the history) and "
                f"{self.chosen_tokens} token ids of the output: the cloud's drafts the device kept and its "
                "corrections, which the cloud drafts on from."
            )
            if not self.ok:
                return f"{crossed} LEAK: {'; '.join(self.problems)}."
            return (
                f"{crossed} No raw history text left the device. The corrections are chosen with your history, "
                "by design; the cloud's own drafts that the device refused were never sent back."
            )
        if self.unanswered_tokens:
            crossed += (
                f" The last {self.unanswered_tokens} drafted ids were sent but never answered (the generation "
                "ended there), so they appear in this transcript and not in the output."
            )
        if not self.ok:
            return f"{crossed} LEAK: {'; '.join(self.problems)}."
        return (
            f"{crossed} No raw history text left the device: the only prompt sent was the plain one, and every "
            "other id sent is a token the Specialist drafted or chose. Those ids are computed with your history, "
            "by design (that is what the cloud verifies); rejected drafts are among them."
        )


def audit_uplink(
    transcript: Sequence[LinkMessage],
    plain_prompt_ids: Sequence[int],
    events: Sequence[TokenEvent],
    plain_large_prompt_ids: Sequence[int] | None = None,
    private_prompt_ids: Sequence[int] | None = None,
) -> UplinkAudit:
    """``plain_large_prompt_ids``: on a cross-tokenizer pair, the plain prompt in the Generalist's ids,
    which its opening message (``cross-open``) carries besides the Specialist's (for ``llm+``, the private
    prompt in those ids). ``private_prompt_ids``: given only for a method that declares it sends the
    private prompt (``llm+``)."""
    audit = UplinkAudit()
    expected_prompt = list(plain_prompt_ids) if private_prompt_ids is None else list(private_prompt_ids)
    uplink = [m for m in transcript if m.direction == "uplink"]
    audit.messages = len(uplink)
    if not uplink:  # a device-only method: nothing crossed the link at all
        return audit
    audit.bytes = sum(m.bytes for m in uplink)
    opening = uplink[0].payload if uplink[0].kind in ("open", "cross-open") else {}
    audit.cloud_drafted = opening.get("rule") == "cloud-draft"
    if audit.cloud_drafted:
        return _audit_cloud_drafted(audit, uplink, list(plain_prompt_ids), events, int(opening.get("top_k", 0)))
    drafted = [e.id for e in events if e.kind in ("accepted", "rejected")]
    # Every emitted token that is not an accepted draft was chosen on the Edge:
    # recovered and bonus tokens, and each token of the draft-free methods.
    # (With the ``llm`` baseline the Cloud itself chose every token.)
    cloud_chose = any(m.direction == "downlink" and m.kind == "tokens" for m in transcript)
    chosen = [] if cloud_chose else [e.id for e in events if e.emitted and e.kind != "accepted"]
    # A draft that ends the transcript was never answered: its drafts were never shown, accepted or not.
    unanswered = uplink[-1] if uplink[-1].kind == "draft" and transcript[-1] is uplink[-1] else None
    sent_drafts: list[int] = []
    sent_chosen: list[int] = []
    for index, message in enumerate(uplink):
        payload = message.payload
        if message.kind in ("open", "cross-open"):
            audit.prompt_tokens = len(payload["prompt"])
            if index != 0:
                audit.problems.append(f"message {index}: a second prompt was sent")
            kind = "plain (history-free)" if private_prompt_ids is None else "private"
            if list(payload["prompt"]) != expected_prompt:
                audit.problems.append(f"message {index}: the prompt sent differs from the {kind} prompt")
            audit.private_prompt_sent = private_prompt_ids is not None and list(payload["prompt"]) != list(
                plain_prompt_ids
            )
            if message.kind == "cross-open" and (
                plain_large_prompt_ids is None or list(payload["large_prompt"]) != list(plain_large_prompt_ids)
            ):
                audit.problems.append(
                    f"message {index}: the Generalist's prompt sent differs from the {kind} prompt in its tokenization"
                )
        elif message.kind == "draft":
            if message is unanswered:
                audit.unanswered_tokens = len(payload["draft"])
            else:
                sent_drafts.extend(payload["draft"])
            sent_chosen.extend(payload["append"])
        else:
            audit.problems.append(f"message {index}: unexpected uplink message kind {message.kind!r}")
    audit.draft_tokens = len(sent_drafts) + audit.unanswered_tokens
    audit.chosen_tokens = len(sent_chosen)
    if sent_drafts != drafted:
        audit.problems.append("drafted ids sent differ from the drafts the Specialist proposed")
    # The last chosen token may never be sent (generation ended before another round).
    if sent_chosen != chosen[: len(sent_chosen)] or len(chosen) - len(sent_chosen) > 1:
        audit.problems.append("chosen ids sent differ from the tokens the Edge chose")
    return audit


def _audit_cloud_drafted(
    audit: UplinkAudit, uplink: Sequence[LinkMessage], plain_prompt_ids: list[int], events: Sequence[TokenEvent], k: int
) -> UplinkAudit:
    """P³: the plain prompt once, then rounds that carry no drafts and append the output's tokens in order; at
    most one round's kept drafts and correction (k + 1 tokens) at the end go unsent."""
    emitted = [e.id for e in events if e.emitted]
    sent: list[int] = []
    for index, message in enumerate(uplink):
        payload = message.payload
        if index == 0:
            audit.prompt_tokens = len(payload["prompt"])
            if list(payload["prompt"]) != plain_prompt_ids:
                audit.problems.append(f"message {index}: the prompt sent differs from the plain (history-free) prompt")
        elif message.kind == "draft":
            if payload["draft"]:
                audit.problems.append(f"message {index}: drafts sent under a rule where the Cloud drafts")
            sent.extend(payload["append"])
        else:
            audit.problems.append(f"message {index}: unexpected uplink message kind {message.kind!r}")
    audit.chosen_tokens = len(sent)
    if sent != emitted[: len(sent)] or len(emitted) - len(sent) > k + 1:
        audit.problems.append("token ids sent differ from the output's tokens the Edge kept or chose")
    return audit


def audit_wire(
    uplink_bodies: Sequence[bytes],
    downlink_bodies: Sequence[bytes],
    plain_prompt_ids: Sequence[int],
    events: Sequence[TokenEvent],
    plain_large_prompt_ids: Sequence[int] | None = None,
    private_prompt_ids: Sequence[int] | None = None,
) -> UplinkAudit:
    """:func:`audit_uplink` on bytes captured where they crossed (a socket, an HTTP body, a transport),
    not on the Edge's own account of what it sent. Each body may hold several frames; bytes that are
    not frames of this protocol are a problem in themselves."""
    from specsteer.protocol.wire import DOWNLINK, UPLINK, FrameError, decode_stream, encode

    messages: list[LinkMessage] = []
    problems = []
    for direction, bodies in ((UPLINK, uplink_bodies), (DOWNLINK, downlink_bodies)):
        for index, body in enumerate(bodies):
            try:
                decoded = decode_stream(body, direction)
            except FrameError as error:
                problems.append(f"{direction} body {index} is not protocol frames: {error}")
                continue
            # decode_stream read only messages of ``direction``: each names it as its own.
            messages += [LinkMessage(m.direction, m.kind, m.summary(), len(encode(m))) for m in decoded]
    audit = audit_uplink(messages, plain_prompt_ids, events, plain_large_prompt_ids, private_prompt_ids)
    audit.problems[:0] = problems
    return audit
