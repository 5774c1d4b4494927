"""A llama.cpp sequence whose long prompt another runtime read: the keys and values handed over as a state.

Transformers can read a long prompt faster than llama.cpp's 4-bit kernels -- in fp32 on an AVX2 CPU, in bf16
where the CPU computes bf16 fast (AVX512-BF16, AMX) -- while llama.cpp decodes several times faster
(docs/research/MEASUREMENTS.md). The Specialist's private prompt decides when the first token is on screen,
its decoding how soon the answer ends; a hand-off takes both: a transformers model of the *same weights* (the
conversion of the GGUF, in the dtype the calibration measured fastest: specsteer.models.prompt_reading) reads
the prompt, and its keys and values are written into the llama.cpp context with ``llama_state_seq_set_data``
as f16 rows, llama.cpp's own cache type (bf16 values are exact in f16 within f16's range), after which
llama.cpp decodes as if it had read the prompt itself. Rows f16 cannot hold are never written: llama.cpp then
reads that prompt itself (:class:`RowsOutOfRange`).

The state's layout is llama.cpp's own (``llama_context::state_seq_get_data``): a magic number and the
sequence id, the stream count and the cell count, per cell its position, one sequence id and that id,
then ``v_trans`` and the layer count, per layer the keys' type and row size and one f16 row per cell,
then the values the same way (or, transposed, one run of cells per dimension). :func:`read_layout` reads
the header fields from a state llama.cpp wrote for a one-token sequence, so a build whose layout differs
is refused when the reader is attached (:class:`HandoffUnsupported`), never half-written at run time.
Keys are stored after the rotary embedding by both libraries, with the same (NeoX) rotation for the
models this is used with, heads in the same order.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import numpy as np

STATE_MAGIC = 0xAF143CD8  # llama_context's sequence state begins with it, then the sequence id
GGML_TYPE_F16 = 1
HANDOFF_MIN_TOKENS = 256  # shorter prompts are read by llama.cpp itself: too little to gain


class HandoffUnsupported(RuntimeError):
    """This llama.cpp build or model stores its cache in a way the hand-off does not write."""


class RowsOutOfRange(HandoffUnsupported):
    """A handed-over key or value is not finite in f16 (llama.cpp's cache type): this prompt stays with llama.cpp."""


@dataclass(frozen=True)
class StateLayout:
    v_trans: bool  # values stored transposed (llama.cpp without flash attention)
    n_layer: int
    k_row_bytes: int  # one cell's keys of one layer: n_embd_k_gqa f16 values


def read_layout(state: bytes) -> StateLayout:
    """The layout of a one-token sequence state llama.cpp wrote; HandoffUnsupported where it is not the
    f16, single-stream, one-sequence form :func:`sequence_state` writes."""
    try:
        magic, _, streams, cells = struct.unpack_from("<IiII", state, 0)
        if magic != STATE_MAGIC or streams != 1 or cells != 1:
            raise HandoffUnsupported(f"unexpected state header (magic {magic:#x}, {streams} streams, {cells} cells)")
        _, seq_ids, _ = struct.unpack_from("<iIi", state, 16)
        if seq_ids != 1:
            raise HandoffUnsupported("a cell of the state carries more than one sequence id")
        v_trans, n_layer = struct.unpack_from("<II", state, 28)
        k_type, k_row = struct.unpack_from("<iQ", state, 36)
    except struct.error as error:
        raise HandoffUnsupported(f"the state is shorter than its header: {error}") from error
    if k_type != GGML_TYPE_F16:
        raise HandoffUnsupported(f"the keys are stored as ggml type {k_type}, not f16")
    layout = StateLayout(bool(v_trans), n_layer, k_row)
    if len(state) != state_size(layout, 1):
        raise HandoffUnsupported(f"the state holds {len(state)} bytes, {state_size(layout, 1)} expected")
    return layout


def state_size(layout: StateLayout, tokens: int) -> int:
    header = 16 + tokens * 12 + 8
    per_layer = (4 + 8 + tokens * layout.k_row_bytes) + (
        4 + 4 + 4 + tokens * layout.k_row_bytes if layout.v_trans else 4 + 8 + tokens * layout.k_row_bytes
    )
    return header + layout.n_layer * per_layer


def sequence_state(keys: list[np.ndarray], values: list[np.ndarray], layout: StateLayout) -> bytes:
    """Sequence 0's state holding ``keys[layer]`` and ``values[layer]``, each [tokens, kv_heads * head_dim] (any
    float dtype; written as f16). RowsOutOfRange where f16 cannot hold one of them."""
    if len(keys) != layout.n_layer or len(values) != layout.n_layer:
        raise HandoffUnsupported(f"{len(keys)} layers handed over, the model has {layout.n_layer}")
    tokens, width = keys[0].shape
    if width * 2 != layout.k_row_bytes:
        raise HandoffUnsupported(f"a key row of {width} values does not fill llama.cpp's {layout.k_row_bytes} bytes")
    with np.errstate(over="ignore"):  # an overflow becomes inf, refused just below
        keys = [k.astype(np.float16, order="C") for k in keys]
        values = [v.astype(np.float16, order="C") for v in values]
    if not all(np.isfinite(rows).all() for rows in (*keys, *values)):
        raise RowsOutOfRange("a key or value handed over is beyond f16's range, llama.cpp's cache type")
    parts = [struct.pack("<IiII", STATE_MAGIC, 0, 1, tokens)]
    parts += [struct.pack("<iIi", position, 1, 0) for position in range(tokens)]
    parts.append(struct.pack("<II", int(layout.v_trans), layout.n_layer))
    for k in keys:
        parts += [struct.pack("<iQ", GGML_TYPE_F16, layout.k_row_bytes), k.tobytes()]
    for v in values:
        if layout.v_trans:  # each dimension's values across the cells
            parts += [struct.pack("<iII", GGML_TYPE_F16, 2, width), np.ascontiguousarray(v.T).tobytes()]
        else:
            parts += [struct.pack("<iQ", GGML_TYPE_F16, layout.k_row_bytes), v.tobytes()]
    return b"".join(parts)


def as_c_buffer(data: bytes):
    return (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
