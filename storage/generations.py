"""Single outputs of one method, with their per-token trace, statistics and link transcript."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select

from specsteer.util.jsonable import to_jsonable
from storage.db import retry_on_locked, session_scope
from storage.models import Generation
from storage.values import require_text


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
            method=require_text(method, "method", Generation.method),
            task=require_text(task, "task", Generation.task),
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
