"""What a generation store keeps (``protocols.GenerationStore``): histories, generations, comparisons and the
annotators' judgements of them, as typed values.

The application service (``specsteer.service``) saves every generation and comparison, reads saved comparisons
back, and saves and sums up annotators' judgements of them in these values; ``storage.SqlGenerationStore``
turns them into rows. The vocabulary of every judgement, the Compare tab's and a campaign's, is here too: slots
labelled A, B, …, the one list of special preferences, the rating criteria and their range. What judgements add
up to is ``specsteer.evaluation.preference``. Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from specsteer.data.history import History
from specsteer.engine.settings import GenerationSettings
from specsteer.method.events import GenerationStats, LinkMessage, TokenEvent

# --------------------------------------------------------------------------- the application service's generations, comparisons and judgements


RATING_CRITERIA = ("personalization", "fluency")  # what an annotator scores each output on
RATING_RANGE = (1, 5)  # a score is a whole number from the first to the last
MAX_COMPARISON_OUTPUTS = 26  # one letter label each

# What an annotator may choose instead of an output: the one list the Compare tab, campaigns, their stores and
# exports read. None of them ranks one method above another.
SpecialPreference = Literal["tie", "all_good", "all_bad"]
SPECIAL_PREFERENCES: tuple[SpecialPreference, ...] = get_args(SpecialPreference)
SPECIAL_PREFERENCE_LABELS: Mapping[SpecialPreference, str] = {
    "tie": "Tie",
    "all_good": "All good",
    "all_bad": "All bad",
}


def slot_label(slot: int) -> str:
    """Label shown for a slot of a comparison: 0 -> "A", 1 -> "B", ..."""
    if not 0 <= slot < MAX_COMPARISON_OUTPUTS:
        raise ValueError(f"slot {slot} out of range")
    return chr(ord("A") + slot)


@dataclass(frozen=True)
class NamedHistory:
    """A history with the name its owner knows it by (a sample's label, or the uploaded file's name)."""

    history: History
    name: str


@dataclass(frozen=True)
class NewGeneration:
    """One finished (or stopped) generation, to be saved with everything needed to reproduce it."""

    task: str
    input_text: str
    settings: GenerationSettings
    text: str
    tokens: tuple[TokenEvent, ...]  # every token shown, rejected drafts included
    stats: GenerationStats
    transcript: tuple[LinkMessage, ...]  # every message that crossed the link
    history_id: int | None  # from save_history; None without a history
    history_name: str | None


@dataclass(frozen=True)
class NewComparison:
    """Saved generations of one input shown side by side, in the order shown (labels A, B, …)."""

    task: str
    input_text: str
    settings: GenerationSettings  # shared by every output; each output's method is in ``methods``
    generation_ids: tuple[int, ...]
    methods: tuple[str, ...]  # the method of each generation, same order
    blind: bool
    history_id: int | None
    history_name: str | None


@dataclass(frozen=True)
class StoredOutput:
    """One output of a saved comparison."""

    generation_id: int
    method: str
    text: str
    stats: GenerationStats | None  # None for a row saved without readable statistics


@dataclass(frozen=True)
class StoredComparison:
    """A saved comparison; ``outputs`` in the order they are shown (slot 0 is label A)."""

    id: int
    task: str
    input_text: str
    blind: bool
    outputs: tuple[StoredOutput, ...]

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(output.method for output in self.outputs)


@dataclass(frozen=True)
class NewAnnotation:
    """One annotator's judgement of a comparison as they saw it (``display_order``: slot 0 is label A).

    ``preferred`` and the keys of ``ratings`` are labels ("B") or method names; ``preferred`` may also
    be a special preference (:data:`SPECIAL_PREFERENCES`). A None score is "not rated".

    ``page``: the page session that judged, as stored (``specsteer.service.judging.page_key``, never the
    session itself): a page holds one judgement per comparison, so its next one replaces it. None: a
    judgement of no page (stored beside every other)."""

    comparison_id: int
    annotator: str
    preferred: str
    ratings: Mapping[str, Mapping[str, int | None]]  # label -> criterion -> score
    comment: str
    display_order: tuple[str, ...]
    page: str | None = None


@dataclass(frozen=True)
class AnnotationSaved:
    """A judgement stored: its row's id, and whether it replaced its page's earlier judgement of the
    comparison (then the id is that judgement's)."""

    id: int
    replaced: bool = False


@dataclass(frozen=True)
class Judgement:
    """One annotator's stored judgement of one comparison, labels resolved to method names."""

    id: int
    comparison_id: int
    annotator: str
    preferred: str  # as given: a label ("B"), a method or a special preference
    preferred_method: str  # resolved: a method name or a special preference
    ratings: Mapping[str, Mapping[str, int]]  # method -> criterion -> score (1-5); unrated ones absent
    display_order: tuple[str, ...]  # methods in the order this annotator saw them (slot 0 = A)
    comment: str = ""
    created_at: datetime | None = None
    page: str | None = None  # the page session that judged, as stored; None for judgements saved before

    @property
    def judge(self) -> tuple[str, str]:
        """Who judged, as far as the app can tell: the page session, or (judgements saved before pages
        were kept) the name typed."""
        return ("page", self.page) if self.page is not None else ("name", self.annotator)


@dataclass(frozen=True)
class MethodJudgements:
    """How one method fared over the judgements whose comparison showed it."""

    shown: int
    wins: int  # judgements that preferred it
    ties: int  # "tie" judgements while it was shown
    all_good: int  # "all_good" judgements while it was shown
    all_bad: int  # "all_bad" judgements while it was shown
    mean_ratings: Mapping[str, float]  # criterion -> mean score, for the criteria it was rated on

    @property
    def win_rate(self) -> float:
        return self.wins / self.shown


@dataclass(frozen=True)
class Agreement:
    """Agreement on the preferred output over the comparisons judged by two or more annotators.

    ``percent_agreement`` is the mean over those comparisons of the share of annotator pairs that
    agree (Fleiss' observed agreement P-bar); ``unanimous`` the share of comparisons where all agree.
    ``fleiss_kappa`` is Fleiss' kappa in its form for a varying number of raters per item, with the
    methods and the special preferences as categories; with two raters it equals Scott's pi (pooled
    marginals), not Cohen's kappa. Each is None where undefined (no such comparison, or a chance
    agreement of 1).
    """

    comparisons: int
    judgements: int
    percent_agreement: float | None
    unanimous: float | None
    fleiss_kappa: float | None


@dataclass(frozen=True)
class AnnotationSummary:
    """The Compare tab's judgements summed up, one per judge and comparison (:attr:`Judgement.judge`). Unverified:
    a judge is a page session, which a reload or an API caller makes anew, and a name is whatever was typed."""

    judgements: int
    judges: int  # distinct page sessions (for judgements saved before pages were kept: distinct names)
    names: int  # distinct annotator names typed
    methods: Mapping[str, MethodJudgements]  # in method-name order
    agreement: Agreement


ExportFormat = Literal["csv", "jsonl"]
