"""The Dashboard's decisions, GUI-free: the grid form's values as one EvalSpec (data sources, number lists,
kept uploads), a stored run's summary rows (with the privacy shares of a CoGenesis run), the claim against
SLM+ and LLM as the run's bootstrap intervals show it, the cells its speed figures left out (disturbed timing),
and how the run picker and messages name runs (the example runs that ship with the app as such)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar

from specsteer.data.datasets import LONGLAMP_TASKS, resolve_data_source, shared_cogenesis_path, shared_data_path
from specsteer.evaluation.claims import claim_sentences
from specsteer.evaluation.grid import EvalSpec, run_facts, run_prompts, summarize
from specsteer.evaluation.sweep import SweepReport, config_points, run_record_count, sweep_report
from specsteer.evaluation.timing import disturbed_count, left_out_sentence
from specsteer.method.catalog import METHODS
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU
from specsteer.models.runtime_plan import StoredPlan
from specsteer.stores.runs import StoredRun

SOURCES = {
    "sample": "Bundled sample (synthetic, 3 records per task)",
    "shared": "Real records (../shared/data: LongLaMP; CoGenesis's test split)",
    "upload": "Uploaded LongLaMP file",
}


def parse_numbers(text: str, what: str) -> tuple[float, ...]:
    """ "1, 0.5, 0.1" -> (1.0, 0.5, 0.1); raises ValueError naming the bad entry."""
    values = []
    for part in (text or "").replace(";", ",").split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{what}: {_shown(part.strip())!r} is not a number.") from None
        if math.isnan(value):
            raise ValueError(f"{what}: NaN is not a grid value.")
        values.append(value)
    if not values:
        raise ValueError(f"{what}: give at least one number (comma-separated).")
    return tuple(dict.fromkeys(values))


def _shown(text: str, limit: int = 40) -> str:
    """A visitor's text as a message quotes it: cut short (a 1 MB value must not come back as a 1 MB toast)."""
    return text if len(text) <= limit else text[:limit] + "…"


def whole_number(value: object, what: str) -> int:
    """A widget's number as an int; ValueError naming ``what`` for a value that is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number, not {_shown(str(value))!r}.")
    return int(value)


def number(value: object, what: str) -> float:
    """A widget's number as a float; ValueError naming ``what`` for a value that is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number, not {_shown(str(value))!r}.")
    return float(value)


W = TypeVar("W")  # GridForm.widgets: whatever a caller names the fields with (the page: its components)


@dataclass(frozen=True)
class GridForm:
    """The grid's widgets' values, by the /evaluate endpoint's parameter names."""

    source: str  # "sample", "shared" or "upload" (SOURCES)
    upload: str | None
    task: str
    records: float
    methods: Sequence[str]
    alphas: str  # comma-separated
    betas: str
    pairing: str
    runtime: str
    max_new_tokens: float
    draft_len: float
    run_name: str
    operator_token: str = ""  # public: a grid beyond a visitor's cap needs the operator's token
    p3_draft_len: float = DEFAULT_DRAFT_LEN  # P³'s Cloud draft length k (method p3; bounded by the engine)
    p3_tau: float = DEFAULT_TAU  # P³'s threshold τ, 0 to 1

    @staticmethod
    def widgets(**widgets: W) -> dict[str, W]:
        """The grid's widgets by field name; a TypeError unless they name exactly the fields."""
        names = [field.name for field in fields(GridForm)]
        if sorted(widgets) != sorted(names):
            raise TypeError(f"the grid's widgets {sorted(widgets)} are not the form's fields {sorted(names)}")
        return widgets

    def spec(self, keep_upload: Callable[[str, str], Path]) -> EvalSpec:
        """The one EvalSpec these values name; ``keep_upload`` keeps an uploaded records file (the service's
        ``keep_records``). ValueError (or DataError, OSError) saying what to change."""
        if self.source in ("sample", "shared"):
            data = resolve_data_source(self.source, self.task)
        elif self.upload:
            data = str(keep_upload(self.upload, self.task))
        else:
            raise ValueError("Upload a LongLaMP records file (JSONL or JSON) first.")
        return EvalSpec(
            data=data,
            task=self.task,
            methods=tuple(method for method in METHODS if method in set(self.methods or [])),
            alphas=parse_numbers(self.alphas, "α list"),
            betas=parse_numbers(self.betas, "β list"),
            limit=whole_number(self.records, "Records"),
            pairing=self.pairing,
            runtime=self.runtime,
            max_new_tokens=whole_number(self.max_new_tokens, "Max new tokens"),
            draft_len=whole_number(self.draft_len, "Draft length"),
            p3_draft_len=whole_number(self.p3_draft_len, "P³ draft length"),
            p3_tau=number(self.p3_tau, "P³ τ"),
            run_name=(self.run_name or "").strip() or None,
        )


def source_choices() -> list[tuple[str, str]]:
    has_shared = any(shared_data_path(task) for task in LONGLAMP_TASKS) or shared_cogenesis_path() is not None
    return [(label, key) for key, label in SOURCES.items() if key != "shared" or has_shared]


def stored_rows(config: Mapping[str, object], cells: Sequence) -> list[dict]:
    """A stored run's summary rows; a run over records with private facts (CoGenesis) also gets the
    privacy audit's shares, when its records file is here to rebuild its prompts from."""
    if config.get("task") != "cogenesis":
        return summarize(cells)
    try:
        return summarize(cells, "cogenesis", run_prompts(config), run_facts(config))
    except (ValueError, OSError):  # the records file moved or is unreadable: the rows without privacy
        return summarize(cells)


def timing_note(cells: Sequence) -> str:
    """How many of a run's cells its speed figures left out (disturbed timing), and how to re-time them; ""
    when none."""
    count = disturbed_count(cells)
    if not count:
        return ""
    return f"{left_out_sentence(count)} Run it again under the same name to re-time {'it' if count == 1 else 'them'}."


def claim_notes(cells: Sequence) -> list[str]:
    """Each SpecSteer setting against SLM+ and against LLM, record by record on ROUGE-L, with the run's own
    95 % bootstrap intervals and what they show (``specsteer.evaluation.claims``), as sentences for the
    status line: never more than an interval shows."""
    return claim_sentences(cells)


def run_sweep(config: Mapping[str, object], cells: Sequence) -> SweepReport | None:
    """The α × β view's numbers for a stored run (``specsteer.evaluation.sweep``: the run's grid from its
    config, only records with every cell), or None when the run has no SpecSteer setting."""
    try:
        points, total = config_points(config), run_record_count(config)
    except (TypeError, ValueError, KeyError):  # a config this version cannot read: the points the cells have
        points, total = list(dict.fromkeys(cell.point for cell in cells)), None
    if not any(point.method == "specsteer" for point in points):
        return None
    return sweep_report(cells, points, records_total=total)


def run_title(run: StoredRun) -> str:
    """How messages name a stored run: ``#12 my-grid``, or ``example: cogenesis-sweep-dev40`` for one of the
    example runs that ship with the app."""
    return f"example: {run.name}" if run.example else f"#{run.id} {run.name}"


def run_label(run: StoredRun) -> str:
    """How the run picker names a stored run (rendered as text, not HTML)."""
    config = run.config or {}
    return (
        f"{run_title(run)} · {config.get('task', '?')} · {StoredPlan.read(config).runtime} · {run.status} · "
        f"{run.cell_count}/{config.get('cells_total', '?')} cells"
    )


def runtime_note(config: Mapping[str, object]) -> str:
    """A sentence for the status line: the runtime the run's cells ran on, each stream's when split, and the
    plan's reason (runs stored before plans: the runtime's name alone; before the runtime choice: transformers)."""
    return f"Runtime: {StoredPlan.read(config).describe()}."


def chosen_run_ids(run_ids: Sequence[int] | int | None) -> list[int] | None:
    """The run picker's value as run ids; None when nothing (or something that is not an id) is chosen."""
    if isinstance(run_ids, (int, str)):
        ids = [run_ids]
    elif isinstance(run_ids, (list, tuple)):
        ids = list(run_ids)
    else:  # None, or what an API caller sends instead of a list (a float, an object)
        ids = []
    if not ids or not all(isinstance(run_id, (int, str)) and str(run_id).strip().isdigit() for run_id in ids):
        return None
    return [int(str(run_id).strip()) for run_id in ids]
