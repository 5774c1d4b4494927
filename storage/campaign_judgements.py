"""What a campaign's annotators judged: one row per annotator and comparison (a second save replaces
the first), and the flat rows of its export. Short sessions; typed values of
``specsteer.service.campaign_store``; the checks on what a person typed are the service's."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from specsteer.service.campaign_store import NewCampaignJudgement, StoredCampaignJudgement
from specsteer.util.jsonable import to_jsonable
from storage.db import retry_on_locked, session_scope
from storage.models import CampaignAnnotator, CampaignItem, CampaignJudgementRow


def _update(row: CampaignJudgementRow, judgement: NewCampaignJudgement) -> None:
    row.slots = list(judgement.slots)
    row.preference = judgement.preference
    row.preferred_method = judgement.preferred_method
    row.ratings = to_jsonable({method: dict(scores) for method, scores in judgement.ratings.items()})
    row.rationale = judgement.rationale
    row.seconds = judgement.seconds


def _existing(session: Session, judgement: NewCampaignJudgement) -> CampaignJudgementRow | None:
    return session.scalar(
        select(CampaignJudgementRow).where(
            CampaignJudgementRow.annotator_id == judgement.annotator_id,
            CampaignJudgementRow.comparison_id == judgement.comparison_id,
        )
    )


@retry_on_locked()
def save_campaign_judgement(judgement: NewCampaignJudgement, *, url: str | None = None) -> int:
    """Insert the judgement, or replace the annotator's earlier one of the same comparison; its row id.

    Two saves at once (a double click, two tabs) meet the unique constraint: the loser updates the
    winner's row instead, so one row remains whatever the timing."""
    for _attempt in range(2):
        try:
            with session_scope(url) as session:
                item = session.scalar(
                    select(CampaignItem.id).where(
                        CampaignItem.campaign_id == judgement.campaign_id,
                        CampaignItem.comparison_id == judgement.comparison_id,
                    )
                )
                annotator = session.get(CampaignAnnotator, judgement.annotator_id)
                if item is None or annotator is None or annotator.campaign_id != judgement.campaign_id:
                    raise ValueError("the comparison or the annotator is not part of this campaign")
                row = _existing(session, judgement)
                if row is None:
                    row = CampaignJudgementRow(
                        campaign_id=judgement.campaign_id,
                        comparison_id=judgement.comparison_id,
                        annotator_id=judgement.annotator_id,
                        saves=1,
                    )
                    session.add(row)
                else:
                    row.saves += 1
                _update(row, judgement)
                session.flush()
                return row.id
        except IntegrityError:
            continue  # another save of the same judgement won the insert: update it on the next try
    raise RuntimeError("the judgement could not be saved")


def campaign_judgements(
    campaign_id: int | None, annotator_id: int | None = None, *, url: str | None = None
) -> list[StoredCampaignJudgement]:
    """Oldest first; of one campaign (None: of every campaign), optionally of one annotator."""
    with session_scope(url) as session:
        query = (
            select(CampaignJudgementRow, CampaignAnnotator.name)
            .join(CampaignAnnotator, CampaignAnnotator.id == CampaignJudgementRow.annotator_id)
            .order_by(CampaignJudgementRow.id)
        )
        if campaign_id is not None:
            query = query.where(CampaignJudgementRow.campaign_id == campaign_id)
        if annotator_id is not None:
            query = query.where(CampaignJudgementRow.annotator_id == annotator_id)
        return [
            StoredCampaignJudgement(
                id=row.id,
                campaign_id=row.campaign_id,
                comparison_id=row.comparison_id,
                annotator=name,
                slots=tuple(row.slots),
                preference=row.preference,
                preferred_method=row.preferred_method,
                ratings=row.ratings,
                rationale=row.rationale,
                seconds=row.seconds,
                saves=row.saves,
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
            for row, name in session.execute(query)
        ]
