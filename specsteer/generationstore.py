"""What the application service needs from wherever it keeps its outputs: a small typed protocol.

The library never imports a database. ``specsteer.service`` saves every generation and comparison
through a :class:`GenerationStore`; ``storage.SqlGenerationStore`` (SQLite, or ``DATABASE_URL``)
is the one the app uses, chosen in ``app.py``, and a test can hand the service an in-memory one.
What crosses the boundary is typed and defined here.

Light, like ``runstore``: no torch, no SQLAlchemy, so ``storage`` implements it without loading
the decoding library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .events import GenerationStats, LinkMessage, TokenEvent
from .history import History
from .settings import GenerationSettings


@dataclass(frozen=True)
class NamedHistory:
    """A history with the name its owner knows it by (a sample's label, or the uploaded file's name)."""

    history: History
    name: str


@dataclass(frozen=True)
class NewGeneration:
    """One finished (or stopped) generation, to be saved with everything needed to reproduce it."""

    task: str
    input_text: str
    settings: GenerationSettings
    text: str
    tokens: tuple[TokenEvent, ...]  # every token shown, rejected drafts included
    stats: GenerationStats
    transcript: tuple[LinkMessage, ...]  # every message that crossed the link
    history_id: int | None  # from save_history; None without a history
    history_name: str | None


@dataclass(frozen=True)
class NewComparison:
    """Saved generations of one input shown side by side, in the order shown (labels A, B, …)."""

    task: str
    input_text: str
    settings: GenerationSettings  # shared by every output; each output's method is in ``methods``
    generation_ids: tuple[int, ...]
    methods: tuple[str, ...]  # the method of each generation, same order
    blind: bool
    history_id: int | None
    history_name: str | None


class GenerationStore(Protocol):
    """Keeps histories, generations and comparisons; each call returns the new row's id."""

    def save_history(self, history: NamedHistory) -> int:
        """An identical history saved before is not saved twice: its id is returned."""
        ...

    def save_generation(self, generation: NewGeneration) -> int: ...

    def save_comparison(self, comparison: NewComparison) -> int:
        """ValueError when a generation id is unknown or a method appears twice."""
        ...
