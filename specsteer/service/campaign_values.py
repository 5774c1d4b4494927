"""What campaigns take and give, as typed values: an operator's request, a created campaign, generation progress,
an annotator's seat and view, a campaign's status and report; and the error every campaign call raises.

``specsteer.service.campaigns`` works with these; the tabs and the command line render them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specsteer.evaluation.preference import PreferenceReport
from specsteer.service.events import Failed
from specsteer.stores.campaigns import StoredCampaign, StoredCampaignJudgement
from specsteer.stores.generations import StoredOutput, slot_label


class CampaignError(ValueError):
    """A request about a campaign that cannot be done; the message says why, as a sentence."""


@dataclass(frozen=True)
class CampaignRequest:
    """What an operator asks for. ``data``: "sample", "shared", "shared:dev" or a kept upload's path."""

    name: str
    task: str
    data: str
    methods: tuple[str, ...]
    settings: Mapping[str, object]  # GenerationSettings' fields (pairing, α, β, max_new_tokens, …)
    limit: int | None = None
    annotators: tuple[str, ...] = ()  # each gets a join code; none: the campaign is open to anyone
    open_to_anyone: bool = False


@dataclass(frozen=True)
class CreatedCampaign:
    campaign: StoredCampaign
    codes: Mapping[str, str]  # annotator -> join code, shown once


@dataclass(frozen=True)
class CampaignProgress:
    campaign: str
    ready: int
    planned: int
    record_key: str  # the record just stored


@dataclass(frozen=True)
class CampaignGenerated:
    campaign: str
    status: str  # "ready", "stopped", "preparing" (this shard done, others not yet)
    ready: int
    planned: int
    generated: int  # by this call


CampaignEvent = CampaignProgress | CampaignGenerated | Failed


@dataclass(frozen=True)
class Seat:
    """An annotator who joined a campaign (held by their browser session; never shown to others)."""

    campaign_id: int
    campaign: str
    annotator_id: int
    annotator: str


@dataclass(frozen=True)
class JudgeView:
    """Position ``position`` (0-based) of ``total`` in the annotator's order; ``slots`` the outputs in the
    order this annotator sees them (label A first); ``previous`` their saved judgement, if any."""

    campaign: str
    position: int
    total: int
    judged: int  # comparisons this annotator has judged
    comparison_id: int
    task: str
    input_text: str
    slots: tuple[StoredOutput, ...]
    shown_at: float  # time.time() when shown: the save's timer starts here
    previous: StoredCampaignJudgement | None = None

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(slot_label(slot) for slot in range(len(self.slots)))

    @property
    def progress(self) -> str:
        return f"{self.position + 1} of {self.total} · judged {self.judged}"


@dataclass(frozen=True)
class CampaignStatusView:
    campaign: StoredCampaign
    annotators: int
    judgements: int
    source: str | None = None  # where the outputs came from, for a campaign made from a stored run


@dataclass(frozen=True)
class CampaignReport:
    campaigns: tuple[str, ...]
    open_to_anyone: bool  # any of them lets anyone join by name
    report: PreferenceReport
    sources: tuple[str, ...] = ()  # where the outputs came from, for each of them made from a stored run
