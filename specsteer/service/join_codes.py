"""Join codes of a campaign's named annotators: how they are issued, stored, checked, and how often one
client may guess.

* **Issued**: :data:`CODE_BYTES` random bytes (128 bits, ``secrets.token_urlsafe``: 22 characters), shown
  once to the operator; codes issued before were 48 bits (``token_urlsafe(6)``) and keep working.
* **Stored** as a salted hash, never the code: ``s1$<salt>$<digest>`` with a random 12-byte salt per
  code and SHA-256 of salt and code (base64url, 63 characters: the column holds 64). A salted hash
  rather than an HMAC under a server secret: it needs no secret to create, keep and share between the
  app and the command line (``specsteer campaign create`` may run elsewhere, over the same database),
  and a 128-bit code is beyond guessing whatever the hash, so a slow hash would only cost the server
  CPU on every attempt. Codes stored by earlier versions as a bare SHA-256 (64 hex digits) are checked
  that way and re-stored salted on their first successful use (:attr:`CodeCheck.rehash`).
* **Attempts** (:class:`JoinAttempts`): a client (its address) may fail :data:`FAILURES_PER_CAMPAIGN`
  times per campaign and :data:`FAILURES_PER_CLIENT` times over all campaigns within
  :data:`WINDOW_S`; beyond either it is refused, a right code included, until the window has passed.
  Only failures count (an annotator who reloads the page and joins again costs nothing). There is no
  limit over all clients of a campaign: one stranger could then lock every annotator out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

CODE_BYTES = 16  # 128 bits; at least 96 (the issue of 48-bit codes is what this replaced)
SALT_BYTES = 12
SCHEME = "s1"
_LEGACY = re.compile(r"^[0-9a-f]{64}$")  # a bare SHA-256 of the code, as stored before salts

WINDOW_S = 15 * 60.0
FAILURES_PER_CAMPAIGN = 10  # per client and campaign in WINDOW_S: typos, not guesses
FAILURES_PER_CLIENT = 30  # per client over all campaigns in WINDOW_S: a few campaigns' worth of typos
MAX_TRACKED = 10_000  # (client, campaign) and client entries kept; the oldest are forgotten beyond it


def new_code() -> str:
    """A fresh join code (128 bits, URL-safe text)."""
    return secrets.token_urlsafe(CODE_BYTES)


def issue_codes(names: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """A fresh code for each name: (name -> code, shown once; name -> its stored form, kept)."""
    codes = {name: new_code() for name in names}
    return codes, {name: stored_form(code) for name, code in codes.items()}


def stored_form(code: str) -> str:
    """What the database keeps of ``code``: a salted hash (see the module's text)."""
    salt = secrets.token_bytes(SALT_BYTES)
    return f"{SCHEME}${_b64(salt)}${_b64(_digest(salt, code))}"


@dataclass(frozen=True)
class CodeCheck:
    """A code checked against its stored form; ``rehash``: the stored form to keep instead (a code stored
    the old way, unsalted, that just matched), or None."""

    matches: bool
    rehash: str | None = None


def check_code(code: object, stored: str) -> CodeCheck:
    """Whether ``code`` (as a visitor typed it: surrounding spaces dropped) is the one ``stored`` holds."""
    if not isinstance(code, str):
        return CodeCheck(False)
    typed = code.strip()
    if _LEGACY.match(stored):
        matches = hmac.compare_digest(hashlib.sha256(typed.encode("utf-8")).hexdigest(), stored)
        return CodeCheck(matches, stored_form(typed) if matches else None)
    scheme, _, rest = stored.partition("$")
    salt_text, _, digest_text = rest.partition("$")
    if scheme != SCHEME or not salt_text or not digest_text:
        return CodeCheck(False)  # not a form this version writes: no code opens it
    return CodeCheck(hmac.compare_digest(_b64(_digest(_unb64(salt_text), typed)), digest_text))


def _digest(salt: bytes, code: str) -> bytes:
    return hashlib.sha256(salt + code.encode("utf-8")).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class JoinAttempts:
    """Failed joins per (client, campaign) and per client, in fixed windows of :data:`WINDOW_S`, in memory
    (a restart forgets them; several app processes count apart). Thread-safe."""

    def __init__(
        self,
        per_campaign: int = FAILURES_PER_CAMPAIGN,
        per_client: int = FAILURES_PER_CLIENT,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_campaign, self.per_client, self.window_s, self.clock = per_campaign, per_client, window_s, clock
        self._lock = threading.Lock()
        self._failures: OrderedDict[tuple[str, int | None], tuple[float, int]] = OrderedDict()

    def wait_s(self, client: str, campaign_id: int) -> float | None:
        """Seconds until this client may try this campaign again, or None when it may now."""
        now = self.clock()
        waits = []
        with self._lock:
            for key, cap in (((client, campaign_id), self.per_campaign), ((client, None), self.per_client)):
                started, count = self._current(key, now)
                if count >= cap:
                    waits.append(started + self.window_s - now)
        return max(waits) if waits else None

    def failed(self, client: str, campaign_id: int) -> None:
        """Count one failed join of this client at this campaign."""
        now = self.clock()
        with self._lock:
            for key in ((client, campaign_id), (client, None)):
                started, count = self._current(key, now)
                self._failures[key] = (started, count + 1)
                self._failures.move_to_end(key)
            while len(self._failures) > MAX_TRACKED:
                self._failures.popitem(last=False)

    def _current(self, key: tuple[str, int | None], now: float) -> tuple[float, int]:
        started, count = self._failures.get(key, (now, 0))
        return (now, 0) if now - started >= self.window_s else (started, count)
