"""An annotation campaign made from the outputs an evaluation run stored: no generation, no model loaded.

``specsteer evaluate`` stores every cell's output (``specsteer.stores.runs.CellResult``); a campaign
over the same records and methods would compute them again (minutes of CPU, and llama.cpp's batching may
change a token). :func:`create_from_run` instead builds each record's comparison from the run's cells:

* **The run**: by name, from the application service's run store; its records are read from its records
  file (as the run read them: the same task, the first ``limit`` records, in the file's order), so each
  comparison's input and history are the record's, kept as :meth:`CampaignService.generate` keeps them.
* **The methods**: those named (default: the run's methods that keep the private context on the device),
  each at one grid point: α and β pick the point of the methods that read them (left out, the run's only
  value; a run with several must be told which).
* **The records**: the first ``limit`` (default: all, up to ``MAX_RECORDS``) records, in the run's order,
  that have a cell for every chosen method at that point; fewer than asked is an error that says how many.
* **Stored**: the campaign (its data keeps the source: run name and id, α, β; the report and the
  Dashboard say it), then per record its history, one generation per method (the cell's output and
  statistics; no token trace or transcript, which the run does not keep) and the comparison; ready at once,
  with join codes as :meth:`CampaignService.create` issues them.

Everything is checked before anything is stored; a store failure midway leaves the campaign ``failed``
with the reason (``generate`` then says so: it never generates for such a campaign).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsteer.data.datasets import Record, load_task_records
from specsteer.data.record_files import DataError
from specsteer.data.sources import resolve_data_source
from specsteer.engine.settings import GenerationSettings, sentence
from specsteer.evaluation.grid import spec_from_config
from specsteer.method.catalog import METHOD_INFO, PRIVATE_METHODS, method_label
from specsteer.service.campaign_checks import (
    MAX_ANNOTATORS,
    MAX_RECORDS,
    clean_name,
    outputs_similarity,
    record_history,
)
from specsteer.service.campaign_records import valid_record_limit
from specsteer.service.campaign_values import CampaignError, CreatedCampaign
from specsteer.service.campaigns import CampaignService
from specsteer.service.join_codes import issue_codes
from specsteer.stores.campaigns import NewCampaign, RunSource
from specsteer.stores.generations import NewComparison, NewGeneration
from specsteer.stores.runs import CellResult, GridPoint, StoredRun, cell_key, grid_point
from specsteer.util.jsonable import to_jsonable


@dataclass(frozen=True)
class RunCampaignRequest:
    """A campaign from stored run ``run``'s outputs. ``methods`` () means the run's private methods; ``alpha``
    and ``beta`` None mean the run's only value for the methods that read them."""

    name: str
    run: str
    methods: tuple[str, ...] = ()
    alpha: float | None = None
    beta: float | None = None
    limit: int | None = None
    annotators: tuple[str, ...] = ()
    open_to_anyone: bool = False


@dataclass(frozen=True)
class RunRecord:
    """A record of the run chosen for the campaign: its place in the run's order and its cells, one per method."""

    position: int
    record: Record
    cells: tuple[CellResult, ...]


@dataclass(frozen=True)
class RunSelection:
    """What a campaign from ``run`` holds, decided before anything is stored."""

    run: StoredRun
    task: str
    path: str  # the run's records file, where it is now
    methods: tuple[str, ...]
    settings: GenerationSettings
    source: RunSource
    records: tuple[RunRecord, ...]


# --------------------------------------------------------------------------- choosing (pure)


def proposed(run: StoredRun) -> RunCampaignRequest:
    """What a form proposes for a campaign from ``run`` (the operator may change it): the run's methods that
    keep the private context on the device, and the first α and β of its grid."""
    try:
        spec = spec_from_config(run.config)
    except (TypeError, ValueError, KeyError):
        return RunCampaignRequest("", run.name)
    methods = tuple(method for method in spec.methods if method in PRIVATE_METHODS)
    return RunCampaignRequest(
        "",
        run.name,
        methods,
        spec.alphas[0] if spec.alphas and any(METHOD_INFO[m].takes_alpha for m in methods) else None,
        spec.betas[0] if spec.betas and any(METHOD_INFO[m].takes_beta for m in methods) else None,
    )


def _value_text(value: float | None) -> str:
    return "-" if value is None else format(float(value), ".12g")  # as cell keys compare them


def choose_methods(requested: Sequence[str], run_methods: Sequence[str]) -> tuple[str, ...]:
    """The methods to compare: those asked for (default: the run's private ones), each one the run has."""
    methods = tuple(dict.fromkeys(str(method) for method in requested)) or tuple(
        method for method in run_methods if method in PRIVATE_METHODS
    )
    missing = [method[:40] for method in methods if method not in run_methods]
    if missing:
        raise CampaignError(
            f"The run has no {', '.join(missing)} cells; its methods are {', '.join(run_methods) or 'none'}."
        )
    refused = [method for method in methods if method not in PRIVATE_METHODS]
    if refused:
        raise CampaignError(
            "A campaign compares methods that keep the private context on the device "
            f"({', '.join(PRIVATE_METHODS)}); not {', '.join(refused)}."
        )
    if len(methods) < 2:
        raise CampaignError("Choose at least two methods to compare.")
    return methods


def _setting(
    name: str, symbol: str, value: float | None, readers: Sequence[str], present: Sequence[float | None]
) -> float | None:
    """α or β of the setting: the value given, or the run's only one; None when no chosen method reads it."""
    if not readers:
        if value is not None:
            raise CampaignError(f"None of the methods chosen reads {symbol}; leave the {name} out.")
        return None
    values = sorted({float(v) for v in present if v is not None})
    if value is None:
        if len(values) != 1:
            listed = ", ".join(f"{v:g}" for v in values) or "none"
            raise CampaignError(
                f"The run has {symbol} = {listed} for {', '.join(method_label(m) for m in readers)}: choose the {name}."
            )
        return values[0]
    return float(value)


def choose_setting(
    methods: Sequence[str], cells: Sequence[CellResult], alpha: float | None, beta: float | None
) -> tuple[float | None, float | None]:
    """The (α, β) of the setting, and a CampaignError naming the run's settings when it has no cell there."""
    chosen = [cell.point for cell in cells if cell.point.method in methods]
    alpha_readers = [m for m in methods if METHOD_INFO[m].takes_alpha]
    beta_readers = [m for m in methods if METHOD_INFO[m].takes_beta]
    alpha = _setting("alpha", "α", alpha, alpha_readers, [p.alpha for p in chosen if p.method in alpha_readers])
    beta = _setting("beta", "β", beta, beta_readers, [p.beta for p in chosen if p.method in beta_readers])
    present = {cell_key("", point) for point in chosen}
    for method in methods:
        point = grid_point(method, alpha, beta)
        if cell_key("", point) not in present:
            settings = sorted({p.label for p in chosen if p.method == method})
            raise CampaignError(
                f"The run has no {method_label(method)} cell at {point.label}; its settings are {', '.join(settings)}."
            )
    return alpha, beta


def complete_records(
    records: Sequence[Record], cells: Sequence[CellResult], points: Sequence[GridPoint]
) -> list[RunRecord]:
    """The records, in order, that have a cell at every point (the first cell of a key, as the run keeps)."""
    by_key: dict[str, CellResult] = {}
    for cell in cells:
        by_key.setdefault(cell.key, cell)
    complete = []
    for position, record in enumerate(records):
        found = [by_key.get(cell_key(record.id, point)) for point in points]
        if all(cell is not None for cell in found):
            complete.append(RunRecord(position, record, tuple(cell for cell in found if cell is not None)))
    return complete


def _records_path(config: Mapping[str, Any]) -> tuple[str, str]:
    """The run's task and records file: where it was stored, or a file of that name among the known sources
    (a moved checkout)."""
    task, stored = str(config.get("task", "")), Path(str(config.get("data", "")))
    if stored.is_file():
        return task, str(stored)
    for source in ("shared", "shared:dev", "sample"):
        try:
            candidate = Path(resolve_data_source(source, task))
        except (DataError, ValueError):
            continue
        if candidate.name == stored.name and candidate.is_file():
            return task, str(candidate)
    raise CampaignError(f"The run's records file {stored} is not here, so its records cannot be shown.")


def select_from_run(run: StoredRun, cells: Sequence[CellResult], request: RunCampaignRequest) -> RunSelection:
    """Everything a campaign from ``run`` holds, or a CampaignError saying why there is none. Reads the run's
    records file; stores nothing."""
    limit = valid_record_limit(request.limit)
    try:
        spec = spec_from_config(run.config)
    except (TypeError, ValueError, KeyError) as error:
        raise CampaignError(sentence(f"Run {run.name!r} has a config this version cannot read: {error}")) from None
    methods = choose_methods(request.methods, spec.methods)
    alpha, beta = choose_setting(methods, cells, request.alpha, request.beta)
    task, path = _records_path(run.config)
    try:
        records = load_task_records(path, task, limit=spec.limit)
    except (DataError, ValueError, OSError, RecursionError) as error:
        raise CampaignError(sentence(f"The run's records do not read: {error}")) from None
    if len({record.id for record in records}) != len(records):
        raise CampaignError("The run's records file repeats a record id.")
    points = [grid_point(method, alpha, beta) for method in methods]
    complete = complete_records(records, cells, points)
    setting = " ".join(point.label for point in points)
    wanted = limit if limit is not None else min(len(complete), MAX_RECORDS)
    if limit is None and len(complete) > MAX_RECORDS:
        raise CampaignError(f"The run has {len(complete)} complete records; a campaign takes 1 to {MAX_RECORDS}.")
    if len(complete) < max(wanted, 1):
        raise CampaignError(
            f"Run {run.name!r} has {len(complete)} of its {len(records)} records with a cell for every method "
            f"chosen ({setting}); {wanted or 'at least one'} asked for."
        )
    try:
        settings = GenerationSettings.from_values(
            {
                "pairing": run.config.get("pairing", ""),
                "runtime": run.config.get("runtime") or "auto",
                "method": methods[0],
                **({"alpha": alpha} if alpha is not None else {}),
                **({"beta": beta} if beta is not None else {}),
                "draft_len": spec.draft_len,
                "max_new_tokens": spec.max_new_tokens,
                "retrieval_k": spec.retrieval_k,
                "prompt_style": spec.prompt_style,
                "private_guard": spec.private_guard,
                "p3_draft_len": spec.p3_draft_len,
                "p3_tau": spec.p3_tau,
            }
        )
    except ValueError as error:
        raise CampaignError(sentence(f"Run {run.name!r}'s settings do not read: {error}")) from None
    source = RunSource(run.name, run.id, alpha, beta)
    return RunSelection(run, task, path, methods, settings, source, tuple(complete[:wanted]))


# --------------------------------------------------------------------------- storing


def find_run(campaigns: CampaignService, name: str) -> StoredRun:
    if not isinstance(name, str) or not name.strip():
        raise CampaignError("Name the evaluation run whose outputs the campaign compares.")
    for run in campaigns.runs.runs():
        if run.name == name.strip():
            return run
    raise CampaignError(f"There is no stored evaluation run named {name.strip()[:128]!r}.")


def create_from_run(campaigns: CampaignService, request: RunCampaignRequest, token: str = "") -> CreatedCampaign:
    """Store a campaign whose comparisons are stored run ``request.run``'s outputs (no generation), ready at
    once; CampaignError, with nothing stored, for anything that does not fit (see the module's text)."""
    campaigns.check_operator(token, "Creating a campaign")
    name = clean_name(request.name, "campaign name")
    run = find_run(campaigns, request.run)
    selection = select_from_run(run, campaigns.runs.cells(run.id), request)
    names = tuple(dict.fromkeys(clean_name(annotator, "annotator's name") for annotator in request.annotators))
    if len(names) > MAX_ANNOTATORS:
        raise CampaignError(f"A campaign has at most {MAX_ANNOTATORS} named annotators.")
    codes, stored_codes = issue_codes(names)
    stored = campaigns.store.create_campaign(
        NewCampaign(
            name=name,
            task=selection.task,
            methods=selection.methods,
            pairing=selection.settings.pairing,
            settings=to_jsonable(selection.settings),
            data=selection.source.data(selection.path, len(selection.records)),
            planned=len(selection.records),
            open_to_anyone=bool(request.open_to_anyone) or not names,
            annotators=stored_codes,
        )
    )
    try:
        for chosen in selection.records:
            comparison_id = save_comparison(campaigns, selection, chosen)
            similar = outputs_similarity([cell.output for cell in chosen.cells])
            campaigns.store.add_item(stored.id, chosen.position, chosen.record.id, comparison_id, similar)
    except Exception as error:  # a store failure: the campaign says so, and the caller gets a sentence
        message = sentence(f"Storing the run's outputs failed ({type(error).__name__}): {error}")
        campaigns.store.set_status(stored.id, "failed", message)
        raise CampaignError(message) from error
    campaigns.store.set_status(stored.id, "ready")
    return CreatedCampaign(campaigns.campaign(name), codes)


def save_comparison(campaigns: CampaignService, selection: RunSelection, chosen: RunRecord) -> int:
    """One record's comparison, as :meth:`CampaignService.generate` stores one, from the run's cells."""
    store, task, record = campaigns.comparisons, selection.task, chosen.record
    history = record_history(record, task)
    history_id = store.save_history(history)
    generation_ids = tuple(
        store.save_generation(
            NewGeneration(
                task=task,
                input_text=record.input,
                settings=selection.settings.for_method(cell.point.method),
                text=cell.output,
                tokens=(),
                stats=cell.stats,
                transcript=(),
                history_id=history_id,
                history_name=history.name,
            )
        )
        for cell in chosen.cells
    )
    return store.save_comparison(
        NewComparison(
            task=task,
            input_text=record.input,
            settings=selection.settings,
            generation_ids=generation_ids,
            methods=selection.methods,
            blind=True,
            history_id=history_id,
            history_name=history.name,
        )
    )


__all__ = ["RunCampaignRequest", "RunSelection", "create_from_run", "proposed", "select_from_run"]
