"""How long a campaign's generation will take here, estimated from what was measured, before it starts.

**How.** A campaign generates one output per record and method, one after another. Each method's output is
estimated as its first token's wait plus its other tokens at its decoding pace, both measured:

* **Stored runs first**: the generations every stored evaluation run of the same pairing kept (the user's runs
  and the example runs that ship with the app; a grid reads each record's prompts as a campaign does, one method
  after another), cells whose timing was disturbed left out (``evaluation.timing``). The first token's wait is the
  median time to the first token (prompt reading included); the pace is the seconds after the first token over
  the tokens after it, summed over the generations.
* **Else the calibration** (``specsteer calibrate``, ``models.calibration.estimate``): the DESIGN §6 bound of the
  runtime ``auto`` picks, for the calibration's reference prompts, at the campaign's token limit.
* **Else no estimate**, and the sentence says what would give one.

Every output is counted at the full token limit (an output that ends earlier takes less), and loading the
models, when they are not loaded yet, comes on top. The figure is rounded to whole minutes and said as "about".
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from specsteer.evaluation.timing import timed_cells
from specsteer.method.catalog import method_label
from specsteer.method.events import GenerationStats
from specsteer.models import calibration
from specsteer.stores.protocols import RunStore
from specsteer.stores.runs import CellResult


@dataclass(frozen=True)
class MethodPace:
    """One method's measured speed: the wait for its first token and the seconds of each token after it."""

    method: str
    first_token_s: float
    per_token_s: float
    generations: int  # how many generations measured it (0: the calibration's estimate)
    source: str  # "stored runs" or "calibration"

    def seconds(self, new_tokens: int) -> float:
        return self.first_token_s + max(new_tokens - 1, 0) * self.per_token_s

    def tok_per_s(self, new_tokens: int) -> float:
        return new_tokens / self.seconds(new_tokens) if self.seconds(new_tokens) > 0 else 0.0


def measured_paces(cells: Iterable[CellResult]) -> dict[str, MethodPace]:
    """Each method's pace over ``cells`` whose timing is sound (and that have a first token's time)."""
    by_method: dict[str, list[CellResult]] = {}
    for cell in timed_cells(cells):
        stats = cell.stats
        if stats.ttft_s is not None and stats.new_tokens > 1 and stats.seconds > stats.ttft_s:
            by_method.setdefault(cell.point.method, []).append(cell)
    paces = {}
    for method, measured in by_method.items():
        after_first = sum(cell.stats.seconds - (cell.stats.ttft_s or 0.0) for cell in measured)
        tokens_after = sum(cell.stats.new_tokens - 1 for cell in measured)
        paces[method] = MethodPace(
            method,
            statistics.median(cell.stats.ttft_s or 0.0 for cell in measured),
            after_first / tokens_after,
            len(measured),
            "stored runs",
        )
    return paces


def calibrated_pace(pairing: str, method: str) -> MethodPace | None:
    """The pace the calibration of ``pairing`` on this machine gives ``method``; None where it timed no runtime."""
    saved = calibration.saved_calibration(pairing)
    if saved is None or not saved.timings:
        return None
    choice = calibration.choose(saved, method, tuple(t.runtime for t in saved.timings))
    timing = saved.timing(choice.runtime) if choice is not None else None
    if timing is None:
        return None
    one, two = calibration.estimate(timing, method, new_tokens=1), calibration.estimate(timing, method, new_tokens=2)
    return MethodPace(method, one, two - one, 0, "calibration")


@dataclass(frozen=True)
class CampaignEstimate:
    """How long generating ``records`` × ``methods`` outputs of up to ``max_new_tokens`` tokens takes here."""

    records: int
    methods: tuple[str, ...]
    max_new_tokens: int
    paces: tuple[MethodPace, ...]  # of the methods with a measured (or calibrated) pace
    missing: tuple[str, ...] = ()  # methods with neither
    records_note: str = ""  # how the record count was read, where it is not the file's own count

    @property
    def seconds(self) -> float | None:
        if self.missing or not self.paces:
            return None
        return self.records * sum(pace.seconds(self.max_new_tokens) for pace in self.paces)

    @property
    def minutes(self) -> int | None:
        """The nearest whole minute, at least 1."""
        return None if self.seconds is None else max(1, round(self.seconds / 60))

    def how(self) -> str:
        """How the figure was made, in one sentence."""
        stored = [pace for pace in self.paces if pace.source == "stored runs"]
        calibrated = [pace for pace in self.paces if pace.source == "calibration"]
        speeds = lambda paces: ", ".join(  # noqa: E731
            f"{method_label(p.method)} {p.tok_per_s(self.max_new_tokens):.1f} tok/s" for p in paces
        )
        parts = []
        if stored:
            generations = sum(pace.generations for pace in stored)
            parts.append(
                f"the speed stored runs of this pairing measured: {speeds(stored)} at this length, the wait for "
                f"the first token included ({generations:,} generations)"
            )
        if calibrated:
            parts.append(f"this machine's calibration: {speeds(calibrated)}")
        return (
            "From "
            + "; and from ".join(parts)
            + (
                ". Every output is counted at the full token limit; loading the models, when they are not loaded yet, "
                "comes on top."
            )
        )

    def headline(self) -> str:
        """E.g. "Estimated time: about 4 min (3 records × 2 methods × up to 64 tokens)"."""
        size = (
            f"{self.records} record{'s' if self.records != 1 else ''} × {len(self.methods)} method"
            f"{'s' if len(self.methods) != 1 else ''} × up to {self.max_new_tokens} tokens"
        )
        if self.minutes is None:
            return f"No estimate of the time ({size})"
        return f"Estimated time: about {self.minutes} min ({size})"

    def text(self) -> str:
        """The headline, then how it was made (or what would give one)."""
        if self.minutes is None:
            names = ", ".join(method_label(method) for method in self.missing or self.methods)
            return (
                f"{self.headline()}: no stored run of this pairing measured {names}, and this machine has no "
                "calibration that timed its runtimes (`specsteer calibrate`). A small evaluation grid on the "
                "Dashboard measures them."
            )
        note = f" {self.records_note}" if self.records_note else ""
        return f"{self.headline()}. {self.how()}{note}"


def estimate(
    records: int, methods: Sequence[str], max_new_tokens: int, paces: Mapping[str, MethodPace], records_note: str = ""
) -> CampaignEstimate:
    """The estimate from each method's pace (:func:`measured_paces`, else :func:`calibrated_pace`)."""
    known = tuple(paces[method] for method in methods if method in paces)
    missing = tuple(method for method in methods if method not in paces)
    return CampaignEstimate(records, tuple(methods), max_new_tokens, known, missing, records_note)


class StoredPaces:
    """The measured paces of a run store's runs of one pairing, read once per run (a run's cells are read
    again only when it has more of them): a form's estimate follows every change without rereading them."""

    def __init__(self, runs: RunStore) -> None:
        self.runs = runs
        self._lock = threading.Lock()
        self._cells: dict[tuple[int, int], list[CellResult]] = {}

    def _timed(self, run_id: int, count: int) -> list[CellResult]:
        with self._lock:
            cached = self._cells.get((run_id, count))
        if cached is None:
            cached = [cell for cell in timed_cells(self.runs.cells(run_id)) if cell.stats.ttft_s is not None]
            # Only what a pace needs is kept: no output, no trace (a grid's cells can hold megabytes of them).
            cached = [CellResult(c.record_id, c.point, "", {}, _timing_only(c.stats)) for c in cached]
            with self._lock:
                self._cells = {key: value for key, value in self._cells.items() if key[0] != run_id}
                self._cells[(run_id, count)] = cached
        return cached

    def paces(self, pairing: str) -> dict[str, MethodPace]:
        cells = [
            cell
            for run in self.runs.runs()
            if run.config.get("pairing") == pairing
            for cell in self._timed(run.id, run.cell_count)
        ]
        return measured_paces(cells)


def _timing_only(stats: GenerationStats) -> GenerationStats:
    return replace(stats, trace=[], round_log=[], sent_text="")
