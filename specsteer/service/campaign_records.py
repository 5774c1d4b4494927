"""The records a campaign reads: where from (:func:`records_source`), how many (:func:`valid_record_limit`,
:func:`record_count`), and reading them (:func:`campaign_records`), each failure a CampaignError that says why.

A campaign reads the bundled sample, the shared LongLaMP or CoGenesis records (``shared:dev``: CoGenesis's dev
split) or a file a person uploaded and the app kept; at most :data:`MAX_RECORDS` of them, the first ones.
"""

from __future__ import annotations

import functools
from pathlib import Path

from specsteer.data.datasets import COGENESIS_TASK, Record, load_task_records
from specsteer.data.record_files import DataError
from specsteer.data.sources import resolve_data_source
from specsteer.engine.settings import sentence
from specsteer.service.campaign_checks import MAX_RECORDS
from specsteer.service.campaign_values import CampaignError


def valid_record_limit(limit: int | None) -> int | None:
    """A campaign's number of records as asked: None (every record, up to :data:`MAX_RECORDS`) or 1 to it."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECORDS):
        raise CampaignError(f"The number of records is 1 to {MAX_RECORDS}.")
    return limit


def records_source(data: str, task: str) -> tuple[str, str]:
    """The records a campaign over ``task`` reads, as (source, path), from what a person chose: ``sample``,
    ``shared``, ``shared:dev`` or the path of an uploaded file (kept by ``EvaluationService.keep_records``)."""
    if not isinstance(data, str) or not data.strip():
        raise CampaignError("Choose the records: the bundled sample, the shared records or an uploaded file.")
    if data in ("sample", "shared", "shared:dev"):
        if data == "shared:dev" and task != COGENESIS_TASK:
            raise CampaignError("Only CoGenesis has a dev split; choose the shared records.")
        try:
            return data, resolve_data_source(data, task)
        except (DataError, ValueError) as error:
            raise CampaignError(sentence(str(error))) from None
    if not Path(data).is_file():  # an uploaded file, kept by EvaluationService.keep_records
        raise CampaignError("The uploaded records file is gone; upload it again.")
    return "upload", str(Path(data))


def campaign_records(path: str, task: str, limit: int) -> list[Record]:
    """The first ``limit`` records of ``task`` in ``path``."""
    try:
        return load_task_records(path, task, limit=limit)
    except (DataError, ValueError, OSError, RecursionError) as error:
        raise CampaignError(sentence(f"The records do not read: {error}")) from None


@functools.lru_cache(maxsize=32)
def record_count(path: str, task: str, limit: int) -> int:
    """How many records a campaign over ``path`` would take (a form asks on every change: read once)."""
    return len(campaign_records(path, task, limit))
