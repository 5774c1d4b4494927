"""Where SpecSteer keeps what it prepares once per machine (converted models, proofs, calibrations)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SPECSTEER_CACHE"


def cache_root() -> Path:
    """Root of SpecSteer's caches: $SPECSTEER_CACHE, else ~/.cache/specsteer."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "specsteer"
