"""The Compare tab's decisions, GUI-free: what an annotator is looking at (a saved comparison in the order shown
to them, blind or not, revealed once judged), what they filled in, the checks a judgement must pass before it
is saved, the blind rule (which slot may name its method), and the summary's rows.

**Who judged.** A judgement here is tied to the page session that saved it (Gradio's session hash, stored
as :func:`page_key`), and a page holds one judgement per comparison: its next one replaces it. The name an
annotator types is kept, but it is not who judged: one page that types eight names is one judge, and the
summary's counts, win rates and agreement are over judges. This was chosen over keeping these judgements
out of every figure: a team that judges from several browsers still gets a quick agreement figure, and a
page cannot inflate it by typing names.

A session is not a person, though. A reload starts a new one, and an API caller sends whatever session
hash it likes, so a caller that makes up sessions gains one more judgement per session: no more than by
reloading the page, a call at a time (each also needs the comparison opened in that session first). It
gains nothing beyond this tab: campaigns (the Judge tab) count annotators who joined with a code, and
take nothing from here. So every figure on this tab is labelled unverified, and the page says that a study
that counts people is a campaign.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from specsteer.method.catalog import PRIVATE_METHODS, method_label
from specsteer.method.events import GenerationStats
from specsteer.service.limits import stored_id
from specsteer.stores.generations import (
    RATING_CRITERIA,
    SPECIAL_PREFERENCE_LABELS,
    SPECIAL_PREFERENCES,
    AnnotationSummary,
    NewAnnotation,
    StoredComparison,
    StoredOutput,
    slot_label,
)

# Blind comparisons judge the methods that keep the private context on the device; llm+ (which sends it)
# is offered by the Generate tab and the evaluation, where it is labelled as sending it.
COMPARED_METHODS = PRIVATE_METHODS
# Besides an output, an annotator may choose a special preference, the same list as a campaign's.
PREFERENCE_EXTRAS = [(SPECIAL_PREFERENCE_LABELS[choice], choice) for choice in SPECIAL_PREFERENCES]
SUMMARY_HEADERS = ["method", "shown", "wins", "win rate", "ties", "all good", "all bad", "personalization", "fluency"]


class SavedOutputs(Protocol):
    """A saved judgement's outputs in the order shown (the service's SavedAnnotation)."""

    @property
    def outputs(self) -> Sequence[StoredOutput]: ...


@dataclass
class ComparisonView:
    """What one annotator is looking at: a saved comparison in the order shown to them."""

    comparison_id: int
    order: list[str]  # methods, slot 0 = label A
    texts: list[str]
    generation_ids: list[int]
    blind: bool
    revealed: bool = False
    stats: list[GenerationStats | None] = field(default_factory=list)  # filled when revealed

    def shown_method(self, slot: int) -> str | None:
        """The blind rule: a slot names its method once the judgement is saved, or always when not blind."""
        return self.order[slot] if (self.revealed or not self.blind) else None

    def revealed_with(self, saved: SavedOutputs) -> ComparisonView:
        """This view after its judgement was saved: the methods revealed, with each output's statistics."""
        return replace(self, revealed=True, stats=[output.stats for output in saved.outputs])

    @classmethod
    def of(cls, comparison: StoredComparison) -> ComparisonView:
        """A saved comparison as the service reopened it (a blind one already in a fresh random order)."""
        outputs = comparison.outputs
        return cls(
            comparison_id=comparison.id,
            order=[o.method for o in outputs],
            texts=[o.text for o in outputs],
            generation_ids=[o.generation_id for o in outputs],
            blind=comparison.blind,
        )


@dataclass(frozen=True)
class JudgementForm:
    """What an annotator filled in: name, preference, comment, and the ratings of slot A's criteria
    (:data:`RATING_CRITERIA`), then slot B's, … (None: not rated)."""

    annotator: str
    preferred: str | None
    comment: str
    ratings: tuple[int | None, ...]

    def scores(self, count: int) -> dict[str, dict[str, int | None]]:
        """The ratings of the first ``count`` slots, by label and criterion (missing ones: not rated)."""
        per_slot = len(RATING_CRITERIA)
        given = self.ratings + (None,) * max(0, per_slot * count - len(self.ratings))
        return {
            slot_label(slot): dict(zip(RATING_CRITERIA, given[per_slot * slot : per_slot * (slot + 1)], strict=True))
            for slot in range(count)
        }


def comparison_label(comparison: StoredComparison) -> str:
    """How the reopen dropdown names a saved comparison (rendered as text, not HTML)."""
    snippet = " ".join(comparison.input_text.split())[:60]
    blind = "blind, " if comparison.blind else ""
    return f"#{comparison.id} · {comparison.task} · {blind}{len(comparison.outputs)} outputs · {snippet}"


# Closes the summary's text: what its figures count, and where a study that counts people runs.
UNVERIFIED_NOTE = (
    "Each browser page counts once per comparison (its next judgement replaces the last), whatever names it "
    "types; a reload, or an API caller, starts another page, so these figures count pages, not people. "
    "A study that counts people is a campaign, whose annotators join with a code (the Campaigns and Judge tabs)."
)


def summary_rows(summary: AnnotationSummary) -> tuple[list[list], str]:
    """Win rates and mean ratings per method, and agreement between page sessions, labelled unverified."""
    rows = []
    for method, judged in summary.methods.items():
        means = judged.mean_ratings
        rows.append(
            [
                method_label(method),
                judged.shown,
                judged.wins,
                round(judged.win_rate, 3),
                judged.ties,
                judged.all_good,
                judged.all_bad,
                _round(means.get("personalization")),
                _round(means.get("fluency")),
            ]
        )
    agreement = summary.agreement
    if agreement.comparisons:
        kappa = agreement.fleiss_kappa
        text = (
            f"**Agreement** (unverified) over {agreement.comparisons} comparison(s) judged from two or more page "
            f"sessions ({agreement.judgements} judgements): pairwise agreement {agreement.percent_agreement:.0%}, "
            f"unanimous {agreement.unanimous:.0%}, Fleiss' κ {'n/a' if kappa is None else f'{kappa:.2f}'}."
        )
    else:
        text = "**Agreement**: no comparison has been judged from two page sessions yet."
    counts = (
        f"**Unverified**: {summary.judgements} judgement(s) from {summary.judges} page session(s), "
        f"under {summary.names} name(s). "
    )
    return rows, counts + text + " " + UNVERIFIED_NOTE


# Keys a page session's hash for storage. Random per process: what is stored cannot be turned back into a
# session's hash (which names the session's runs to Stop); sessions do not outlive the process anyway.
_PAGE_KEY_SECRET = secrets.token_bytes(32)


def page_key(session: str) -> str:
    """How a page session is stored with its judgements: an HMAC of Gradio's session hash (64 hex digits)."""
    return hmac.new(_PAGE_KEY_SECRET, session.encode("utf-8"), hashlib.sha256).hexdigest()


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def comparison_id(chosen: int | str | None) -> int:
    """The comparison a caller names ("12", "#12", 12) as an id; ValueError with what to do for anything else
    (a number too large to be an id included: the database would overflow on it)."""
    text = str(chosen).strip().lstrip("#") if chosen is not None else ""
    if not text.isdigit():
        raise ValueError("Choose a saved comparison to open.")
    if len(text) > 19 or not stored_id(int(text)):  # beyond any database id (int() refuses huge strings)
        raise ValueError(f"Comparison #{text[:24]} does not exist.")
    return int(text)


def judgement(view: ComparisonView | None, form: JudgementForm, session: str | None) -> NewAnnotation:
    """The annotation a judgement of the page ``session`` (Gradio's session hash) saves; ValueError saying
    what is missing, before anything is saved."""
    if session is None:
        raise ValueError("A judgement is saved from the page that shows the comparison; this call came from none.")
    if view is None:
        raise ValueError("Run a comparison or open a saved one first.")
    if view.revealed:
        raise ValueError(
            "This judgement is already saved. Reopen the comparison to change it: this page holds one judgement "
            "per comparison, and its next one replaces it."
        )
    if not form.annotator.strip():
        raise ValueError("Enter your name as annotator.")
    if not form.preferred:
        raise ValueError("Pick the output you prefer (or tie / all good / all bad).")
    return NewAnnotation(
        comparison_id=view.comparison_id,
        annotator=form.annotator.strip(),
        preferred=form.preferred,
        ratings=form.scores(len(view.order)),
        comment=form.comment,
        display_order=tuple(view.order),
        page=page_key(session),
    )
