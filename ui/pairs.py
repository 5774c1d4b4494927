"""Which model pairings the UI offers, how it labels them, and which the app's service may load.

:func:`pairing_picker` builds the one pairing picker the tabs use (dropdowns, notes, the remembered
choice, its select event). Nothing is loaded when the page is built: the first generation loads the pair (the service reports
its progress; ``load_pair`` caches it), so the page opens at once.

Test-only hook: with ``SPECSTEER_TEST_PAIR=tiny`` in the environment the app offers a "tiny test
pair" (``specsteer.models.tiny.tiny_pair``, random weights, builds in about a second) as its default
pairing, and beside it the tiny cross-tokenizer pair (``tiny-cross-test``: two tokenizers). Tests of
the UI, the HTTP API and the browser use them; a real deployment never sets it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Generic, NamedTuple, TypeVar

import gradio as gr

from specsteer.engine.decode_config import CROSS_TOKENIZER_METHODS
from specsteer.method.catalog import METHOD_INFO
from specsteer.models.registry import PAIRINGS, Pairing
from specsteer.models.tiny import CROSS_PAIRING_ID as TINY_CROSS_PAIRING_ID
from specsteer.models.tiny import TEST_PAIRING_ID as TINY_PAIRING_ID
from specsteer.runtimes.base import RUNTIME_CHOICES
from specsteer.service.pair_catalog import PairCatalog
from specsteer.service.pairings import default_pairing_id, methods_run_by
from ui.wiring import QUIET

TINY_LABEL = "Tiny random pair (tests only)"
TINY_CROSS_LABEL = "Tiny random pair, two tokenizers (tests only)"
RUNTIME_LABELS = {"auto": "auto", "llama.cpp": "llama.cpp (GGUF, CPU)", "transformers": "transformers (PyTorch)"}


def _short_reason(pairing: Pairing, note: str) -> str:
    """A few words for the dropdown label; the full reason is shown beside it."""
    if pairing.cross_tokenizer:
        return "different tokenizers"
    if "hub" in note:
        return "no hub"
    if "packages" in note:
        return "not installed"
    return note[:40]


def pairing_choices(pairs: PairCatalog) -> list[tuple[str, str]]:
    """(label, id) for the dropdown; pairings that cannot load here say so in their label."""
    tiny = ((TINY_LABEL, TINY_PAIRING_ID), (TINY_CROSS_LABEL, TINY_CROSS_PAIRING_ID))
    choices = [(label, pairing_id) for label, pairing_id in tiny if pairing_id in pairs.test_pairs]
    for pairing in PAIRINGS.values():
        ok, note = pairs.status(pairing.id)
        label = pairing.label if ok else f"{pairing.label} (unavailable: {_short_reason(pairing, note)})"
        choices.append((label, pairing.id))
    return choices


def pairing_note(pairs: PairCatalog, pairing_id: str | None) -> str:
    """Markdown describing a pairing and whether it can load (registry text only, trusted)."""
    if pairing_id == TINY_PAIRING_ID and pairing_id in pairs.test_pairs:
        return "**Tiny random pair**: random weights for automated tests; the output is gibberish."
    if pairing_id == TINY_CROSS_PAIRING_ID and pairing_id in pairs.test_pairs:
        return (
            "**Tiny random pair, two tokenizers**: random weights for automated tests (a byte Specialist, a "
            f"merged-pairs Generalist); the output is gibberish.  \n{cross_methods_note()}"
        )
    pairing = PAIRINGS.get(pairing_id or "")
    if pairing is None:
        return "Choose a pairing."
    ok, note = pairs.status(pairing.id)
    state = "✓ available" if ok else "✕ unavailable"
    methods = f"  \n{cross_methods_note()}" if pairing.separate_tokenizers else ""
    return (
        f"**{pairing.specialist.name} → {pairing.generalist.name}**: {pairing.description}  \n{state}: {note}{methods}"
    )


def offer_methods(offered: Sequence[str], label: Callable[[str], str], pairing_id: str | None, chosen: object):
    """A method picker's update after the pairing changed: only the ``offered`` methods the pairing runs,
    the choice kept where it still runs (a dropdown's one method falls back to the first that does).
    The engine refuses the others anyway; this keeps the page from offering them."""
    runs = methods_run_by(pairing_id)
    kept = [method for method in offered if method in runs]
    choices = [(label(method), method) for method in kept]
    if isinstance(chosen, (list, tuple)):  # a checkbox group
        return gr.update(choices=choices, value=[method for method in chosen if method in kept])
    value = chosen if chosen in kept else (kept[0] if kept else None)
    return gr.update(choices=choices, value=value, info=METHOD_INFO[value].description if value else "")


def cross_methods_note() -> str:
    """What a pairing of two tokenizers runs (engine.CROSS_TOKENIZER_METHODS), and why not the rest."""
    runs = [METHOD_INFO[method].label for method in CROSS_TOKENIZER_METHODS]
    refused = [info.label for method, info in METHOD_INFO.items() if method not in CROSS_TOKENIZER_METHODS]
    return (
        f"Two tokenizers: runs {', '.join(runs[:-1])} and {runs[-1]} (its drafts tested per segment of text "
        f"that both tokenizers cut alike). {', '.join(refused)} and SpecSteer's exact-target variant need one "
        "shared vocabulary and are refused."
    )


_V = TypeVar("_V")  # a view's fields: its components when an event is wired, their new values when it fires


class PairingChoice(NamedTuple, Generic[_V]):
    """What a pairing dropdown's choice updates."""

    dropdown: _V
    note: _V
    runtime_note: _V
    remembered: _V  # the pairing a later unavailable choice goes back to


def pairing_selected(pairs: PairCatalog, pairing_id: str, previous: str) -> PairingChoice[object]:
    """A pairing dropdown's choice -> its dropdown, notes and remembered pairing.

    An unavailable pairing is refused with one warning, and the dropdown goes back to the pairing
    chosen before, so what it shows is always what a run would use.
    """
    try:
        pairs.check(pairing_id)
    except ValueError as error:
        gr.Warning(html.escape(str(error)))
        return PairingChoice(previous, pairing_note(pairs, previous), pairs.runtime_note(previous), previous)
    return PairingChoice(gr.skip(), pairing_note(pairs, pairing_id), pairs.runtime_note(pairing_id), pairing_id)


def runtime_choices() -> list[tuple[str, str]]:
    return [(RUNTIME_LABELS[runtime], runtime) for runtime in RUNTIME_CHOICES]


@dataclass(frozen=True)
class PairingPicker:
    """The components of a tab's pairing picker whose values a run reads."""

    pairing: gr.Dropdown
    runtime: gr.Dropdown


def pairing_picker(pairs: PairCatalog, label: str, elem_prefix: str = "", runtime: str = "auto") -> PairingPicker:
    """Builds, where it is called, the pairing and runtime dropdowns side by side, the pairing's note
    and the runtime note under them, and the remembered choice (where an unavailable choice sends the
    dropdown back); wires the dropdown's select event (:func:`pairing_selected`).

    Element ids: ``{elem_prefix}pairing``, ``{elem_prefix}runtime``, ``{elem_prefix}runtime-note``.
    """
    default = default_pairing_id(pairs)
    with gr.Row(equal_height=False):
        pairing = gr.Dropdown(
            choices=pairing_choices(pairs), value=default, label=label, scale=2, elem_id=f"{elem_prefix}pairing"
        )
        runtime_dropdown = gr.Dropdown(
            choices=runtime_choices(), value=runtime, label="Runtime", scale=1, elem_id=f"{elem_prefix}runtime"
        )
    remembered = gr.State(default)
    note = gr.Markdown(pairing_note(pairs, default), elem_classes="ss-note")
    runtime_note = gr.Markdown(
        pairs.runtime_note(default), elem_classes="ss-note", elem_id=f"{elem_prefix}runtime-note"
    )
    # .select, not .input: a dropdown reports one choice as two input events, which warned twice.
    pairing.select(
        partial(pairing_selected, pairs),
        [pairing, remembered],
        list(PairingChoice(pairing, note, runtime_note, remembered)),
        **QUIET,
    )
    return PairingPicker(pairing, runtime_dropdown)
