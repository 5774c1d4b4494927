"""What an LLM judge is asked about one output, and how its answer is read: the CoGenesis paper's rubric.

**What was read, and where** (2026-11-28). The CoGenesis paper (Zhang et al., ACL 2024, "CoGenesis: A Framework
Collaborating Large and Small Language Models for Secure Context-Aware Instruction Following",
https://arxiv.org/abs/2403.03129: its abstract) and its public repository, ``TsinghuaC3I/CoGenesis`` at commit
b25a110c0e974b488fda9723bf0a8741e9373ccf, file ``src/evaluate/llm_evaluator_parallel.py`` (the judge's three
prompts and how they are filled) with ``src/prompts.py`` (how a writing-history item is shown). There the judge
(``gpt-4-1106-preview``) grades each output alone (single-answer grading, no reference text) on three criteria,
each a separate request:

* **overall** — the output's quality *for this user*: its fit to the user's style and profile, and its
  helpfulness, relevance, accuracy, depth, creativity and detail; the judge reads the user's profile (the
  record's ``additional_profile``, every line of it) and writing history (every text, with its title);
* **personalization** — only the personal fit: the user's style and preferences, consistency with the profile,
  the user's own needs and interests; with the same profile and history;
* **overall without profile** — generic quality (helpfulness, relevance, accuracy, depth, creativity, detail)
  from the task alone: no profile, no history.

Scale: 1 to 10. The judge first explains briefly, then gives the grade in double square brackets
(``[[7]]``); temperature and length are the client's defaults there.

**This implementation** asks for the same three criteria (:data:`CRITERIA`), on the same 1-10 scale, from the
same inputs, with the grade in the same double-bracket form, but the prompt is written here in other words
(:func:`score_prompt`; nothing of the repository's text is copied). Where it differs:

* the record's context comes first and the instruction after it, so that one record's prompts (each method,
  each criterion) share their longest prefix (a local judge's prefix cache then reads the history once);
* the explanation is asked to be two or three sentences (a bounded answer; CoGenesis asks for a "short" one);
* each of the user's texts is held to :data:`MAX_TEXT_CHARS` and all of them to :data:`MAX_HISTORY_CHARS`
  (CoGenesis's four texts fit whole; a LongLaMP history does not), and an answer to :data:`MAX_ANSWER_CHARS`;
* the repository reads the grade with no rule given for an answer with several grades or none; here one with
  no grade, several different grades, or a grade outside 1-10 is *malformed* and gets no score, and a reply
  that declines is a *refusal* (:func:`read_score`); the reason is stored instead of a score. Where an answer
  has no grade in brackets, one written without them (``Grade: 8``, ``Rating: 7/10``: the small local judge
  often writes so) is read when it is the only one. Answers are stored, so a later reader re-reads them
  (``specsteer.evaluation.judge_run``);
* **pairwise judging** (:func:`pair_prompt`, :func:`read_verdict`) is beyond the repository's judge: two
  outputs for the same record on one criterion, "A", "B" or a tie. It is asked in both orders to measure the
  judge's position bias (``specsteer.service.judge_report``).

The judge reads the whole private profile and texts, as CoGenesis's does: point an endpoint judge only at a
server trusted with the records (synthetic users here), never at users' real histories.

Light: standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from specsteer.stores.judges import ReasonKind

Criterion = Literal["personalization", "overall", "overall_without_profile"]
CRITERIA: tuple[Criterion, ...] = get_args(Criterion)
CRITERION_LABELS: dict[str, str] = {
    "personalization": "personalization",
    "overall": "overall",
    "overall_without_profile": "overall (no profile)",
}
SCALE = (1, 10)

MAX_TEXT_CHARS = 3_000  # one text the user wrote, as the judge reads it
MAX_HISTORY_CHARS = 12_000  # all of them together
MAX_HISTORY_TEXTS = 8
MAX_ANSWER_CHARS = 20_000  # an output longer than this is shown cut (and says so)

# What the judge's answer must end with; an endpoint that can constrain its output (vLLM's structured outputs)
# is held to these: up to 600 characters of reasons without brackets, then the grade or the verdict.
SCORE_ANSWER_PATTERN = r"[^\[\]]{0,600}Rating: \[\[(10|[1-9])\]\]"
VERDICT_ANSWER_PATTERN = r"[^\[\]]{0,600}Verdict: \[\[(A|B|tie)\]\]"
# The words each answer pattern ends on, before its grade or verdict: what the local judge is handed to finish an
# answer its budget cut before the grade (``specsteer.evaluation.judges.LocalJudge``).
ANSWER_CUES = {SCORE_ANSWER_PATTERN: "Rating: [[", VERDICT_ANSWER_PATTERN: "Verdict: [["}


def check_criteria(names: Sequence[str]) -> tuple[Criterion, ...]:
    """``names`` as criteria, in :data:`CRITERIA`'s order; ValueError naming an unknown one or none at all."""
    given = [str(name).strip() for name in names if str(name).strip()]
    unknown = [name for name in given if name not in CRITERIA]
    if unknown:
        raise ValueError(f"unknown judge criterion {unknown[0][:40]!r}; choose among {', '.join(CRITERIA)}")
    if not given:
        raise ValueError(f"name at least one judge criterion ({', '.join(CRITERIA)})")
    return tuple(criterion for criterion in CRITERIA if criterion in given)


# --------------------------------------------------------------------------- what the judge reads


@dataclass(frozen=True)
class JudgeContext:
    """What the judge reads about one record besides the output: the task, and what is known about the user."""

    task: str
    profile: str = ""  # the user's profile text (CoGenesis's ``additional_profile``); "" when the record has none
    texts: tuple[tuple[str, str], ...] = ()  # (title, text) of texts the user wrote before


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit].rstrip() + " [… cut here]"


def history_text(context: JudgeContext) -> str:
    """The user's earlier texts as the judge reads them: numbered, titled, each and all of them bounded."""
    parts: list[str] = []
    room = MAX_HISTORY_CHARS
    for number, (title, text) in enumerate(context.texts[:MAX_HISTORY_TEXTS], start=1):
        if room <= 0:
            break
        body = _cut(text, min(MAX_TEXT_CHARS, room))
        room -= len(body)
        heading = f"Text {number}" + (f" (written for: {title.strip()})" if title.strip() else "")
        parts.append(f"{heading}\n{body}")
    return "\n\n".join(parts)


_OPENING = "You are grading writing that an AI assistant produced for one particular person.\n\n"


def _context_block(context: JudgeContext, with_profile: bool) -> str:
    sections = []
    if with_profile:
        if context.profile.strip():
            sections.append(f"## What is known about the person\n{_cut(context.profile, MAX_HISTORY_CHARS)}")
        history = history_text(context)
        if history:
            sections.append(f"## Texts the person wrote earlier\n{history}")
    sections.append(f"## The task the person gave the assistant\n{context.task.strip()}")
    return "\n\n".join(sections) + "\n\n"


_MEASURES: dict[str, str] = {
    "personalization": (
        "Grade only how well the writing is made for this person: whether it sounds like their own earlier "
        "texts (voice, tone, habits of style), whether it agrees with what is known about them, and whether it "
        "serves their own needs and interests rather than anyone's. General polish counts only where it "
        "bears on that fit."
    ),
    "overall": (
        "Grade the writing as a whole, for this person: how well it matches their way of writing and agrees "
        "with what is known about them, and how helpful, on-task, correct, thoughtful, original and detailed "
        "it is."
    ),
    "overall_without_profile": (
        "Grade the writing as a whole: how helpful, on-task, correct, thoughtful, original and detailed it is."
    ),
}


def _answer_block(label: str, answer: str) -> str:
    return f"## {label}\n<<<\n{_cut(answer, MAX_ANSWER_CHARS)}\n>>>\n\n"


def score_prompt(criterion: Criterion, context: JudgeContext, answer: str) -> str:
    """The one message that asks the judge to grade ``answer`` on ``criterion`` (1-10)."""
    return (
        _OPENING
        + _context_block(context, criterion != "overall_without_profile")
        + _answer_block("The assistant's writing", answer)
        + _MEASURES[criterion]
        + " Judge what is written, fairly and without being swayed by its length. Give your reasons first, in "
        "two or three sentences. Then, on a line of its own, give a whole-number grade from 1 (very poor) to 10 "
        "(excellent), written exactly as Rating: [[N]] with your grade in place of N."
    )


def pair_prompt(criterion: Criterion, context: JudgeContext, first: str, second: str) -> str:
    """The one message that asks the judge which of two outputs is better on ``criterion`` (A, B or a tie)."""
    return (
        _OPENING
        + _context_block(context, criterion != "overall_without_profile")
        + _answer_block("Writing A", first)
        + _answer_block("Writing B", second)
        + _MEASURES[criterion].replace("Grade", "Compare A and B on", 1)
        + " Which one is shown first says nothing about which is better, and length alone is no merit. Give "
        "your reasons first, in two or three sentences. Then, on a line of its own, give your verdict written "
        "exactly as Verdict: [[A]] if A is better, Verdict: [[B]] if B is better, or Verdict: [[tie]] if "
        "neither is."
    )


# --------------------------------------------------------------------------- reading the answer


@dataclass(frozen=True)
class Reading:
    """What an answer says: a score (or verdict), or why there is none."""

    value: float | str | None
    reason_kind: ReasonKind | None = None
    reason: str | None = None


_SCORE = re.compile(r"\[\[\s*([+-]?\d+(?:\.\d+)?)\s*\]\]")
_VERDICT = re.compile(r"\[\[\s*(A|B|tie|C)\s*\]\]", re.IGNORECASE)
# A grade or verdict written without the brackets ("### Grade: 8", "Rating: 7/10", "**Verdict:** B"), read only where
# the answer has none in brackets: the small local judge often writes them so.
_BARE_SCORE = re.compile(
    r"\b(?:rating|grade|score)\b\W{0,4}[:=]\W{0,4}([+-]?\d+(?:\.\d+)?)(?!\.?\d)(?:\s*/\s*10\b)?", re.IGNORECASE
)
_BARE_VERDICT = re.compile(r"\bverdict\b\W{0,4}[:=]\W{0,4}(A|B|tie|C)\b", re.IGNORECASE)
# Phrases of a reply that declines the task (read only when it gives no grade).
_REFUSAL = re.compile(
    r"\b(I\s+(?:can(?:no|')t|cannot|am\s+(?:not\s+able|unable)|won'?t)|I'm\s+(?:sorry|unable|not\s+able)|"
    r"as\s+an\s+AI\b)",
    re.IGNORECASE,
)


def _quoted(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")


def _missing(answer: str, what: str) -> Reading:
    if not answer.strip():
        return Reading(None, "malformed", f"the answer is empty (no {what})")
    if _REFUSAL.search(answer):
        return Reading(None, "refusal", f"the judge declined: {_quoted(answer)}")
    return Reading(None, "malformed", f"no {what} in the answer: {_quoted(answer)}")


def read_score(answer: str) -> Reading:
    """The 1-10 grade in ``answer`` (``[[N]]``, decimals allowed; where there is none, a grade written without
    the brackets, ``Rating: N`` or ``Grade: N``); malformed when there is none, several different ones or one
    outside the scale; a refusal when the judge declined."""
    found = {float(match) for match in _SCORE.findall(answer)} or {
        float(match) for match in _BARE_SCORE.findall(answer)
    }
    if not found:
        return _missing(answer, "grade in [[N]] form")
    if len(found) > 1:
        listed = ", ".join(f"{value:g}" for value in sorted(found))
        return Reading(None, "malformed", f"several different grades in the answer ({listed})")
    score = found.pop()
    if not SCALE[0] <= score <= SCALE[1]:
        return Reading(None, "malformed", f"the grade {score:g} is outside {SCALE[0]}-{SCALE[1]}")
    return Reading(score)


def read_verdict(answer: str) -> Reading:
    """ "first" (A), "second" (B) or "tie" from ``answer`` (``[[A]]``, ``[[B]]``, ``[[tie]]``; ``[[C]]`` is read as
    a tie; where there is none, ``Verdict: A`` without the brackets); malformed for none or several different
    verdicts, a refusal when the judge declined."""
    found = {match.upper() for match in _VERDICT.findall(answer) or _BARE_VERDICT.findall(answer)}
    found = {"TIE" if value == "C" else value for value in found}
    if not found:
        return _missing(answer, "verdict in [[A]], [[B]] or [[tie]] form")
    if len(found) > 1:
        return Reading(None, "malformed", f"several different verdicts in the answer ({', '.join(sorted(found))})")
    return Reading({"A": "first", "B": "second", "TIE": "tie"}[found.pop()])
