"""Paper Appendix A.2's table, here: two stored runs over the same records -- a base run (``slm+``, ``llm``,
``specsteer``) and a run with per-record LoRA adapters (``slm+``, ``specsteer``; ``evaluate --specialist-lora
per-record:DIR``) -- read as one table (``specsteer lora table``).

Rows: SLM+, SLM+ with LoRA, LLM, SpecSteer, SpecSteer with LoRA (the ones the runs have), each over the records
every row has: mean ROUGE-1 and ROUGE-L (0-100) with a record-level percentile bootstrap interval
(``metrics.bootstrap_interval``), and the facts audit's shares (``grid.summarize`` with the records' private
facts: sent to the cloud, beyond the task, in the output). Then the paired differences that answer A.2's
question (each with LoRA against itself without, SpecSteer with LoRA against SLM+ with LoRA and against LLM),
record by record with their bootstrap intervals and verdicts (``grid.paired_difference``, ``claims.verdict``),
and the per-record adapters' training time per user (mean, median, range: the cells' ``lora_training_seconds``).

The two runs must read the same records file and task; the other config keys they differ in (the runtime,
say) are listed as notes, since then more than the adapter tells the rows apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specsteer.data.tasks import PromptPair
from specsteer.evaluation.claims import METRIC_NAMES
from specsteer.evaluation.grid import paired_difference
from specsteer.evaluation.joined import (
    FACTS_HEADER,
    Difference,
    Interval,
    difference_json,
    differences_lines,
    facts_cells,
    facts_shares,
    rouge_fields,
)
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.evaluation.record_lora import PER_RECORD_LABEL
from specsteer.method.catalog import method_label
from specsteer.stores.runs import CellResult, GridPoint

METRICS = ("rouge1", "rougeL")
# (method, with LoRA): the table's rows in order
ROWS = (("slm+", False), ("slm+", True), ("llm", False), ("specsteer", False), ("specsteer", True))
# (ours, theirs) by row: what A.2 asks of the adapter
DIFFERENCES = (
    (("slm+", True), ("slm+", False)),
    (("specsteer", True), ("specsteer", False)),
    (("specsteer", True), ("slm+", True)),
    (("specsteer", True), ("llm", False)),
    (("specsteer", False), ("slm+", False)),
    (("specsteer", False), ("llm", False)),
)
LORA_TAG = "+lora"  # the method of a LoRA run's cells once both runs are in one list
# The plan's record is compared through ``runtime`` (each stream's runtime, as --runtime spells it): its reasons
# differ by construction (a LoRA run says the adapter chose transformers) and are no difference in what ran.
_SAME_KEYS_IGNORED = {
    "methods",
    "alphas",
    "betas",
    "extra_points",
    "specialist_lora",
    "lora_settings",
    "cells_total",
    "runtime_plan",
}


@dataclass(frozen=True)
class TableRow:
    method: str
    lora: bool
    point: GridPoint  # as stored in its own run
    records: int
    rouge: dict[str, Interval]  # by METRICS
    facts: dict[str, float | None]  # by grid.PRIVACY_ROW_KEYS; empty without private facts

    @property
    def label(self) -> str:
        setting = " ".join(f"{s}={v:g}" for s, v in (("α", self.point.alpha), ("β", self.point.beta)) if v is not None)
        return " ".join(filter(None, [method_label(self.method), setting, "+ LoRA" if self.lora else ""]))


@dataclass(frozen=True)
class Training:
    """The per-record adapters' training over the table's records (one value per user)."""

    users: int
    mean_s: float
    median_s: float
    min_s: float
    max_s: float
    mean_steps: float

    def text(self) -> str:
        return (
            f"training per user ({self.users} adapters): mean {self.mean_s:.1f} s, median {self.median_s:.1f} s "
            f"(range {self.min_s:.1f}–{self.max_s:.1f} s), {self.mean_steps:g} steps on average"
        )


@dataclass(frozen=True)
class LoraTable:
    records: tuple[str, ...]
    rows: tuple[TableRow, ...]
    differences: tuple[Difference, ...]
    training: Training | None
    notes: tuple[str, ...]
    level: float = 0.95


def specsteer_point(
    base: Sequence[CellResult], lora: Sequence[CellResult], alpha: float | None = None, beta: float | None = None
) -> GridPoint:
    """The one SpecSteer setting both runs have at ``alpha`` and ``beta`` (None: any). ValueError when there is
    none, or more than one."""
    shared = {c.point for c in base if c.point.method == "specsteer"} & {
        c.point for c in lora if c.point.method == "specsteer"
    }
    found = ", ".join(sorted(point.label for point in shared)) or "none"
    matching = [p for p in shared if alpha in (None, p.alpha) and beta in (None, p.beta)]
    if len(matching) != 1:
        asked = " ".join(f"{s}={v:g}" for s, v in (("a", alpha), ("b", beta)) if v is not None)
        what = f"SpecSteer at {asked}" if asked else "one SpecSteer setting"
        raise ValueError(f"the runs do not share {what} (choose with --alpha, --beta); they share {found}")
    return matching[0]


def config_notes(base: Mapping[str, Any], lora: Mapping[str, Any]) -> list[str]:
    """ValueError when the runs read other records; otherwise a note per other config key they differ in."""
    for key in ("data", "task"):
        if base.get(key) != lora.get(key):
            raise ValueError(
                f"the two runs must read the same records: their {key} differs ({base.get(key)!r}, {lora.get(key)!r})"
            )
    notes = []
    if lora.get("specialist_lora") != PER_RECORD_LABEL:
        notes.append("the LoRA run's config does not say per-record adapters (specialist_lora = 'per-record')")
    if base.get("specialist_lora"):
        notes.append(f"the base run has a LoRA Specialist too ({base['specialist_lora']})")
    for key in sorted((set(base) | set(lora)) - _SAME_KEYS_IGNORED):
        if base.get(key) != lora.get(key):
            notes.append(f"the runs differ in {key}: {base.get(key)!r} (base) and {lora.get(key)!r} (LoRA)")
    return notes


def _training(cells: Sequence[CellResult], records: set[str]) -> Training | None:
    seconds: dict[str, float] = {}
    steps: dict[str, int] = {}
    for cell in cells:
        if cell.record_id in records and cell.stats.lora_training_seconds is not None:
            seconds.setdefault(cell.record_id, cell.stats.lora_training_seconds)
            steps.setdefault(cell.record_id, cell.stats.lora_training_steps or 0)
    if not seconds:
        return None
    values = list(seconds.values())
    return Training(
        len(values),
        statistics.fmean(values),
        statistics.median(values),
        min(values),
        max(values),
        statistics.fmean(steps.values()),
    )


def lora_table(
    base: Sequence[CellResult],
    lora: Sequence[CellResult],
    *,
    task: str,
    base_config: Mapping[str, Any] | None = None,
    lora_config: Mapping[str, Any] | None = None,
    base_prompts: Mapping[str, PromptPair] | None = None,
    lora_prompts: Mapping[str, PromptPair] | None = None,
    facts: Mapping[str, Sequence[str]] | None = None,
    alpha: float | None = None,
    beta: float | None = None,
    draws: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> LoraTable:
    """The A.2 table of a base run's cells and a per-record-LoRA run's cells (see the module doc)."""
    notes = config_notes(base_config, lora_config) if base_config is not None and lora_config is not None else []
    steered = specsteer_point(base, lora, alpha, beta)
    points = {"slm+": GridPoint("slm+"), "llm": GridPoint("llm"), "specsteer": steered}
    sources = {False: base, True: lora}
    chosen = {
        key: [c for c in sources[key[1]] if c.point == points[key[0]]]
        for key in ROWS
        if any(c.point == points[key[0]] for c in sources[key[1]])
    }
    missing = [labels_of(key) for key in ROWS if key not in chosen]
    if missing:
        notes.append(f"no cells for {', '.join(missing)}")
    if not chosen:
        raise ValueError("neither run has cells of SLM+, LLM or SpecSteer")
    records = set.intersection(*({c.record_id for c in cells} for cells in chosen.values()))
    if not records:
        raise ValueError("the rows share no record")
    # One list, the LoRA run's methods tagged, so that the paired differences pair rows across the runs.
    tagged = {
        key: [
            replace(c, point=replace(c.point, method=c.point.method + LORA_TAG)) if key[1] else c
            for c in cells
            if c.record_id in records
        ]
        for key, cells in chosen.items()
    }
    rows = []
    for key, cells in chosen.items():
        kept = [c for c in cells if c.record_id in records]
        rouge = {}
        for metric in METRICS:
            values = [100 * score for c in kept if (score := c.rouge.get(metric)) is not None]
            if not values:
                raise ValueError(f"no {METRIC_NAMES.get(metric, metric)} score in the {labels_of(key)} cells")
            low, high = bootstrap_interval(values, draws, seed, level)
            rouge[metric] = Interval(statistics.fmean(values), low, high)
        prompts = lora_prompts if key[1] else base_prompts
        rows.append(
            TableRow(key[0], key[1], points[key[0]], len(kept), rouge, facts_shares(kept, task, prompts, facts))
        )
    labels = {(row.method, row.lora): row.label for row in rows}
    everything = [c for cells in tagged.values() for c in cells]
    differences = []
    for metric in METRICS:
        for ours, theirs in DIFFERENCES:
            if ours in tagged and theirs in tagged:
                paired = paired_difference(
                    everything, tagged[ours][0].point, tagged[theirs][0].point, metric, draws, seed, level
                )
                if paired is not None:
                    differences.append(Difference(labels[ours], labels[theirs], paired))
    training = _training(lora, records)
    if training is None:
        notes.append("the LoRA run's cells carry no training time (not a per-record-LoRA run?)")
    return LoraTable(tuple(sorted(records)), tuple(rows), tuple(differences), training, tuple(notes), level)


def labels_of(key: tuple[str, bool]) -> str:
    return f"{method_label(key[0])}{' + LoRA' if key[1] else ''}"


def table_text(table: LoraTable, title: str = "") -> str:
    level = f"{100 * table.level:g} %"
    lines = [title] if title else []
    lines.append(f"{len(table.records)} records that every row has; ROUGE 0–100, mean [{level} record bootstrap]")
    has_facts = any(row.facts for row in table.rows)
    header = f"{'method':<28} {'R-1':>22} {'R-L':>22}"
    if has_facts:
        header += FACTS_HEADER
    lines.append(header)
    for row in table.rows:
        line = f"{row.label:<28} {row.rouge['rouge1'].text():>22} {row.rouge['rougeL'].text():>22}"
        if has_facts:
            line += facts_cells(row.facts)
        lines.append(line)
    lines += differences_lines(table.differences, level)
    lines += ["", table.training.text() if table.training else "training per user: not recorded"]
    lines += [f"note: {note}" for note in table.notes]
    return "\n".join(lines)


def table_json(table: LoraTable) -> dict[str, Any]:
    return {
        "records": list(table.records),
        "level": table.level,
        "rows": [
            {
                "method": row.method,
                "lora": row.lora,
                "alpha": row.point.alpha,
                "beta": row.point.beta,
                "label": row.label,
                "records": row.records,
                **rouge_fields(row.rouge),
                **row.facts,
            }
            for row in table.rows
        ],
        "differences": [difference_json(d) for d in table.differences],
        "training": None
        if table.training is None
        else {
            "users": table.training.users,
            "mean_seconds": table.training.mean_s,
            "median_seconds": table.training.median_s,
            "min_seconds": table.training.min_s,
            "max_seconds": table.training.max_s,
            "mean_steps": table.training.mean_steps,
        },
        "notes": list(table.notes),
    }
