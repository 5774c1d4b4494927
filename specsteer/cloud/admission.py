"""Who is asking the Cloud, and whether a new session may have room: fair admission between credentials.

Identity
--------
The Cloud counts sessions by the *credential* a request carries, never by its source address (one
machine has as many loopback or IPv6 addresses as it likes). A Cloud with a secret ``S`` accepts:

* ``S`` itself, the shared secret: every holder is the one credential ``"shared"``;
* an *Edge key* ``NAME.MAC`` where ``MAC`` is HMAC-SHA256 of ``NAME`` under ``S`` (:func:`edge_key`,
  ``python -m specsteer edge-key NAME``): the credential ``"edge:NAME"``. The Cloud keeps no list; it
  recomputes the MAC. Whoever holds only an Edge key cannot make another one, so one Edge cannot pose
  as many; the operator, who holds ``S``, hands one key to each Edge (the app, a laptop, a script).

A Cloud without a secret listens on loopback only, and everyone who reaches it is ``"anonymous"``.

Admission
---------
:func:`admit` decides on one Open from the sessions open now (:class:`Holding`): the Cloud's
``max_sessions``, the credential's ``max_sessions_per_client`` and ``max_client_share`` of the
memory budget, and the budget itself. An Open that does not fit takes room from *reclaimable*
sessions, oldest-idle first and only as many as it needs: a session idle for ``reclaim_idle_s``
(or opened ``unstarted_timeout_s`` ago and never used). When the refusal is the credential's own
cap, only its own sessions are taken. When even all reclaimable sessions would not make room,
none is taken and the Open is refused (503) with the seconds after which one could be.

The budget itself (:func:`memory_budget`) is a share of the memory free where the caches live, once the
models are loaded: the host's available memory for models on the CPU, the GPU's free memory (less a
headroom for the passes' activations, :func:`gpu_memory_budget`) for models on a GPU.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

ANONYMOUS = "anonymous"  # every client of a Cloud without a secret
SHARED = "shared"  # every holder of the shared secret
EDGE_PREFIX = "edge:"
EDGE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_KEY_CONTEXT = b"specsteer-edge-key\x00"  # so that the MAC of a name is used for nothing else
# The ``cloud`` command's share of the memory budget for one credential: whoever floods with one
# credential leaves at least half the budget to the others (a library CloudService has no share: 1.0).
CLOUD_CLIENT_SHARE = 0.5
# The share of a GPU's memory kept out of the caches' budget: a pass's activations and logits, and the
# allocator's blocks that are cached but not free, need room beside the sessions' keys and values.
GPU_HEADROOM = 0.1


# --------------------------------------------------------------------------- identity


def edge_key(secret: str, name: str) -> str:
    """The key of the Edge called ``name`` on a Cloud whose secret is ``secret``: ``NAME.MAC``."""
    if not EDGE_NAME.fullmatch(name):
        raise ValueError("an Edge's name is 1 to 64 letters, digits, '-' or '_'")
    if not secret:
        raise ValueError("an Edge key is made from the Cloud's secret, and none is given")
    return f"{name}.{_mac(secret, name)}"


def _mac(secret: str, name: str) -> str:
    return hmac.new(secret.encode(), _KEY_CONTEXT + name.encode(), hashlib.sha256).hexdigest()


def credential(token: str, secret: str | None) -> str | None:
    """The credential a bearer ``token`` proves on a Cloud with ``secret``, or None when it proves none.

    Both comparisons take the same time whatever the token holds (``hmac.compare_digest``)."""
    if not secret:
        return ANONYMOUS
    if hmac.compare_digest(token.encode(), secret.encode()):
        return SHARED
    name, dot, mac = token.rpartition(".")
    if dot and EDGE_NAME.fullmatch(name) and hmac.compare_digest(mac.encode(), _mac(secret, name).encode()):
        return EDGE_PREFIX + name
    return None


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header ("" when it is not one)."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


# --------------------------------------------------------------------------- the budget


def memory_budget(free_bytes: int, share: float = 0.5, reserve_bytes: int = 0) -> int:
    """The sessions' caches' budget: ``share`` of the memory free now past ``reserve_bytes`` (at least 1)."""
    if not 0 < share <= 1:
        raise ValueError("the budget's share must be in (0, 1]")
    return max(1, int(max(0, free_bytes - reserve_bytes) * share))


def gpu_memory_budget(free_bytes: int, total_bytes: int, share: float = 0.5) -> int:
    """The budget on a GPU reporting ``free_bytes`` of ``total_bytes`` free (``torch.cuda.mem_get_info``):
    the share of what is free beyond :data:`GPU_HEADROOM` of the card."""
    return memory_budget(free_bytes, share, int(total_bytes * GPU_HEADROOM))


# --------------------------------------------------------------------------- admission


class AdmissionLimits(Protocol):
    """What admission reads of ``specsteer.cloud.limits.ServiceLimits``."""

    @property
    def max_sessions(self) -> int: ...
    @property
    def max_sessions_per_client(self) -> int: ...
    @property
    def memory_budget_bytes(self) -> int | None: ...
    @property
    def max_client_share(self) -> float: ...
    @property
    def reclaim_idle_s(self) -> float: ...
    @property
    def unstarted_timeout_s(self) -> float: ...


@dataclass(frozen=True)
class Holding:
    """What one session holds, as admission sees it. ``busy``: a request of it is being served now
    (never reclaimed)."""

    id: bytes
    credential: str
    reserved: int
    last_used: float
    started: bool = True
    busy: bool = False


@dataclass(frozen=True)
class Decision:
    """Admit (``refusal`` None) after ending ``victims``, oldest-idle first; or refuse, saying why and
    when to try again."""

    refusal: str | None = None
    victims: tuple[bytes, ...] = ()
    retry_after_s: int | None = None
    # Whether the refusal is the credential's own cap (only its own sessions make room for it).
    own_cap: bool = False


def reclaimable(holding: Holding, limits: AdmissionLimits, now: float) -> bool:
    """Whether ``holding`` may give its room to a new Open: idle long enough, and not being served."""
    if holding.busy:
        return False
    wait = limits.reclaim_idle_s if holding.started else min(limits.reclaim_idle_s, limits.unstarted_timeout_s)
    return now - holding.last_used >= wait


def refusal(candidate: Holding, holdings: Sequence[Holding], limits: AdmissionLimits) -> tuple[str, bool] | None:
    """Why ``candidate`` does not fit beside ``holdings`` (and whether it is its credential's own cap), or None."""
    if len(holdings) >= limits.max_sessions:
        return f"The Cloud is serving its maximum of {limits.max_sessions} generations.", False
    own = [h for h in holdings if h.credential == candidate.credential]
    if len(own) >= limits.max_sessions_per_client:
        return (
            f"This client already holds {limits.max_sessions_per_client} session(s), "
            "the most this Cloud gives one client.",
            True,
        )
    budget = limits.memory_budget_bytes
    if budget is None:
        return None
    if candidate.reserved > budget:
        return _memory_words(candidate.reserved, "more than its whole budget", budget), False
    share = client_bytes(limits)
    if share is not None and share < budget and sum(h.reserved for h in own) + candidate.reserved > share:
        return (
            f"This client's sessions would hold more than its share of the Cloud's memory "
            f"({megabytes(share)} of {megabytes(budget)}).",
            True,
        )
    if sum(h.reserved for h in holdings) + candidate.reserved > budget:
        return _memory_words(candidate.reserved, "more than is left", budget), False
    return None


def client_bytes(limits: AdmissionLimits) -> int | None:
    """The most one credential's sessions may reserve together (None: no budget, no share)."""
    if limits.memory_budget_bytes is None:
        return None
    return int(limits.memory_budget_bytes * limits.max_client_share)


def admit(candidate: Holding, holdings: Sequence[Holding], limits: AdmissionLimits, now: float) -> Decision:
    """Whether ``candidate`` is admitted, and which reclaimable sessions it takes the room of (see the module)."""
    first = refusal(candidate, holdings, limits)
    if first is None:
        return Decision()
    remaining, victims = list(holdings), []
    why: tuple[str, bool] | None = first
    while why is not None:  # each turn ends one more session, so at most len(holdings) turns
        pool = [
            h for h in remaining if reclaimable(h, limits, now) and (not why[1] or h.credential == candidate.credential)
        ]
        if not pool:  # nothing would make room: nobody is ended for nothing
            reason, own_cap = first
            waiting = [h for h in holdings if not own_cap or h.credential == candidate.credential]
            return Decision(reason, (), retry_after(waiting, limits, now), own_cap)
        oldest = min(pool, key=lambda h: h.last_used)
        remaining.remove(oldest)
        victims.append(oldest.id)
        why = refusal(candidate, remaining, limits)
    return Decision(victims=tuple(victims))


def retry_after(holdings: Sequence[Holding], limits: AdmissionLimits, now: float) -> int:
    """Seconds until the first session could give its room (at least 1)."""
    waits = [
        h.last_used + (limits.reclaim_idle_s if h.started else min(limits.reclaim_idle_s, limits.unstarted_timeout_s))
        for h in holdings
    ]
    return max(1, math.ceil(min(waits, default=now + 1.0) - now))


def _memory_words(reserved: int, need: str, budget: int) -> str:
    return f"This generation's caches need {megabytes(reserved)}, {need} of the Cloud's {megabytes(budget)} for all sessions."


def megabytes(count: int) -> str:
    """A size as people read it: MB above a megabyte, kB below."""
    return f"{count / 2**20:,.0f} MB" if count >= 2**20 else f"{count / 2**10:,.1f} kB"
