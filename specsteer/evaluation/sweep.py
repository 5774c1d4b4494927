"""An α × β sweep of SpecSteer read from a run's cells: quality and speed per setting with record-level bootstrap
intervals, the Pareto front, and the choice rule of ``docs/research/SWEEP_PLAN.md`` applied as written.

Records. Only the records that have a cell at every grid point of the run (every setting, SLM+ and LLM) are
used, so that every number compares the same records; a run still going (or stopped) says how many that is
(:attr:`SweepReport.records_complete` of :attr:`SweepReport.records_seen`).

Per point (:class:`PointSummary`): the mean record-level ROUGE-L (0-100) with a percentile bootstrap 95 %
interval of that mean, tokens/s (total new tokens / total seconds, ``grid.summarize``: cells whose timing was
disturbed left out, and counted in ``speed_left_out``; the ROUGE keeps them), and for a SpecSteer
setting the paired difference SpecSteer − LLM (``grid.paired_difference``): mean, interval, records won.
Every bootstrap resamples records with replacement 10,000 times from ``random.Random(0)``.

The choice rule (:func:`choose`, the plan's rules 2 and 3):

2. the setting with the largest mean difference SpecSteer − LLM is the best; every setting whose mean lies
   within ``tie`` (0.10 R-L) of the best's is a near-tie, and among the near-ties the one with the highest
   SpecSteer tokens/s is chosen (the first in the run's order if two are equally fast);
3. if no setting's mean difference is positive, the setting is still chosen by rule 2, and the report says
   that these records showed no gain over LLM.

The Pareto front (:func:`pareto_front`): the points (settings and references) that no other point beats on
both axes at once: at least as high on mean ROUGE-L and at least as fast, and strictly better on one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specsteer.evaluation.grid import PairedDifference, paired_difference, spec_from_config, summarize
from specsteer.evaluation.metrics import ROUGE_LABELS, bootstrap_interval
from specsteer.evaluation.timing import left_out_sentence
from specsteer.method.catalog import BASELINES, method_label
from specsteer.stores.runs import CellResult, GridPoint

STEERED = "specsteer"
REFERENCE = "llm"  # what the choice rule compares each setting with
TIE = 0.10  # R-L: settings whose mean difference lies this close to the best's are near-ties (rule 2)
DRAWS = 10_000
SEED = 0


def complete_records(cells: Sequence[CellResult], points: Sequence[GridPoint] | None = None) -> list[str]:
    """The records with a cell at every one of ``points`` (default: every point the cells have), in a
    natural order ("2" before "10")."""
    wanted = set(points) if points is not None else {cell.point for cell in cells}
    by_record: dict[str, set[GridPoint]] = {}
    for cell in cells:
        by_record.setdefault(cell.record_id, set()).add(cell.point)
    return sorted((record for record, done in by_record.items() if wanted <= done), key=lambda r: (len(r), r))


def config_points(config: Mapping[str, Any]) -> list[GridPoint]:
    """The grid points a stored run's config names (all of them, finished or not)."""
    return spec_from_config(config).points()


@dataclass(frozen=True)
class PointSummary:
    """One grid point over the complete records: mean metric (0-100) with its bootstrap interval, speed, and
    for a SpecSteer setting the paired difference from LLM."""

    point: GridPoint
    records: int
    mean: float
    low: float
    high: float
    tok_per_s: float | None
    vs_reference: PairedDifference | None = None
    speed_left_out: int = 0  # cells whose timing was disturbed: out of tok_per_s, in the ROUGE

    @property
    def label(self) -> str:
        values = (("α", self.point.alpha), ("β", self.point.beta))
        return " ".join([method_label(self.point.method), *(f"{s}={v:g}" for s, v in values if v is not None)])


@dataclass(frozen=True)
class Choice:
    """The plan's rules 2-3 applied: the best setting by mean difference, its near-ties, the one chosen."""

    chosen: GridPoint
    best: GridPoint
    best_mean: float
    near_ties: tuple[GridPoint, ...]  # within the tie margin of the best, the best included, in the run's order
    any_positive: bool  # False: rule 3 (no setting's mean difference from LLM is positive)
    tie: float = TIE

    def statement(self) -> str:
        reason = (
            "the largest mean difference"
            if len(self.near_ties) == 1
            else f"the fastest of {len(self.near_ties)} settings within {self.tie:g} R-L of the best mean difference"
        )
        text = f"chosen: {_setting(self.chosen)} ({reason})."
        if not self.any_positive:
            text += " No setting's mean difference from LLM is positive: these records showed no gain over LLM."
        return text


def _setting(point: GridPoint) -> str:
    return f"α={point.alpha:g} β={point.beta:g}"


def choose(candidates: Sequence[tuple[GridPoint, float, float | None]], tie: float = TIE) -> Choice | None:
    """Rules 2-3 over ``(setting, mean difference from LLM, SpecSteer tokens/s)``; None without candidates.
    A setting without a speed counts as the slowest."""
    if not candidates:
        return None
    best_point, best_mean, _ = max(candidates, key=lambda item: item[1])  # first of equal means
    # A hair of slack so that a difference of exactly ``tie`` (in decimal) counts as within it.
    tied = [item for item in candidates if best_mean - item[1] <= tie + 1e-9]
    chosen = max(tied, key=lambda item: -float("inf") if item[2] is None else item[2])[0]
    return Choice(
        chosen=chosen,
        best=best_point,
        best_mean=best_mean,
        near_ties=tuple(item[0] for item in tied),
        any_positive=any(item[1] > 0 for item in candidates),
        tie=tie,
    )


def pareto_front(points: Sequence[tuple[float, float | None]]) -> list[int]:
    """Indices of the (quality, speed) pairs no other pair dominates (>= on both, > on one); a pair without a
    speed is left out."""
    known = [(index, q, s) for index, (q, s) in enumerate(points) if s is not None]
    return [
        index
        for index, quality, speed in known
        if not any(q >= quality and s >= speed and (q > quality or s > speed) for _, q, s in known)
    ]


@dataclass(frozen=True)
class SweepReport:
    """A run's α × β sweep over its complete records (see the module doc)."""

    metric: str
    points: tuple[GridPoint, ...]  # every grid point of the run
    records_seen: int  # records with at least one cell (the run's record count instead, when known)
    records_complete: int  # records with a cell at every point: the ones used
    settings: tuple[PointSummary, ...]  # SpecSteer, the run's order
    references: tuple[PointSummary, ...]  # SLM+ and LLM where the run has them
    choice: Choice | None  # None without LLM or without a complete record
    pareto: tuple[GridPoint, ...]

    @property
    def has_reference(self) -> bool:
        return any(summary.point.method == REFERENCE for summary in self.references)

    @property
    def speed_left_out(self) -> int:
        """Cells of the points shown left out of their tokens/s (disturbed timing)."""
        return sum(summary.speed_left_out for summary in [*self.settings, *self.references])

    def speed_note(self) -> str:
        """How many cells the tokens/s left out, and of which points ("" for none)."""
        shown = [*self.settings, *self.references]
        return left_out_sentence(self.speed_left_out, where={s.label: s.speed_left_out for s in shown})

    def coverage(self) -> str:
        return (
            f"{self.records_complete} of {self.records_seen} records have every cell of the run's "
            f"{len(self.points)} grid points; only those are used."
        )


def run_record_count(config: Mapping[str, Any]) -> int | None:
    """How many records a stored run covers when finished (its config's cell count over its grid), or None."""
    total, points = config.get("cells_total"), len(config_points(config))
    return total // points if isinstance(total, int) and points and total % points == 0 else None


def sweep_report(
    cells: Sequence[CellResult],
    points: Sequence[GridPoint] | None = None,
    metric: str = "rougeL",
    draws: int = DRAWS,
    seed: int = SEED,
    tie: float = TIE,
    records_total: int | None = None,
) -> SweepReport:
    """The sweep of a run's cells; ``points``: the run's grid (``config_points``), default the points the
    cells have (a point with no cell yet then leaves no record complete when given); ``records_total``: the
    run's record count (``run_record_count``), default the records that have a cell."""
    grid = tuple(points) if points is not None else tuple(dict.fromkeys(cell.point for cell in cells))
    records = set(complete_records(cells, grid))
    kept = [cell for cell in cells if cell.record_id in records and cell.point in grid]
    speeds = {(row["method"], row["alpha"], row["beta"]): row for row in summarize(kept)}

    def summary(point: GridPoint) -> PointSummary | None:
        scores = [100 * value for c in kept if c.point == point and (value := c.rouge.get(metric)) is not None]
        if not scores:
            return None
        low, high = bootstrap_interval(scores, draws, seed)
        versus = None
        if point.method == STEERED:
            versus = paired_difference(kept, point, GridPoint(REFERENCE), metric, draws, seed)
        speed = speeds.get((point.method, point.alpha, point.beta), {})
        return PointSummary(
            point,
            len(scores),
            sum(scores) / len(scores),
            low,
            high,
            speed.get("tok_per_s"),
            versus,
            speed.get("speed_left_out", 0),
        )

    settings = tuple(s for p in grid if p.method == STEERED and (s := summary(p)) is not None)
    references = tuple(s for name in BASELINES if GridPoint(name) in grid and (s := summary(GridPoint(name))))
    candidates = [(s.point, s.vs_reference.mean, s.tok_per_s) for s in settings if s.vs_reference is not None]
    shown = [*settings, *references]
    front = pareto_front([(s.mean, s.tok_per_s) for s in shown])
    return SweepReport(
        metric=metric,
        points=grid,
        records_seen=max(records_total or 0, len({cell.record_id for cell in cells})),
        records_complete=len(records),
        settings=settings,
        references=references,
        choice=choose(candidates, tie),
        pareto=tuple(shown[index].point for index in front),
    )


# --------------------------------------------------------------------------- the report as text and JSON


def _signed(value: float) -> str:
    return f"{value:+.2f}"


def report_rows(report: SweepReport) -> list[dict[str, Any]]:
    """One plain row per point (settings, then references): what ``--json`` prints and the table shows."""
    rows = []
    for summary in [*report.settings, *report.references]:
        d = summary.vs_reference
        rows.append(
            {
                "method": summary.point.method,
                "alpha": summary.point.alpha,
                "beta": summary.point.beta,
                "records": summary.records,
                report.metric: summary.mean,
                f"{report.metric}_low": summary.low,
                f"{report.metric}_high": summary.high,
                "tok_per_s": summary.tok_per_s,
                "speed_left_out": summary.speed_left_out,
                "diff_vs_llm": None if d is None else d.mean,
                "diff_vs_llm_low": None if d is None else d.low,
                "diff_vs_llm_high": None if d is None else d.high,
                "wins_vs_llm": None if d is None else d.wins,
                "pareto": summary.point in report.pareto,
                "chosen": report.choice is not None and summary.point == report.choice.chosen,
            }
        )
    return rows


def report_json(report: SweepReport) -> dict[str, Any]:
    choice = report.choice
    return {
        "metric": report.metric,
        "records_seen": report.records_seen,
        "records_complete": report.records_complete,
        "grid_points": len(report.points),
        "speed_left_out": report.speed_left_out,
        "bootstrap": {"draws": DRAWS, "seed": SEED, "level": 0.95},
        "rows": report_rows(report),
        "choice": None
        if choice is None
        else {
            "alpha": choice.chosen.alpha,
            "beta": choice.chosen.beta,
            "best_alpha": choice.best.alpha,
            "best_beta": choice.best.beta,
            "best_mean_diff_vs_llm": choice.best_mean,
            "near_ties": [[point.alpha, point.beta] for point in choice.near_ties],
            "tie": choice.tie,
            "any_positive": choice.any_positive,
            "statement": choice.statement(),
        },
    }


def report_table(report: SweepReport) -> str:
    """A fixed-width table with the coverage line above and the choice below."""
    name = ROUGE_LABELS.get(report.metric, report.metric)
    headers = ["setting", "n", f"{name} [95 %]", "tok/s", "− LLM [95 %]", "better", "front", "chosen"]
    lines = []
    for row, summary in zip(report_rows(report), [*report.settings, *report.references], strict=True):
        interval = f"{row[report.metric]:.2f} [{row[f'{report.metric}_low']:.2f}, {row[f'{report.metric}_high']:.2f}]"
        versus = (
            "–"
            if row["diff_vs_llm"] is None
            else f"{_signed(row['diff_vs_llm'])} [{_signed(row['diff_vs_llm_low'])}, {_signed(row['diff_vs_llm_high'])}]"
        )
        lines.append(
            [
                summary.label,
                str(row["records"]),
                interval,
                "–" if row["tok_per_s"] is None else f"{row['tok_per_s']:.2f}",
                versus,
                "–" if row["wins_vs_llm"] is None else f"{row['wins_vs_llm']}/{row['records']}",
                "*" if row["pareto"] else "",
                "<=" if row["chosen"] else "",
            ]
        )
    widths = [max(len(header), *(len(line[i]) for line in lines)) for i, header in enumerate(headers)] if lines else []
    table = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in [headers, *lines]
    ]
    notes = [report.coverage()]
    if report.speed_left_out:
        notes[0] += " " + report.speed_note()
    if report.choice is not None:
        notes.append(report.choice.statement())
    elif not report.has_reference:
        notes.append("no LLM cells: the choice rule (SpecSteer − LLM) cannot be applied.")
    else:
        notes.append("no SpecSteer setting has a record in common with LLM yet: nothing to choose.")
    notes.append(
        "Intervals: percentile bootstrap over records (10,000 resamples, seed 0). front: on the Pareto front of "
        f"mean {name} and tokens/s. Choice rule: docs/research/SWEEP_PLAN.md (rules 2-3)."
    )
    return "\n".join([notes[0], "", *table, "", *notes[1:]]) if lines else "\n".join(["no results", *notes])
