"""Which model pairing the UI offers, and loading it lazily with visible progress.

Nothing is loaded when the page is built: the first generation loads the pair (``load_pair``
caches it), so the page opens at once and the user sees what is happening while weights load.

Test-only hook: with ``SPECSTEER_TEST_PAIR=tiny`` in the environment the app offers a "tiny test
pair" (``specsteer.testing.tiny_pair``, random weights, builds in about a second) as its default
pairing. Tests of the UI, the HTTP API and the browser use it; a real deployment never sets it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from specsteer.background import Background
from specsteer.models import LoadedPair, ModelLoadError, default_dtype, load_pair
from specsteer.registry import DEFAULT_PAIRING, PAIRINGS, Pairing, pairing_status
from specsteer.testing import TEST_PAIRING_ID as TINY_PAIRING_ID, shared_tiny_pair

TEST_PAIR_ENV = "SPECSTEER_TEST_PAIR"
TINY_LABEL = "Tiny random pair (tests only)"


class PairingUnavailable(ValueError):
    """The chosen pairing cannot load here; the message says why and what to choose instead."""


def test_pair_enabled() -> bool:
    return os.environ.get(TEST_PAIR_ENV, "").strip().lower() == "tiny"


def default_pairing_id() -> str:
    """The registry's default when it can load here, else the first pairing that can (e.g. a hub
    pairing on a Space without the offline weights), else the default anyway (its note says why)."""
    if test_pair_enabled():
        return TINY_PAIRING_ID
    ordered = [PAIRINGS[DEFAULT_PAIRING], *(p for p in PAIRINGS.values() if p.id != DEFAULT_PAIRING)]
    for pairing in ordered:
        if pairing_status(pairing)[0]:
            return pairing.id
    return DEFAULT_PAIRING


def _short_reason(pairing: Pairing, note: str) -> str:
    """A few words for the dropdown label; the full reason is shown beside it."""
    if pairing.cross_tokenizer:
        return "different tokenizers"
    if "hub" in note:
        return "no hub"
    if "packages" in note:
        return "not installed"
    return note[:40]


def pairing_choices() -> list[tuple[str, str]]:
    """(label, id) for the dropdown; pairings that cannot load here say so in their label."""
    choices = [(TINY_LABEL, TINY_PAIRING_ID)] if test_pair_enabled() else []
    for pairing in PAIRINGS.values():
        ok, note = pairing_status(pairing)
        label = pairing.label if ok else f"{pairing.label} (unavailable: {_short_reason(pairing, note)})"
        choices.append((label, pairing.id))
    return choices


def pairing_note(pairing_id: str | None) -> str:
    """Markdown describing a pairing and whether it can load (registry text only, trusted)."""
    if pairing_id == TINY_PAIRING_ID and test_pair_enabled():
        return "**Tiny random pair** — random weights for automated tests; the output is gibberish."
    pairing = PAIRINGS.get(pairing_id or "")
    if pairing is None:
        return "Choose a pairing."
    ok, note = pairing_status(pairing)
    state = "✓ available" if ok else "✕ unavailable"
    return f"**{pairing.specialist.name} → {pairing.generalist.name}** — {pairing.description}  \n{state}: {note}"


def check_pairing(pairing_id: str | None) -> None:
    """Raise PairingUnavailable with a clear message unless the pairing can load now."""
    if pairing_id == TINY_PAIRING_ID and test_pair_enabled():
        return
    pairing = PAIRINGS.get(pairing_id or "")
    if pairing is None:
        raise PairingUnavailable(f"Unknown pairing {pairing_id!r}. Choose one from the list.")
    ok, note = pairing_status(pairing)
    if not ok:
        raise PairingUnavailable(
            f"The pairing “{pairing.label}” is unavailable here: {note}. "
            f"Choose an available pairing, e.g. “{PAIRINGS[DEFAULT_PAIRING].label}”."
        )


def _load(pairing_id: str, progress) -> LoadedPair:
    if pairing_id == TINY_PAIRING_ID and test_pair_enabled():
        return shared_tiny_pair()
    return load_pair(pairing_id, dtype=default_dtype(), progress=progress)


def load_with_progress(pairing_id: str, quiet_for: float = 0.3) -> Iterator[str | LoadedPair]:
    """Load the pair in a worker thread; yield progress lines while it loads, then the pair.

    A pair that is already loaded comes back at once with no progress lines (``quiet_for`` is how
    long to wait before saying anything). Raises PairingUnavailable or ModelLoadError.
    """
    check_pairing(pairing_id)
    loading: Background[str, LoadedPair] = Background(lambda emit, _cancel: _load(pairing_id, emit),
                                                     name="specsteer-load-pair")
    started = time.monotonic()
    if not loading.wait(quiet_for):
        yield "Loading the models (first use; this takes a while once)…"
        for line in loading.items():
            yield f"Loading the models ({time.monotonic() - started:.0f} s): {line}"
    try:
        pair = loading.result()
    except (ModelLoadError, PairingUnavailable, ValueError, KeyError, OSError) as error:
        raise ModelLoadError(str(error.args[0]) if error.args else str(error)) from error
    yield pair
