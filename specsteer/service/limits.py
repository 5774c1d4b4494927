"""How much one visitor may ask of the app: every cap on model work, text and requests, in one value.

On a public deployment every endpoint is public and every caller anonymous, so what a form offers
(a slider's maximum, a textbox's size) is no limit: a caller sends what it likes, as large and as
often as it likes. :class:`VisitorLimits` is the one place that says how large. The service
(``specsteer.service.app_service.AppService``) checks model work and names against it, and the app's server
(``ui.http_limits``) its request sizes and timeouts. The numbers are documented in
docs/THREAT_MODEL.md, "Bounded work per visitor".

An evaluation grid is the heavy case: methods × α × β × records cells, each a generation. A visitor
may run a small grid (``open_grid_cells`` cells over at most ``open_records`` records); a larger one,
up to ``max_grid_cells``, needs the operator's token (``$SPECSTEER_ADMIN_TOKEN``, the token that
exports annotations). Locally the user is the operator and needs no token.

This module is light (standard library only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# SQLite (and most SQL databases) store ids as signed 64-bit integers: a larger number names no row,
# and binding it raises OverflowError instead of finding nothing.
MAX_STORED_ID = 2**63 - 1

MIB = 1024 * 1024


@dataclass(frozen=True)
class VisitorLimits:
    """Caps on what one request may ask for (see the module doc)."""

    # Evaluation grids: cells are methods × α × β × records.
    open_grid_cells: int  # the most cells a grid may have without the operator's token
    open_records: int  # the most records a grid may read without the operator's token
    max_grid_cells: int  # the most cells a grid may have at all (with the token)
    max_records: int  # the most records a grid may read at all
    max_grid_values: int  # the most α values, and the most β values, in one grid
    # One generation (and every grid cell).
    max_new_tokens: int
    # Text a visitor sends.
    max_input_chars: int  # a task input
    max_name_chars: int  # a run name, an annotator's name
    max_comment_chars: int  # an annotator's comment
    # Requests to the app's server (ui.http_limits).
    max_upload_bytes: int  # one uploaded file (records or a history)
    max_request_bytes: int  # any other request body (an API call's JSON)
    header_timeout_s: float  # from a connection's first byte (or the end of the last response) to a whole header
    body_idle_timeout_s: float  # the longest pause while a request body arrives
    body_timeout_s: float  # the longest a whole request body may take
    # Teaching the Specialist a history (a LoRA adapter, service.lora_teaching): the most training steps; 0 = no cap.
    max_lora_steps: int = 0
    # The model jobs (generations, comparisons, grids, campaign generations, trainings) one client may hold in
    # the app's queue at once, queued or running (service.fair_share; the number is argued in docs/THREAT_MODEL.md).
    queue_share: int = 4

    def grid_problem(
        self,
        methods: Sequence[str],
        alphas: Sequence[float],
        betas: Sequence[float],
        records: int | None,
        operator: bool,
    ) -> str | None:
        """Why a grid of ``records`` records (None: every record of its file) over these methods and values
        is refused, or None. The cells are counted as each method takes α and β (a method that takes
        neither is one cell a record). ``operator``: the caller holds the operator's token (or the app is
        local). A caller is told the cap that applies to it: a visitor the visitor's, the operator the
        operator's."""
        from specsteer.method.catalog import METHOD_INFO

        for what, values in (("α", alphas), ("β", betas)):
            if len(values) > self.max_grid_values:
                return f"The {what} list has {len(values)} values; the limit is {self.max_grid_values}."
        points = 0
        for method in dict.fromkeys(methods):
            info = METHOD_INFO.get(method)
            if info is not None:
                points += (len(alphas) if info.takes_alpha else 1) * (len(betas) if info.takes_beta else 1)
        if records is None:
            size = f"This grid reads every record of its file ({points} method settings each)"
            counted = self.max_records + 1  # more than any cap allows
        else:
            size = f"This grid has {points * max(records, 0)} cells ({points} method settings × {records} records)"
            counted = records
        cells = points * max(counted, 0)
        if not operator and (counted > self.open_records or cells > self.open_grid_cells):
            return (
                f"{size}. Without the operator's token a grid may have {self.open_grid_cells} cells over "
                f"{self.open_records} records: choose fewer methods, values or records, or enter the operator's token."
            )
        if counted > self.max_records or cells > self.max_grid_cells:
            return f"{size}; the limit is {self.max_grid_cells} cells over at most {self.max_records} records."
        return None

    def tokens_problem(self, max_new_tokens: object) -> str | None:
        """Why a token budget is refused, or None (a value that is not a number is the settings' to report)."""
        if isinstance(max_new_tokens, (int, float)) and max_new_tokens > self.max_new_tokens:
            return f"Max new tokens is {max_new_tokens:g}; the limit here is {self.max_new_tokens}."
        return None


def text_problem(what: str, text: object, max_chars: int) -> str | None:
    """Why ``text`` (a visitor's ``what``) is refused for its length, or None."""
    if isinstance(text, str) and len(text) > max_chars:
        return f"The {what} has {len(text):,} characters; the limit is {max_chars:,}."
    return None


def stored_id(value: object) -> bool:
    """Whether ``value`` can name a stored row at all (a positive signed 64-bit integer)."""
    return isinstance(value, int) and 0 < value <= MAX_STORED_ID


PUBLIC_LIMITS = VisitorLimits(
    open_grid_cells=24,
    open_records=8,
    max_grid_cells=2000,
    max_records=50,
    max_grid_values=16,
    max_new_tokens=512,
    max_input_chars=8000,
    max_name_chars=120,
    max_comment_chars=4000,
    max_upload_bytes=16 * MIB,
    max_request_bytes=2 * MIB,
    header_timeout_s=10.0,
    body_idle_timeout_s=15.0,
    body_timeout_s=120.0,
    max_lora_steps=16,  # about two epochs of a sample user's 8 items; minutes on a 2-core CPU
    queue_share=4,  # a person's generation, comparison, grid and campaign at once; 16 clients to fill the queue
)

# Locally the user is the operator: no token, larger grids and files; text and request caps still hold
# (a run name is shown in every run picker; a stuck connection is still a stuck connection).
LOCAL_LIMITS = VisitorLimits(
    open_grid_cells=100_000,
    open_records=100_000,
    max_grid_cells=100_000,
    max_records=100_000,
    max_grid_values=64,
    max_new_tokens=4096,
    max_input_chars=100_000,
    max_name_chars=200,
    max_comment_chars=20_000,
    max_upload_bytes=50 * MIB,
    max_request_bytes=8 * MIB,
    header_timeout_s=30.0,
    body_idle_timeout_s=60.0,
    body_timeout_s=600.0,
    queue_share=64,  # the user is the operator: the whole queue
)


def limits_for(public: bool) -> VisitorLimits:
    """The defaults for a public or a local app (``Exposure.public``)."""
    return PUBLIC_LIMITS if public else LOCAL_LIMITS
