"""The quality claim a run supports, and no more: each SpecSteer setting against SLM+ and against LLM, record by
record, with the run's own 95 % bootstrap interval, and a verdict read off that interval.

* ``higher`` — the interval lies above 0: on these records the setting beats the baseline;
* ``lower`` — the interval lies below 0: on these records the baseline is better;
* ``not established`` — the interval holds 0: these records do not tell the two apart.

A verdict is about the run's records only (n of them, shared by the two points); it is never a statement
about other users. :func:`claims` computes them (``grid.paired_difference``: percentile bootstrap over records,
10,000 resamples, seed 0), :func:`claim_sentence` words one, :func:`claim_sentences` words a run's, with a
count line per baseline (:func:`claim_counts`). ``specsteer evaluate``'s summary prints these; the Dashboard shows
the count lines and one table row per claim (:func:`claim_row`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from specsteer.evaluation.grid import PairedDifference, paired_difference
from specsteer.method.catalog import BASELINES, method_label
from specsteer.stores.runs import CellResult, GridPoint

Verdict = Literal["higher", "lower", "not established"]
METRIC_NAMES = {"rougeL": "R-L", "rouge1": "R-1", "rougeL_stemmed": "R-L stem", "rouge1_stemmed": "R-1 stem"}
VERDICT_TEXT: dict[Verdict, str] = {
    "higher": "higher on these records (the interval lies above 0)",
    "lower": "lower on these records (the interval lies below 0)",
    "not established": "not established on these records (the interval holds 0)",
}


def verdict(difference: PairedDifference) -> Verdict:
    """What the interval shows: above 0, below 0, or neither."""
    if difference.low > 0:
        return "higher"
    if difference.high < 0:
        return "lower"
    return "not established"


@dataclass(frozen=True)
class Claim:
    """One SpecSteer setting against one baseline on one metric, with what its interval shows."""

    difference: PairedDifference

    @property
    def verdict(self) -> Verdict:
        return verdict(self.difference)


def claim_sentence(claim: Claim) -> str:
    """E.g. "SpecSteer α=0.1 β=1 − LLM: R-L −0.17 [−0.98, +0.70] (51/120 better): not established on these
    records (the interval holds 0)." (signs as minus signs, the interval at its level)."""
    d = claim.difference
    numbers = f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]".replace("-", "−")
    level = f"{100 * d.level:g} % bootstrap"
    return (
        f"{d.ours.display} − {method_label(d.theirs.method)}: {METRIC_NAMES.get(d.metric, d.metric)} "
        f"{numbers} ({d.wins}/{d.records} better, {level}): {VERDICT_TEXT[claim.verdict]}."
    )


def _signed(value: float) -> str:
    return f"{value:+.2f}".replace("-", "−")


def claim_row(claim: Claim) -> dict[str, str]:
    """One claim as a table row: the setting, the baseline, the mean difference, its interval, the records it
    won, and what the interval shows ("higher", "lower", "not established")."""
    d = claim.difference
    return {
        "SpecSteer setting": d.ours.display,
        "against": method_label(d.theirs.method),
        "metric": METRIC_NAMES.get(d.metric, d.metric),
        "mean difference": _signed(d.mean),
        f"{100 * d.level:g} % interval": f"[{_signed(d.low)}, {_signed(d.high)}]",
        "records better": f"{d.wins} of {d.records}",
        "on these records": claim.verdict,
    }


def steered_points(cells: Sequence[CellResult]) -> list[GridPoint]:
    """The run's SpecSteer settings, strict to permissive (α descending), then β ascending, the fixed α before CDA."""
    return steering_settings(cell.point for cell in cells)


def steering_settings(points: Iterable[GridPoint]) -> list[GridPoint]:
    """The SpecSteer settings among ``points``, once each, in :func:`steered_points`' order."""
    return sorted(
        {point for point in points if point.method == "specsteer"},
        key=lambda point: (
            -(point.alpha or 0.0),
            point.beta or 0.0,
            point.cda_lambda is not None,
            point.cda_lambda or 0,
        ),
    )


def claims(
    cells: Sequence[CellResult], metrics: Sequence[str] = ("rougeL",), baselines: Sequence[str] = BASELINES
) -> list[Claim]:
    """Every SpecSteer setting of the run against each baseline it has (SLM+, LLM), on each metric, over the
    records the two share."""
    found: list[Claim] = []
    for metric in metrics:
        for baseline in baselines:
            for point in steered_points(cells):
                difference = paired_difference(cells, point, GridPoint(baseline), metric)
                if difference is not None:
                    found.append(Claim(difference))
    return found


def claim_sentences(cells: Sequence[CellResult], metrics: Sequence[str] = ("rougeL",)) -> list[str]:
    """A count line per (baseline, metric), each followed by one sentence per claim; empty without a SpecSteer
    setting and a baseline to compare it with."""
    return claim_counts(claims(cells, metrics), metrics, sentences=True)


def claim_counts(found: Sequence[Claim], metrics: Sequence[str] = ("rougeL",), sentences: bool = False) -> list[str]:
    """A count line per (baseline, metric) of ``found``: how many settings the intervals put higher, lower or
    neither; with ``sentences``, each followed by its claims' sentences."""
    lines: list[str] = []
    for metric in metrics:
        for baseline in BASELINES:
            group = [c for c in found if c.difference.metric == metric and c.difference.theirs.method == baseline]
            if not group:
                continue
            counts = {name: sum(c.verdict == name for c in group) for name in VERDICT_TEXT}
            lines.append(
                f"SpecSteer − {method_label(baseline)} on {METRIC_NAMES.get(metric, metric)}, each setting on the "
                f"records both have: higher for {counts['higher']} of {len(group)} setting(s), lower for "
                f"{counts['lower']}, not established for {counts['not established']} (95 % bootstrap intervals "
                "over this run's records; nothing here speaks for other users)."
            )
            if sentences:
                lines += [claim_sentence(claim) for claim in group]
    return lines
