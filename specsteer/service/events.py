"""The workflows' events and the values they and the service's queries return: what every front end renders.

A workflow is a generator of these events (``specsteer.service.generation``, ``specsteer.service.evaluation``):

    generate: Started, Loading*, Generating, Token*, then Done or Failed
    compare:  ComparisonStarted, Loading*, then per output Generating, Token*, OutputDone;
              then ComparisonSaved, Stopped or Failed
    evaluate: Status, Loading*, GridProgress*, then EvalResult or Failed

``Failed`` carries a message for a person (a sentence naming what to change). The queries' values (a Cloud
check, a deployment projection, a saved judgement, an export, a stored run's results) are here too, so a tab
imports the types it renders from one module and the workflows from none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specsteer.data.crossing import HistoryCrossing
from specsteer.data.facts import FactExposure
from specsteer.data.privacy import UplinkAudit
from specsteer.data.tasks import PromptPair
from specsteer.engine.settings import GenerationSettings
from specsteer.evaluation.deployment import DeploymentProfile
from specsteer.evaluation.grid import EvalResult, GridProgress
from specsteer.method.events import Finished, LinkMessage, TokenEvent
from specsteer.protocol.cloud_reports import CloudInfo
from specsteer.stores.generations import StoredOutput
from specsteer.stores.runs import CellResult, StoredRun

# --------------------------------------------------------------------------- values the events carry

PrivacyVerdict = Literal["failed", "not private", "history crossed", "passed"]


@dataclass(frozen=True)
class ScoredItem:
    """A retrieved history item as the Specialist's prompt shows it, with its BM25 score."""

    text: str
    score: float


@dataclass(frozen=True)
class RetrievalPreview:
    """What the Specialist will see for an input: the items BM25 picks and both prompts."""

    task: str
    total: int  # items in the history
    retrieval_k: int
    items: tuple[ScoredItem, ...]
    prompts: PromptPair | None  # None while there is no input


@dataclass(frozen=True)
class PrivacyReport:
    """The audit of every uplink message, the messages themselves, and how to show their ids as text."""

    audit: UplinkAudit
    transcript: tuple[LinkMessage, ...]
    token_text: Callable[[Sequence[int]], str]
    # Which of the persona's private facts reached the cloud (specsteer.data.facts); None without a profile.
    facts: FactExposure | None = None
    # The phrases of the history that crossed, on any history (specsteer.data.crossing), and the settings to
    # generate again with the private-span guard on (the panel's one-click offer): None where none crossed
    # or the guard is on already or does not cover the method.
    crossing: HistoryCrossing | None = None
    guard_offer: GenerationSettings | None = None

    @property
    def verdict(self) -> PrivacyVerdict:
        """The privacy panel's headline: the uplink audit failed; the method sends the private prompt by design;
        phrases of the history crossed (amber, named); or none did and the audit passed (green, the only one)."""
        if not self.audit.ok:
            return "failed"
        if self.audit.private_prompt_sent:
            return "not private"
        if self.crossing is not None and self.crossing.crossed:
            return "history crossed"
        return "passed"


@dataclass(frozen=True)
class GenerationResult:
    finished: Finished
    tokens: tuple[TokenEvent, ...]  # every token shown, rejected drafts included
    privacy: PrivacyReport | None  # None for a device-only method: nothing crossed the link
    saved_id: int | None  # None when saving failed (``save_error`` says why)
    save_error: str | None = None

    @property
    def stopped(self) -> bool:
        return self.finished.stats.stop_reason == "cancelled"


@dataclass(frozen=True)
class SavedComparison:
    comparison_id: int
    methods: tuple[str, ...]  # in the order shown: slot 0 is label A
    texts: tuple[str, ...]
    generation_ids: tuple[int, ...]
    blind: bool


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Status:
    """A step begins that takes a moment (reading records)."""

    message: str


@dataclass(frozen=True)
class Loading:
    """The pair is loading (first use): one line of the loader's progress."""

    message: str


@dataclass(frozen=True)
class Started:
    """Settings and request are valid; the preview is what this generation's Specialist sees."""

    settings: GenerationSettings
    preview: RetrievalPreview


@dataclass(frozen=True)
class ComparisonStarted:
    settings: GenerationSettings
    methods: tuple[str, ...]  # in the order they will be shown (shuffled when blind)
    blind: bool


@dataclass(frozen=True)
class Generating:
    """The pair is loaded and ``method`` starts (output ``slot`` of ``of`` in a comparison)."""

    method: str
    runtime: str
    precision: str
    slot: int = 0
    of: int = 1
    # A comparison's outputs, all of them: seconds this machine's calibration estimates (models.calibration,
    # for the reference prompts), None where the pairing was not calibrated here
    estimate_s: float | None = None


@dataclass(frozen=True)
class Token:
    """A settled token (kept, saved, audited)."""

    event: TokenEvent
    slot: int = 0


@dataclass(frozen=True)
class Pending:
    """A draft on screen before its verdict (``event.kind`` "pending"): the Token events of the same
    round and position settle it; one still pending when the output ends was never sent."""

    event: TokenEvent
    slot: int = 0


@dataclass(frozen=True)
class OutputDone:
    slot: int
    method: str
    finished: Finished


@dataclass(frozen=True)
class Done:
    result: GenerationResult


@dataclass(frozen=True)
class ComparisonSaved:
    comparison: SavedComparison


@dataclass(frozen=True)
class Stopped:
    """A comparison was stopped before its last output; nothing of it was saved."""


@dataclass(frozen=True)
class Failed:
    message: str  # one or more sentences for a person
    # A generation whose Cloud failed midway: what it had emitted, audited and saved (stop reason
    # "cloud-error"), like a stopped one. None for every other failure.
    partial: GenerationResult | None = None


@dataclass(frozen=True)
class CloudCheck:
    """What "Test connection" found at a Cloud address: what it serves, or why it cannot be used."""

    address: str  # as the settings keep it (settings.cloud_address); "" in process
    ok: bool
    message: str  # a sentence or two for a person
    info: CloudInfo | None = None  # None when nothing (readable) answered


@dataclass(frozen=True)
class DeploymentReport:
    """One stored run's generations projected onto a deployment profile across round-trip times.

    ``rows`` are ``deployment_rows.projection_rows``: one per (method, α, β) group and RTT, with the projected
    and the measured tokens/s and the projected speedup over ``llm``. Cells stored before generations
    kept their traces cannot be projected: ``traced`` says how many of ``cells`` could; ``disturbed``, how many
    of those the rows left out because their timing was disturbed (``deployment_rows.timed_runs``).
    """

    run_id: int
    profile: DeploymentProfile
    rtts_ms: tuple[float, ...]  # the sweep the rows cover
    table_rtts_ms: tuple[float, ...]  # the RTTs the speedup table shows
    rows: tuple[dict, ...]
    cells: int
    traced: int
    disturbed: int = 0

    @property
    def untraced(self) -> int:
        return self.cells - self.traced

    @property
    def projected(self) -> int:
        """The generations the rows project."""
        return self.traced - self.disturbed


@dataclass(frozen=True)
class SavedAnnotation:
    """A judgement saved: its id, and the outputs it judged in the order the annotator saw them (with
    their statistics, which the page reveals with the methods)."""

    annotation_id: int
    outputs: tuple[StoredOutput, ...]
    replaced: bool = False  # it took the place of its page's earlier judgement of the comparison


@dataclass(frozen=True)
class AnnotationExport:
    """A fresh file of every annotation for download; ``path`` is None when there is none to export."""

    path: Path | None
    count: int


@dataclass(frozen=True)
class RunResults:
    """A stored evaluation run with its cells, in the order they were saved."""

    run: StoredRun
    cells: tuple[CellResult, ...]


class ExportRefused(ValueError):
    """This caller may not export every annotation (a public app without the operator's token)."""


GenerationEvent = Started | Loading | Generating | Token | Pending | Done | Failed
ComparisonEvent = (
    ComparisonStarted | Loading | Generating | Token | Pending | OutputDone | ComparisonSaved | Stopped | Failed
)
EvaluationEvent = Status | Loading | GridProgress | EvalResult | Failed
