"""The llama.cpp runtime: a GGUF file read directly, through llama-cpp-python's C-API bindings.

Only the low-level, stable surface of the bindings is used (``llama_model_load_from_file``,
``llama_init_from_model``, ``llama_batch_init``, ``llama_decode``, ``llama_get_logits_ith``,
``llama_memory_seq_rm``): the high-level ``Llama`` class keeps per-position logits and cache
removal behind private attributes that changed within 0.3.x.

One :class:`LlamaCppModel` holds the weights once (memory-mapped); every :class:`LlamaCppSequence`
is a llama.cpp context of its own (its own KV cache) over those weights. So the Edge's Specialist
and the Cloud's generic Specialist copy share one copy of the weights when they run in one process.

A pass asks llama.cpp for logits only at the positions the caller needs (``llama_batch.logits``),
and a rollback removes KV entries (``llama_memory_seq_rm``) instead of reading the prefix again.
llama.cpp's results depend slightly on how tokens are batched (a multi-token pass and single
steps differ by up to a few tenths of a logit), so llama.cpp is held to agreement with a fresh
evaluation within a tolerance, not to equality; exactness lives on fp32 transformers models.

Whether the installed build may run here, and its bindings, are ``llamacpp_build``'s.
"""

from __future__ import annotations

import ctypes
import re
import sys
import threading
from pathlib import Path

import numpy as np

from specsteer.runtimes.base import ModelRuntime, Sequence, check_rows
from specsteer.runtimes.hardware import cpu_threads
from specsteer.runtimes.llamacpp_build import bindings, configuration
from specsteer.runtimes.prompt_handoff import (
    HANDOFF_MIN_TOKENS,
    HandoffUnsupported,
    RowsOutOfRange,
    StateLayout,
    as_c_buffer,
    read_layout,
    sequence_state,
)

BATCH_TOKENS = 512  # tokens per llama_decode call; a longer prompt is read in chunks
# Logits rows one llama_decode call may return. Each context keeps an output buffer of this many rows
# of the vocabulary (0.6 MB a row for Qwen): llama.cpp's default, a whole batch, would cost 300 MB per
# context. A verification asks for at most MAX_DRAFT_LEN + 1 rows; more are read in several calls.
OUTPUT_ROWS = 32
CONTEXT_STEP = 4096  # a sequence's capacity is rounded up to these steps, so most fit any later prompt
# A context starts this large (or at its capacity, if smaller) and grows, by doubling, to hold what is
# read: a generation that stops early never allocates the keys and values of its whole budget.
FIRST_CONTEXT = 512
# What a context's compute buffer holds besides its attention scores (which grow with the context): the
# activations of one batch. Measured on the default pair (README, "Cloud memory"): a 4096-token context of
# the 1.5B model came to its keys and values plus about 100 MB once it read full 512-token batches, which
# the attention scores (512 x 4096 x 12 heads x 4 bytes) account for; this covers the rest.
CONTEXT_OVERHEAD_BYTES = 16 * 2**20
_SEQ = 0  # every context holds one sequence

_backend_lock = threading.Lock()
_backend_ready = False


# Buffer types named by llama.cpp's load log ("CPU_REPACK model buffer size = …"), appended while a
# model loads (loads are serialised by _load_lock): which kernels will read the weights.
_BUFFER_LINE = re.compile(r"(\S+) model buffer size")
_load_lock = threading.Lock()
_seen_buffers: list[str] = []
_log_callbacks: list[object] = []  # the C side keeps only a pointer: the Python objects are kept alive here


def _silence_log(ll) -> None:
    """llama.cpp reports every tensor it loads on stderr; keep only errors, and note buffer types."""
    level_error = 4  # enum ggml_log_level in ggml.h: NONE, DEBUG, INFO, WARN, ERROR, CONT

    @ll.llama_log_callback
    def quiet(level, text, _user_data):
        message = text.decode("utf-8", "replace")
        if level == level_error:
            sys.stderr.write(message)
        elif (found := _BUFFER_LINE.search(message)) and found.group(1) not in _seen_buffers:
            _seen_buffers.append(found.group(1))

    _log_callbacks[:] = [quiet]
    ll.llama_log_set(quiet, ctypes.c_void_p(0))


def _ensure_backend(ll) -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            _silence_log(ll)
            ll.llama_backend_init()
            _backend_ready = True


class LlamaCppModel(ModelRuntime):
    """A GGUF model loaded once; sequences are contexts over its weights."""

    runtime = "llama.cpp"

    def __init__(
        self, path: str | Path, name: str = "", threads: int | None = None, extra_buffers: bool | None = None
    ) -> None:
        """``extra_buffers``: llama.cpp's ``use_extra_bufts``; None takes the configuration proven on this
        machine (:func:`configuration`), which is what everything but the proof itself should do."""
        ll = bindings()
        _ensure_backend(ll)
        self._ll = ll
        self.path = Path(path)
        self.threads = threads or cpu_threads()
        params = ll.llama_model_default_params()
        params.n_gpu_layers = 0  # this build is the CPU one
        if extra_buffers is None:
            config = configuration((self.path,))
            extra_buffers, self.configuration = config.extra_buffers, config.name
        else:
            self.configuration = "repack" if extra_buffers else "plain"
        params.use_extra_bufts = extra_buffers
        # LLAMA_LOAD_MODE_NONE: read the file instead of mapping it. The CPU backend repacks the
        # 4-bit weights into its own interleaved layout; with a mapping, the mapped pages it read
        # stay resident beside that copy (measured: 2.4 GB for the default pair against 1.8 GB).
        params.load_mode = 0
        with _load_lock:
            _seen_buffers.clear()
            model = ll.llama_model_load_from_file(str(self.path).encode(), params)
            self.buffer_types = tuple(_seen_buffers)
        if not model:
            raise ValueError(f"llama.cpp could not load the GGUF file {self.path}")
        self._model = model
        vocab = ll.llama_model_get_vocab(model)
        self._rows = int(ll.llama_vocab_n_tokens(vocab))
        self._end_ids = frozenset(int(i) for i in (ll.llama_vocab_eos(vocab), ll.llama_vocab_eot(vocab)) if int(i) >= 0)
        self._train_context = int(ll.llama_model_n_ctx_train(model))
        buffer = ctypes.create_string_buffer(256)
        ll.llama_model_desc(model, buffer, ctypes.sizeof(buffer))
        self.description = buffer.value.decode("utf-8", "replace")  # e.g. "qwen2 1.5B Q4_K - Medium"
        self.size_bytes = int(ll.llama_model_size(model))
        # f16 keys and values of every layer: what one cached token costs a context.
        head_dim = int(ll.llama_model_n_embd(model)) // max(1, int(ll.llama_model_n_head(model)))
        self.kv_bytes_per_token = (
            2 * 2 * int(ll.llama_model_n_layer(model)) * head_dim * int(ll.llama_model_n_head_kv(model))
        )
        self._heads = int(ll.llama_model_n_head(model))
        # A transformers model of the same weights that reads long prompts for this model's sequences
        # (attach_prompt_reader, specsteer.runtimes.prompt_handoff); None: llama.cpp reads them itself.
        self.prompt_reader: ModelRuntime | None = None
        self._layout: StateLayout | None = None
        super().__init__(name or self.path.stem)

    def attach_prompt_reader(self, reader: ModelRuntime) -> None:
        """Have ``reader`` (a TransformersModel of the same weights) read every prompt of at least
        HANDOFF_MIN_TOKENS that starts a sequence, handing its keys and values to llama.cpp. Refused with
        HandoffUnsupported where this build's state layout is not the one written here."""
        if reader.output_rows != self.output_rows:
            raise HandoffUnsupported(
                f"{reader.name} has {reader.output_rows} logits rows, {self.name} {self.output_rows}"
            )
        probe = LlamaCppSequence(self, self._context_size(16))
        try:
            probe.extend([0], 1)
            self._layout = read_layout(probe.state())
        finally:
            probe.close()
        self.prompt_reader = reader

    @property
    def output_rows(self) -> int:
        return self._rows

    def metadata(self) -> dict[str, str]:
        """The GGUF file's key-value metadata as llama.cpp read it (arrays, such as the vocabulary, are
        summarised by llama.cpp, not listed)."""
        ll, found = self._ll, {}
        key, value = ctypes.create_string_buffer(256), ctypes.create_string_buffer(1024)
        for index in range(int(ll.llama_model_meta_count(self._model))):
            if ll.llama_model_meta_key_by_index(self._model, index, key, ctypes.sizeof(key)) < 0:
                continue
            if ll.llama_model_meta_val_str_by_index(self._model, index, value, ctypes.sizeof(value)) < 0:
                continue
            found[key.value.decode("utf-8", "replace")] = value.value.decode("utf-8", "replace")
        return found

    def token_texts(self) -> list[str]:
        """Each id's token as the GGUF's vocabulary spells it (byte-level BPE's "Ġthe", a special token's
        "<|im_end|>"): what a split plan compares with the transformers tokenizer's ids."""
        ll = self._ll
        vocab = ll.llama_model_get_vocab(self._model)
        return [
            (ll.llama_vocab_get_text(vocab, index) or b"").decode("utf-8", "replace") for index in range(self._rows)
        ]

    @property
    def precision(self) -> str:
        return _quantization_label(self.description)

    @property
    def end_token_ids(self) -> frozenset[int]:
        return self._end_ids

    def new_sequence(self, capacity: int) -> Sequence:
        return LlamaCppSequence(self, self._context_size(capacity))

    def sequence_bytes(self, capacity: int) -> int:
        """A context's f16 keys and values for its whole size (allocated up front), the logits rows it may
        output, and its compute buffer: one batch's fp32 attention scores over the whole context, plus
        the rest of a batch's activations (CONTEXT_OVERHEAD_BYTES)."""
        size = self._context_size(capacity, check=False)
        scores = BATCH_TOKENS * size * self._heads * 4
        return size * self.kv_bytes_per_token + OUTPUT_ROWS * self._rows * 4 + scores + CONTEXT_OVERHEAD_BYTES

    def _context_size(self, capacity: int, check: bool = True) -> int:
        size = -(-max(capacity, 1) // CONTEXT_STEP) * CONTEXT_STEP
        if size > self._train_context > 0:
            if check and capacity > self._train_context:
                raise ValueError(
                    f"{self.name} reads at most {self._train_context} tokens; "
                    f"this request needs {capacity} (prompt + new tokens)"
                )
            size = self._train_context
        return size

    def close(self) -> None:
        self.prefix_cache.clear()
        if self._model:
            self._ll.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # contexts first (through the cache), then the weights
        try:
            self.close()
        except Exception:
            pass


def _quantization_label(description: str) -> str:
    """ "qwen2 1.5B Q4_K - Medium" -> "Q4_K_M", "qwen2 ?B (guessed) all F32" -> "F32"; the description
    itself when it has another form."""
    parts = description.split(" ", 2)
    if len(parts) < 3:
        return description
    kind = parts[2].removeprefix("(guessed) ").removeprefix("all ")
    for suffix, letter in ((" - Medium", "_M"), (" - Small", "_S"), (" - Large", "_L")):
        if kind.endswith(suffix):
            return kind.removesuffix(suffix) + letter
    return kind


def _chunks(count: int, first_kept: int) -> list[tuple[int, int]]:
    """[start, end) spans of at most BATCH_TOKENS tokens and at most OUTPUT_ROWS kept rows each."""
    spans, start = [], 0
    while start < count:
        end = min(start + BATCH_TOKENS, count)
        kept_from = max(start, first_kept)
        if end - kept_from > OUTPUT_ROWS:
            end = kept_from + OUTPUT_ROWS
        spans.append((start, end))
        start = end
    return spans


class LlamaCppSequence(Sequence):
    """A KV cache of at most ``capacity`` tokens over the model's weights: a llama.cpp context that starts
    small and is replaced by a larger one, its cached tokens copied over, when a pass needs more room
    (llama.cpp cannot resize a context in place)."""

    def __init__(self, model: LlamaCppModel, capacity: int) -> None:
        super().__init__()
        self._ll = model._ll
        self._owner = model  # keeps the weights alive while this context exists
        self.capacity = capacity
        self._context = None
        self._size = min(capacity, FIRST_CONTEXT)
        self._context = self._new_context(self._size)
        self._memory = self._ll.llama_get_memory(self._context)
        self._batch = self._ll.llama_batch_init(BATCH_TOKENS, 0, 1)
        self._rows = model.output_rows

    def _new_context(self, size: int):
        ll, model = self._ll, self._owner
        params = ll.llama_context_default_params()
        params.n_ctx = size
        params.n_batch = BATCH_TOKENS
        params.n_ubatch = BATCH_TOKENS
        params.n_seq_max = 1
        params.n_outputs_max = OUTPUT_ROWS
        params.n_threads = model.threads
        params.n_threads_batch = model.threads
        params.no_perf = True
        context = ll.llama_init_from_model(model._model, params)
        if not context:
            raise MemoryError(f"llama.cpp could not create a {size}-token context for {model.name}")
        return context

    def _grow(self, length: int) -> None:
        """Move the cached tokens into a context that holds ``length`` (at least double the size, at most
        the capacity): the sequence's state is copied, not recomputed."""
        ll = self._ll
        size = self._size
        while size < length:
            size *= 2
        size = min(size, self.capacity)
        state = (ctypes.c_uint8 * ll.llama_state_seq_get_size(self._context, _SEQ))()
        written = ll.llama_state_seq_get_data(self._context, state, len(state), _SEQ)
        larger = self._new_context(size)
        if self.tokens and not ll.llama_state_seq_set_data(larger, state, written, _SEQ):
            ll.llama_free(larger)
            raise RuntimeError(f"llama.cpp could not move {len(self.tokens)} cached tokens into a {size}-token context")
        ll.llama_free(self._context)
        self._context, self._size = larger, size
        self._memory = ll.llama_get_memory(larger)

    def fits(self, length: int) -> bool:
        return length <= self.capacity

    def state(self) -> bytes:
        """The sequence's state as llama.cpp writes it (``llama_state_seq_get_data``)."""
        ll = self._ll
        buffer = (ctypes.c_uint8 * ll.llama_state_seq_get_size(self._context, _SEQ))()
        written = ll.llama_state_seq_get_data(self._context, buffer, len(buffer), _SEQ)
        return bytes(buffer[:written])

    def _handed_over(self, ids: list[int], rows: int):
        """The prompt read by the model's prompt reader and its cache written here: the reader's logits
        rows, or None (llama.cpp reads it) for a short prompt, a sequence already started, or no reader."""
        owner = self._owner
        reader, layout = owner.prompt_reader, owner._layout
        if reader is None or layout is None or self.tokens or len(ids) < HANDOFF_MIN_TOKENS:
            return None
        read = reader.new_sequence(len(ids))
        try:
            logits = read.extend(ids, rows)
            keys, values = read.cached_rows()  # type: ignore[attr-defined]
        finally:
            read.close()
        try:
            state = sequence_state(keys, values, layout)
        except RowsOutOfRange:
            return None  # llama.cpp reads this prompt itself
        if len(ids) > self._size:
            self._grow(len(ids))
        if not self._ll.llama_state_seq_set_data(self._context, as_c_buffer(state), len(state), _SEQ):
            self._ll.llama_memory_seq_rm(self._memory, _SEQ, 0, -1)
            raise RuntimeError(f"llama.cpp refused the {len(ids)}-token prompt read by {reader.name}")
        self.tokens.extend(ids)
        return logits

    def extend(self, ids: list[int], rows: int):
        import torch  # imported by whoever decodes; kept out of this module's import for registry.py

        check_rows(ids, rows)
        needed = len(self.tokens) + len(ids)
        if needed > self.capacity:
            raise ValueError(f"the sequence would exceed its {self.capacity}-token context")
        handed = self._handed_over(ids, rows)
        if handed is not None:
            return handed
        if needed > self._size:
            self._grow(needed)
        first_kept = len(ids) - rows
        out = np.empty((rows, self._rows), dtype=np.float32)
        filled = 0
        for start, end in _chunks(len(ids), first_kept):
            chunk = ids[start:end]
            wanted = [i for i in range(len(chunk)) if start + i >= first_kept]
            self._decode(chunk, wanted)
            for index in wanted:
                pointer = self._ll.llama_get_logits_ith(self._context, index)
                out[filled] = np.ctypeslib.as_array(pointer, shape=(self._rows,))
                filled += 1
            self.tokens.extend(chunk)
        return torch.from_numpy(out)

    def _decode(self, chunk: list[int], wanted: list[int]) -> None:
        batch, position = self._batch, len(self.tokens)
        batch.n_tokens = len(chunk)
        keep = set(wanted)
        for i, token in enumerate(chunk):
            batch.token[i] = token
            batch.pos[i] = position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = _SEQ
            batch.logits[i] = i in keep
        code = self._ll.llama_decode(self._context, batch)
        if code != 0:
            # 1: no KV slot (context full); 2: aborted; < 0: invalid batch or a fatal error. Either
            # way the cache may hold part of the chunk: drop it so that tokens and cache agree.
            self._ll.llama_memory_seq_rm(self._memory, _SEQ, position, -1)
            raise RuntimeError(f"llama_decode failed with code {code} at position {position}")

    def crop(self, length: int) -> None:
        if length < len(self.tokens):
            if not self._ll.llama_memory_seq_rm(self._memory, _SEQ, length, -1):
                raise RuntimeError(f"llama.cpp could not remove cached tokens from position {length}")
            del self.tokens[length:]

    @property
    def nbytes(self) -> int:
        """The KV cache the current context allocated up front, whatever it holds now."""
        return self._size * self._owner.kv_bytes_per_token if self._context else 0

    def close(self) -> None:
        if getattr(self, "_context", None):
            self._ll.llama_batch_free(self._batch)
            self._ll.llama_free(self._context)
            self._context = None
            self.tokens = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
