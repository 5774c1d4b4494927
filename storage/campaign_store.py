"""``SqlCampaignStore``: the campaign service's ``CampaignStore`` on this package's repositories."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from specsteer.stores.campaigns import (
    Annotator,
    CampaignItemRef,
    CampaignStatus,
    NewCampaign,
    NewCampaignJudgement,
    StoredCampaign,
    StoredCampaignJudgement,
)
from storage import campaign_judgements, campaigns
from storage.exports import write_annotations_csv, write_annotations_jsonl


class SqlCampaignStore:
    """Campaigns in one database (default: ``DATABASE_URL`` / the SQLite file)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url

    def create_campaign(self, campaign: NewCampaign) -> StoredCampaign:
        return campaigns.create_campaign(campaign, url=self.url)

    def campaign(self, name: str) -> StoredCampaign | None:
        return campaigns.get_campaign(name, url=self.url)

    def campaign_by_id(self, campaign_id: int) -> StoredCampaign | None:
        return campaigns.get_campaign_by_id(campaign_id, url=self.url)

    def campaigns(self) -> list[StoredCampaign]:
        return campaigns.list_campaigns(url=self.url)

    def set_status(self, campaign_id: int, status: CampaignStatus, error: str | None = None) -> None:
        campaigns.set_campaign_status(campaign_id, status, error=error, url=self.url)

    def items(self, campaign_id: int) -> list[CampaignItemRef]:
        return campaigns.campaign_items(campaign_id, url=self.url)

    def add_item(self, campaign_id: int, position: int, record_key: str, comparison_id: int) -> bool:
        return campaigns.add_campaign_item(campaign_id, position, record_key, comparison_id, url=self.url)

    def annotator(self, campaign_id: int, name: str) -> Annotator | None:
        return campaigns.get_annotator(campaign_id, name, url=self.url)

    def annotator_count(self, campaign_id: int) -> int:
        return campaigns.annotator_count(campaign_id, url=self.url)

    def add_annotator(self, campaign_id: int, name: str, code_hash: str | None) -> Annotator:
        return campaigns.add_annotator(campaign_id, name, code_hash, url=self.url)

    def set_code_hash(self, annotator_id: int, code_hash: str) -> None:
        campaigns.set_code_hash(annotator_id, code_hash, url=self.url)

    def save_judgement(self, judgement: NewCampaignJudgement) -> int:
        return campaign_judgements.save_campaign_judgement(judgement, url=self.url)

    def judgements(self, campaign_id: int | None, annotator_id: int | None = None) -> list[StoredCampaignJudgement]:
        return campaign_judgements.campaign_judgements(campaign_id, annotator_id, url=self.url)

    def write_export(self, kind: Literal["csv", "jsonl"], rows: Sequence[Mapping[str, Any]], target: Path) -> int:
        writer = write_annotations_csv if kind == "csv" else write_annotations_jsonl
        return writer(rows, target)
