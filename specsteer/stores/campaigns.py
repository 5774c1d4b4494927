"""What a campaign store keeps (``protocols.CampaignStore``): annotation campaigns, their annotators and
judgements, as typed values.

``specsteer.service.campaigns`` uses them; ``storage.SqlCampaignStore`` turns them into rows. Repositories
check what they store (a unique campaign name, one judgement per annotator and comparison); the service checks
everything a person typed. Light: no torch, no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

CampaignStatus = Literal["preparing", "ready", "stopped", "failed"]


RUN_SOURCE = "run"  # ``NewCampaign.data["source"]`` of a campaign made from an evaluation run's stored outputs


class DuplicateCampaign(ValueError):
    """A campaign of that name exists already."""


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class RunSource:
    """Where a campaign made from a stored evaluation run (``specsteer.service.campaign_import``) took its
    outputs: the run, by name and id, and the α and β of the grid point of the methods that read them (None
    where no chosen method reads one). Kept in the campaign's ``data``; nothing was generated for it."""

    run: str
    run_id: int
    alpha: float | None
    beta: float | None

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RunSource | None:
        """The source kept in a campaign's ``data``; None for a campaign that generated its outputs."""
        if data.get("source") != RUN_SOURCE:
            return None
        return cls(
            str(data.get("run", "")),
            int(data.get("run_id") or 0),
            _number(data.get("alpha")),
            _number(data.get("beta")),
        )

    def data(self, path: str, limit: int) -> dict[str, Any]:
        """The campaign's ``data``: the run's records file, how many records, and this source."""
        return {"source": RUN_SOURCE, "path": path, "limit": limit, **asdict(self)}

    @property
    def setting(self) -> str:
        values = [f"{name}={value:g}" for name, value in (("α", self.alpha), ("β", self.beta)) if value is not None]
        return " ".join(values)

    def describe(self) -> str:
        """One sentence for the campaign's status and report."""
        at = f" at {self.setting}" if self.setting else ""
        return (
            f"Outputs of evaluation run {self.run!r} (#{self.run_id}){at}, as the run stored them; "
            "none was generated for this campaign."
        )


@dataclass(frozen=True)
class NewCampaign:
    """A campaign as its operator defines it (checked by the service before it is stored)."""

    name: str
    task: str
    methods: tuple[str, ...]
    pairing: str
    settings: Mapping[str, Any]  # GenerationSettings as JSON
    data: Mapping[str, Any]  # {"source": ..., "path": ..., "limit": ...}
    planned: int  # records to compare
    open_to_anyone: bool
    annotators: Mapping[str, str]  # name -> the stored form of the join code issued to them (join_codes)


@dataclass(frozen=True)
class StoredCampaign:
    id: int
    name: str
    task: str
    methods: tuple[str, ...]
    pairing: str
    settings: Mapping[str, Any]
    data: Mapping[str, Any]
    planned: int
    ready: int  # comparisons generated and stored so far
    open_to_anyone: bool
    status: CampaignStatus
    error: str | None
    created_at: datetime | None = None


@dataclass(frozen=True)
class CampaignItemRef:
    """A record of a campaign and the comparison stored for it."""

    position: int
    record_key: str
    comparison_id: int


@dataclass(frozen=True)
class Annotator:
    id: int
    campaign_id: int
    name: str
    code_hash: (
        str | None
    )  # the join code's stored form (specsteer.service.join_codes); None: joined an open campaign by name alone


@dataclass(frozen=True)
class NewCampaignJudgement:
    """A checked judgement: ``slots`` the methods in the order the annotator saw them, ``preference`` a
    label ("B") or a special choice, ``preferred_method`` it resolved, ``ratings`` keyed by method."""

    campaign_id: int
    comparison_id: int
    annotator_id: int
    slots: tuple[str, ...]
    preference: str
    preferred_method: str
    ratings: Mapping[str, Mapping[str, int]]
    rationale: str
    seconds: float | None


@dataclass(frozen=True)
class StoredCampaignJudgement:
    id: int
    campaign_id: int
    comparison_id: int
    annotator: str
    slots: tuple[str, ...]
    preference: str
    preferred_method: str
    ratings: Mapping[str, Mapping[str, int]]
    rationale: str
    seconds: float | None
    saves: int
    created_at: datetime | None = None
    updated_at: datetime | None = None
