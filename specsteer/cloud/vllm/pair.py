"""The two engines one vLLM Cloud serves (the Generalist's and the generic Specialist's) and what they computed.

:class:`VllmPair` stands where an in-process Cloud has its loaded pair: the pairing's id and vocabulary, the
engines' clients, the thread pool a round's requests are sent from, and the counts of tokens the engines
computed (:class:`EngineStats`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from specsteer.cloud.vllm.client import Completion, VllmEngine
from specsteer.method.events import GENERALIST_STREAM, GENERIC_STREAM

ENGINE_NAME = "vllm"
# The candidates a Verdict may carry: the engines' --max-logprobs. The Open's default top_k is 64.
DEFAULT_MAX_CANDIDATES = 64


@dataclass(frozen=True)
class EngineStats:
    """What the engines computed for this Cloud so far (every session): prompt tokens sent, and of them
    the tokens computed (not found in the prefix cache), per engine; and the verification rounds."""

    rounds: int
    prompt_tokens: dict[str, int]
    computed_tokens: dict[str, int]


@dataclass
class VllmPair:
    """What a vLLM Cloud serves: the pairing's id and shared vocabulary, the Generalist's and the generic
    Specialist's engines, and the bytes one token's keys and values take in both (admission)."""

    pairing_id: str
    vocab_size: int
    generalist: VllmEngine
    specialist: VllmEngine
    kv_bytes_per_token: int = 0  # 0: unknown (no admission by memory unless a budget is given)
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    max_model_len: int | None = None
    cross = None  # a same-tokenizer pairing only
    runtime = ENGINE_NAME
    _counts: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(64, "vllm-request"))

    def submit(self, call: Callable, *args, **kwargs) -> Future:
        return self._pool.submit(call, *args, **kwargs)

    def cloud_side(self) -> VllmPair:
        """Itself: the engines serve the base models, so there is no Edge adapter to keep out (as
        :meth:`LoadedPair.cloud_side` does for an in-process pair)."""
        return self

    def count(self, role: str, replies: Sequence[Completion], round_done: bool = False) -> None:
        with self._lock:
            self._counts[("prompt", role)] = self._counts.get(("prompt", role), 0) + sum(
                r.prompt_tokens for r in replies
            )
            self._counts[("computed", role)] = self._counts.get(("computed", role), 0) + sum(
                r.computed_tokens for r in replies
            )
            if round_done:
                self._counts["rounds"] = self._counts.get("rounds", 0) + 1

    def stats(self) -> EngineStats:
        with self._lock:
            roles = (GENERALIST_STREAM, GENERIC_STREAM)
            return EngineStats(
                self._counts.get("rounds", 0),
                {role: self._counts.get(("prompt", role), 0) for role in roles},
                {role: self._counts.get(("computed", role), 0) for role in roles},
            )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.generalist.close()
        self.specialist.close()
