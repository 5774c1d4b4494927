"""What one Cloud accepts (:class:`ServiceLimits`), and the memory budget its sessions' caches get by default.

The limits bound every request a caller can send (prompt and draft lengths, token budgets, end ids, and
from them the largest frame) and every session it can hold (how many, for how long, how much of the memory
budget); ``specsteer.cloud.service.CloudService`` enforces them. :func:`default_memory_budget` is the
``cloud`` command's budget when none is given: a share of the memory free where the Generalist's caches
live (``specsteer.cloud.admission`` does the arithmetic).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

from specsteer.cloud import admission
from specsteer.protocol.rules import Rule
from specsteer.protocol.wire import MAX_DRAFT_LEN, MAX_NEW_TOKENS, SESSION_BYTES, CrossOpen, Open, encode


@dataclass(frozen=True)
class ServiceLimits:
    """What one Cloud accepts. ``max_frame_bytes`` follows from the others (the largest legal Open)."""

    max_sessions: int = 32
    max_prompt_tokens: int = 8192
    max_draft_len: int = MAX_DRAFT_LEN
    max_new_tokens: int = MAX_NEW_TOKENS
    max_stop_ids: int = 64
    # None: a session never expires for idleness (a Cloud in process: its only Edge may be paused, a laptop asleep).
    idle_timeout_s: float | None = 300.0
    # Sessions one credential may hold at once, whatever its source addresses (specsteer.cloud.admission).
    max_sessions_per_client: int = 8
    # Sessions' caches together, in bytes; None: no budget (a Cloud in process serves one generation).
    memory_budget_bytes: int | None = None
    # A session that has not drafted (nor read a token) this long after its Open makes room for a new one.
    unstarted_timeout_s: float = 30.0
    # A session idle this long gives its room to an Open that needs it, oldest-idle first.
    reclaim_idle_s: float = 30.0
    # A session's whole life, from its Open; None: unbounded (a Cloud in process).
    max_session_life_s: float | None = 3600.0
    # The share of the memory budget one credential's sessions may reserve together.
    max_client_share: float = 1.0

    def __post_init__(self) -> None:
        for name in (
            "max_sessions",
            "max_prompt_tokens",
            "max_draft_len",
            "max_new_tokens",
            "max_stop_ids",
            "max_sessions_per_client",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_draft_len > MAX_DRAFT_LEN:
            raise ValueError(f"max_draft_len is at most {MAX_DRAFT_LEN}")
        for name in ("unstarted_timeout_s", "reclaim_idle_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("idle_timeout_s", "max_session_life_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (or None: never)")
        if not 0 < self.max_client_share <= 1:
            raise ValueError("max_client_share must be in (0, 1]")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes < 1:
            raise ValueError("memory_budget_bytes must be at least 1 (or None: no budget)")

    @property
    def max_frame_bytes(self) -> int:
        # The largest legal Open names an acceptance rule (the extension's bytes) as well as its longest prompt.
        empty_open = Open(bytes(SESSION_BYTES), Rule.RATIO, (), 1, cda_lambda=0.0)
        return len(encode(empty_open)) + 4 * (self.max_prompt_tokens + self.max_stop_ids)

    @property
    def max_cross_frame_bytes(self) -> int:
        """A cross-tokenizer pair's largest legal Open: a CrossOpen carries the plain prompt twice."""
        empty_open = CrossOpen(bytes(SESSION_BYTES), Rule.RATIO, (), 1, cda_lambda=0.0)
        return len(encode(empty_open)) + 4 * (2 * self.max_prompt_tokens + self.max_stop_ids)

    def to_json(self) -> dict:
        return {**asdict(self), "max_frame_bytes": self.max_frame_bytes}


def default_memory_budget(share: float = 0.5, device: str = "cpu") -> int:
    """``share`` of the memory available now where the caches live (call it once the models are loaded):
    the ``cloud`` command's budget for the sessions' caches when none is given. ``device``: the Generalist's
    (``ModelRuntime.device``); on a GPU the budget is the card's free memory, not the host's."""
    if device.startswith("cuda"):
        free, total = torch.cuda.mem_get_info(torch.device(device))
        return admission.gpu_memory_budget(free, total, share)
    return admission.memory_budget(available_memory_bytes(), share)


def available_memory_bytes() -> int:
    """MemAvailable of /proc/meminfo (what can be allocated without swapping), else the free pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
