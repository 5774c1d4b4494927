"""Parsing an uploaded history file into a :class:`~specsteer.data.history.History` (its items validated there).

Accepted upload formats (``parse_history``):

* JSON — a list of profile items, a LongLaMP record object with a ``profile``
  list, or ``{"profile": [...]}``.
* JSONL — one profile item per line, or one LongLaMP record per line. A
  record file is a dataset, not one history: the *first* record's profile (one
  user) is used, and its user key becomes ``History.user_id``. Lines after the
  first must still be valid JSON records, so a damaged file is reported rather
  than half-read.
* CSV with a header row naming the columns of one schema (or one ``text``
  column).
* Plain text — one item per paragraph (paragraphs are separated by blank
  lines).

The format comes from the file name's extension when there is one; otherwise
from the content: text starting with ``[`` or ``{`` must parse as JSON or JSONL
(a truncated JSON file is reported, not read as prose), a first line that
names the columns of one schema is CSV, and anything else is plain text.

Every problem raises :class:`~specsteer.data.history.HistoryError` naming the place (line, item, field);
an oversized upload is refused, never truncated.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import PurePath
from typing import TypeGuard

from specsteer.data.history import (
    MAX_ITEMS,
    PROFILE_KEY,
    USER_KEYS,
    History,
    HistoryError,
    HistoryItem,
    build_items,
    json_type,
    known_schemas,
    normalise_newlines,
    persona_history,
    schemas_matching,
)
from specsteer.data.json_limits import too_deep
from specsteer.data.text_encoding import TextEncodingError, decode_text

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
# A history is at most a record holding a profile list of flat items: three levels. Deeper JSON is
# refused before parsing (Python's parser recurses and a file nested 10,000 deep would overflow it).
MAX_JSON_DEPTH = 16

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_history(data: bytes | str, filename: str | None = None) -> History:
    """Parse an uploaded history; raise HistoryError naming the place at fault."""
    text = _decode(data)
    if not text.strip():
        raise HistoryError("the history is empty: the file has no content")
    suffix = PurePath(filename).suffix.lower() if filename else ""
    if suffix == ".json":
        return _parse_json_or_jsonl(text)
    if suffix in (".jsonl", ".ndjson"):
        return _parse_jsonl(text)
    if suffix == ".csv":
        return _parse_csv(text)
    if suffix in (".txt", ".md", ".text"):
        return _parse_plain(text)
    if suffix:
        raise HistoryError(f"unsupported file type {suffix!r}: use .json, .jsonl, .csv or .txt")
    return _parse_sniffed(text)


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        # Counting characters first avoids encoding a huge string just to reject it.
        if len(data) > MAX_UPLOAD_BYTES or len(data.encode("utf-8", "replace")) > MAX_UPLOAD_BYTES:
            raise HistoryError(_too_large_message())
        return normalise_newlines(data.removeprefix("\ufeff"))
    if len(data) > MAX_UPLOAD_BYTES:
        raise HistoryError(_too_large_message())
    try:
        return normalise_newlines(decode_text(data))
    except TextEncodingError as error:
        raise HistoryError(str(error)) from None


def _too_large_message() -> str:
    return f"the upload is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB"


def _parse_sniffed(text: str) -> History:
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        return _parse_json_or_jsonl(text)
    first_line = stripped.split("\n", 1)[0]
    if _looks_like_csv_header(first_line):
        return _parse_csv(text)
    return _parse_plain(text)


def _parse_json_or_jsonl(text: str) -> History:
    _check_json_depth(text)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        # Several JSON values on separate lines is JSONL (often saved as .json);
        # anything else is broken JSON.
        if error.msg == "Extra data":
            return _parse_jsonl(text)
        raise _json_error(error) from None
    return _history_from_document(document)


def _check_json_depth(text: str) -> None:
    """HistoryError naming the line where the JSON nests deeper than MAX_JSON_DEPTH (json_limits.too_deep,
    the check every reader of someone else's JSON shares)."""
    line = too_deep(text, MAX_JSON_DEPTH)
    if line is not None:
        raise HistoryError(
            f"line {line}: the JSON is nested more than {MAX_JSON_DEPTH} levels deep; a "
            "history is a list of flat items (or a record holding one)"
        )


def _json_error(error: json.JSONDecodeError) -> HistoryError:
    return HistoryError(f"line {error.lineno}, column {error.colno}: malformed JSON ({error.msg})")


def _history_from_document(document: object) -> History:
    if isinstance(document, list):
        if len(document) > MAX_ITEMS:
            raise HistoryError(f"the history has {len(document)} items; the limit is {MAX_ITEMS}")
        places = [f"item {number}" for number in range(1, len(document) + 1)]
        return _history_from_values(document, places)
    if isinstance(document, dict) and "profile" in document:
        return _history_from_record(document, "record")
    raise HistoryError("expected a JSON list of profile items, or an object with a 'profile' list")


def _is_record(value: object) -> TypeGuard[dict]:
    return isinstance(value, dict) and "profile" in value


def _describe(value: object) -> str:
    if _is_record(value):
        return "a record with a 'profile'"
    return "a profile item" if isinstance(value, dict) else f"{json_type(value)}, not an object"


def _history_from_record(record: dict, where: str) -> History:
    profile = record["profile"]
    if not isinstance(profile, list):
        raise HistoryError(f"{where}: field 'profile' must be a list of items")
    if PROFILE_KEY in record:
        return persona_history(record, where)
    schema, items = build_items(profile, where=f"{where}, profile item")
    return History(items=items, schema=schema, user_id=_record_user(record, schema))


def _record_user(record: dict, schema: str) -> str | None:
    value = record.get(USER_KEYS[schema]) if schema in USER_KEYS else None
    return None if value is None else str(value)


def _shared_author(items: Sequence[HistoryItem]) -> str | None:
    """Writing items carry their author; when all agree, that is the user."""
    authors = {item.fields.get("author") for item in items}
    if len(authors) == 1:
        return authors.pop()
    return None


def _parse_jsonl(text: str) -> History:
    _check_json_depth(text)
    lines = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if len(lines) > MAX_ITEMS:
        raise HistoryError(f"the history has {len(lines)} lines; the limit is {MAX_ITEMS} items")
    values = [_json_line(line, number) for number, line in lines]
    places = [f"line {number}" for number, _ in lines]
    return _history_from_values(values, places)


def _history_from_values(values: Sequence[object], places: Sequence[str]) -> History:
    """Profile items, or records of which the first one's profile is used."""
    if not values:
        raise HistoryError("the history is empty: it needs at least one item")
    first_is_record = _is_record(values[0])
    for value, place in zip(values, places, strict=True):
        if _is_record(value) != first_is_record:
            raise HistoryError(f"{place} is {_describe(value)} but {places[0]} is {_describe(values[0])}")
    first = values[0]
    if _is_record(first):
        return _history_from_record(first, places[0])
    schema, items = build_items(values, places=places)
    return History(items=items, schema=schema, user_id=_shared_author(items))


def _json_line(line: str, number: int) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise HistoryError(f"line {number}, column {error.colno}: malformed JSON ({error.msg})") from None


def _looks_like_csv_header(line: str) -> bool:
    columns = _csv_header(line)
    if not columns or not all(_IDENTIFIER.fullmatch(column) for column in columns):
        return False
    return _schema_of_columns(columns) is not None


def _csv_header(line: str) -> list[str]:
    try:
        row = next(csv.reader([line]), [])
    except csv.Error:
        return []
    return [cell.strip() for cell in row]


def _schema_of_columns(columns: Sequence[str]) -> str | None:
    matches = schemas_matching(columns)
    return matches[0] if len(matches) == 1 else None


def _parse_csv(text: str) -> History:
    reader = csv.reader(io.StringIO(text))
    try:
        header = [cell.strip() for cell in next(reader, [])]
        schema = _csv_schema(header)
        rows = []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > len(header):
                raise HistoryError(
                    f"line {reader.line_num}: {len(row)} values but the header has {len(header)} columns"
                )
            rows.append((reader.line_num, dict(zip(header, row, strict=False))))
            if len(rows) > MAX_ITEMS:
                raise HistoryError(f"the history has more than {MAX_ITEMS} rows; the limit is {MAX_ITEMS} items")
    except csv.Error as error:
        raise HistoryError(f"line {reader.line_num}: malformed CSV ({error})") from None
    if not rows:
        raise HistoryError("the history is empty: the CSV has a header but no rows")
    _, items = build_items([row for _, row in rows], schema=schema, places=[f"line {line}" for line, _ in rows])
    return History(items=items, schema=schema, user_id=_shared_author(items))


def _csv_schema(header: Sequence[str]) -> str:
    if not header:
        raise HistoryError("line 1: the CSV has no header row")
    schema = _schema_of_columns(header)
    if schema is None:
        raise HistoryError(f"line 1: the CSV header {header} names no single known schema ({known_schemas()})")
    return schema


def _parse_plain(text: str) -> History:
    paragraphs = list(_paragraphs(text))
    if not paragraphs:
        raise HistoryError("the history is empty: the text has no paragraphs")
    if len(paragraphs) > MAX_ITEMS:
        raise HistoryError(f"the history has {len(paragraphs)} paragraphs; the limit is {MAX_ITEMS} items")
    places = [f"paragraph {number} (line {line})" for number, (line, _) in enumerate(paragraphs, start=1)]
    _, items = build_items([{"text": body} for _, body in paragraphs], schema="plain", places=places)
    return History(items=items, schema="plain")


def _paragraphs(text: str) -> Iterator[tuple[int, str]]:
    """Blank-line separated paragraphs with the line each starts on."""
    start = 0
    lines: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            if not lines:
                start = number
            lines.append(line)
        elif lines:
            yield start, "\n".join(lines).strip()
            lines = []
    if lines:
        yield start, "\n".join(lines).strip()
