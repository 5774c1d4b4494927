"""Uploaded personal histories, stored once per content (the same upload twice is one row).

Like every repository in this package, each function opens its own short session
(``storage.db.session_scope``), returns plain values, never ORM objects (callers hold no session
and no lock), and takes ``url=`` (default: ``DATABASE_URL`` / the SQLite file).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from specsteer.util.jsonable import to_jsonable
from storage.db import retry_on_locked, session_scope
from storage.models import History
from storage.values import fitting, require_text


def _item_fields(item: Any) -> dict[str, Any]:
    # Accepts specsteer.data.history.HistoryItem (has .fields) or a plain mapping.
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
    schema = require_text(schema, "schema", History.schema)
    fields = [_item_fields(item) for item in items]
    digest = history_sha256(schema, user_id, fields)
    existing = _history_id_by_hash(digest, url)
    if existing is not None:
        return existing
    try:
        with session_scope(url) as session:
            row = History(
                name=fitting(name.strip() or "history", "history name", History.name),
                schema=schema,
                user_id=None if user_id is None else fitting(user_id, "user id", History.user_id),
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
