"""A run's judge scores read back: per judge, criterion and grid point the mean grade (1-10) with a record-level
percentile bootstrap interval (``metrics.bootstrap_interval``: records resampled 10,000 times, seed 0), how many
cells were graded and how many were not, by reason; and SpecSteer's settings against SLM+ and LLM record by
record (the paired difference with its interval and the verdict ``claims`` reads off it).

Pure over stored :class:`~specsteer.stores.judges.JudgeScore` values: ``specsteer judge``, ``report``,
``sweep``, the Dashboard's run table (:func:`row_columns`) and the campaign export read the same numbers. A weak
judge's (the local fallback's) figures say so in every header and line.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specsteer.evaluation.claims import METRIC_NAMES, Claim, claim_sentence, steering_settings
from specsteer.evaluation.grid import PairedDifference, paired_values
from specsteer.evaluation.judge_rubric import CRITERIA, CRITERION_LABELS, SCALE
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.method.catalog import BASELINES, METHODS
from specsteer.stores.judges import REASON_KINDS, WEAK_JUDGE, JudgeIdentity, JudgeScore
from specsteer.stores.runs import CellResult, GridPoint

DRAWS, SEED, LEVEL = 10_000, 0, 0.95


@dataclass(frozen=True)
class ScoreSummary:
    """One judge's grades of one grid point on one criterion, over the records it graded."""

    judge: JudgeIdentity
    point: GridPoint
    criterion: str
    scored: int
    mean: float | None
    low: float | None
    high: float | None
    failures: Mapping[str, int]  # reason kind -> cells stored without a grade

    @property
    def asked(self) -> int:
        return self.scored + sum(self.failures.values())

    def text(self) -> str:
        """E.g. ``6.10 [5.70, 6.45] (n=40)``, or ``no grade (3 asked)``."""
        if self.mean is None:
            return f"no grade ({sum(self.failures.values())} asked)"
        return f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}] (n={self.scored})"


def _selected(scores: Sequence[JudgeScore], records: Collection[str] | None) -> list[JudgeScore]:
    return [score for score in scores if records is None or score.record_id in records]


def judges(scores: Sequence[JudgeScore]) -> list[JudgeIdentity]:
    """The judges that graded, strongest first (endpoint judges before the weak local one), then by name."""
    return sorted({score.judge for score in scores}, key=lambda judge: (judge.weak, judge.key))


def score_summaries(scores: Sequence[JudgeScore], records: Collection[str] | None = None) -> list[ScoreSummary]:
    """One summary per (judge, criterion, grid point), over ``records`` (None: every record graded)."""
    groups: dict[tuple[JudgeIdentity, str, GridPoint], list[JudgeScore]] = defaultdict(list)
    for score in _selected(scores, records):
        groups[(score.judge, score.criterion, score.point)].append(score)
    summaries = []
    for (judge, criterion, point), group in groups.items():
        values = [score.score for score in group if score.score is not None]
        failures = Counter(str(score.reason_kind) for score in group if score.score is None)
        low = high = mean = None
        if values:
            mean = sum(values) / len(values)
            low, high = bootstrap_interval(values, DRAWS, SEED, LEVEL)
        summaries.append(ScoreSummary(judge, point, criterion, len(values), mean, low, high, dict(failures)))
    order = {judge: index for index, judge in enumerate(judges(scores))}
    return sorted(
        summaries,
        key=lambda s: (
            order[s.judge],
            CRITERIA.index(s.criterion) if s.criterion in CRITERIA else 99,
            _point_order(s.point),
        ),
    )


def _point_order(point: GridPoint) -> tuple:
    # The catalog's method order (SLM+, LLM, SpecSteer, ...), strict to permissive α within a method.
    rank = METHODS.index(point.method) if point.method in METHODS else len(METHODS)
    return (rank, point.method, -(point.alpha or 0.0), point.beta or 0.0)


def paired_differences(
    scores: Sequence[JudgeScore], records: Collection[str] | None = None, baselines: Sequence[str] = BASELINES
) -> list[tuple[JudgeIdentity, PairedDifference]]:
    """Each SpecSteer setting minus each baseline the run has (SLM+, LLM), per judge and criterion, over the
    records both have a grade for, with a percentile bootstrap interval of the mean difference."""
    graded: dict[tuple[JudgeIdentity, str, GridPoint], dict[str, float]] = defaultdict(dict)
    for score in _selected(scores, records):
        if score.score is not None:
            graded[(score.judge, score.criterion, score.point)][score.record_id] = score.score
    found = []
    points = {point for _, _, point in graded}
    for judge in judges(scores):
        for criterion in CRITERIA:
            for baseline in baselines:
                theirs = graded.get((judge, criterion, GridPoint(baseline)))
                if not theirs:
                    continue
                for point in steering_settings(points):
                    metric = column_header(judge, criterion)
                    ours = graded.get((judge, criterion, point), {})
                    difference = paired_values(point, GridPoint(baseline), metric, ours, theirs, DRAWS, SEED, LEVEL)
                    if difference is not None:
                        found.append((judge, difference))
    return found


# --------------------------------------------------------------------------- how they are shown


def column_header(judge: JudgeIdentity, criterion: str, shown: Collection[JudgeIdentity] = ()) -> str:
    """The results table's header of a judge's criterion, e.g. ``weak judge: personalization``; among the judges
    ``shown`` in one table, the model is named when there are several, and the rubric when one model graded under
    several (a rubric's new version), so that no two judges share a column."""
    name = f"{judge.model} " if len({other.model for other in shown}) > 1 else ""
    who = f"{name}{WEAK_JUDGE}" if judge.weak else f"{name}judge".strip()
    rubrics = {other.rubric for other in shown if other.model == judge.model}
    version = f" ({judge.rubric})" if len(rubrics) > 1 else ""
    return f"{who}{version}: {CRITERION_LABELS.get(criterion, criterion)}"


def row_columns(rows: Sequence[Mapping[str, Any]], scores: Sequence[JudgeScore]) -> list[dict[str, Any]]:
    """The summary rows (``grid.summarize``) with their judge grades under ``"judge"``: header -> text, the
    same headers on every row ("–" where a row's point has none). Rows unchanged when there is no grade."""
    summaries = score_summaries(scores)
    if not summaries:
        return [dict(row) for row in rows]
    shown = {summary.judge for summary in summaries}
    headers = list(dict.fromkeys(column_header(s.judge, s.criterion, shown) for s in summaries))
    by_point: dict[GridPoint, dict[str, str]] = defaultdict(dict)
    for summary in summaries:
        text = summary.text() if summary.mean is None else f"{summary.mean:.2f} [{summary.low:.2f}, {summary.high:.2f}]"
        by_point[summary.point][column_header(summary.judge, summary.criterion, shown)] = text
    result = []
    for row in rows:
        point = GridPoint(row["method"], row.get("alpha"), row.get("beta"))
        found = by_point.get(point, {})
        result.append({**row, "judge": {header: found.get(header, "–") for header in headers}})
    return result


def scale_note(scores: Sequence[JudgeScore]) -> str:
    """One sentence under a table with judge columns: who judged, on what scale, how the intervals were drawn,
    and how many cells have no grade, by reason ("" without scores)."""
    if not scores:
        return ""
    failures = Counter(str(score.reason_kind) for score in scores if score.score is None)
    who = "; ".join(dict.fromkeys(judge.label for judge in judges(scores)))  # a model under two rubrics: once
    counted = ", ".join(f"{failures[kind]} {kind}" for kind in REASON_KINDS if failures[kind])
    missing = f" Without a grade: {counted}." if counted else ""
    weak = (
        " A weak judge is the offline Generalist grading here (a small model; on a run of its own pairing, the one"
        " behind LLM's outputs and SpecSteer's Cloud, so it may favour them): a rough signal, not the paper's judge."
        if any(judge.weak for judge in judges(scores))
        else ""
    )
    return (
        f"Judge grades (CoGenesis's rubric, {SCALE[0]}–{SCALE[1]}) by {who}: mean over the graded records "
        f"[{100 * LEVEL:g} % record bootstrap, {DRAWS:,} resamples].{missing}{weak}"
    )


def rouge_beside(
    cells: Sequence[CellResult], point: GridPoint, records: Collection[str], metric: str = "rougeL"
) -> str:
    """``point``'s mean ROUGE (0-100) with its record bootstrap interval over ``records``: what a grade is read
    beside ("" when none of them has a score)."""
    values = [
        100 * value
        for cell in cells
        if cell.point == point and cell.record_id in records and (value := cell.rouge.get(metric)) is not None
    ]
    if not values:
        return ""
    low, high = bootstrap_interval(values, DRAWS, SEED, LEVEL)
    return f"{METRIC_NAMES.get(metric, metric)} {sum(values) / len(values):.2f} [{low:.2f}, {high:.2f}]"


def summary_lines(
    scores: Sequence[JudgeScore], records: Collection[str] | None = None, cells: Sequence[CellResult] = ()
) -> list[str]:
    """The judge section of a text report: per judge (model and rubric), its grades per criterion and point
    (beside the point's ROUGE-L over the same graded records, when ``cells`` are given), then SpecSteer against the
    baselines under that judge, each a sentence (empty without scores)."""
    chosen = _selected(scores, records)
    summaries = score_summaries(chosen)
    if not summaries:
        return []
    lines = [scale_note(chosen)]
    differences = paired_differences(chosen)
    for judge in judges(chosen):
        lines.append(f"{judge.label}, rubric {judge.rubric}:")
        for summary in (s for s in summaries if s.judge == judge):
            failures = ", ".join(f"{count} {kind}" for kind, count in sorted(summary.failures.items()))
            why = f"; without a grade: {failures}" if failures else ""
            graded = {
                s.record_id
                for s in chosen
                if (s.judge, s.point, s.criterion) == (judge, summary.point, summary.criterion) and s.score is not None
            }
            rouge = rouge_beside(cells, summary.point, graded) if cells else ""
            beside = f"; {rouge} on the same records" if rouge else ""
            lines.append(
                f"  {CRITERION_LABELS.get(summary.criterion, summary.criterion):<22} {summary.point.display:<22} "
                f"{summary.text()}{why}{beside}"
            )
        lines += [f"  {claim_sentence(Claim(d))}" for by, d in differences if by == judge]
    return lines


def summary_json(scores: Sequence[JudgeScore], records: Collection[str] | None = None) -> dict[str, Any]:
    """The same numbers as one JSON value (``{"grades": [...], "differences": [...]}``)."""
    chosen = _selected(scores, records)
    grades = [
        {
            "judge": summary.judge.model,
            "judge_kind": summary.judge.kind,
            "weak_judge": summary.judge.weak,
            "rubric": summary.judge.rubric,
            "criterion": summary.criterion,
            "method": summary.point.method,
            "alpha": summary.point.alpha,
            "beta": summary.point.beta,
            "graded": summary.scored,
            "mean": summary.mean,
            "low": summary.low,
            "high": summary.high,
            "without_grade": dict(summary.failures),
        }
        for summary in score_summaries(chosen)
    ]
    differences = [
        {
            "judge": judge.model,
            "weak_judge": judge.weak,
            "rubric": judge.rubric,
            "metric": d.metric,
            "ours": {"method": d.ours.method, "alpha": d.ours.alpha, "beta": d.ours.beta},
            "theirs": d.theirs.method,
            "records": d.records,
            "wins": d.wins,
            "mean": d.mean,
            "low": d.low,
            "high": d.high,
            "verdict": Claim(d).verdict,
        }
        for judge, d in paired_differences(chosen)
    ]
    return {"scale": list(SCALE), "level": LEVEL, "grades": grades, "differences": differences}
