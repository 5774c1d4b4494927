"""Speed figures over generations whose timing is sound.

A generation whose wall time holds a pause (``GenerationStats.timing_disturbed``: the process stood still
far beyond its own steps, stopped or frozen; ``specsteer.method.timing`` has the rule) did not spend that
time computing. Every speed figure (tokens/s, speedups, the deployment view's and ``bench``'s measured
speeds) leaves such generations out and says how many it left out; the quality figures (ROUGE, acceptance,
the facts audit) keep them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from specsteer.stores.runs import CellResult


def timed_cells(cells: Iterable[CellResult]) -> list[CellResult]:
    """The cells whose timing is sound: the ones every speed figure is computed over."""
    return [cell for cell in cells if not cell.stats.timing_disturbed]


def disturbed_count(cells: Iterable[CellResult]) -> int:
    """How many cells' timing was disturbed (left out of speed figures)."""
    return sum(1 for cell in cells if cell.stats.timing_disturbed)


def left_out_sentence(
    count: int, noun: str = "cell", where: Mapping[str, int] | None = None, quality_kept: bool = True
) -> str:
    """What every speed figure says about the generations it left out ("" when it left none out); ``where``:
    how many of them each row had (by the row's label), named in brackets; ``quality_kept``: False where the
    figures left them out altogether (a projection replays a generation's passes, whose times the pause is in)."""
    if not count:
        return ""
    things = noun if count == 1 else f"{noun}s"
    verb = "was" if count == 1 else "were"
    rows = ", ".join(f"{label}: {n}" for label, n in (where or {}).items() if n)
    kept = f"; quality figures keep {'it' if count == 1 else 'them'}" if quality_kept else ""
    return (
        f"{count} {things} whose timing was disturbed (the process stood still mid-generation: stopped, frozen "
        f"or paused) {verb} left out of every speed figure{f' ({rows})' if rows else ''}{kept}."
    )
