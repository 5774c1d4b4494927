"""Checks shared by the repositories on values on their way into the database."""

from __future__ import annotations


def require_text(value: str, what: str) -> str:
    """``value`` stripped; ValueError naming ``what`` when it is not a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    return value.strip()
