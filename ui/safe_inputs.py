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
with a short, escaped message. A file input that names a file the upload route did not write is
refused with the path as the caller wrote it (Gradio's own message names the path it resolved on the
server).

A refusal is the caller's doing, not the server's: it is logged as one WARNING line naming the endpoint
and the reason, without a traceback (Gradio prints one for every ``gr.Error`` unless told not to). A
failure that is not a refusal (not a ``gr.Error``, ``ValueError`` or ``TypeError``) keeps its traceback.
"""

from __future__ import annotations

import functools
import html
import logging
from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr
from gradio.components import Component
from gradio.exceptions import InvalidPathError
from gradio.utils import get_upload_folder, is_in_or_equal

from ui.uploads import NOT_AN_UPLOAD

log = logging.getLogger(__name__)

SHOWN_CHARS = 120  # the most of a caller's value (or Gradio's message quoting it) that comes back


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters and HTML-escaped (Gradio renders an error's message as HTML)."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return html.escape(cut)


def _name(component: Component) -> str:
    label = getattr(component, "label", None)
    return str(label) if label else type(component).__name__


def one_line(text: str) -> str:
    """``text`` for a log line: a caller's line breaks and control characters written as escapes, so a value
    it sent can never start a log line of its own."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def refusal(message: str) -> gr.Error:
    """The error that refuses a caller's input: shown to the caller, never printed with a traceback."""
    return gr.Error(message, print_exception=False)


def _guarded_preprocess(component: Component, preprocess: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(preprocess)
    def read(payload: Any) -> Any:
        try:
            return preprocess(payload)
        except gr.Error as error:
            raise refusal(f"{shortened(_name(component))}: {shortened(str(error.message))}") from None
        except Exception:
            raise refusal(
                f"{shortened(_name(component))}: cannot take {shortened(repr(payload), 60)} "
                f"(a value of type {type(payload).__name__})."
            ) from None

    return read


def _named_files(value: Any) -> Iterator[str]:
    """The file paths a caller's input value names (Gradio's FileData: a dict with a "path")."""
    if isinstance(value, dict):
        if isinstance(value.get("path"), str):
            yield value["path"]
        for item in value.values():
            yield from _named_files(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _named_files(item)


def not_uploaded(inputs: Any) -> str:
    """The refusal of a file input that names a file the upload route did not write, naming it as sent."""
    outside = [path for path in _named_files(inputs) if not is_in_or_equal(path, get_upload_folder())]
    if not outside:
        return f"A file of this request: {NOT_AN_UPLOAD}."
    return f"{shortened(outside[0])}: {NOT_AN_UPLOAD}."


def _endpoint(args: tuple, kwargs: dict) -> str:
    block_fn = kwargs.get("block_fn", args[0] if args else None)
    return str(getattr(block_fn, "api_name", None) or getattr(block_fn, "name", None) or "an event")


def _inputs(args: tuple, kwargs: dict) -> Any:
    return kwargs.get("inputs", args[1] if len(args) > 1 else None)


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
        except gr.Error as error:
            refused = refusal(error.message)
        except InvalidPathError:
            refused = refusal(not_uploaded(_inputs(args, kwargs)))
        except (ValueError, TypeError) as error:
            refused = refusal(f"An input of this request cannot be read: {shortened(str(error))}")
        except Exception as error:  # not the caller's doing: a bug, whose traceback the log keeps
            log.exception("reading the inputs of /%s failed", _endpoint(args, kwargs))
            raise refusal(f"An input of this request cannot be read: {shortened(str(error))}") from None
        log.warning("refused an input of /%s: %s", _endpoint(args, kwargs), one_line(html.unescape(refused.message)))
        raise refused from None

    blocks.preprocess_data = read_inputs  # type: ignore[method-assign]
    blocks._inputs_guarded = True  # type: ignore[attr-defined]
    return blocks
