"""The Campaigns panel's form as one typed value, GUI-free: its defaults (a campaign a 2-core CPU generates in
minutes), which fields each records source shows, and how the widgets' values become the request the campaign
service takes (a campaign to generate, or one made from a stored run's outputs).

The defaults: the paper's three core methods (SLM+, LLM, SpecSteer), the bundled sample's three records and
64 new tokens: minutes on a 2-core CPU, where the default of every method and record of a task took hours. The
form's estimate says the figure for the settings chosen (``campaign_estimate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TypeVar

from specsteer.method.catalog import CORE_METHODS
from specsteer.service.campaign_import import RunCampaignRequest
from specsteer.service.campaign_values import CampaignError, CampaignRequest

DEFAULT_METHODS = CORE_METHODS
DEFAULT_RECORDS = 3
DEFAULT_MAX_NEW_TOKENS = 64
# The records a campaign reads, as the panel offers them: ("label", value).
DATA_CHOICES = (
    ("Bundled sample", "sample"),
    ("Shared records", "shared"),
    ("CoGenesis dev", "shared:dev"),
    ("Uploaded file", "upload"),
    ("A stored run's outputs", "run"),
)
FROM_RUN = "run"
UPLOAD = "upload"

W = TypeVar("W")


def whole(value: object, what: str) -> int | None:
    """A number box's value as a whole number (None when empty); CampaignError for text, NaN, ∞ or a fraction."""
    if value is None or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CampaignError(f"{what} must be a number.") from None
    if not math.isfinite(number) or number != int(number):
        raise CampaignError(f"{what} must be a whole number.")
    return int(number)


def _number(value: object) -> float | None:
    """α or β as typed (None when empty: a run's only value)."""
    if value is None or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CampaignError("α and β must be numbers.") from None
    if not math.isfinite(number):
        raise CampaignError("α and β must be finite numbers.")
    return number


def shows_upload(data: object) -> bool:
    """The upload box is shown for an uploaded file only."""
    return data == UPLOAD


def shows_run(data: object) -> bool:
    """The stored-run picker is shown for a campaign from a stored run only."""
    return data == FROM_RUN


@dataclass(frozen=True)
class CampaignForm:
    """The panel's widgets' values, by the /campaign_create endpoint's parameter names."""

    name: str
    task: str
    data: str  # DATA_CHOICES' values
    upload: str | None  # the uploaded records file, for data "upload"
    run: str | None  # a stored run's name, for data "run"
    limit: float | None
    methods: Sequence[str]
    pairing: str
    runtime: str
    alpha: float | None
    beta: float | None
    max_new_tokens: float | None
    annotators: str  # comma-separated; none: open to anyone
    open_to_anyone: bool
    token: str = ""  # the operator's token (public app)

    @staticmethod
    def widgets(**widgets: W) -> dict[str, W]:
        """The form's widgets by field name; a TypeError unless they name exactly the fields."""
        names = sorted(field.name for field in fields(CampaignForm))
        if sorted(widgets) != names:
            raise TypeError(f"the campaign form's widgets {sorted(widgets)} are not its fields {names}")
        return widgets

    @property
    def from_run(self) -> bool:
        return self.data == FROM_RUN

    def _annotators(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in (self.annotators or "").split(",") if part.strip())

    def request(self, data: str | None = None) -> CampaignRequest:
        """The campaign to generate; ``data``: where an upload was kept (its path), else the source chosen."""
        return CampaignRequest(
            name=self.name or "",
            task=self.task,
            data=data or self.data,
            methods=tuple(self.methods or ()),
            settings={
                "pairing": self.pairing,
                "runtime": self.runtime,
                "alpha": self.alpha,
                "beta": self.beta,
                "max_new_tokens": whole(self.max_new_tokens, "Max new tokens") or 0,
            },
            limit=whole(self.limit, "The number of records"),
            annotators=self._annotators(),
            open_to_anyone=bool(self.open_to_anyone),
        )

    def run_request(self) -> RunCampaignRequest:
        """The campaign from stored run ``run``'s outputs (``campaign_import``: nothing generated)."""
        if not self.run:
            raise CampaignError("Choose the stored run whose outputs the campaign compares.")
        return RunCampaignRequest(
            name=self.name or "",
            run=str(self.run),
            methods=tuple(self.methods or ()),
            alpha=_number(self.alpha),
            beta=_number(self.beta),
            limit=whole(self.limit, "The number of records"),
            annotators=self._annotators(),
            open_to_anyone=bool(self.open_to_anyone),
        )
