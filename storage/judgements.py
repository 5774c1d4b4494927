"""What an annotator's judgement is, and what many judgements add up to: win rates and agreement.

Pure: no database, no SQLAlchemy. ``storage.comparisons`` validates and stores judgements with this
vocabulary and reads them back as :class:`Judgement` values; :func:`summarize_annotations` turns any
list of them into statistics, so the statistics are tested on hand-made judgements alone.

It lives in ``storage/`` and not in ``specsteer/`` because its vocabulary (slots labelled A, B, …,
"tie" and "all_bad", the rating criteria) is the annotation data model that this package defines
and stores; the decoding library knows nothing of comparisons or annotators.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

RATING_CRITERIA = ("personalization", "fluency")
RATING_MIN, RATING_MAX = 1, 5
SPECIAL_PREFERENCES = ("tie", "all_bad")
MAX_COMPARISON_OUTPUTS = 26  # one letter label each


def slot_label(slot: int) -> str:
    """Label shown for a slot of a comparison: 0 -> "A", 1 -> "B", ..."""
    if not 0 <= slot < MAX_COMPARISON_OUTPUTS:
        raise ValueError(f"slot {slot} out of range")
    return chr(ord("A") + slot)


@dataclass(frozen=True)
class Judgement:
    """One annotator's stored judgement of one comparison, labels resolved to method names."""

    id: int
    comparison_id: int
    annotator: str
    preferred: str  # as given: a label ("B"), a method, "tie" or "all_bad"
    preferred_method: str  # resolved: a method name, "tie" or "all_bad"
    ratings: Mapping[str, Mapping[str, int]]  # method -> criterion -> score (1-5); unrated ones absent
    display_order: tuple[str, ...]  # methods in the order this annotator saw them (slot 0 = A)
    comment: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class MethodJudgements:
    """How one method fared over the judgements whose comparison showed it."""

    shown: int
    wins: int  # judgements that preferred it
    ties: int  # "tie" judgements while it was shown
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
    methods, "tie" and "all_bad" as categories; with two raters it equals Scott's pi (pooled
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
    judgements: int
    annotators: int
    methods: Mapping[str, MethodJudgements]  # in method-name order
    agreement: Agreement


def latest_judgements(judgements: Iterable[Judgement]) -> list[Judgement]:
    """Each annotator's latest judgement per comparison (a re-judgement replaces the earlier one)."""
    latest: dict[tuple[int, str], Judgement] = {}
    for judgement in sorted(judgements, key=lambda j: j.id):
        latest[(judgement.comparison_id, judgement.annotator)] = judgement
    return list(latest.values())


def _method_judgements(judgements: Sequence[Judgement]) -> dict[str, MethodJudgements]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    scores: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for judgement in judgements:
        for method in judgement.display_order:
            counts[method]["shown"] += 1
            if judgement.preferred_method == method:
                counts[method]["wins"] += 1
            elif judgement.preferred_method in SPECIAL_PREFERENCES:
                counts[method][judgement.preferred_method] += 1
        for method, criteria in judgement.ratings.items():
            for criterion, score in criteria.items():
                scores[method][criterion].append(score)
    return {
        method: MethodJudgements(
            shown=count["shown"], wins=count["wins"], ties=count["tie"], all_bad=count["all_bad"],
            mean_ratings={criterion: sum(values) / len(values) for criterion, values in sorted(scores[method].items())},
        )
        for method, count in sorted(counts.items())
    }


def _agreement(judgements: Sequence[Judgement]) -> Agreement:
    by_comparison: dict[int, Counter[str]] = defaultdict(Counter)
    for judgement in judgements:
        by_comparison[judgement.comparison_id][judgement.preferred_method] += 1
    items = [counts for counts in by_comparison.values() if sum(counts.values()) >= 2]
    rated = sum(sum(counts.values()) for counts in items)
    if not items:
        return Agreement(0, 0, None, None, None)
    per_item = []
    for counts in items:
        raters = sum(counts.values())
        per_item.append(sum(n * (n - 1) for n in counts.values()) / (raters * (raters - 1)))
    observed = sum(per_item) / len(items)
    totals: Counter[str] = Counter()
    for counts in items:
        totals.update(counts)
    expected = sum((n / rated) ** 2 for n in totals.values())
    return Agreement(
        comparisons=len(items),
        judgements=rated,
        percent_agreement=observed,
        unanimous=sum(1 for counts in items if len(counts) == 1) / len(items),
        fleiss_kappa=(observed - expected) / (1 - expected) if expected < 1 else None,
    )


def summarize_annotations(judgements: Iterable[Judgement]) -> AnnotationSummary:
    """Win rates and mean ratings per method, and inter-annotator agreement.

    Only each annotator's latest judgement of a comparison counts.
    """
    latest = latest_judgements(judgements)
    return AnnotationSummary(
        judgements=len(latest),
        annotators=len({judgement.annotator for judgement in latest}),
        methods=_method_judgements(latest),
        agreement=_agreement(latest),
    )
