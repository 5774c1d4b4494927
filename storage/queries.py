"""Everything the app and the evaluation runner read or write, as small functions.

Each function opens its own short session (``storage.db.session_scope``) and
returns plain dicts/ints, never ORM objects, so callers hold no session and no
lock. Every function takes ``url=`` (default: ``DATABASE_URL`` / the SQLite file)
so tests and tools can point at another database.

Writers are wrapped in ``retry_on_locked``: with WAL and busy_timeout SQLite
waits for a busy database by itself; the retry covers what it refuses to wait for.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any, cast

from sqlalchemy import CursorResult, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from storage.db import get_engine, retry_on_locked, session_scope
from storage.models import (
    RUN_STATUSES,
    Annotation,
    Comparison,
    ComparisonOutput,
    EvalCell,
    EvalRun,
    Generation,
    History,
)

RATING_CRITERIA = ("personalization", "fluency")
RATING_MIN, RATING_MAX = 1, 5
SPECIAL_PREFERENCES = ("tie", "all_bad")
ROUGE_KEYS = ("rouge1", "rougeL", "rouge1_stemmed", "rougeL_stemmed")
MAX_COMPARISON_OUTPUTS = 26  # one letter label each


# ------------------------------------------------------------------------ helpers


def to_jsonable(value: Any) -> Any:
    """Plain JSON values from dataclasses, tuples, numpy/torch values, datetimes.

    Non-finite floats become None: JSON has no NaN/Infinity, and PostgreSQL
    rejects them (e.g. a verification ratio of inf when p_S0(y) underflows to 0).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(value.tolist())
    if isinstance(value, (set, frozenset)):
        return [to_jsonable(item) for item in sorted(value, key=repr)]
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    raise TypeError(f"cannot store a {type(value).__name__} as JSON")


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _require_text(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value.strip()


# ---------------------------------------------------------------------- histories


def _item_fields(item: Any) -> dict[str, Any]:
    # Accepts specsteer.history.HistoryItem (has .fields) or a plain mapping.
    fields = getattr(item, "fields", item)
    if not isinstance(fields, Mapping):
        raise ValueError(f"history item must be a mapping of fields, got {type(item).__name__}")
    return to_jsonable(fields)


def history_sha256(schema: str, user_id: str | None, items: Sequence[Mapping[str, Any]]) -> str:
    """Content hash of a history: same items, schema and user -> same hash (name ignored)."""
    canonical = json.dumps(
        {"schema": schema, "user_id": user_id, "items": list(items)}, sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _history_id_by_hash(digest: str, url: str | None) -> int | None:
    with session_scope(url) as session:
        return session.scalar(select(History.id).where(History.sha256 == digest))


@retry_on_locked()
def save_history(
    *, name: str, schema: str, items: Iterable[Any], user_id: str | None = None, url: str | None = None
) -> int:
    """Store an uploaded history; an identical one already stored is reused (its id is returned)."""
    schema = _require_text(schema, "schema")
    fields = [_item_fields(item) for item in items]
    digest = history_sha256(schema, user_id, fields)
    existing = _history_id_by_hash(digest, url)
    if existing is not None:
        return existing
    try:
        with session_scope(url) as session:
            row = History(
                name=name.strip() or "history",
                schema=schema,
                user_id=user_id,
                items=fields,
                item_count=len(fields),
                sha256=digest,
            )
            session.add(row)
            session.flush()
            return row.id
    except IntegrityError:
        # Another writer stored the same content between our check and insert.
        existing = _history_id_by_hash(digest, url)
        if existing is None:
            raise
        return existing


def _history_dict(row: History, with_items: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": row.id,
        "name": row.name,
        "schema": row.schema,
        "user_id": row.user_id,
        "item_count": row.item_count,
        "sha256": row.sha256,
        "created_at": row.created_at,
    }
    if with_items:
        result["items"] = row.items
    return result


def get_history(history_id: int, *, url: str | None = None) -> dict[str, Any] | None:
    """One history with its items (list of field dicts), or None."""
    with session_scope(url) as session:
        row = session.get(History, history_id)
        return _history_dict(row, with_items=True) if row else None


def list_histories(*, limit: int = 100, url: str | None = None) -> list[dict[str, Any]]:
    """Newest histories first, without their items."""
    with session_scope(url) as session:
        rows = session.scalars(select(History).order_by(History.id.desc()).limit(limit))
        return [_history_dict(row, with_items=False) for row in rows]


# -------------------------------------------------------------------- generations


@retry_on_locked()
def save_generation(
    *,
    method: str,
    task: str,
    input_text: str,
    text: str,
    pairing: str = "",
    settings: Mapping[str, Any] | None = None,
    tokens: Iterable[Any] = (),
    stats: Any = None,
    transcript: Iterable[Any] = (),
    history_id: int | None = None,
    url: str | None = None,
) -> int:
    """Store one output. tokens/transcript/stats may be the engine's dataclasses or dicts."""
    with session_scope(url) as session:
        row = Generation(
            history_id=history_id,
            pairing=pairing,
            method=_require_text(method, "method"),
            task=_require_text(task, "task"),
            input_text=input_text,
            settings=to_jsonable(dict(settings or {})),
            text=text,
            tokens=to_jsonable(list(tokens)),
            stats=to_jsonable(stats) or {},
            transcript=to_jsonable(list(transcript)),
        )
        session.add(row)
        session.flush()
        return row.id


def _generation_dict(row: Generation, full: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": row.id,
        "history_id": row.history_id,
        "pairing": row.pairing,
        "method": row.method,
        "task": row.task,
        "input_text": row.input_text,
        "settings": row.settings,
        "text": row.text,
        "stats": row.stats,
        "created_at": row.created_at,
    }
    if full:
        result["tokens"] = row.tokens
        result["transcript"] = row.transcript
    return result


def get_generation(generation_id: int, *, url: str | None = None) -> dict[str, Any] | None:
    """One generation with tokens and transcript, or None."""
    with session_scope(url) as session:
        row = session.get(Generation, generation_id)
        return _generation_dict(row) if row else None


def list_generations(*, limit: int = 50, url: str | None = None) -> list[dict[str, Any]]:
    """Newest generations first, without tokens and transcript."""
    with session_scope(url) as session:
        rows = session.scalars(select(Generation).order_by(Generation.id.desc()).limit(limit))
        return [_generation_dict(row, full=False) for row in rows]


# -------------------------------------------------------------------- comparisons


def slot_label(slot: int) -> str:
    """Label shown for a slot: 0 -> "A", 1 -> "B", ..."""
    if not 0 <= slot < MAX_COMPARISON_OUTPUTS:
        raise ValueError(f"slot {slot} out of range")
    return chr(ord("A") + slot)


@retry_on_locked()
def save_comparison(
    *,
    generation_ids: Sequence[int],
    task: str,
    input_text: str,
    pairing: str = "",
    settings: Mapping[str, Any] | None = None,
    blind: bool = False,
    history_id: int | None = None,
    url: str | None = None,
) -> int:
    """Store a comparison of generations, in the order shown (labels A, B, C...).

    The caller shuffles for blind mode; storage keeps the order it is given.
    Methods must be distinct: ratings and preferences are keyed by method.
    """
    ids = list(generation_ids)
    if not 1 <= len(ids) <= MAX_COMPARISON_OUTPUTS:
        raise ValueError(f"a comparison needs 1 to {MAX_COMPARISON_OUTPUTS} generations, got {len(ids)}")
    if len(set(ids)) != len(ids):
        raise ValueError("a generation appears twice in the comparison")
    with session_scope(url) as session:
        rows = session.execute(select(Generation.id, Generation.method).where(Generation.id.in_(ids)))
        methods_by_id = {generation_id: method for generation_id, method in rows}
        missing = [gid for gid in ids if gid not in methods_by_id]
        if missing:
            raise ValueError(f"unknown generation id(s): {missing}")
        methods = [methods_by_id[gid] for gid in ids]
        duplicated = sorted(method for method, count in Counter(methods).items() if count > 1)
        if duplicated:
            raise ValueError(f"each method may appear once per comparison; repeated: {duplicated}")
        row = Comparison(
            history_id=history_id,
            task=_require_text(task, "task"),
            input_text=input_text,
            pairing=pairing,
            settings=to_jsonable(dict(settings or {})),
            blind=bool(blind),
            display_order=methods,
            outputs=[
                ComparisonOutput(slot=slot, label=slot_label(slot), generation_id=generation_id)
                for slot, generation_id in enumerate(ids)
            ],
        )
        session.add(row)
        session.flush()
        return row.id


def _comparison_dict(row: Comparison) -> dict[str, Any]:
    outputs = [
        {
            "slot": output.slot,
            "label": output.label,
            "generation_id": output.generation_id,
            "method": output.generation.method,
            "text": output.generation.text,
        }
        for output in row.outputs
    ]
    return {
        "id": row.id,
        "history_id": row.history_id,
        "task": row.task,
        "input_text": row.input_text,
        "pairing": row.pairing,
        "settings": row.settings,
        "blind": row.blind,
        "display_order": row.display_order,
        "labels": {output["label"]: output["method"] for output in outputs},
        "outputs": outputs,
        "created_at": row.created_at,
    }


def get_comparison(comparison_id: int, *, url: str | None = None) -> dict[str, Any] | None:
    """A comparison with its outputs (slot, label, generation_id, method, text) and label->method map."""
    with session_scope(url) as session:
        row = session.get(Comparison, comparison_id)
        return _comparison_dict(row) if row else None


def list_comparisons(*, limit: int = 100, url: str | None = None) -> list[dict[str, Any]]:
    """Newest comparisons first, with their outputs."""
    with session_scope(url) as session:
        rows = session.scalars(select(Comparison).order_by(Comparison.id.desc()).limit(limit))
        return [_comparison_dict(row) for row in rows]


# -------------------------------------------------------------------- annotations


def _validated_display_order(given: Sequence[str] | None, methods: list[str]) -> list[str]:
    if given is None:
        return list(methods)
    shown = [str(method) for method in given]
    if sorted(shown) != sorted(methods):
        raise ValueError(f"display_order {shown} must list exactly the comparison's methods {methods}")
    return shown


def _resolve_choice(choice: str, label_to_method: Mapping[str, str], what: str) -> str:
    """A label ("B") or a method name -> the method name."""
    if choice in label_to_method:
        return label_to_method[choice]
    if choice in label_to_method.values():
        return choice
    options = sorted(label_to_method) + sorted(label_to_method.values())
    raise ValueError(f"{what} {choice!r} is not one of {options}")


def _validated_score(value: Any, where: str) -> int:
    # Sliders hand over floats such as 4.0; accept whole numbers only.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
        raise ValueError(f"rating {where} must be a whole number from {RATING_MIN} to {RATING_MAX}, got {value!r}")
    score = int(value)
    if not RATING_MIN <= score <= RATING_MAX:
        raise ValueError(f"rating {where} must be from {RATING_MIN} to {RATING_MAX}, got {score}")
    return score


def _validated_ratings(
    ratings: Mapping[str, Mapping[str, Any]] | None, label_to_method: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Ratings keyed by label or method -> keyed by method; None scores (not rated) are dropped."""
    result: dict[str, dict[str, int]] = {}
    for key, scores in (ratings or {}).items():
        method = _resolve_choice(str(key), label_to_method, "rated output")
        if method in result:
            raise ValueError(f"{method!r} is rated twice (by label and by method name)")
        if not isinstance(scores, Mapping):
            raise ValueError(f"ratings of {method!r} must map criteria to scores")
        result[method] = {}
        for criterion, value in scores.items():
            if criterion not in RATING_CRITERIA:
                raise ValueError(f"unknown rating criterion {criterion!r}; expected one of {RATING_CRITERIA}")
            if value is not None:
                result[method][criterion] = _validated_score(value, f"{method}.{criterion}")
    return result


@retry_on_locked()
def save_annotation(
    *,
    comparison_id: int,
    annotator: str,
    preferred: str,
    ratings: Mapping[str, Mapping[str, Any]] | None = None,
    comment: str = "",
    display_order: Sequence[str] | None = None,
    url: str | None = None,
) -> int:
    """Record one judgement; raises ValueError naming what is wrong.

    ``display_order`` is the list of method names in the order this annotator
    saw them (labels A, B, ... refer to it); default: the comparison's order.
    ``preferred`` and the keys of ``ratings`` may be labels or method names;
    ``preferred`` may also be "tie" or "all_bad". Scores are whole numbers 1-5
    per criterion in RATING_CRITERIA; a None score means "not rated".
    """
    annotator = _require_text(annotator, "annotator")
    preferred = _require_text(preferred, "preferred")
    with session_scope(url) as session:
        comparison = session.get(Comparison, comparison_id)
        if comparison is None:
            raise ValueError(f"comparison {comparison_id} does not exist")
        shown = _validated_display_order(display_order, list(comparison.display_order))
        label_to_method = {slot_label(slot): method for slot, method in enumerate(shown)}
        if preferred in SPECIAL_PREFERENCES:
            preferred_method = preferred
        else:
            preferred_method = _resolve_choice(preferred, label_to_method, "preferred")
        row = Annotation(
            comparison_id=comparison_id,
            annotator=annotator,
            preferred=preferred,
            preferred_method=preferred_method,
            ratings=_validated_ratings(ratings, label_to_method),
            comment=comment or "",
            display_order=shown,
        )
        session.add(row)
        session.flush()
        return row.id


def _annotation_dict(row: Annotation) -> dict[str, Any]:
    return {
        "id": row.id,
        "comparison_id": row.comparison_id,
        "annotator": row.annotator,
        "preferred": row.preferred,
        "preferred_method": row.preferred_method,
        "ratings": row.ratings,
        "comment": row.comment,
        "display_order": row.display_order,
        "created_at": row.created_at,
    }


def list_annotations(
    *, comparison_id: int | None = None, task: str | None = None, url: str | None = None
) -> list[dict[str, Any]]:
    """Annotations oldest first, optionally of one comparison or one task."""
    with session_scope(url) as session:
        query = select(Annotation).order_by(Annotation.id)
        if comparison_id is not None:
            query = query.where(Annotation.comparison_id == comparison_id)
        if task is not None:
            query = query.join(Comparison).where(Comparison.task == task)
        return [_annotation_dict(row) for row in session.scalars(query)]


def _format_display_order(methods: Sequence[str]) -> str:
    return ";".join(f"{slot_label(slot)}={method}" for slot, method in enumerate(methods))


def _export_row(annotation: Annotation, comparison: Comparison) -> dict[str, Any]:
    row: dict[str, Any] = {
        "annotation_id": annotation.id,
        "annotator": annotation.annotator,
        "comparison_id": comparison.id,
        "task": comparison.task,
        "pairing": comparison.pairing,
        "blind": comparison.blind,
        "input_text": comparison.input_text,
        "preferred": annotation.preferred,
        "preferred_method": annotation.preferred_method,
        "display_order": _format_display_order(annotation.display_order),
        "comment": annotation.comment,
        "created_at": _iso(annotation.created_at),
        "comparison_created_at": _iso(comparison.created_at),
    }
    for method in annotation.display_order:
        for criterion in RATING_CRITERIA:
            row[rating_column(method, criterion)] = annotation.ratings.get(method, {}).get(criterion)
    return row


def rating_column(method: str, criterion: str) -> str:
    """Export column name of one method's score on one criterion, e.g. "rating:specsteer:fluency"."""
    return f"rating:{method}:{criterion}"


def annotations_export_rows(*, task: str | None = None, url: str | None = None) -> list[dict[str, Any]]:
    """One flat dict per annotation (labels resolved to methods), oldest first."""
    with session_scope(url) as session:
        query = select(Annotation, Comparison).join(Comparison).order_by(Annotation.id)
        if task is not None:
            query = query.where(Comparison.task == task)
        return [_export_row(annotation, comparison) for annotation, comparison in session.execute(query)]


def _export_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    base = [column for column in columns if not column.startswith("rating:")]
    return base + sorted(column for column in columns if column.startswith("rating:"))


def _csv_safe(value: Any) -> Any:
    # Free text (comments, inputs) starting with these is run as a formula by
    # spreadsheet programs; a leading apostrophe keeps it text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _open_text_target(target: str | Path | IO[str]) -> tuple[IO[str], bool]:
    if isinstance(target, (str, Path)):
        return open(target, "w", encoding="utf-8", newline=""), True
    return target, False


def write_annotations_csv(rows: Sequence[Mapping[str, Any]], target: str | Path | IO[str]) -> int:
    """Write export rows as CSV (formula-looking text neutralised); returns the row count."""
    stream, owned = _open_text_target(target)
    try:
        writer = csv.DictWriter(stream, fieldnames=_export_columns(rows), restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _csv_safe(value) for key, value in row.items()})
    finally:
        if owned:
            stream.close()
    return len(rows)


def write_annotations_jsonl(rows: Sequence[Mapping[str, Any]], target: str | Path | IO[str]) -> int:
    """Write export rows as JSON lines (text kept verbatim); returns the row count."""
    stream, owned = _open_text_target(target)
    try:
        for row in rows:
            stream.write(json.dumps(to_jsonable(row), ensure_ascii=False) + "\n")
    finally:
        if owned:
            stream.close()
    return len(rows)


def export_annotations_csv(target: str | Path | IO[str], *, task: str | None = None, url: str | None = None) -> int:
    """All annotations to a CSV file or text buffer; returns the row count."""
    return write_annotations_csv(annotations_export_rows(task=task, url=url), target)


def export_annotations_jsonl(
    target: str | Path | IO[str], *, task: str | None = None, url: str | None = None
) -> int:
    """All annotations to a JSONL file or text buffer; returns the row count."""
    return write_annotations_jsonl(annotations_export_rows(task=task, url=url), target)


def annotations_csv_text(*, task: str | None = None, url: str | None = None) -> str:
    """The CSV export as a string (for a download button)."""
    buffer = io.StringIO()
    export_annotations_csv(buffer, task=task, url=url)
    return buffer.getvalue()


# ---------------------------------------------------------------- annotation stats


def latest_judgements(annotations: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Keep each annotator's latest annotation per comparison (a re-judgement replaces the earlier one)."""
    latest: dict[tuple[int, str], Mapping[str, Any]] = {}
    for annotation in sorted(annotations, key=lambda a: a["id"]):
        latest[(annotation["comparison_id"], annotation["annotator"])] = annotation
    return list(latest.values())


def _method_stats(judgements: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    scores: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for judgement in judgements:
        for method in judgement["display_order"]:
            counts[method]["shown"] += 1
            if judgement["preferred_method"] == method:
                counts[method]["wins"] += 1
            elif judgement["preferred_method"] in SPECIAL_PREFERENCES:
                counts[method][judgement["preferred_method"]] += 1
        for method, criteria in judgement["ratings"].items():
            for criterion, score in criteria.items():
                scores[method][criterion].append(score)
    return {
        method: {
            "shown": count["shown"],
            "wins": count["wins"],
            "ties": count["tie"],
            "all_bad": count["all_bad"],
            "win_rate": count["wins"] / count["shown"],
            "mean_ratings": {
                criterion: sum(values) / len(values) for criterion, values in sorted(scores[method].items())
            },
        }
        for method, count in sorted(counts.items())
    }


def _agreement(judgements: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Agreement on the preferred method over comparisons judged by >= 2 annotators.

    percent_agreement: mean over comparisons of the share of annotator pairs that
    agree (Fleiss' observed agreement P-bar). unanimous: share of comparisons
    where all annotators agree. fleiss_kappa: Fleiss' kappa in its form for a
    varying number of raters per item, categories = methods + tie + all_bad;
    with two raters it equals Scott's pi (pooled marginals), not Cohen's kappa.
    None when undefined (fewer than one item, or chance agreement of 1).
    """
    by_comparison: dict[int, Counter[str]] = defaultdict(Counter)
    for judgement in judgements:
        by_comparison[judgement["comparison_id"]][judgement["preferred_method"]] += 1
    items = [counts for counts in by_comparison.values() if sum(counts.values()) >= 2]
    result: dict[str, Any] = {
        "comparisons": len(items),
        "judgements": sum(sum(counts.values()) for counts in items),
        "percent_agreement": None,
        "unanimous": None,
        "fleiss_kappa": None,
    }
    if not items:
        return result
    per_item = []
    for counts in items:
        raters = sum(counts.values())
        per_item.append(sum(n * (n - 1) for n in counts.values()) / (raters * (raters - 1)))
    observed = sum(per_item) / len(items)
    totals: Counter[str] = Counter()
    for counts in items:
        totals.update(counts)
    expected = sum((n / result["judgements"]) ** 2 for n in totals.values())
    result["percent_agreement"] = observed
    result["unanimous"] = sum(1 for counts in items if len(counts) == 1) / len(items)
    result["fleiss_kappa"] = (observed - expected) / (1 - expected) if expected < 1 else None
    return result


def summarize_annotations(annotations: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Win rates per method and inter-annotator agreement from ``list_annotations`` dicts.

    Per method: shown (judgements whose comparison showed it), wins (it was
    preferred), ties / all_bad (judgements of that kind while it was shown),
    win_rate = wins / shown, mean rating per criterion. Only each annotator's
    latest judgement of a comparison counts.
    """
    judgements = latest_judgements(annotations)
    return {
        "judgements": len(judgements),
        "annotators": len({judgement["annotator"] for judgement in judgements}),
        "methods": _method_stats(judgements),
        "agreement": _agreement(judgements),
    }


def annotation_summary(*, task: str | None = None, url: str | None = None) -> dict[str, Any]:
    """:func:`summarize_annotations` over the stored annotations (optionally of one task)."""
    return summarize_annotations(list_annotations(task=task, url=url))


# --------------------------------------------------------------------------- runs


def _canonical_config(config: Mapping[str, Any]) -> dict[str, Any]:
    # Round-trip through JSON so that tuples/lists and key order compare equal.
    return json.loads(json.dumps(to_jsonable(dict(config)), sort_keys=True))


def _run_dict(row: EvalRun, cell_count: int | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": row.id,
        "name": row.name,
        "config": row.config,
        "status": row.status,
        "error": row.error,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    if cell_count is not None:
        result["cell_count"] = cell_count
    return result


def _existing_run_id(name: str, config: dict[str, Any], url: str | None) -> int | None:
    with session_scope(url) as session:
        row = session.scalar(select(EvalRun).where(EvalRun.name == name))
        if row is None:
            return None
        if _canonical_config(row.config) != config:
            raise ValueError(
                f"run {name!r} already exists with a different config; choose another name to start a new run"
            )
        return row.id


@retry_on_locked()
def create_run(name: str, config: Mapping[str, Any], *, url: str | None = None) -> int:
    """Create a run, or return the id of the run of that name if its config is the same (resume).

    Raises ValueError if a run of that name exists with a different config.
    """
    name = _require_text(name, "run name")
    canonical = _canonical_config(config)
    existing = _existing_run_id(name, canonical, url)
    if existing is not None:
        return existing
    try:
        with session_scope(url) as session:
            row = EvalRun(name=name, config=canonical, status="pending")
            session.add(row)
            session.flush()
            return row.id
    except IntegrityError:
        # Created by another process meanwhile: resume it (or refuse, if configs differ).
        existing = _existing_run_id(name, canonical, url)
        if existing is None:
            raise
        return existing


def get_run(run_id: int, *, url: str | None = None) -> dict[str, Any] | None:
    """One run (with cell_count), or None."""
    with session_scope(url) as session:
        row = session.get(EvalRun, run_id)
        if row is None:
            return None
        count = session.scalar(select(func.count()).select_from(EvalCell).where(EvalCell.run_id == run_id))
        return _run_dict(row, count or 0)


def get_run_by_name(name: str, *, url: str | None = None) -> dict[str, Any] | None:
    """The run of that name, or None."""
    with session_scope(url) as session:
        run_id = session.scalar(select(EvalRun.id).where(EvalRun.name == name))
    return get_run(run_id, url=url) if run_id is not None else None


def list_runs(*, url: str | None = None) -> list[dict[str, Any]]:
    """All runs, newest first, each with its cell_count."""
    with session_scope(url) as session:
        counts = (
            select(EvalCell.run_id, func.count().label("cells")).group_by(EvalCell.run_id).subquery()
        )
        query = (
            select(EvalRun, func.coalesce(counts.c.cells, 0))
            .outerjoin(counts, counts.c.run_id == EvalRun.id)
            .order_by(EvalRun.id.desc())
        )
        return [_run_dict(row, count) for row, count in session.execute(query)]


@retry_on_locked()
def set_run_status(run_id: int, status: str, *, error: str | None = None, url: str | None = None) -> None:
    """Set a run's status (one of RUN_STATUSES) and error text (None clears it)."""
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
    with session_scope(url) as session:
        row = session.get(EvalRun, run_id)
        if row is None:
            raise ValueError(f"run {run_id} does not exist")
        row.status = status
        row.error = error


def _key_number(value: float | None) -> str:
    # 12 significant digits: 0.1 and 0.1000000000001 (float noise from a grid) share a key.
    return "-" if value is None else format(float(value), ".12g")


def _key_text(value: str) -> str:
    # Escape the separator so that no record id can forge another cell's key.
    return str(value).replace("%", "%25").replace("|", "%7C")


def cell_key(record_id: str, method: str, alpha: float | None = None, beta: float | None = None) -> str:
    """Canonical key of a grid cell, e.g. ``"rec42|specsteer|a=0.1|b=1"`` (``-`` for no value)."""
    return f"{_key_text(record_id)}|{_key_text(method)}|a={_key_number(alpha)}|b={_key_number(beta)}"


def finished_cell_keys(run_id: int, *, url: str | None = None) -> set[str]:
    """Keys of the cells a run already has (skip these when resuming)."""
    with session_scope(url) as session:
        return set(session.scalars(select(EvalCell.cell_key).where(EvalCell.run_id == run_id)))


def _rouge_columns(rouge: Mapping[str, Any] | None) -> dict[str, float | None]:
    scores = dict(rouge or {})
    unknown = set(scores) - set(ROUGE_KEYS)
    if unknown:
        raise ValueError(f"unknown ROUGE key(s) {sorted(unknown)}; expected {ROUGE_KEYS}")
    return {key: (None if scores.get(key) is None else float(scores[key])) for key in ROUGE_KEYS}


def _insert_ignoring_duplicate(session: Session, values: dict[str, Any]) -> bool:
    dialect = session.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        statement = insert(EvalCell).values(**values).on_conflict_do_nothing(index_elements=["run_id", "cell_key"])
        result = cast(CursorResult[Any], session.execute(statement))
        return result.rowcount == 1
    # Other databases: a savepoint lets the duplicate fail without ending the transaction.
    try:
        with session.begin_nested():
            session.add(EvalCell(**values))
        return True
    except IntegrityError:
        return False


@retry_on_locked()
def save_cell(
    run_id: int,
    *,
    record_id: str,
    method: str,
    alpha: float | None = None,
    beta: float | None = None,
    output: str = "",
    rouge: Mapping[str, Any] | None = None,
    stats: Mapping[str, Any] | None = None,
    url: str | None = None,
) -> bool:
    """Persist one cell at once; True if stored, False if the run already had it (never raises for that).

    ``rouge`` keys: any of ROUGE_KEYS. ``stats``: tok_per_s, acceptance, rounds,
    uplink_bytes, downlink_bytes, seconds, new_tokens, ...
    """
    values = {
        "run_id": run_id,
        "cell_key": cell_key(record_id, method, alpha, beta),
        "record_id": str(record_id),
        "method": _require_text(method, "method"),
        "alpha": None if alpha is None else float(alpha),
        "beta": None if beta is None else float(beta),
        "output": output or "",
        "stats": to_jsonable(dict(stats or {})),
        **_rouge_columns(rouge),
    }
    with session_scope(url) as session:
        if session.get(EvalRun, run_id) is None:
            raise ValueError(f"run {run_id} does not exist")
        return _insert_ignoring_duplicate(session, values)


def _cell_dict(row: EvalCell) -> dict[str, Any]:
    return {
        "id": row.id,
        "run_id": row.run_id,
        "cell_key": row.cell_key,
        "record_id": row.record_id,
        "method": row.method,
        "alpha": row.alpha,
        "beta": row.beta,
        "output": row.output,
        **{key: getattr(row, key) for key in ROUGE_KEYS},
        "stats": row.stats,
        "created_at": row.created_at,
    }


def run_cells(run_id: int, *, url: str | None = None) -> list[dict[str, Any]]:
    """A run's cells in the order they were saved."""
    with session_scope(url) as session:
        rows = session.scalars(select(EvalCell).where(EvalCell.run_id == run_id).order_by(EvalCell.id))
        return [_cell_dict(row) for row in rows]


def database_ready(*, url: str | None = None) -> bool:
    """True if the database answers (for a health line in the UI)."""
    try:
        with get_engine(url).connect() as connection:
            connection.exec_driver_sql("SELECT 1")
        return True
    except Exception:  # noqa: BLE001 - any failure means "not ready"
        return False
