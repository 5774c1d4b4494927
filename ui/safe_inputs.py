"""Inputs a caller sends that Gradio cannot read: a message naming the input, never an unexplained error.

Every named endpoint takes its inputs as JSON, and a caller sends what it likes. Before a handler
runs, Gradio reads each value through its component (``Component.preprocess``), and several do not
expect a wrong type: a Slider given a string compares it with its minimum (TypeError), a Number with
``precision=0`` given NaN rounds it to an int (ValueError), a CheckboxGroup given a number iterates it.
Gradio reports such an error to the caller as a bare "Error" (its message is hidden, as for any
unexpected exception), and a value it refuses itself (a choice not offered) comes back whole in the
message, 1 MB and markup included.

:func:`guard_inputs` wraps what reads the inputs, once, after the page is built: each component's
``preprocess`` (so a refusal names the input by its label) and the app's ``preprocess_data`` (what
happens before: a file input given a string or a server path). Each failure becomes a ``gr.Error``
with a short, escaped message.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from typing import Any

import gradio as gr
from gradio.components import Component

SHOWN_CHARS = 120  # the most of a caller's value (or Gradio's message quoting it) that comes back


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters and HTML-escaped (Gradio renders an error's message as HTML)."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return html.escape(cut)


def _name(component: Component) -> str:
    label = getattr(component, "label", None)
    return str(label) if label else type(component).__name__


def _guarded_preprocess(component: Component, preprocess: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(preprocess)
    def read(payload: Any) -> Any:
        try:
            return preprocess(payload)
        except gr.Error as error:
            raise gr.Error(f"{shortened(_name(component))}: {shortened(str(error.message))}") from None
        except Exception:
            raise gr.Error(
                f"{shortened(_name(component))}: cannot take {shortened(repr(payload), 60)} "
                f"(a value of type {type(payload).__name__})."
            ) from None

    return read


def guard_inputs(blocks: gr.Blocks) -> gr.Blocks:
    """Wrap the input reading of ``blocks`` (see the module doc); idempotent. Returns ``blocks``."""
    if getattr(blocks, "_inputs_guarded", False):
        return blocks
    for block in blocks.blocks.values():
        if isinstance(block, Component):
            block.preprocess = _guarded_preprocess(block, block.preprocess)  # type: ignore[method-assign, assignment]
    preprocess_data = blocks.preprocess_data

    @functools.wraps(preprocess_data)
    async def read_inputs(*args: Any, **kwargs: Any) -> Any:
        try:
            return await preprocess_data(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as error:
            raise gr.Error(f"An input of this request cannot be read: {shortened(str(error))}") from None

    blocks.preprocess_data = read_inputs  # type: ignore[method-assign]
    blocks._inputs_guarded = True  # type: ignore[attr-defined]
    return blocks
