"""Stored runs over the same records read as one table (``specsteer report --run A --run B ...``).

A comparison planned before its data, such as SpecSteer against P³ (``docs/research/P3_PLAN.md``), adds a method to
records another run already holds: the new run's cells and the old run's pair up record by record, as
if one run had computed both. This module joins them and reads the result:

* the runs must read the same records file and task (else ``ValueError``); every other config key they
  differ in (the runtime, say) becomes a note, because then more than the method tells the rows apart;
* a grid point (method, α, β) may come from one run only: two runs with the same point would be two
  answers to one question (``ValueError`` naming both);
* only the records every row has are kept, so that each mean and each paired difference is over the
  same users.

Each row: mean ROUGE-1 and ROUGE-L (0-100) with a record-level percentile bootstrap interval, tokens/s (cells
whose timing was disturbed left out and counted, ``specsteer.evaluation.timing``; the ROUGE keeps them),
the share of the output's tokens chosen on the device (:func:`device_tokens`), and on CoGenesis the facts
audit's shares (``grid.summarize``: sent to the cloud, beyond the task, in the output). Then the paired
differences of each steering method (P³, SpecSteer) against every other row, with their verdicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specsteer.data.tasks import PromptPair
from specsteer.evaluation.claims import METRIC_NAMES, VERDICT_TEXT, verdict
from specsteer.evaluation.grid import (
    PRIVACY_ROW_KEYS,
    PairedDifference,
    paired_difference,
    run_facts,
    run_prompts,
    summarize,
)
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.evaluation.timing import left_out_sentence
from specsteer.method.catalog import method_label
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import CellResult, GridPoint

METRICS = ("rouge1", "rougeL")
# Methods whose rows are compared with every other row (in this order), rather than only compared with.
STEERING = ("p3", "specsteer")
# Methods that decode on the device alone: every output token is the device's.
DEVICE_ONLY = ("slm", "slm+")
# Config keys that say which grid points a run computed, not how: runs adding a method differ in them.
_POINT_KEYS = {"methods", "alphas", "betas", "extra_points", "cells_total", "p3_draft_len", "p3_tau", "runtime_plan"}
_SAME_RECORDS = ("data", "task")


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class Difference:
    ours: str  # row labels
    theirs: str
    paired: PairedDifference

    def text(self) -> str:
        d = self.paired
        numbers = f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]".replace("-", "−")
        return (
            f"{self.ours} − {self.theirs}: {METRIC_NAMES.get(d.metric, d.metric)} {numbers} "
            f"({d.wins}/{d.records} better): {VERDICT_TEXT[verdict(d)]}"
        )


@dataclass(frozen=True)
class StoredRun:
    """One evaluate run as the store gives it back, with what its rows need rebuilt from the records."""

    name: str
    config: Mapping[str, Any]
    cells: Sequence[CellResult]
    prompts: Mapping[str, PromptPair] | None = None


@dataclass(frozen=True)
class JoinedRow:
    run: str
    point: GridPoint
    records: int
    rouge: dict[str, Interval]  # by METRICS
    tok_per_s: float | None
    device_share: float | None  # of the output's tokens, chosen on the device
    settings: str  # the method's own settings where they are not α, β (P³'s k and τ)
    facts: dict[str, float | None]  # by grid.PRIVACY_ROW_KEYS; empty without private facts
    speed_left_out: int = 0  # cells whose timing was disturbed: out of tok_per_s, in the ROUGE

    @property
    def label(self) -> str:
        setting = " ".join(f"{s}={v:g}" for s, v in (("α", self.point.alpha), ("β", self.point.beta)) if v is not None)
        return " ".join(filter(None, [method_label(self.point.method), setting, self.settings]))


@dataclass(frozen=True)
class JoinedTable:
    records: tuple[str, ...]
    rows: tuple[JoinedRow, ...]
    differences: tuple[Difference, ...]
    notes: tuple[str, ...]
    level: float = 0.95


def device_tokens(method: str, stats: GenerationStats) -> int:
    """The output tokens the device chose: P³'s corrections (``device_chosen``); a speculative method's
    accepted drafts (the Specialist's tokens kept); every token of a device-only method; none of ``llm``."""
    if stats.device_chosen is not None:
        return stats.device_chosen
    if method in DEVICE_ONLY:
        return stats.new_tokens
    return stats.accepted if stats.drafted else 0


def config_notes(runs: Sequence[StoredRun]) -> list[str]:
    """ValueError when the runs read other records; otherwise a note per other config key they differ in."""
    first = runs[0]
    notes = []
    for other in runs[1:]:
        for key in _SAME_RECORDS:
            if first.config.get(key) != other.config.get(key):
                raise ValueError(
                    f"the runs must read the same records: {key} of {first.name!r} is {first.config.get(key)!r}, "
                    f"of {other.name!r} {other.config.get(key)!r}"
                )
        for key in sorted((set(first.config) | set(other.config)) - _POINT_KEYS - set(_SAME_RECORDS)):
            if first.config.get(key) != other.config.get(key):
                notes.append(
                    f"the runs differ in {key}: {first.config.get(key)!r} ({first.name}) "
                    f"and {other.config.get(key)!r} ({other.name})"
                )
    return notes


def _method_settings(point: GridPoint, config: Mapping[str, Any]) -> str:
    if point.method != "p3":
        return ""
    from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU

    return f"k={config.get('p3_draft_len', DEFAULT_DRAFT_LEN)} τ={config.get('p3_tau', DEFAULT_TAU):g}"


def facts_shares(
    cells: Sequence[CellResult],
    task: str,
    prompts: Mapping[str, PromptPair] | None,
    facts: Mapping[str, Sequence[str]] | None,
) -> dict[str, float | None]:
    """The facts audit's shares of one row's cells (empty without prompts or private facts)."""
    if not cells or prompts is None or not facts:
        return {}
    (row,) = summarize(cells, task, prompts, facts)
    return {key: row[key] for key in PRIVACY_ROW_KEYS if key in row}


def _interval(values: Sequence[float], draws: int, seed: int, level: float) -> Interval:
    low, high = bootstrap_interval(values, draws, seed, level)
    return Interval(statistics.fmean(values), low, high)


def join_runs(
    runs: Sequence[StoredRun],
    *,
    facts: Mapping[str, Sequence[str]] | None = None,
    draws: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> JoinedTable:
    """The runs' cells as one table over the records every row has (see the module doc)."""
    if not runs:
        raise ValueError("name at least one run")
    notes = config_notes(runs)
    owner: dict[GridPoint, StoredRun] = {}
    for run in runs:
        for point in {cell.point for cell in run.cells}:
            if point in owner:
                raise ValueError(
                    f"both {owner[point].name!r} and {run.name!r} have {point.label}: keep one of the runs"
                )
            owner[point] = run
    if not owner:
        raise ValueError("the runs have no cells")
    by_point = {point: [c for c in run.cells if c.point == point] for point, run in owner.items()}
    records = set.intersection(*({c.record_id for c in cells} for cells in by_point.values()))
    if not records:
        raise ValueError("the runs' rows share no record")
    kept = {point: [c for c in cells if c.record_id in records] for point, cells in by_point.items()}
    task = str(runs[0].config.get("task", ""))
    rows = []
    everything = [c for cells in kept.values() for c in cells]
    # summarize's rows come in the tables' order: the catalog's methods, strict to permissive
    ordered = [GridPoint(row["method"], row["alpha"], row["beta"]) for row in summarize(everything)]
    for point in ordered:
        cells, run = kept[point], owner[point]
        rouge = {}
        for metric in METRICS:
            values = [100 * score for c in cells if (score := c.rouge.get(metric)) is not None]
            if not values:
                raise ValueError(
                    f"no {METRIC_NAMES.get(metric, metric)} score in the {point.label} cells of {run.name!r}"
                )
            rouge[metric] = _interval(values, draws, seed, level)
        (summary,) = summarize(cells)
        total = sum(c.stats.new_tokens for c in cells)
        device = sum(device_tokens(point.method, c.stats) for c in cells)
        rows.append(
            JoinedRow(
                run.name,
                point,
                len(cells),
                rouge,
                summary["tok_per_s"],
                device / total if total else None,
                _method_settings(point, run.config),
                facts_shares(cells, task, run.prompts, facts),
                summary["speed_left_out"],
            )
        )
    labels = {row.point: row.label for row in rows}
    left_out = left_out_sentence(
        sum(row.speed_left_out for row in rows), where={r.label: r.speed_left_out for r in rows}
    )
    if left_out:
        notes.append(f"tok/s: {left_out}")
    pairs = []
    for method in STEERING:
        for ours in (row.point for row in rows if row.point.method == method):
            pairs += [(ours, row.point) for row in rows if row.point != ours and (row.point, ours) not in pairs]
    differences = [
        Difference(labels[ours], labels[theirs], paired)
        for metric in METRICS
        for ours, theirs in pairs
        if (paired := paired_difference(everything, ours, theirs, metric, draws, seed, level)) is not None
    ]
    return JoinedTable(tuple(sorted(records)), tuple(rows), tuple(differences), tuple(notes), level)


def join_stored(
    runs: Sequence[tuple[str, Mapping[str, Any], Sequence[CellResult]]], *, max_rows: int | None = None
) -> JoinedTable:
    """Stored runs, as (name, config, cells), joined: their prompts and private facts rebuilt from the records
    file the first run read (what ``specsteer report`` and the Dashboard's joined view both show).

    ``max_rows`` bounds the work (each steering row is bootstrapped against every other row): more grid
    points than that are refused before any interval is drawn. ValueError (``DataError`` where the records
    file is not here) as a sentence."""
    if max_rows is not None:
        points = {cell.point for _, _, cells in runs for cell in cells}
        if len(points) > max_rows:
            raise ValueError(
                f"the runs hold {len(points)} methods and settings; a joined table takes at most {max_rows}: "
                "choose fewer runs"
            )
    stored = [StoredRun(name, config, cells, run_prompts(config)) for name, config, cells in runs]
    return join_runs(stored, facts=run_facts(runs[0][1]) if runs else None)


def share_text(value: float | None) -> str:
    """A share as the tables print it ("12.7 %", "—" for none)."""
    return "—" if value is None else f"{100 * value:.1f} %"


FACTS_HEADER = f" {'facts sent':>11} {'beyond task':>12} {'in output':>10}"


def facts_cells(facts: Mapping[str, float | None]) -> str:
    """A row's facts audit under FACTS_HEADER."""
    return (
        f" {share_text(facts.get('facts_sent')):>11} {share_text(facts.get('facts_sent_beyond_task')):>12}"
        f" {share_text(facts.get('facts_in_output')):>10}"
    )


def differences_lines(differences: Sequence[Difference], level: str) -> list[str]:
    if not differences:
        return []
    header = f"paired differences, record by record ({level} bootstrap over these records):"
    return ["", header, *(difference.text() for difference in differences)]


def rouge_fields(rouge: Mapping[str, Interval]) -> dict[str, float]:
    """A row's ROUGE intervals as JSON fields: rouge1, rouge1_low, rouge1_high, rougeL, ..."""
    return {
        f"{metric}{suffix}": getattr(rouge[metric], part)
        for metric in METRICS
        for suffix, part in (("", "mean"), ("_low", "low"), ("_high", "high"))
    }


def table_text(table: JoinedTable, title: str = "") -> str:
    level = f"{100 * table.level:g} %"
    lines = [title] if title else []
    lines.append(f"{len(table.records)} records that every row has; ROUGE 0–100, mean [{level} record bootstrap]")
    has_facts = any(row.facts for row in table.rows)
    width = max(len("method"), *(len(row.label) for row in table.rows))
    header = f"{'method':<{width}} {'R-1':>22} {'R-L':>22} {'tok/s':>6} {'on device':>9}"
    if has_facts:
        header += FACTS_HEADER
    lines.append(header + "  run")
    for row in table.rows:
        speed = "—" if row.tok_per_s is None else f"{row.tok_per_s:.2f}"
        line = (
            f"{row.label:<{width}} {row.rouge['rouge1'].text():>22} {row.rouge['rougeL'].text():>22} "
            f"{speed:>6} {share_text(row.device_share):>9}"
        )
        if has_facts:
            line += facts_cells(row.facts)
        lines.append(f"{line}  {row.run}")
    lines += differences_lines(table.differences, level)
    lines += [f"note: {note}" for note in table.notes]
    return "\n".join(lines)


def table_json(table: JoinedTable) -> dict[str, Any]:
    return {
        "records": list(table.records),
        "level": table.level,
        "rows": [
            {
                "run": row.run,
                "method": row.point.method,
                "alpha": row.point.alpha,
                "beta": row.point.beta,
                "label": row.label,
                "records": row.records,
                **rouge_fields(row.rouge),
                "tok_per_s": row.tok_per_s,
                "speed_left_out": row.speed_left_out,
                "device_share": row.device_share,
                **row.facts,
            }
            for row in table.rows
        ],
        "differences": [difference_json(d) for d in table.differences],
        "notes": list(table.notes),
    }


def difference_json(difference: Difference) -> dict[str, Any]:
    d = difference.paired
    return {
        "ours": difference.ours,
        "theirs": difference.theirs,
        "metric": d.metric,
        "records": d.records,
        "wins": d.wins,
        "mean": d.mean,
        "low": d.low,
        "high": d.high,
        "verdict": verdict(d),
    }
