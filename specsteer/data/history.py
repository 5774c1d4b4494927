"""A user's private history: parsing uploads into validated profile items.

A history is a sequence of profile items in one schema (DESIGN §5):

========  ======================================  ==========================
schema    item keys                                user key (record files)
========  ======================================  ==========================
review    description, overall, reviewText, summary  reviewerId
abstract  abstract, id, title, year               name
writing   author, content, id, summary            author
plain     text                                    (none)
cogenesis id, text, title                         (none; a persona record)
========  ======================================  ==========================

A CoGenesis persona (a record of the CoGenesis benchmark, or an object with the
same ``additional_profile`` and ``profile`` fields) is a history of the user's
texts (``cogenesis`` items: title and text) plus the user profile as text
(``History.profile``: age, occupation, the ``Privacy_info`` line, ...). Both are
private: only the Specialist reads them.

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

Every problem raises :class:`HistoryError` whose message says where (line,
item number — 1-based — and field). Limits are enforced, never worked around
by truncation: an oversized upload, too many items or an overlong item is
rejected so that the user knows what the Specialist will actually see.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TypeGuard

from specsteer.data.json_limits import too_deep
from specsteer.data.text_encoding import TextEncodingError, decode_text

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_ITEMS = 2000
MAX_ITEM_CHARS = 20_000
# A history is at most a record holding a profile list of flat items: three levels. Deeper JSON is
# refused before parsing (Python's parser recurses and a file nested 10,000 deep would overflow it).
MAX_JSON_DEPTH = 16

# Keys kept from a profile item, per schema, in the schema's documented order.
# The LaMP schemas are never guessed from content (their keys overlap with the
# others); the LaMP loader in data.py asks for them by name.
SCHEMA_FIELDS: dict[str, tuple[str, ...]] = {
    "review": ("description", "overall", "reviewText", "summary"),
    "abstract": ("abstract", "id", "title", "year"),
    "writing": ("author", "content", "id", "summary"),
    "plain": ("text",),
    "cogenesis": ("id", "text", "title"),
    "lamp4": ("id", "text", "title"),
    "lamp5": ("abstract", "id", "title"),
    "lamp7": ("id", "text"),
}

# An item must have at least one of these non-empty to be worth retrieving.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "review": ("reviewText", "summary", "description"),
    "abstract": ("abstract", "title"),
    "writing": ("content", "summary"),
    "plain": ("text",),
    "cogenesis": ("text", "title"),
    "lamp4": ("text", "title"),
    "lamp5": ("abstract", "title"),
    "lamp7": ("text",),
}

# Keys that only one guessable schema has ("id" and "summary" are shared).
_SIGNATURE_KEYS: dict[str, frozenset[str]] = {
    "review": frozenset({"description", "overall", "reviewText"}),
    "abstract": frozenset({"abstract", "title", "year"}),
    "writing": frozenset({"author", "content"}),
    "plain": frozenset({"text"}),
}
DETECTABLE_SCHEMAS = tuple(_SIGNATURE_KEYS)

USER_KEYS: dict[str, str] = {"review": "reviewerId", "abstract": "name", "writing": "author"}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Reading order of content fields for HistoryItem.text.
_DISPLAY_ORDER = ("title", "summary", "description", "reviewText", "abstract", "content", "text")


class HistoryError(ValueError):
    """An upload that cannot be used as a history; the message says where."""


class FrozenFields(dict[str, str]):
    """A read-only, hashable dict.

    Still a dict (json.dumps, ``isinstance(..., dict)`` and ``dict(...)`` work),
    but hashable so that items can be set members and cache keys, and
    read-only so that a hash never goes stale.
    """

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type, tuple[dict[str, str]]]:
        # Pickle and deepcopy would otherwise rebuild it through __setitem__.
        return (type(self), (dict(self),))

    def _read_only(self, *args: object, **kwargs: object) -> None:
        raise TypeError("history item fields are read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]


@dataclass(frozen=True)
class HistoryItem:
    """One profile entry; ``fields`` (str -> str) is frozen into a read-only dict."""

    fields: Mapping[str, str]

    def __post_init__(self) -> None:
        for key, value in self.fields.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"history item fields must map str to str, got {key!r}: {value!r}")
        object.__setattr__(self, "fields", FrozenFields(self.fields))

    @property
    def text(self) -> str:
        """The item's content fields in reading order, one per line.

        Identifier-like fields (id, year, author, rating) are left out; an item
        built with other keys shows all of its values.
        """
        content = [self.fields[key] for key in _DISPLAY_ORDER if key in self.fields]
        return "\n".join(content or self.fields.values())


PROFILE_KEY = "additional_profile"  # a CoGenesis record's user profile (text, one "Key: value" per line)
MAX_PROFILE_CHARS = 20_000


@dataclass(frozen=True)
class History:
    items: tuple[HistoryItem, ...]
    schema: str
    user_id: str | None = None
    profile: str | None = None  # a persona's user profile text (CoGenesis), private like the items

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))

    def __len__(self) -> int:
        return len(self.items)


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


def build_items(
    raw_items: Sequence[object],
    *,
    schema: str | None = None,
    where: str = "item",
    places: Sequence[str] | None = None,
    enforce_limits: bool = True,
) -> tuple[str, tuple[HistoryItem, ...]]:
    """Validate raw profile dicts and turn them into HistoryItems of one schema.

    ``schema`` forces a schema (required for the LaMP ones); otherwise each
    item's schema is detected and all must agree with the first. Messages name
    an item as ``places[i]`` when given (e.g. "line 7"), else as
    ``f"{where} {i + 1}"``. Datasets pass ``enforce_limits=False``: the upload
    caps protect the app, not the benchmark.
    """
    if schema is not None and schema not in SCHEMA_FIELDS:
        raise ValueError(f"unknown schema {schema!r}; known: {', '.join(SCHEMA_FIELDS)}")
    if not raw_items:
        raise HistoryError("the history is empty: it needs at least one item")
    if enforce_limits and len(raw_items) > MAX_ITEMS:
        raise HistoryError(f"the history has {len(raw_items)} items; the limit is {MAX_ITEMS}")
    labels = places or [f"{where} {number}" for number in range(1, len(raw_items) + 1)]
    chosen = schema
    items = []
    for raw, place in zip(raw_items, labels, strict=True):
        item_schema = schema or _detect_schema(raw, place)
        chosen = chosen or item_schema
        if item_schema != chosen:
            raise HistoryError(
                f"{place} has {item_schema} fields but earlier items have {chosen} fields; "
                "a history must use one schema"
            )
        items.append(_make_item(raw, chosen, place, enforce_limits))
    assert chosen is not None  # raw_items is not empty: its first item chose the schema
    return chosen, tuple(items)


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        # Counting characters first avoids encoding a huge string just to reject it.
        if len(data) > MAX_UPLOAD_BYTES or len(data.encode("utf-8", "replace")) > MAX_UPLOAD_BYTES:
            raise HistoryError(_too_large_message())
        return _normalise_newlines(data.removeprefix("\ufeff"))
    if len(data) > MAX_UPLOAD_BYTES:
        raise HistoryError(_too_large_message())
    try:
        return _normalise_newlines(decode_text(data))
    except TextEncodingError as error:
        raise HistoryError(str(error)) from None


def _too_large_message() -> str:
    return f"the upload is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB"


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
    return "a profile item" if isinstance(value, dict) else f"{_json_type(value)}, not an object"


def _history_from_record(record: dict, where: str) -> History:
    profile = record["profile"]
    if not isinstance(profile, list):
        raise HistoryError(f"{where}: field 'profile' must be a list of items")
    if PROFILE_KEY in record:
        return persona_history(record, where)
    schema, items = build_items(profile, where=f"{where}, profile item")
    return History(items=items, schema=schema, user_id=_record_user(record, schema))


def persona_history(record: Mapping[str, object], where: str = "record", enforce_limits: bool = True) -> History:
    """A CoGenesis persona: its writing history (``profile``: title and text items) and its user
    profile text (``additional_profile``). HistoryError names the field at fault."""
    profile_text = record.get(PROFILE_KEY)
    if not isinstance(profile_text, str) or not profile_text.strip():
        raise HistoryError(f"{where}: field {PROFILE_KEY!r} must be the user profile as non-empty text")
    if enforce_limits and len(profile_text) > MAX_PROFILE_CHARS:
        raise HistoryError(
            f"{where}: field {PROFILE_KEY!r} has {len(profile_text)} characters; the limit is {MAX_PROFILE_CHARS}"
        )
    texts = record.get("profile")
    if not isinstance(texts, list):
        raise HistoryError(f"{where}: field 'profile' must be a list of the user's texts")
    _, items = build_items(texts, schema="cogenesis", where=f"{where}, profile item", enforce_limits=enforce_limits)
    return History(items=items, schema="cogenesis", profile=_normalise_newlines(profile_text).strip())


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
    matches = [name for name in DETECTABLE_SCHEMAS if _SIGNATURE_KEYS[name] & set(columns)]
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
    items = tuple(_make_item(row, schema, f"line {line}", True) for line, row in rows)
    return History(items=items, schema=schema, user_id=_shared_author(items))


def _csv_schema(header: Sequence[str]) -> str:
    if not header:
        raise HistoryError("line 1: the CSV has no header row")
    schema = _schema_of_columns(header)
    if schema is None:
        raise HistoryError(f"line 1: the CSV header {header} names no single known schema ({_known_schemas()})")
    return schema


def _parse_plain(text: str) -> History:
    paragraphs = list(_paragraphs(text))
    if not paragraphs:
        raise HistoryError("the history is empty: the text has no paragraphs")
    if len(paragraphs) > MAX_ITEMS:
        raise HistoryError(f"the history has {len(paragraphs)} paragraphs; the limit is {MAX_ITEMS} items")
    items = tuple(
        _make_item({"text": body}, "plain", f"paragraph {number} (line {line})", True)
        for number, (line, body) in enumerate(paragraphs, start=1)
    )
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


def _detect_schema(raw: object, place: str) -> str:
    if not isinstance(raw, dict):
        raise HistoryError(f"{place}: expected an object of profile fields, got {_json_type(raw)}")
    keys = set(raw)
    matches = [name for name in DETECTABLE_SCHEMAS if _SIGNATURE_KEYS[name] & keys]
    if not matches:
        raise HistoryError(f"{place}: none of its keys {sorted(keys)} belongs to a known schema ({_known_schemas()})")
    if len(matches) > 1:
        raise HistoryError(f"{place}: its keys {sorted(keys)} mix the {' and '.join(matches)} schemas")
    return matches[0]


def _known_schemas() -> str:
    return "; ".join(f"{name}: {', '.join(SCHEMA_FIELDS[name])}" for name in DETECTABLE_SCHEMAS)


def _make_item(raw: object, schema: str, place: str, enforce_limits: bool) -> HistoryItem:
    if not isinstance(raw, dict):
        raise HistoryError(f"{place}: expected an object of profile fields, got {_json_type(raw)}")
    fields = {}
    for key in SCHEMA_FIELDS[schema]:
        value = _field_value(raw.get(key), place, key)
        if value is not None:
            fields[key] = value
    if not any(key in fields for key in TEXT_FIELDS[schema]):
        wanted = ", ".join(TEXT_FIELDS[schema])
        raise HistoryError(f"{place}: has no text in any of the {schema} fields {wanted}")
    size = sum(len(value) for value in fields.values())
    if enforce_limits and size > MAX_ITEM_CHARS:
        raise HistoryError(f"{place}: {size} characters; the limit per item is {MAX_ITEM_CHARS}")
    return HistoryItem(fields)


def _field_value(value: object, place: str, key: str) -> str | None:
    """Strings as they are, numbers as text; None and blank strings count as missing."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise HistoryError(f"{place}: field {key!r} must be text or a number, got {_json_type(value)}")
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else None


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
