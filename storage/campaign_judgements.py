"""What a campaign's annotators judged: one row per annotator and comparison (a second save replaces
the first), and the flat rows of its export. Short sessions; typed values of
``specsteer.stores.campaigns``; the checks on what a person typed are the service's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from specsteer.stores.campaigns import NewCampaignJudgement, StoredCampaignJudgement
from specsteer.util.jsonable import to_jsonable
from storage.db import retry_on_locked, session_scope
from storage.models import CampaignAnnotator, CampaignItem, CampaignJudgementRow, utc_now


def _fields(judgement: NewCampaignJudgement) -> dict[str, Any]:
    return {
        "slots": list(judgement.slots),
        "preference": judgement.preference,
        "preferred_method": judgement.preferred_method,
        "ratings": to_jsonable({method: dict(scores) for method, scores in judgement.ratings.items()}),
        "rationale": judgement.rationale,
        "seconds": judgement.seconds,
    }


@retry_on_locked()
def save_campaign_judgement(judgement: NewCampaignJudgement, *, url: str | None = None) -> int:
    """Insert the judgement, or replace the annotator's earlier one of the same comparison; its row id.

    The replacement is one UPDATE (``saves = saves + 1`` included), so saves at the same moment (a double
    click, two tabs) neither lose a count nor leave two rows: an insert that loses the race to another
    meets the unique constraint and becomes an update."""
    for _attempt in range(3):
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
                mine = (
                    CampaignJudgementRow.annotator_id == judgement.annotator_id,
                    CampaignJudgementRow.comparison_id == judgement.comparison_id,
                )
                replaced = session.execute(
                    update(CampaignJudgementRow)
                    .where(*mine)
                    .values(**_fields(judgement), saves=CampaignJudgementRow.saves + 1, updated_at=utc_now())
                )
                if replaced.rowcount:  # type: ignore[attr-defined]
                    found = session.scalar(select(CampaignJudgementRow.id).where(*mine))
                    if found is not None:
                        return int(found)
                row = CampaignJudgementRow(
                    campaign_id=judgement.campaign_id,
                    comparison_id=judgement.comparison_id,
                    annotator_id=judgement.annotator_id,
                    saves=1,
                    **_fields(judgement),
                )
                session.add(row)
                session.flush()
                return row.id
        except IntegrityError:
            continue  # another save of the same judgement inserted first: update it on the next try
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
