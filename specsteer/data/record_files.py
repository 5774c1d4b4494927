"""Reading a records file: JSONL (lazily), a JSON list or parquet, within the JSON limits, in any encoding
``specsteer.data.text_encoding`` reads; what a record holds is the dataset readers' business (``datasets``).

A :class:`DataError` names the file and the line or record (1-based).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from specsteer.data.json_limits import RECORDS_LIMITS, JsonLimits, too_deep
from specsteer.data.text_encoding import (
    SNIFF_BYTES,
    UTF8,
    TextEncodingError,
    decode_text,
    encoding_of,
    is_utf8,
    not_utf8,
)

_SPLIT_SUFFIXES = (".jsonl", ".json", ".parquet")


class DataError(ValueError):
    """A dataset file that cannot be used; the message names the record and field."""


def split_file(folder: Path, split: str | None) -> Path:
    if split is None:
        raise DataError(f"{folder} is a folder: pass split= to read {{split}}.jsonl inside it")
    for suffix in _SPLIT_SUFFIXES:
        candidate = folder / f"{split}{suffix}"
        if candidate.is_file():
            return candidate
    present = ", ".join(sorted(path.name for path in folder.iterdir())) or "nothing"
    raise DataError(f"{folder} has no {split}.jsonl, {split}.json or {split}.parquet (it holds {present})")


def read_raw_records(file: Path, limits: JsonLimits = RECORDS_LIMITS) -> Iterator[tuple[str, object]]:
    """(place, parsed record) pairs in file order; JSONL is read lazily."""
    if not file.is_file():
        raise DataError(f"{file}: no such file")
    suffix = file.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(file, limits)
    if suffix == ".json":
        document = load_json(file, limits)
        if not isinstance(document, list):
            raise DataError(f"{file.name}: expected a JSON list of records")
        return ((f"record {number}", raw) for number, raw in enumerate(document, start=1))
    if suffix == ".parquet":
        return ((f"row {number}", raw) for number, raw in enumerate(_read_parquet(file), start=1))
    raise DataError(f"{file.name}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")


def _read_jsonl(file: Path, limits: JsonLimits = RECORDS_LIMITS) -> Iterator[tuple[str, object]]:
    _check_size(file, limits)
    count = 0
    for number, line in _text_lines(file):
        if not line.strip():
            continue
        count += 1
        if limits.max_items is not None and count > limits.max_items:
            raise DataError(f"{file.name}: more than {limits.max_items:,} records; the limit is {limits.max_items:,}")
        if too_deep(line, limits.max_depth) is not None:
            raise DataError(_too_deep(file, number, limits))
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{file.name} line {number}, column {error.colno}: malformed JSON ({error.msg})") from None


def _text_lines(file: Path) -> Iterator[tuple[int, str]]:
    """A text file's lines, numbered from 1, in the encoding ``specsteer.data.text_encoding`` finds. UTF-8
    (shared records files are, and may be large) is read a line at a time; a UTF-16 or UTF-32 file (saved by
    a Windows editor) is decoded whole, as its lines cannot be found in its bytes."""
    with file.open("rb") as handle:
        wide = not is_utf8(encoding_of(handle.read(SNIFF_BYTES)))
        handle.seek(0)
        if wide:
            yield from enumerate(_decoded(file, handle.read()).split("\n"), start=1)
            return
        offset = 0
        for number, raw_line in enumerate(handle, start=1):
            try:
                line = raw_line.decode(UTF8 if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{file.name}: {not_utf8(number, offset + error.start)}") from None
            offset += len(raw_line)
            yield number, line


def _decoded(file: Path, data: bytes) -> str:
    try:
        return decode_text(data)
    except TextEncodingError as error:
        raise DataError(f"{file.name}: {error}") from None


def load_json(file: Path, limits: JsonLimits = RECORDS_LIMITS) -> object:
    if not file.is_file():
        raise DataError(f"{file}: no such file")
    _check_size(file, limits)
    text = _decoded(file, file.read_bytes())
    try:
        line = too_deep(text, limits.max_depth)
        if line is not None:
            raise DataError(_too_deep(file, line, limits))
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise DataError(
            f"{file.name} line {error.lineno}, column {error.colno}: malformed JSON ({error.msg})"
        ) from None
    except RecursionError:  # too_deep counts brackets as the parser does; this stays a message all the same
        raise DataError(f"{file.name}: the JSON nests too deep to read") from None
    if limits.max_items is not None and isinstance(document, list) and len(document) > limits.max_items:
        raise DataError(f"{file.name}: {len(document):,} records; the limit is {limits.max_items:,}")
    return document


def _check_size(file: Path, limits: JsonLimits) -> None:
    size = file.stat().st_size
    if limits.max_bytes is not None and size > limits.max_bytes:
        raise DataError(f"{file.name} is {size / 1e6:.1f} MB; the limit is {limits.max_bytes / 1e6:.1f} MB")


def _too_deep(file: Path, line: int, limits: JsonLimits) -> str:
    return (
        f"{file.name} line {line}: the JSON is nested more than {limits.max_depth} levels deep; a records "
        "file is a list of records (objects whose profile is a list of flat items)"
    )


def _read_parquet(file: Path) -> list[dict]:
    if not any(importlib.util.find_spec(engine) for engine in ("pyarrow", "fastparquet")):
        raise DataError(
            f"{file.name}: reading parquet needs pyarrow (pip install pyarrow) or fastparquet; "
            "or export the split as JSONL"
        )
    import pandas

    return [
        {str(key): _plain_python(item) for key, item in row.items()}
        for row in pandas.read_parquet(file).to_dict("records")
    ]


def _plain_python(value: object) -> object:
    """Nested parquet values (numpy arrays, numpy scalars) as lists, dicts and scalars."""
    if isinstance(value, Mapping):
        return {key: _plain_python(item) for key, item in value.items()}
    if hasattr(value, "tolist"):
        return _plain_python(value.tolist())
    if isinstance(value, list):
        return [_plain_python(item) for item in value]
    return value
