"""Model runtimes: the one seam between the decoding core and whatever computes logits.

The decoding core needs three things from a model, whichever library runs it:

* feed tokens after what it has read, and get the next-token logits after each of the last few
  of them (``Sequence.extend``: ``[rows, V]`` fp32, only the rows asked for are computed);
* forget the tokens after a position (``Sequence.crop``), without reading the prefix again;
* start a sequence for a prompt, reusing the cache of an earlier sequence that shares a prefix
  with it (``ModelRuntime.acquire`` / ``release``, through :class:`PrefixCache`).

Two runtimes implement it: :class:`TransformersModel` here (any transformers causal LM, on CPU or
GPU, in any dtype: the exactness tests run on it in fp32) and ``specsteer.runtimes.llamacpp.LlamaCppModel``
(a GGUF file read directly by llama.cpp, quantized kernels on the CPU). Edge and Cloud code only
see these two classes' common surface.

Prefix reuse (the idea of vLLM's automatic prefix caching and llama.cpp's prompt cache, done the
simple way): a finished stream gives its sequence back to its model's cache with the tokens it
holds. A new stream takes the idle sequence that shares the longest prefix with its prompt, crops
it to that prefix and reads only the rest. Regenerating for the same history and input, SLM+ and
SpecSteer in one comparison, or every method x alpha x beta cell of one record in an evaluation
grid therefore pay each prompt's prefill once. A sequence is used by one stream at a time (so
queued or concurrent requests never share a cache), idle sequences are evicted least recently used
first past a byte budget and a count cap, and cropping is the same operation a rejected draft uses,
so reuse is exactly as correct as rollback (the contract tests check both).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from contextlib import contextmanager

import numpy as np
import torch

RUNTIMES = ("llama.cpp", "transformers")
RUNTIME_CHOICES = ("auto", *RUNTIMES)
RUNTIME_SPELLING = (
    f"one of {', '.join(RUNTIME_CHOICES)}, or a split such as transformers/llama.cpp "
    "(the Specialist and its generic copy on the first, the Generalist on the second)"
)


def parse_split(requested: str) -> tuple[str, str] | None:
    """ "transformers/llama.cpp" -> ("transformers", "llama.cpp"): an explicit split (the Specialist pair's
    runtime, then the Generalist's); None for a single runtime's name."""
    if "/" not in requested:
        return None
    small, _, large = requested.partition("/")
    return small.strip(), large.strip()


def check_runtime(requested: str) -> str:
    """``requested`` as a runtime request every entry point accepts (``--runtime`` of generate, cloud,
    evaluate and bench): "auto", a runtime's name, or a split "A/B" of two runtimes' names (the one spelling
    :func:`specsteer.models.planning.runtime_plan` reads). ValueError saying what is accepted otherwise."""
    if not isinstance(requested, str):  # what an API caller may send instead (None, a number, a list)
        raise ValueError(f"unknown runtime {requested!r}; choose {RUNTIME_SPELLING}")
    name = requested.strip()
    split = parse_split(name)
    if name in RUNTIME_CHOICES or (split is not None and name.count("/") == 1 and set(split) <= set(RUNTIMES)):
        return name
    raise ValueError(f"unknown runtime {requested!r}; choose {RUNTIME_SPELLING}")


# Idle sequences a model keeps for reuse. A request opens at most two streams per model (the
# Specialist reads the private and the plain prompt in SpecSteer), so four idle ones cover a
# comparison's methods and the previous request; the byte budget bounds long contexts.
DEFAULT_IDLE_SEQUENCES = 4
DEFAULT_IDLE_BYTES = 1 << 30


def dtype_label(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bf16", the names the command lines take."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
        dtype, str(dtype).removeprefix("torch.")
    )


def check_rows(ids: list[int], rows: int) -> None:
    if not 1 <= rows <= len(ids):
        raise ValueError(f"asked for {rows} rows of a {len(ids)}-token pass")


class Sequence(ABC):
    """One model's cache of one token sequence. Used by one stream at a time."""

    def __init__(self) -> None:
        self.tokens: list[int] = []  # what the cache holds, in order

    @abstractmethod
    def extend(self, ids: list[int], rows: int) -> torch.Tensor:
        """Read ``ids`` after ``tokens``; return the logits after each of the last ``rows`` of them.

        ``[rows, V]`` fp32 on the CPU, V being the model's output rows; 1 <= rows <= len(ids).
        """

    @abstractmethod
    def crop(self, length: int) -> None:
        """Forget every token from position ``length`` on (their keys and values too)."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Memory the cache holds now (what the idle budget counts)."""

    def fits(self, length: int) -> bool:
        """Whether this sequence can hold ``length`` tokens (fixed-size caches cannot grow)."""
        return True

    def close(self) -> None:  # noqa: B027 -- optional: a runtime with nothing to free keeps this default
        """Free the cache now rather than when garbage collected."""


class PrefixCache:
    """A model's idle sequences, handed to the stream whose prompt shares the longest prefix."""

    def __init__(self, new_sequence, max_idle: int = DEFAULT_IDLE_SEQUENCES, max_idle_bytes: int = DEFAULT_IDLE_BYTES):
        self._new_sequence = new_sequence
        self.max_idle = max_idle
        self.max_idle_bytes = max_idle_bytes
        self._idle: list[Sequence] = []  # least recently used first
        self._lock = threading.Lock()

    def acquire(self, prompt: Seq[int], capacity: int) -> Sequence:
        """A sequence holding the longest available prefix of ``prompt`` (at most all but its last
        token, whose logits the caller needs), able to grow to ``capacity`` tokens."""
        with self._lock:
            best, best_shared = None, 0
            for candidate in self._idle:
                shared = _shared_prefix(candidate.tokens, prompt)
                if shared > best_shared and candidate.fits(capacity):
                    best, best_shared = candidate, shared
            if best is not None:
                self._idle.remove(best)
        if best is None:
            return self._new_sequence(capacity)
        best.crop(min(best_shared, len(prompt) - 1))
        return best

    def release(self, sequence: Sequence) -> None:
        """Keep a finished stream's sequence for reuse; evict past the budget, oldest first."""
        with self._lock:
            self._idle.append(sequence)
            evicted = []
            while self._idle and (len(self._idle) > self.max_idle or self.idle_bytes > self.max_idle_bytes):
                evicted.append(self._idle.pop(0))
        for sequence in evicted:
            sequence.close()

    @property
    def idle_bytes(self) -> int:
        return sum(sequence.nbytes for sequence in self._idle)

    @property
    def idle(self) -> int:
        return len(self._idle)

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sequence in idle:
            sequence.close()


def _shared_prefix(a: Seq[int], b: Seq[int]) -> int:
    shared = 0
    for x, y in zip(a, b):
        if x != y:
            break
        shared += 1
    return shared


class ModelRuntime(ABC):
    """One loaded model, as the decoding core sees it."""

    runtime: str  # "transformers" | "llama.cpp"

    def __init__(self, name: str) -> None:
        self.name = name
        self.prefix_cache = PrefixCache(self.new_sequence)

    @property
    @abstractmethod
    def output_rows(self) -> int:
        """Rows of the output layer (the vocabulary, often padded past the tokenizer's size)."""

    @property
    @abstractmethod
    def precision(self) -> str:
        """What the weights compute in: "fp32", "bf16", or the GGUF quantization ("Q4_K_M")."""

    @property
    @abstractmethod
    def end_token_ids(self) -> frozenset[int]:
        """Ids the model's own configuration says end a generation."""

    @property
    def device(self) -> str:
        """Where its caches live ("cpu", "cuda:0"): the memory the Cloud's admission counts."""
        return "cpu"

    @abstractmethod
    def new_sequence(self, capacity: int) -> Sequence:
        """An empty sequence able to hold ``capacity`` tokens."""

    @abstractmethod
    def sequence_bytes(self, capacity: int) -> int:
        """Memory a sequence able to hold ``capacity`` tokens may come to hold: its keys and values when
        full, and what its runtime allocates beside them (the Cloud's admission reserves this)."""

    def acquire(self, prompt: Seq[int], capacity: int) -> Sequence:
        return self.prefix_cache.acquire(prompt, capacity)

    def release(self, sequence: Sequence) -> None:
        self.prefix_cache.release(sequence)


# --------------------------------------------------------------------------- transformers


def logits_to_host(logits: torch.Tensor) -> torch.Tensor:
    """A pass's logits rows as the decoding core reads them: fp32 on the CPU, in one device-to-host copy (the
    pass's only wait for the device; every decision after it is made on the host). Converted on the device,
    so the copy is the one transfer whatever the weights' dtype."""
    return logits.float().cpu()


@contextmanager
def _on_stream(stream: torch.cuda.Stream | None) -> Iterator[None]:
    if stream is None:
        yield
        return
    with torch.cuda.stream(stream):
        yield


class TransformersSequence(Sequence):
    """A DynamicCache of one transformers model; its passes run on ``stream`` when one is given (a CUDA
    stream of its own: an Edge and a Cloud sharing one GPU, each on its own stream)."""

    def __init__(self, model, stream: torch.cuda.Stream | None = None) -> None:
        from transformers import DynamicCache

        super().__init__()
        self._model = model
        self._stream = stream
        self._cache = DynamicCache()

    def extend(self, ids: list[int], rows: int) -> torch.Tensor:
        check_rows(ids, rows)
        with torch.inference_mode(), _on_stream(self._stream):
            # The ids go to the device without waiting (host memory the copy reads at once); the only wait of
            # the pass is the one copy of its logits back.
            input_ids = torch.tensor([ids], dtype=torch.long).to(self._model.device, non_blocking=True)
            # logits_to_keep: the LM head over a 150k vocabulary costs as much as a few layers, so
            # only the rows asked for are computed.
            out = self._model(input_ids=input_ids, past_key_values=self._cache, use_cache=True, logits_to_keep=rows)
            logits = logits_to_host(out.logits[0])  # [rows, V]
        self.tokens.extend(ids)
        return logits

    def crop(self, length: int) -> None:
        if length < len(self.tokens):
            self._cache.crop(length - len(self.tokens))  # transformers 5: a negative count of tokens to drop
            del self.tokens[length:]

    def cached_rows(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every layer's cached keys and values as [tokens, kv_heads * head_dim] fp32 arrays (a prompt
        handed to llama.cpp, specsteer.runtimes.prompt_handoff)."""
        keys: list[np.ndarray] = []
        values: list[np.ndarray] = []
        for layer in self._cache.layers:
            for tensor, out in ((getattr(layer, "keys", None), keys), (getattr(layer, "values", None), values)):
                if not isinstance(tensor, torch.Tensor):
                    raise TypeError(f"a cache layer of type {type(layer).__name__} holds no keys and values")
                heads, tokens, width = tensor.shape[1:]
                out.append(tensor[0].transpose(0, 1).reshape(tokens, heads * width).float().cpu().numpy())
        return keys, values

    @property
    def nbytes(self) -> int:
        total = 0
        for layer in getattr(self._cache, "layers", ()):
            for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(tensor, torch.Tensor):
                    total += tensor.numel() * tensor.element_size()
        return total


class TransformersModel(ModelRuntime):
    """A transformers causal LM (``model``: a PreTrainedModel in eval mode). ``stream``: a CUDA stream its
    passes run on (None: the device's current stream); two runtimes over one module may run on two."""

    runtime = "transformers"

    def __init__(self, model, name: str = "", stream: torch.cuda.Stream | None = None) -> None:
        self.model = model
        self.stream = stream
        super().__init__(name or getattr(model.config, "name_or_path", "") or type(model).__name__)

    @property
    def device(self) -> str:
        return str(self.model.device)

    @property
    def output_rows(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def precision(self) -> str:
        return dtype_label(self.model.dtype)

    @property
    def end_token_ids(self) -> frozenset[int]:
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if configured is None:
            return frozenset()
        return frozenset(int(i) for i in (configured if isinstance(configured, (list, tuple)) else [configured]))

    def new_sequence(self, capacity: int) -> Sequence:
        return TransformersSequence(self.model, self.stream)

    def sequence_bytes(self, capacity: int) -> int:
        # A DynamicCache grows with its tokens: keys and values of every layer, in the weights' dtype.
        config = getattr(self.model.config, "text_config", None) or self.model.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * self.model.dtype.itemsize
        return capacity * per_token
