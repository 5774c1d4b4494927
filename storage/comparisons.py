"""Comparisons (several methods' outputs for one input, as shown to annotators) and their annotations.

A comparison keeps its outputs in the order shown (labels A, B, C…); each annotator may have seen
them in another order (blind mode reshuffles), so an annotation stores the order its annotator saw
and is stored with labels resolved to method names. A judgement saved from a page keeps which
page session saved it (``annotation_pages``): one per page and comparison, a re-submit replaces it.
The vocabulary of judgements is ``specsteer.stores.generations``', what they add up to
``specsteer.evaluation.preference``; export files are ``storage.exports``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from specsteer.evaluation.preference import summarize_annotations
from specsteer.stores.generations import (
    MAX_COMPARISON_OUTPUTS,
    RATING_CRITERIA,
    RATING_RANGE,
    SPECIAL_PREFERENCES,
    AnnotationSaved,
    AnnotationSummary,
    Judgement,
    slot_label,
)
from specsteer.util.jsonable import to_jsonable
from storage.db import retry_on_locked, session_scope
from storage.exports import display_order_text, rating_column
from storage.models import Annotation, AnnotationPage, Comparison, ComparisonOutput, Generation, utc_now
from storage.values import require_text

PAGE_PREFIX = 16  # hex digits of a page's stored key in an export: enough to tell pages apart

# -------------------------------------------------------------------- comparisons


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
            task=require_text(task, "task", Comparison.task),
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
            "stats": output.generation.stats,
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
    """A comparison with its outputs (slot, label, generation_id, method, text, stats) and label->method map."""
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
        raise ValueError(
            f"rating {where} must be a whole number from {RATING_RANGE[0]} to {RATING_RANGE[1]}, got {value!r}"
        )
    score = int(value)
    if not RATING_RANGE[0] <= score <= RATING_RANGE[1]:
        raise ValueError(f"rating {where} must be from {RATING_RANGE[0]} to {RATING_RANGE[1]}, got {score}")
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
    page: str | None = None,
    url: str | None = None,
) -> AnnotationSaved:
    """Record one judgement; raises ValueError naming what is wrong.

    ``display_order`` is the list of method names in the order this annotator
    saw them (labels A, B, ... refer to it); default: the comparison's order.
    ``preferred`` and the keys of ``ratings`` may be labels or method names;
    ``preferred`` may also be a special preference (SPECIAL_PREFERENCES). Scores are
    whole numbers in RATING_RANGE per criterion in RATING_CRITERIA; a None score means
    "not rated".
    ``page``: the page session that judged, as stored; its earlier judgement of
    the comparison, if any, is replaced (and keeps its id).
    """
    store = functools.partial(
        _store_annotation,
        comparison_id=comparison_id,
        annotator=require_text(annotator, "annotator", Annotation.annotator),
        preferred=require_text(preferred, "preferred", Annotation.preferred),
        ratings=ratings,
        comment=comment or "",
        display_order=display_order,
        page=page,
        url=url,
    )
    try:
        return store()
    except IntegrityError:
        if page is None:
            raise
        return store()  # the same page saved it at the same moment (a double click): replace that one


def _store_annotation(
    *,
    comparison_id: int,
    annotator: str,
    preferred: str,
    ratings: Mapping[str, Mapping[str, Any]] | None,
    comment: str,
    display_order: Sequence[str] | None,
    page: str | None,
    url: str | None,
) -> AnnotationSaved:
    with session_scope(url) as session:
        comparison = session.get(Comparison, comparison_id)
        if comparison is None:
            raise ValueError(f"comparison {comparison_id} does not exist")
        shown = _validated_display_order(display_order, list(comparison.display_order))
        label_to_method = {slot_label(slot): method for slot, method in enumerate(shown)}
        preferred_method: str
        if preferred in SPECIAL_PREFERENCES:
            preferred_method = preferred
        else:
            preferred_method = _resolve_choice(preferred, label_to_method, "preferred")
        values = {
            "annotator": annotator,
            "preferred": preferred,
            "preferred_method": preferred_method,
            "ratings": _validated_ratings(ratings, label_to_method),
            "comment": comment,
            "display_order": shown,
        }
        earlier = _page_judgement(session, comparison_id, page)
        if earlier is not None:
            for field, value in values.items():
                setattr(earlier, field, value)
            earlier.created_at = utc_now()
            return AnnotationSaved(earlier.id, replaced=True)
        row = Annotation(comparison_id=comparison_id, **values)
        if page is not None:
            row.page_link = AnnotationPage(comparison_id=comparison_id, page=page)
        session.add(row)
        session.flush()
        return AnnotationSaved(row.id)


def _page_judgement(session: Session, comparison_id: int, page: str | None) -> Annotation | None:
    if page is None:
        return None
    return session.scalar(
        select(Annotation)
        .join(AnnotationPage, AnnotationPage.annotation_id == Annotation.id)
        .where(AnnotationPage.comparison_id == comparison_id, AnnotationPage.page == page)
    )


def _judgement(row: Annotation) -> Judgement:
    return Judgement(
        id=row.id,
        comparison_id=row.comparison_id,
        annotator=row.annotator,
        preferred=row.preferred,
        preferred_method=row.preferred_method,
        ratings=row.ratings,
        display_order=tuple(row.display_order),
        comment=row.comment,
        created_at=row.created_at,
        page=row.page_link.page if row.page_link is not None else None,
    )


def list_annotations(
    *, comparison_id: int | None = None, task: str | None = None, url: str | None = None
) -> list[Judgement]:
    """Annotations oldest first, optionally of one comparison or one task."""
    with session_scope(url) as session:
        query = select(Annotation).order_by(Annotation.id)
        if comparison_id is not None:
            query = query.where(Annotation.comparison_id == comparison_id)
        if task is not None:
            query = query.join(Comparison).where(Comparison.task == task)
        return [_judgement(row) for row in session.scalars(query)]


def annotation_summary(*, task: str | None = None, url: str | None = None) -> AnnotationSummary:
    """Win rates and agreement (``specsteer.evaluation.preference``) over the stored annotations, optionally of one
    task."""
    return summarize_annotations(list_annotations(task=task, url=url))


# ------------------------------------------------------------------------ exports


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _export_row(annotation: Annotation, comparison: Comparison) -> dict[str, Any]:
    row: dict[str, Any] = {
        "annotation_id": annotation.id,
        "annotator": annotation.annotator,
        # The page session that judged (a prefix of its stored key; empty for judgements saved before
        # pages were kept): judgements of one page are one judge's, whatever names they carry.
        "page": annotation.page_link.page[:PAGE_PREFIX] if annotation.page_link is not None else "",
        "comparison_id": comparison.id,
        "task": comparison.task,
        "pairing": comparison.pairing,
        "blind": comparison.blind,
        "input_text": comparison.input_text,
        "preferred": annotation.preferred,
        "preferred_method": annotation.preferred_method,
        "display_order": display_order_text(annotation.display_order),
        "comment": annotation.comment,
        "created_at": _iso(annotation.created_at),
        "comparison_created_at": _iso(comparison.created_at),
    }
    for method in annotation.display_order:
        for criterion in RATING_CRITERIA:
            row[rating_column(method, criterion)] = annotation.ratings.get(method, {}).get(criterion)
    return row


def annotations_export_rows(*, task: str | None = None, url: str | None = None) -> list[dict[str, Any]]:
    """One flat row per annotation, keyed by export column (labels resolved to methods), oldest first.

    Write them with ``storage.exports.write_annotations_csv`` / ``write_annotations_jsonl``.
    """
    with session_scope(url) as session:
        query = select(Annotation, Comparison).join(Comparison).order_by(Annotation.id)
        if task is not None:
            query = query.where(Comparison.task == task)
        return [_export_row(annotation, comparison) for annotation, comparison in session.execute(query)]
