"""Checks shared by the repositories on values on their way into the database."""

from __future__ import annotations

from typing import Any


def fitting(value: str, what: str, column: Any) -> str:
    """``value`` when it fits the text column ``column`` (a model attribute such as ``EvalRun.name``); else a
    ValueError naming ``what`` and the limit. PostgreSQL refuses a longer value where SQLite would keep it:
    both refuse it here, with a sentence instead of a driver's error."""
    limit = column.type.length
    if limit is not None and len(value) > limit:
        raise ValueError(f"{what} is {len(value)} characters long; the limit is {limit}")
    return value


def require_text(value: str, what: str, column: Any = None) -> str:
    """``value`` stripped; ValueError naming ``what`` when it is not a non-empty string, or when it is longer
    than ``column`` (a model attribute) holds."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value.strip() if column is None else fitting(value.strip(), what, column)
