"""Annotation export files: flat rows written as CSV or JSON lines. Pure: no database.

``storage.comparisons.annotations_export_rows`` reads the rows; this module fixes their column
names and writes them, so a file can also be written from rows built elsewhere (or in a test).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from specsteer.stores.generations import slot_label
from specsteer.util.jsonable import to_jsonable

RATING_COLUMN_PREFIX = "rating:"


def rating_column(method: str, criterion: str) -> str:
    """Export column name of one method's score on one criterion, e.g. "rating:specsteer:fluency"."""
    return f"{RATING_COLUMN_PREFIX}{method}:{criterion}"


def display_order_text(methods: Sequence[str]) -> str:
    """The order an annotator saw, as one cell: "A=specsteer;B=llm;C=slm+"."""
    return ";".join(f"{slot_label(slot)}={method}" for slot, method in enumerate(methods))


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    # Rows of comparisons with other methods have other rating columns: take them all, ratings last.
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    base = [column for column in columns if not column.startswith(RATING_COLUMN_PREFIX)]
    return base + sorted(column for column in columns if column.startswith(RATING_COLUMN_PREFIX))


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
        writer = csv.DictWriter(stream, fieldnames=_columns(rows), restval="")
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
