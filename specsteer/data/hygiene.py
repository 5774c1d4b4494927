"""Output hygiene: does a generated text copy the prompt's item layout, open with a preamble, or refuse?

Three deterministic checks of one output, given its task and the prompts of its request
(:func:`classify_output`). Each rule is written for precision before recall: a flag should be
right when it is raised, even if some odd cases go unflagged, because the shares are compared
between methods and prompt styles and a noisy flag would blur exactly those differences.

**Layout copy** — the output reproduces a field of the paper's per-entry item layout
(``tasks.item_field_labels``: review ``Product``/``Summary``/``Review``, writing
``Summary``/``Content``, abstract ``Title``/``Abstract``; free and the LaMP tasks have none) in the
form the template renders it: the label, a colon and an opening double quote (``Summary: "``), at a
field boundary — the start of the output, the start of a line, or right after a closing quote (the
template puts ``Review: "…"`` on the line of ``Summary: "…"``). Markdown bold around the label
(``**Summary:** "``) counts; curly quotes count. Case-sensitive, because the template's labels are
capitalised. Not counted: a label without the quote (``Content:`` on its own line, which the
Generalist writes as a heading without ever seeing the layout), a label inside a sentence (``My
Review: …``), the word "product" anywhere. Two uses of the prompts: if no item was shown (the
private prompt equals the plain one) there was no layout to copy; and a label that the plain prompt
itself writes in that form, anywhere (a user's own ``… in this form: Summary: "…"``), is left out,
since echoing the request is not copying the items (a LongLaMP summary reading ``My Review: …`` has
no quote, so it does not exempt ``Review: "``). The labels are always the *paper* template's,
whatever style the prompt was built in, so that the paper and clean styles are measured with one
ruler.

**Preamble** — the output, after leading whitespace and quote marks, opens with one of
:data:`PREAMBLE_OPENERS` (case-insensitive): an announcement of the text ("Here is a review …",
"Here's a Reddit post …"), a reference to the request ("Based on the provided …"), an assistant
acknowledgement followed by an offer ("Sure, here's …", "Certainly! I'd be happy …"), an offer of
help ("I'd be happy to help …"), or "As an AI, …".
Openers a person also writes are excluded on purpose: "Absolutely fantastic!", "Sure enough",
"Here's the thing", "Based on my experience", "As an AI enthusiast".

**Refusal** — anywhere in the output (refusals turn up inside copied fields: ``Summary: "I'm sorry,
but I can't assist with that request."``), one of :data:`REFUSAL_PATTERNS`: an apology followed by
an inability to assist, help, fulfil, comply or generate ("I'm sorry, but I can't assist with
that"), an inability to assist or help *with that / this / your …* ("I cannot assist with that"),
or "As an AI language model, I cannot …". Not refusals: "I'm sorry to hear …", "I'm sorry, but I
can't recommend it", "I can't help but smile", "As an AI, I don't have personal experiences, but …".

Curly apostrophes are read as straight ones. :func:`hygiene_shares` aggregates verdicts per
(method, alpha, beta).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from specsteer.data.tasks import PromptPair, item_field_labels

# --------------------------------------------------------------------------- the rules

_QUOTE_MARKS = "\"'“”‘’`"
_CANNOT = (
    r"i(?:\s+can't|\s+cannot|\s+can\s+not|'m\s+unable\s+to|\s+am\s+unable\s+to|'m\s+not\s+able\s+to"
    r"|\s+am\s+not\s+able\s+to|\s+won't\s+be\s+able\s+to)"
)

# (name, pattern) pairs, matched case-insensitively at the start of the output.
PREAMBLE_OPENERS: tuple[tuple[str, str], ...] = (
    # An announcement naming the text it announces; "Here's the thing: …" names none.
    (
        "here is",
        r"here(?:'s|\s+is|\s+are)\s+(?:[\w'-]+\s+){0,6}?"
        r"(?:review|post|text|abstract|article|story|essay|draft|version|response|example|content|reddit)s?\b",
    ),
    # A reference to the request; "Based on my experience" or "… the description" are a reviewer's words.
    (
        "based on",
        r"based\s+on\s+(?:the\s+|your\s+|this\s+|these\s+)?"
        r"(?:provided|given|above|following|information|examples?|input|prompt|request|instructions?|style"
        r"|(?:user|author|reviewer|writer)(?:'s|s')?)\b",
    ),
    # An acknowledgement followed by an offer; "Sure, it's cheap" and "Absolutely fantastic!" are not.
    (
        "sure, here",
        r"(?:sure|certainly|of\s+course|absolutely|okay|alright)\s*[,!.]\s*"
        r"(?:here(?:'s|\s+is|\s+are)|i(?:'d|\s+would)\s+be\s+(?:happy|glad)|i\s+can\s+help|let\s+me"
        r"|below\s+(?:is|are))",
    ),
    ("happy to help", r"(?:i'd|i\s+would|i'm|i\s+am)\s+(?:be\s+)?(?:happy|glad)\s+to\s+(?:help|assist)\b"),
    # "As an AI, …" / "As an AI language model, …"; "As an AI enthusiast" is a person.
    ("as an ai", r"as\s+an\s+ai(?:\s+language\s+model|\s+model|\s+assistant)?\s*,"),
)

# (name, pattern) pairs, matched case-insensitively anywhere in the output.
REFUSAL_PATTERNS: tuple[tuple[str, str], ...] = (
    # "… can't help but laugh" is not a refusal.
    (
        "sorry, I can't",
        rf"(?:i'm|i\s+am)\s+sorry,?\s+(?:but\s+)?{_CANNOT}\s+"
        r"(?:assist|help|fulfill|fulfil|comply|generate)\b(?!\s+but\b)",
    ),
    ("I can't assist with that", rf"\b{_CANNOT}\s+(?:assist|help)\s+(?:you\s+)?with\s+(?:that|this|your)\b"),
    (
        "I can't fulfil that request",
        rf"\b{_CANNOT}\s+(?:fulfill|fulfil|comply\s+with)\s+(?:that|this|your)\s+request\b",
    ),
    (
        "as an AI, I cannot",
        r"\bas\s+an\s+ai(?:\s+language\s+model|\s+model|\s+assistant)?,?\s+"
        r"i(?:\s+can't|\s+cannot|\s+can\s+not|\s+am\s+not\s+able|\s+am\s+unable|'m\s+not\s+able"
        r"|'m\s+unable|\s+won't)\b",
    ),  # "… I don't have personal experiences" is a disclaimer
)

_PREAMBLES = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in PREAMBLE_OPENERS)
_REFUSALS = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in REFUSAL_PATTERNS)


# --------------------------------------------------------------------------- one output


@dataclass(frozen=True)
class HygieneVerdict:
    """What one output does wrong; each ``*_evidence`` is the matched text, None when not flagged."""

    layout_copy: bool
    preamble: bool
    refusal: bool
    layout_evidence: str | None = None
    preamble_evidence: str | None = None
    refusal_evidence: str | None = None

    def __post_init__(self) -> None:
        for flag, evidence in (
            (self.layout_copy, self.layout_evidence),
            (self.preamble, self.preamble_evidence),
            (self.refusal, self.refusal_evidence),
        ):
            if flag != (evidence is not None):
                raise ValueError("a hygiene flag is raised exactly when it has evidence")

    @property
    def flagged(self) -> bool:
        return self.layout_copy or self.preamble or self.refusal


def classify_output(output: str, task: str, prompts: PromptPair) -> HygieneVerdict:
    """The three checks of the module doc on one output of ``task`` answering ``prompts``."""
    layout = layout_copy_evidence(output, task, prompts)
    preamble = preamble_evidence(output)
    refusal = refusal_evidence(output)
    return HygieneVerdict(
        layout_copy=layout is not None,
        preamble=preamble is not None,
        refusal=refusal is not None,
        layout_evidence=layout,
        preamble_evidence=preamble,
        refusal_evidence=refusal,
    )


def layout_copy_evidence(output: str, task: str, prompts: PromptPair) -> str | None:
    """The first item-layout field the output reproduces (e.g. ``Product: "``), or None."""
    if prompts.private == prompts.plain:
        return None  # nothing was retrieved, so the prompt showed no item layout
    labels = set(item_field_labels(task))
    # A field the request itself writes this way (a summary reading 'Review: "…"') is an echo of the request.
    labels -= {match["label"] for match in _layout_fields(_normalized(prompts.plain), labels, at_boundary=False)}
    fields = _layout_fields(_normalized(output), labels)
    return fields[0]["field"] if fields else None


def preamble_evidence(output: str) -> str | None:
    """The preamble the output opens with, or None."""
    opening = _normalized(output).lstrip().lstrip(_QUOTE_MARKS).lstrip()
    return next((match[0] for _, pattern in _PREAMBLES if (match := pattern.match(opening))), None)


def refusal_evidence(output: str) -> str | None:
    """The first refusal in the output, or None."""
    text = _normalized(output)
    found = [match for _, pattern in _REFUSALS if (match := pattern.search(text))]
    return min(found, key=lambda match: match.start())[0] if found else None


def _layout_fields(text: str, labels: Iterable[str], *, at_boundary: bool = True) -> list[re.Match[str]]:
    """Every field of ``labels`` written as the template renders it (at a field boundary, unless told)."""
    labels = frozenset(labels)
    return list(_layout_pattern(labels, at_boundary).finditer(text)) if labels else []


@functools.lru_cache(maxsize=64)
def _layout_pattern(labels: frozenset[str], at_boundary: bool) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(label) for label in sorted(labels))
    # Field boundary: the start, a new line, or a closing quote (the template's " " separator).
    boundary = r"(?:\A|\n|(?<=[\"”]))[ \t]*" if at_boundary else r"(?<!\w)"
    return re.compile(rf"{boundary}(?P<field>(?:\*\*)?(?P<label>{alternatives})(?:\*\*)?:(?:\*\*)?[ \t]*[\"“])")


def _normalized(text: str) -> str:
    # Models write both apostrophes; the patterns are written with the straight one, so evidence
    # shows a straight apostrophe where the output may have a curly one.
    return text.replace("’", "'")


# --------------------------------------------------------------------------- many outputs


@dataclass(frozen=True)
class GridVerdict:
    """One classified output of a grid cell: the method, the alpha and beta it read, the verdict."""

    method: str
    alpha: float | None
    beta: float | None
    verdict: HygieneVerdict


@dataclass(frozen=True)
class HygieneShares:
    """Counts of flagged outputs for one (method, alpha, beta); the ``*_share`` properties are 0–1."""

    method: str
    alpha: float | None
    beta: float | None
    outputs: int
    layout_copies: int
    preambles: int
    refusals: int
    flagged: int  # outputs with at least one of the three

    @property
    def layout_copy_share(self) -> float:
        return self.layout_copies / self.outputs

    @property
    def preamble_share(self) -> float:
        return self.preambles / self.outputs

    @property
    def refusal_share(self) -> float:
        return self.refusals / self.outputs

    @property
    def flagged_share(self) -> float:
        return self.flagged / self.outputs


def hygiene_shares(verdicts: Iterable[GridVerdict]) -> list[HygieneShares]:
    """One row per (method, alpha, beta), in the order each first appears."""
    groups: dict[tuple[str, float | None, float | None], list[HygieneVerdict]] = {}
    for item in verdicts:
        groups.setdefault((item.method, item.alpha, item.beta), []).append(item.verdict)
    return [
        HygieneShares(
            method=method,
            alpha=alpha,
            beta=beta,
            outputs=len(group),
            layout_copies=sum(verdict.layout_copy for verdict in group),
            preambles=sum(verdict.preamble for verdict in group),
            refusals=sum(verdict.refusal for verdict in group),
            flagged=sum(verdict.flagged for verdict in group),
        )
        for (method, alpha, beta), group in groups.items()
    ]
