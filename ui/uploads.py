"""Which file paths a handler may read: only files Gradio received as uploads, never a path a caller names.

An API caller can send ``{"path": "/any/server/file", "meta": {"_type": "gradio.FileData"}}`` as a
File input; Gradio then copies that server file into its cache and hands the handler the copy's
path, which looks like an upload's. The files its upload route (``POST /gradio_api/upload``) wrote
are listed in the app's ``Blocks.upload_file_set``; a handler reads a path only if it is one of
those, inside Gradio's upload folder, with symbolic links resolved. An upload lives in a folder
named after its content's SHA-256, so naming one means already holding its content: a caller can
reach another caller's upload only by knowing that hash.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

import gradio as gr
from gradio.context import Context
from gradio.utils import get_upload_folder

UploadCheck = Callable[[str], bool]  # whether a handler may read the file at this path

NOT_AN_UPLOAD = (
    "this file was not uploaded to the app: only a file sent through the upload box can be read, "
    "never a path on the server"
)


def received_upload(path: str, uploads: Collection[str], folder: str) -> bool:
    """Whether ``path`` is one of ``uploads`` (paths Gradio's upload route wrote) inside ``folder``."""
    real = os.path.realpath(path)
    root = os.path.realpath(folder)
    if os.path.commonpath([real, root]) != root:
        return False
    return any(os.path.realpath(upload) == real for upload in list(uploads))


def gradio_uploads() -> UploadCheck:
    """The check for the Blocks being built now (call it inside ``with gr.Blocks()``)."""
    blocks: gr.Blocks | None = Context.root_block
    if blocks is None:
        raise RuntimeError("gradio_uploads() is called while a gr.Blocks is being built")
    return lambda path: received_upload(path, blocks.upload_file_set, get_upload_folder())


def any_path(_path: str) -> bool:
    """No check: for handlers called in process by code that chose the file itself (tests, scripts)."""
    return True
