"""ROUGE for personalized long-text generation, computed with the ``rouge-score`` package.

Two variants of ROUGE-1 and ROUGE-L F-measure are reported side by side:

* ``rouge1`` / ``rougeL`` — unstemmed (``use_stemmer=False``), the LaMP / LongLaMP protocol;
* ``rouge1_stemmed`` / ``rougeL_stemmed`` — with rouge-score's Porter stemmer (which only stems
  tokens longer than three characters).

Per-generation scores are F-measures in [0, 1], as rouge-score returns them and as they are stored
in the database. Corpus figures are the mean over records; :func:`corpus_rouge` reports them on the
0–100 scale used in papers and in every output of ``specsteer.evaluation.grid``.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Mapping, Sequence

from rouge_score import rouge_scorer

ROUGE_TYPES = ("rouge1", "rougeL")
ROUGE_KEYS = ("rouge1", "rougeL", "rouge1_stemmed", "rougeL_stemmed")
ROUGE_LABELS = {
    "rouge1": "ROUGE-1",
    "rougeL": "ROUGE-L",
    "rouge1_stemmed": "ROUGE-1 (stemmed)",
    "rougeL_stemmed": "ROUGE-L (stemmed)",
}


@functools.lru_cache(maxsize=2)
def _scorer(stemmed: bool) -> rouge_scorer.RougeScorer:
    # Building a scorer loads the stemmer; one per variant is enough for a whole run.
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=stemmed)


def rouge_scores(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1 and ROUGE-L F-measure (0–1) of ``prediction`` against ``reference``, unstemmed and stemmed."""
    scores: dict[str, float] = {}
    for stemmed, suffix in ((False, ""), (True, "_stemmed")):
        # rouge-score's argument order is (target, prediction).
        result = _scorer(stemmed).score(reference, prediction)
        for rouge_type in ROUGE_TYPES:
            scores[rouge_type + suffix] = result[rouge_type].fmeasure
    return scores


def corpus_rouge(per_record: Iterable[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Mean over records of each ROUGE key, on the 0–100 scale; None where no record has a score."""
    records = list(per_record)
    means: dict[str, float | None] = {}
    for key in ROUGE_KEYS:
        values = [value for record in records if (value := record.get(key)) is not None]
        means[key] = 100.0 * sum(values) / len(values) if values else None
    return means


def bootstrap_interval(
    values: Sequence[float], draws: int = 10_000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``values`` (one value per record, resampled with
    replacement ``draws`` times from ``random.Random(seed)``): (low, high) at ``level``. ValueError when
    ``values`` is empty."""
    if not values:
        raise ValueError("a bootstrap interval needs at least one value")
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(draws))
    tail = (1 - level) / 2
    return means[int(tail * draws)], means[int((1 - tail) * draws) - 1]
