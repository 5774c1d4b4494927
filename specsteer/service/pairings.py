"""Which model pairings the app's service may load, GUI-free: the registry's, and in test mode the tiny random
pairs (``SPECSTEER_TEST_PAIR=tiny``: a one-second pair for the UI, API and browser tests; a deployment never
sets it); the default the pickers start at; the methods each pairing runs."""

from __future__ import annotations

import os
from functools import partial

from specsteer.engine.decode_config import CROSS_TOKENIZER_METHODS
from specsteer.method.catalog import METHODS
from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS
from specsteer.models.tiny import CROSS_PAIRING_ID as TINY_CROSS_PAIRING_ID
from specsteer.models.tiny import TEST_PAIRING_ID as TINY_PAIRING_ID
from specsteer.models.tiny import shared_tiny_pair
from specsteer.runtimes.placement import Placement
from specsteer.service.pair_catalog import PairCatalog

TEST_PAIR_ENV = "SPECSTEER_TEST_PAIR"


def test_pair_enabled() -> bool:
    return os.environ.get(TEST_PAIR_ENV, "").strip().lower() == "tiny"


def catalog(placement: Placement | None = None) -> PairCatalog:
    """The pairings this app may load: the registry's, and the tiny pairs in test mode; ``placement``: where
    the transformers runtime puts the registry's models (default: the CPU)."""
    placement = placement or Placement()
    if not test_pair_enabled():
        return PairCatalog(placement=placement)
    return PairCatalog(
        {TINY_PAIRING_ID: shared_tiny_pair, TINY_CROSS_PAIRING_ID: partial(shared_tiny_pair, TINY_CROSS_PAIRING_ID)},
        placement,
    )


def default_pairing_id(pairs: PairCatalog) -> str:
    """The registry's default when it can load here, else the first pairing that can (e.g. a hub
    pairing on a Space without the offline weights), else the default anyway (its note says why)."""
    if TINY_PAIRING_ID in pairs.test_pairs:
        return TINY_PAIRING_ID
    ordered = [DEFAULT_PAIRING, *(pairing_id for pairing_id in PAIRINGS if pairing_id != DEFAULT_PAIRING)]
    return next((pairing_id for pairing_id in ordered if pairs.status(pairing_id)[0]), DEFAULT_PAIRING)


def methods_run_by(pairing_id: str | None) -> tuple[str, ...]:
    """The methods a pairing runs: every one, or on a pairing of two tokenizers those the engine runs
    across tokenizers (engine.CROSS_TOKENIZER_METHODS)."""
    pairing = PAIRINGS.get(pairing_id or "")
    two_tokenizers = pairing_id == TINY_CROSS_PAIRING_ID or (pairing is not None and pairing.separate_tokenizers)
    return tuple(method for method in METHODS if not two_tokenizers or method in CROSS_TOKENIZER_METHODS)
