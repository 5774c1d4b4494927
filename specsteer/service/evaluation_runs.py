"""The Dashboard's decisions, GUI-free: the grid form's values as one EvalSpec (data sources, number lists,
kept uploads), a stored run's summary rows (with the privacy shares of a CoGenesis run), the claim against
SLM+ and LLM as the run's bootstrap intervals show it, the cells its speed figures left out (disturbed timing),
and how the run picker and messages name runs (the example runs that ship with the app as such)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar

from specsteer.data.datasets import LONGLAMP_TASKS
from specsteer.data.sources import resolve_data_source, shared_cogenesis_path, shared_data_path
from specsteer.evaluation import plots
from specsteer.evaluation.claims import claim_counts, claim_row, claim_sentences, claims
from specsteer.evaluation.grid import EvalSpec, run_facts, run_prompts, summarize
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.evaluation.sweep import SweepReport, config_points, run_record_count, sweep_report
from specsteer.evaluation.timing import disturbed_count, left_out_sentence
from specsteer.method.catalog import BASELINES, METHODS, method_label
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU
from specsteer.models.runtime_plan import StoredPlan
from specsteer.service.example_runs import DEFAULT_EXAMPLE
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
    """The run picker's value as run ids, each once in the order chosen (an API caller may repeat one as often as
    it likes: the work a view does stays bounded by the runs stored); None when nothing (or something that is not
    an id) is chosen."""
    if isinstance(run_ids, (int, str)):
        ids = [run_ids]
    elif isinstance(run_ids, (list, tuple)):
        ids = list(run_ids)
    else:  # None, or what an API caller sends instead of a list (a float, an object)
        ids = []
    if not ids or not all(isinstance(run_id, (int, str)) and str(run_id).strip().isdigit() for run_id in ids):
        return None
    return list(dict.fromkeys(int(str(run_id).strip()) for run_id in ids))


# --------------------------------------------------------------------------- what the Dashboard shows of a run


@dataclass(frozen=True)
class RunNumbers:
    """What the Dashboard shows of one stored run: its summary rows, each with the record bootstrap 95 %
    interval of its mean ROUGE-L (``rougeL_low``, ``rougeL_high``), the claims against SLM+ and LLM as table
    rows, and their count lines."""

    rows: tuple[dict, ...]
    differences: tuple[dict[str, str], ...]
    counts: tuple[str, ...]


QUALITY = "rougeL"


def with_intervals(rows: Sequence[Mapping], cells: Sequence, metric: str = QUALITY) -> list[dict]:
    """``rows`` (``summarize``'s, one per grid point) with each point's percentile bootstrap 95 % interval of
    its mean ``metric`` over its records (``metrics.bootstrap_interval``: 10,000 resamples, seed 0, as the
    α × β view draws them), as ``<metric>_low`` and ``<metric>_high`` on 0-100; None where it has no score."""
    scores: dict[tuple, list[float]] = {}
    for cell in cells:
        value = cell.rouge.get(metric)
        if value is not None:
            scores.setdefault((cell.point.method, cell.point.alpha, cell.point.beta), []).append(100 * value)
    shown = []
    for row in rows:
        values = scores.get((row["method"], row.get("alpha"), row.get("beta")))
        low, high = bootstrap_interval(values) if values else (None, None)
        shown.append({**row, f"{metric}_low": low, f"{metric}_high": high})
    return shown


_KEPT: dict[tuple, object] = {}
_KEPT_LOCK = threading.Lock()
_KEPT_MOST = 16
_T = TypeVar("_T")


def _kept(kind: str, run: StoredRun, compute: Callable[[], _T]) -> _T:
    """``compute()`` for ``run``, kept for the last few runs (by id, cell count and last change): a stored run's
    bootstraps (10,000 resamples each) are computed once per process, not once per visitor who opens it."""
    key = (kind, run.id, run.example, run.cell_count, run.updated_at)
    with _KEPT_LOCK:
        if key in _KEPT:
            return _KEPT[key]  # type: ignore[return-value]
    value = compute()
    with _KEPT_LOCK:
        while len(_KEPT) >= _KEPT_MOST:
            _KEPT.pop(next(iter(_KEPT)))
        _KEPT[key] = value
    return value


def numbers_of(rows: Sequence[Mapping], cells: Sequence) -> RunNumbers:
    """The numbers of a run's view from its summary rows and cells (computed afresh)."""
    found = claims(cells)
    return RunNumbers(
        tuple(with_intervals(rows, cells)), tuple(claim_row(claim) for claim in found), tuple(claim_counts(found))
    )


def run_numbers(run: StoredRun, cells: Sequence) -> RunNumbers:
    """The numbers of a stored run's view (:class:`RunNumbers`), kept (:func:`_kept`): the example run a page
    opens on is computed once per process."""
    return _kept("numbers", run, lambda: numbers_of(stored_rows(run.config, cells), cells))


def stored_sweep(run: StoredRun, cells: Sequence) -> SweepReport | None:
    """:func:`run_sweep` of a stored run, kept (:func:`_kept`)."""
    return _kept("sweep", run, lambda: run_sweep(run.config, cells))


def default_run_ids(runs: Sequence[StoredRun]) -> list[int]:
    """The run the Dashboard opens on: the example :data:`example_runs.DEFAULT_EXAMPLE` (else the first example,
    else the user's newest run); none for an empty store."""
    examples = [run for run in runs if run.example]
    chosen = next((run for run in examples if run.name == DEFAULT_EXAMPLE), examples[0] if examples else None)
    if chosen is None and runs:
        chosen = runs[0]
    return [chosen.id] if chosen is not None else []


EMPTY_STORE = (
    "No stored evaluation run yet, so there is nothing to plot. Run a grid with the settings on the left (the "
    "bundled sample's records take minutes), and its figures, tables and α × β view appear here."
)


# --------------------------------------------------------------------------- the joined view's refusal


def joined_refusal(
    chosen: Sequence[tuple[StoredRun, Sequence]], every: Sequence[StoredRun], max_rows: int
) -> str | None:
    """Why the chosen runs (each with its cells) make no joined table, with what to choose instead; None when
    they fit.

    A joined table puts several runs over the same records (the same records file and task) side by side, at
    most ``max_rows`` methods and settings in all (each steering row is bootstrapped against every other). The
    runs it suggests are counted by their grid (their config), the chosen ones by their cells."""
    points = {run.id: _point_count(run) for run in every}
    points.update({run.id: len({cell.point for cell in cells}) for run, cells in chosen})
    total = sum(points[run.id] for run, _ in chosen)
    if total <= max_rows:
        return None
    if len(chosen) == 1:
        ((run, _),) = chosen
        lead = (
            f"“{run.name}” alone holds {total} methods and settings, more than the {max_rows} a joined table "
            "takes; its settings side by side are the α × β view above."
        )
    else:
        lead = f"These runs hold {total} methods and settings together; a joined table takes at most {max_rows}."
    first = chosen[0][0]
    same = [
        run
        for run in every
        if run.id not in {c.id for c, _ in chosen}
        and all(run.config.get(key) == first.config.get(key) for key in ("data", "task"))
        and points[run.id] <= max_rows
    ]
    records = f"{first.config.get('task', '?')} records of {Path(str(first.config.get('data', '?'))).name}"
    if same:
        listed = ", ".join(f"“{run.name}” ({points[run.id]})" for run in same[:4])
        advice = (
            f"Choose runs over the same {records} whose methods and settings add up to {max_rows} or fewer: {listed}."
        )
    else:
        advice = f"No other stored run reads the same {records} with {max_rows} or fewer methods and settings."
    return f"{lead} {advice}"


def _point_count(run: StoredRun) -> int:
    """A run's methods and settings by its config (its grid; at least one per method it names)."""
    methods = run.config.get("methods")
    named = len(methods) if isinstance(methods, (list, tuple)) else 0
    try:
        return len(config_points(run.config)) or named
    except (TypeError, ValueError, KeyError):
        return named


# --------------------------------------------------------------------------- the deployment view

MAX_SERIES = 6  # lines a deployment figure draws at once: more and their colours and labels run together


def series_label(row: Mapping) -> str:
    """A projection row's series (method, α, β) as the picker and the legend name it."""
    return plots.point_label(row)


def series_labels(rows: Sequence[Mapping]) -> list[str]:
    """Every series of a projection, in the rows' order."""
    return list(dict.fromkeys(series_label(row) for row in rows))


def nearest_rtt(rows: Sequence[Mapping], rtt_ms: float) -> float | None:
    """The round-trip time of the projection closest to ``rtt_ms`` (the profile's own)."""
    return min({float(row["rtt_ms"]) for row in rows}, key=lambda rtt: (abs(rtt - rtt_ms), rtt), default=None)


def default_series(rows: Sequence[Mapping], rtt_ms: float) -> list[str]:
    """At most :data:`MAX_SERIES` series: SLM+ and LLM where projected, then the others fastest first at the
    profile's round-trip time."""
    at = nearest_rtt(rows, rtt_ms)
    speeds = {series_label(row): row["projected_tok_per_s"] or 0.0 for row in rows if row["rtt_ms"] == at}
    references = [label for label in series_labels(rows) if label in {method_label(m) for m in BASELINES}]
    others = sorted(
        (label for label in series_labels(rows) if label not in references), key=lambda label: -speeds.get(label, 0.0)
    )
    return [*references, *others][:MAX_SERIES]


def chosen_series(rows: Sequence[Mapping], asked: object, rtt_ms: float) -> list[str]:
    """The series asked for that this projection has (at most :data:`MAX_SERIES`), else the default ones."""
    present = series_labels(rows)
    wanted = [label for label in (asked if isinstance(asked, (list, tuple)) else []) if label in present]
    return wanted[:MAX_SERIES] or default_series(rows, rtt_ms)


def deployment_takeaway(rows: Sequence[Mapping], shown: Sequence[str], profile_label: str, rtt_ms: float) -> str:
    """One line read off the projection's rows: the fastest of the ``shown`` series (SpecSteer's first) at the
    profile's round-trip time, its speedup over the cloud-streamed LLM there and at the largest round-trip time;
    "" without rows."""
    at = nearest_rtt(rows, rtt_ms)
    if at is None:
        return ""
    last = max(float(row["rtt_ms"]) for row in rows)
    here = [row for row in rows if row["rtt_ms"] == at]
    visible = [row for row in here if series_label(row) in shown] or here
    steered = [row for row in visible if row["method"] == "specsteer"] or visible
    best = max(steered, key=lambda row: row["projected_tok_per_s"] or 0.0)
    label, speed = series_label(best), best["projected_tok_per_s"] or 0.0
    line = f"Under “{profile_label}” at {at:g} ms round trip, {label} is projected at {speed:.1f} tok/s"
    llm = next((row for row in here if row["method"] == "llm"), None)
    if best["method"] == "llm" or llm is None or not best.get("projected_speedup"):
        return line + (" (the run has no LLM to compare with)." if llm is None else ".")
    far = next(
        (row for row in rows if row["rtt_ms"] == last and series_label(row) == label and row.get("projected_speedup")),
        None,
    )
    line += f", {best['projected_speedup']:.2f}× the cloud-streamed LLM ({llm['projected_tok_per_s']:.1f} tok/s)"
    if far is not None and last != at:
        line += f"; at {last:g} ms, {far['projected_speedup']:.2f}×"
    return line + "."
