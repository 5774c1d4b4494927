"""``SqlGenerationStore``: the application service's ``GenerationStore`` on this package's repositories.

The service hands over typed values (``specsteer.stores.generations``); this module turns them into the
rows of ``histories``, ``generations``, ``comparisons`` and ``annotations``, and rows back into them. A generation's stored settings are its
``GenerationSettings`` as JSON with the history's name beside them (what reproducing it needs); a
comparison's are the shared settings without the method, with the methods in the order shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specsteer.method.events import GenerationStats
from specsteer.stores.generations import (
    AnnotationSaved,
    AnnotationSummary,
    ExportFormat,
    NamedHistory,
    NewAnnotation,
    NewComparison,
    NewGeneration,
    StoredComparison,
    StoredOutput,
)
from specsteer.util.jsonable import to_jsonable
from storage.comparisons import (
    annotation_summary,
    annotations_export_rows,
    get_comparison,
    list_comparisons,
    save_annotation,
    save_comparison,
)
from storage.exports import write_annotations_csv, write_annotations_jsonl
from storage.generations import save_generation
from storage.histories import save_history


class SqlGenerationStore:
    """Saves to one database (default: ``DATABASE_URL`` / the SQLite file)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def save_history(self, history: NamedHistory) -> int:
        parsed = history.history
        return save_history(
            name=history.name, schema=parsed.schema, items=parsed.items, user_id=parsed.user_id, url=self.url
        )

    def save_generation(self, generation: NewGeneration) -> int:
        settings: dict[str, Any] = {**to_jsonable(generation.settings), "history": generation.history_name}
        return save_generation(
            method=generation.settings.method,
            task=generation.task,
            input_text=generation.input_text,
            text=generation.text,
            pairing=generation.settings.pairing,
            settings=settings,
            tokens=generation.tokens,
            stats=generation.stats,
            transcript=generation.transcript,
            history_id=generation.history_id,
            url=self.url,
        )

    def save_comparison(self, comparison: NewComparison) -> int:
        shared: dict[str, Any] = to_jsonable(comparison.settings)
        del shared["method"]  # each output's own; the order shown is in "methods"
        settings = {**shared, "methods": list(comparison.methods), "history": comparison.history_name}
        return save_comparison(
            generation_ids=comparison.generation_ids,
            task=comparison.task,
            input_text=comparison.input_text,
            pairing=comparison.settings.pairing,
            settings=settings,
            blind=comparison.blind,
            history_id=comparison.history_id,
            url=self.url,
        )

    def recent_comparisons(self, limit: int) -> list[StoredComparison]:
        return [_stored_comparison(row) for row in list_comparisons(limit=limit, url=self.url)]

    def comparison(self, comparison_id: int) -> StoredComparison | None:
        row = get_comparison(comparison_id, url=self.url)
        return _stored_comparison(row) if row is not None else None

    def save_annotation(self, annotation: NewAnnotation) -> AnnotationSaved:
        return save_annotation(
            comparison_id=annotation.comparison_id,
            annotator=annotation.annotator,
            preferred=annotation.preferred,
            ratings=annotation.ratings,
            comment=annotation.comment,
            display_order=annotation.display_order,
            page=annotation.page,
            url=self.url,
        )

    def annotation_summary(self) -> AnnotationSummary:
        return annotation_summary(url=self.url)

    def write_annotations(self, kind: ExportFormat, target: Path) -> int:
        rows = annotations_export_rows(url=self.url)
        if not rows:
            return 0
        writer = write_annotations_csv if kind == "csv" else write_annotations_jsonl
        return writer(rows, target)


def _stored_comparison(row: dict[str, Any]) -> StoredComparison:
    outputs = tuple(
        StoredOutput(
            output["generation_id"],
            output["method"],
            output["text"],
            GenerationStats.from_dict(output["stats"]) if output.get("stats") else None,
        )
        for output in row["outputs"]
    )
    return StoredComparison(row["id"], row["task"], row["input_text"], bool(row["blind"]), outputs)
