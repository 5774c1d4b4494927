"""What an annotator's judgement is, and what many judgements add up to: win rates and agreement.

Pure: no database, no SQLAlchemy. ``storage.comparisons`` validates and stores judgements with this
vocabulary and reads them back as :class:`Judgement` values; :func:`summarize_annotations` turns any
list of them into statistics, so the statistics are tested on hand-made judgements alone.

The statistics live here, in ``storage/``; the typed values that cross to the application service
(:class:`Judgement`, :class:`AnnotationSummary`) and the labels and criteria a page shows (slots
labelled A, B, …, the rating criteria) are the store values', ``specsteer.stores.generations``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from specsteer.stores.generations import Agreement, AnnotationSummary, Judgement, MethodJudgements

RATING_MIN, RATING_MAX = 1, 5
SPECIAL_PREFERENCES = ("tie", "all_bad")


def latest_judgements(judgements: Iterable[Judgement]) -> list[Judgement]:
    """Each judge's latest judgement per comparison (a re-judgement replaces the earlier one). The judge is
    the page session that saved it (:attr:`Judgement.judge`), not the name typed: one page that types
    eight names is one judge."""
    latest: dict[tuple[int, tuple[str, str]], Judgement] = {}
    for judgement in sorted(judgements, key=lambda j: j.id):
        latest[(judgement.comparison_id, judgement.judge)] = judgement
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
            shown=count["shown"],
            wins=count["wins"],
            ties=count["tie"],
            all_bad=count["all_bad"],
            mean_ratings={criterion: sum(values) / len(values) for criterion, values in sorted(scores[method].items())},
        )
        for method, count in sorted(counts.items())
    }


def _agreement(judgements: Sequence[Judgement]) -> Agreement:
    return Agreement.of((judgement.comparison_id, judgement.preferred_method) for judgement in judgements)


def summarize_annotations(judgements: Iterable[Judgement]) -> AnnotationSummary:
    """Win rates and mean ratings per method, and agreement between judges (page sessions).

    Only each judge's latest judgement of a comparison counts.
    """
    latest = latest_judgements(judgements)
    return AnnotationSummary(
        judgements=len(latest),
        judges=len({judgement.judge for judgement in latest}),
        names=len({judgement.annotator for judgement in latest}),
        methods=_method_judgements(latest),
        agreement=_agreement(latest),
    )
