"""The rules of a campaign, GUI-free: its limits, the checks of what a person types (names, ratings,
rationales), a record's history as a comparison keeps it, and each annotator's blind order.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Mapping, Sequence

from specsteer.data.datasets import Record
from specsteer.data.history import History
from specsteer.service.campaign_values import CampaignError
from specsteer.stores.generations import RATING_CRITERIA, RATING_RANGE, NamedHistory

MAX_NAME_CHARS = 64
MAX_RECORDS = 500  # comparisons per campaign: what one operator's click may start
MAX_ANNOTATORS = 100  # named by the operator
MAX_OPEN_ANNOTATORS = 1000  # joined by name alone: bounds the rows one visitor's script can add
MAX_RATIONALE_CHARS = 2000
MAX_SECONDS = 24 * 3600.0  # a display older than a day is not a judgement time
_NAME = re.compile(r"^[\w][\w .@+-]*$")  # letters, digits, space and . @ + - _ ; no markup, no control characters
_MARKUP = re.compile(r"<\s*[A-Za-z/!?]|&#?\w+;|javascript:", re.IGNORECASE)
DATA_SOURCES = ("sample", "shared", "shared:dev", "upload")


def clean_name(value: object, what: str) -> str:
    """A campaign's or an annotator's name: 1-64 letters, digits, spaces and . @ + - _ ; CampaignError else."""
    if not isinstance(value, str):
        raise CampaignError(f"The {what} must be text.")
    text = unicodedata.normalize("NFKC", value).strip()
    if not text:
        raise CampaignError(f"Enter the {what}.")
    if len(text) > MAX_NAME_CHARS:
        raise CampaignError(f"The {what} is {len(text)} characters long; the limit is {MAX_NAME_CHARS}.")
    if not _NAME.match(text):
        raise CampaignError(f"The {what} may hold letters, digits, spaces and . @ + - _ only.")
    return text


def record_history(record: Record, task: str) -> NamedHistory:
    """A record's history as a campaign's comparison keeps it (named after the record)."""
    return NamedHistory(History(record.profile, task, record.user_id, record.user_profile), f"record {record.id}")


def blind_key(campaign_id: int, annotator: str, comparison_id: int, what: str) -> int:
    digest = hashlib.sha256(f"{campaign_id}\x00{annotator}\x00{comparison_id}\x00{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def annotator_order(campaign_id: int, annotator: str, comparison_ids: Sequence[int]) -> list[int]:
    """The comparisons in this annotator's own order (deterministic, different per annotator)."""
    return sorted(comparison_ids, key=lambda cid: (blind_key(campaign_id, annotator, cid, "order"), cid))


def slot_order(campaign_id: int, annotator: str, comparison_id: int, count: int) -> list[int]:
    """Which stored output sits in each slot for this annotator (a deterministic shuffle)."""
    order = list(range(count))
    random.Random(blind_key(campaign_id, annotator, comparison_id, "slots")).shuffle(order)
    return order


def valid_ratings(
    ratings: Mapping[str, Mapping[str, object]] | None, label_to_method: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for label, scores in (ratings or {}).items():
        if label not in label_to_method:
            raise CampaignError(f"There is no output {str(label)[:8]!r} to rate here.")
        if not isinstance(scores, Mapping):
            raise CampaignError("Ratings map each output to its scores.")
        kept: dict[str, int] = {}
        for criterion, value in scores.items():
            if criterion not in RATING_CRITERIA:
                raise CampaignError(f"Unknown rating {str(criterion)[:40]!r}: rate {', '.join(RATING_CRITERIA)}.")
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or float(value) != int(value):
                raise CampaignError(f"A rating is a whole number from {RATING_RANGE[0]} to {RATING_RANGE[1]}.")
            if not RATING_RANGE[0] <= int(value) <= RATING_RANGE[1]:
                raise CampaignError(f"A rating is a whole number from {RATING_RANGE[0]} to {RATING_RANGE[1]}.")
            kept[criterion] = int(value)
        if kept:
            result[label_to_method[label]] = kept
    return result


def valid_rationale(text: object) -> str:
    if text is None:
        return ""
    if not isinstance(text, str):
        raise CampaignError("The rationale must be text.")
    text = text.strip()
    if len(text) > MAX_RATIONALE_CHARS:
        raise CampaignError(
            f"The rationale is {len(text)} characters long; the limit is {MAX_RATIONALE_CHARS}. Nothing was saved."
        )
    if _MARKUP.search(text) or any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in text):
        raise CampaignError("Write the rationale as plain text (no markup, no control characters). Nothing was saved.")
    return text
