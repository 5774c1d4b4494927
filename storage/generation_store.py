"""``SqlGenerationStore``: the application service's ``GenerationStore`` on this package's repositories.

The service hands over typed values (``specsteer.stores``); this module turns them into the
rows of ``histories``, ``generations`` and ``comparisons``. A generation's stored settings are its
``GenerationSettings`` as JSON with the history's name beside them (what reproducing it needs); a
comparison's are the shared settings without the method, with the methods in the order shown.
"""

from __future__ import annotations

from typing import Any

from specsteer.jsonable import to_jsonable
from specsteer.stores import NamedHistory, NewComparison, NewGeneration
from storage.comparisons import save_comparison
from storage.generations import save_generation
from storage.histories import save_history


class SqlGenerationStore:
    """Saves to one database (default: ``DATABASE_URL`` / the SQLite file)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def save_history(self, history: NamedHistory) -> int:
        parsed = history.history
        return save_history(name=history.name, schema=parsed.schema, items=parsed.items, user_id=parsed.user_id,
                            url=self.url)

    def save_generation(self, generation: NewGeneration) -> int:
        settings: dict[str, Any] = {**to_jsonable(generation.settings), "history": generation.history_name}
        return save_generation(
            method=generation.settings.method, task=generation.task, input_text=generation.input_text,
            text=generation.text, pairing=generation.settings.pairing, settings=settings,
            tokens=generation.tokens, stats=generation.stats, transcript=generation.transcript,
            history_id=generation.history_id, url=self.url,
        )

    def save_comparison(self, comparison: NewComparison) -> int:
        shared: dict[str, Any] = to_jsonable(comparison.settings)
        del shared["method"]  # each output's own; the order shown is in "methods"
        settings = {**shared, "methods": list(comparison.methods), "history": comparison.history_name}
        return save_comparison(
            generation_ids=comparison.generation_ids, task=comparison.task, input_text=comparison.input_text,
            pairing=comparison.settings.pairing, settings=settings, blind=comparison.blind,
            history_id=comparison.history_id, url=self.url,
        )
