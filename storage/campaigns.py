"""Annotation campaigns, their records' comparisons and their annotators (``storage.campaign_judgements``
keeps what the annotators judged). Short sessions; typed values of ``specsteer.stores.campaigns``."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from specsteer.stores.campaigns import (
    Annotator,
    CampaignItemRef,
    CampaignStatus,
    DuplicateCampaign,
    NewCampaign,
    StoredCampaign,
)
from specsteer.util.jsonable import to_jsonable
from storage.db import retry_on_locked, session_scope
from storage.models import CAMPAIGN_STATUSES, Campaign, CampaignAnnotator, CampaignItem
from storage.values import fitting, require_text


def _stored(row: Campaign, ready: int) -> StoredCampaign:
    return StoredCampaign(
        id=row.id,
        name=row.name,
        task=row.task,
        methods=tuple(row.methods),
        pairing=row.pairing,
        settings=row.settings,
        data=row.data,
        planned=row.planned,
        ready=ready,
        open_to_anyone=row.open_to_anyone,
        status=row.status,  # type: ignore[arg-type]  # the table's check constraint holds it to CampaignStatus
        error=row.error,
        created_at=row.created_at,
    )


def _ready(session: Session, campaign_id: int) -> int:
    return int(session.scalar(select(func.count()).where(CampaignItem.campaign_id == campaign_id)) or 0)


@retry_on_locked()
def create_campaign(campaign: NewCampaign, *, url: str | None = None) -> StoredCampaign:
    """Store a new campaign and its annotators; DuplicateCampaign when the name is taken."""
    name = require_text(campaign.name, "campaign name", Campaign.name)
    try:
        with session_scope(url) as session:
            row = Campaign(
                name=name,
                task=require_text(campaign.task, "task", Campaign.task),
                methods=list(campaign.methods),
                pairing=campaign.pairing,
                settings=to_jsonable(dict(campaign.settings)),
                data=to_jsonable(dict(campaign.data)),
                planned=int(campaign.planned),
                open_to_anyone=bool(campaign.open_to_anyone),
                status="preparing",
            )
            session.add(row)
            session.flush()
            for annotator, code_hash in campaign.annotators.items():
                session.add(CampaignAnnotator(campaign_id=row.id, name=annotator, code_hash=code_hash))
            session.flush()
            return _stored(row, 0)
    except IntegrityError:
        raise DuplicateCampaign(f"There is a campaign named {name!r} already: choose another name.") from None


def get_campaign(name: str, *, url: str | None = None) -> StoredCampaign | None:
    with session_scope(url) as session:
        row = session.scalar(select(Campaign).where(Campaign.name == name))
        return _stored(row, _ready(session, row.id)) if row is not None else None


def get_campaign_by_id(campaign_id: int, *, url: str | None = None) -> StoredCampaign | None:
    with session_scope(url) as session:
        row = session.get(Campaign, campaign_id)
        return _stored(row, _ready(session, row.id)) if row is not None else None


def list_campaigns(*, url: str | None = None) -> list[StoredCampaign]:
    with session_scope(url) as session:
        counts = dict(
            session.execute(select(CampaignItem.campaign_id, func.count()).group_by(CampaignItem.campaign_id)).all()
        )
        rows = session.scalars(select(Campaign).order_by(Campaign.id.desc()))
        return [_stored(row, int(counts.get(row.id, 0))) for row in rows]


@retry_on_locked()
def set_campaign_status(
    campaign_id: int, status: CampaignStatus, *, error: str | None = None, url: str | None = None
) -> None:
    if status not in CAMPAIGN_STATUSES:
        raise ValueError(f"unknown campaign status {status!r}")
    with session_scope(url) as session:
        row = session.get(Campaign, campaign_id)
        if row is None:
            raise ValueError(f"campaign {campaign_id} does not exist")
        row.status = status
        row.error = error


def campaign_items(campaign_id: int, *, url: str | None = None) -> list[CampaignItemRef]:
    with session_scope(url) as session:
        rows = session.scalars(
            select(CampaignItem).where(CampaignItem.campaign_id == campaign_id).order_by(CampaignItem.position)
        )
        return [CampaignItemRef(row.position, row.record_key, row.comparison_id) for row in rows]


@retry_on_locked()
def add_campaign_item(
    campaign_id: int, position: int, record_key: str, comparison_id: int, *, url: str | None = None
) -> bool:
    """Link a record to its comparison; False when the record has one already (a second worker, a resume)."""
    try:
        with session_scope(url) as session:
            session.add(
                CampaignItem(
                    campaign_id=campaign_id,
                    position=position,
                    record_key=fitting(record_key, "record id", CampaignItem.record_key),
                    comparison_id=comparison_id,
                )
            )
        return True
    except IntegrityError:
        return False


def _annotator(row: CampaignAnnotator) -> Annotator:
    return Annotator(row.id, row.campaign_id, row.name, row.code_hash)


def get_annotator(campaign_id: int, name: str, *, url: str | None = None) -> Annotator | None:
    with session_scope(url) as session:
        row = session.scalar(
            select(CampaignAnnotator).where(
                CampaignAnnotator.campaign_id == campaign_id, CampaignAnnotator.name == name
            )
        )
        return _annotator(row) if row is not None else None


def annotator_count(campaign_id: int, *, url: str | None = None) -> int:
    with session_scope(url) as session:
        return int(session.scalar(select(func.count()).where(CampaignAnnotator.campaign_id == campaign_id)) or 0)


@retry_on_locked()
def add_annotator(campaign_id: int, name: str, code_hash: str | None, *, url: str | None = None) -> Annotator:
    """A new annotator, or the one of that name already there (two tabs joining at once store one)."""
    name = require_text(name, "annotator", CampaignAnnotator.name)
    try:
        with session_scope(url) as session:
            row = CampaignAnnotator(campaign_id=campaign_id, name=name, code_hash=code_hash)
            session.add(row)
            session.flush()
            return _annotator(row)
    except IntegrityError:
        existing = get_annotator(campaign_id, name, url=url)
        if existing is None:
            raise
        return existing


@retry_on_locked()
def set_code_hash(annotator_id: int, code_hash: str, *, url: str | None = None) -> None:
    """Store another form of the annotator's join code (an unsalted hash re-stored salted)."""
    with session_scope(url) as session:
        row = session.get(CampaignAnnotator, annotator_id)
        if row is None:
            raise ValueError(f"annotator {annotator_id} does not exist")
        row.code_hash = code_hash
