"""A campaign's judgements as flat rows, and those rows as a fresh CSV or JSON-lines file to download.

One row per judgement (:func:`judgement_row`): the judgement's every field, the campaign's task and pairing,
the input, the slot order, each slot's output text and each method's rating per criterion. The campaign service
adds the LLM judge's grades to the rows of a campaign made from a run that has any
(``specsteer.service.judge_report.export_fields``). :func:`export_file` has the campaign store write the rows
(formula cells neutralised in a CSV) into a fresh temporary folder.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from specsteer.service.events import AnnotationExport
from specsteer.stores.campaigns import StoredCampaign, StoredCampaignJudgement
from specsteer.stores.generations import RATING_CRITERIA, StoredComparison, slot_label

ExportWriter = Callable[[Literal["csv", "jsonl"], Sequence[Mapping[str, Any]], Path], int]


def judgement_row(
    campaign: StoredCampaign, judgement: StoredCampaignJudgement, stored: StoredComparison | None
) -> dict[str, Any]:
    """One judgement of ``campaign`` as a flat row; ``stored``: the comparison it judged (None: gone)."""
    texts = {output.method: output.text for output in stored.outputs} if stored else {}
    row: dict[str, Any] = {
        "campaign": campaign.name,
        "open_to_anyone": campaign.open_to_anyone,
        "judgement_id": judgement.id,
        "comparison_id": judgement.comparison_id,
        "annotator": judgement.annotator,
        "task": campaign.task,
        "pairing": campaign.pairing,
        "input_text": stored.input_text if stored else "",
        "slot_order": ";".join(f"{slot_label(i)}={m}" for i, m in enumerate(judgement.slots)),
        "preference": judgement.preference,
        "preferred_method": judgement.preferred_method,
        "rationale": judgement.rationale,
        "seconds": judgement.seconds,
        "saves": judgement.saves,
        "created_at": judgement.created_at.isoformat() if judgement.created_at else None,
        "updated_at": judgement.updated_at.isoformat() if judgement.updated_at else None,
    }
    for slot, method in enumerate(judgement.slots):
        row[f"output:{slot_label(slot)}"] = texts.get(method, "")
    for method in judgement.slots:
        for criterion in RATING_CRITERIA:
            row[f"rating:{method}:{criterion}"] = judgement.ratings.get(method, {}).get(criterion)
    return row


def export_file(
    kind: Literal["csv", "jsonl"], rows: Sequence[Mapping[str, Any]], name: str | None, write: ExportWriter
) -> AnnotationExport:
    """``rows`` written by ``write`` (``CampaignStore.write_export``) to a fresh file named after campaign
    ``name`` (None: every campaign); no file for no rows, and none left behind by a failed write."""
    if not rows:
        return AnnotationExport(None, 0)
    folder = Path(tempfile.mkdtemp(prefix="specsteer-campaign-"))
    label = re.sub(r"[^\w.-]", "_", name or "all-campaigns")
    path = folder / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
    try:
        count = write(kind, rows, path)
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return AnnotationExport(path, count)
