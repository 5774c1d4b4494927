"""What every decoding method reads models through: the sampler, a model's stream and the detokenizer.

A round's other pieces are their own modules: ``drafting`` (the Specialist's drafts), ``verification`` (the
ratio test, the match test, exact speculative sampling) and ``steering`` (recovering a token from the
steered logits).

Shapes: ``V`` is the vocabulary both models share, ``k`` the draft length.
Logit rows are always fp32 ``[V]`` (or ``[n, V]`` for n positions); models may
run in bf16, but every decision (argmax, ratio, sampling) is made in fp32.

Token kinds, as the speculative methods use them:

* **accepted** -- a token the Specialist drafted and the Cloud's test let through.
* **rejected** -- the first draft of a round the test refused, and the drafts
  after it in that round (discarded unverified). They are shown to the user
  where they were proposed but are not part of the output.
* **recovered** -- the token chosen in place of a rejected draft, from the
  steered logits ``z_L + beta * (z_S+ - z_S0)`` (paper Eq. 8).
* **bonus** -- after a round whose drafts were all accepted, the verification
  pass has already produced the Cloud's logits for the next position, so one
  more token is chosen from the steered logits there at no extra Cloud cost.
* **plain** -- a token of a method that does not speculate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specsteer.method.events import TraceStep
from specsteer.runtimes.base import ModelRuntime

_DEFAULT_HEADROOM = 1024  # tokens a stream may add to its prompt when its caller does not say


# --------------------------------------------------------------------------- sampling


@dataclass
class Sampler:
    """Greedy (``temperature == 0``) or temperature / nucleus sampling with its own RNG."""

    temperature: float = 0.0
    top_p: float = 1.0
    generator: torch.Generator | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @classmethod
    def make(cls, sample: bool, temperature: float, top_p: float, seed: int) -> Sampler:
        if not sample:
            return cls()
        if temperature <= 0:
            raise ValueError("temperature must be > 0 when sampling")
        if not 0 < top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        generator = torch.Generator().manual_seed(seed)
        return cls(temperature=temperature, top_p=top_p, generator=generator)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The distribution this sampler draws from: ``[..., V]`` -> ``[..., V]``."""
        if self.greedy:
            one_hot = torch.zeros_like(logits)
            return one_hot.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1.0:
            probs = _nucleus(probs, self.top_p)
        return probs

    def choose(self, logits: torch.Tensor) -> int:
        if self.greedy:
            return int(logits.argmax())
        return self.draw(self.probs(logits))

    def draw(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator))


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


# --------------------------------------------------------------------------- one model's stream


@dataclass
class ForwardLog:
    """Forward passes per model stream, and their time; the first pass of a stream is its prefill.

    ``trace`` (shared with the Link, when there is one) receives every pass as a TraceStep.
    """

    calls: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    prefill_seconds: dict[str, float] = field(default_factory=dict)
    reused: dict[str, int] = field(default_factory=dict)  # prompt tokens each stream found in the prefix cache
    trace: list[TraceStep] = field(default_factory=list)

    def record(self, name: str, seconds: float, tokens: int = 1) -> None:
        self.trace.append(TraceStep("forward", name, tokens, seconds))
        self.count(name, seconds)

    def count(self, name: str, seconds: float) -> None:
        """Count a pass without placing it in the trace (a pass another process ran and reported)."""
        if name not in self.calls:
            self.calls[name] = 0
            self.seconds[name] = 0.0
            self.prefill_seconds[name] = seconds
        self.calls[name] += 1
        self.seconds[name] += seconds

    def step_seconds(self) -> dict[str, float]:
        """Mean seconds of a pass after the prefill: a draft step, or a verification pass."""
        return {
            name: (self.seconds[name] - self.prefill_seconds[name]) / (calls - 1)
            for name, calls in self.calls.items()
            if calls > 1
        }


class Stream:
    """One model reading one token sequence, with the cache of what it has read.

    ``tokens`` may run ahead of the cache: tokens not yet fed are *pending* and
    are fed, all in one forward pass, the next time logits are asked for.
    ``last_logits`` are the next-token logits after ``tokens[fed - 1]``.

    The cache comes from the model's prefix cache: when an earlier stream of the
    same model read a prompt sharing a prefix with this one, that prefix is not
    read again (``reused`` tokens). ``close`` gives the cache back for reuse.
    ``capacity`` is how many tokens the stream may come to hold.
    """

    def __init__(
        self,
        model: ModelRuntime,
        prompt_ids: list[int],
        vocab_size: int,
        log: ForwardLog,
        name: str,
        capacity: int | None = None,
    ):
        self.model = model
        self.vocab_size = vocab_size
        self.tokens: list[int] = list(prompt_ids)
        self.sequence = model.acquire(self.tokens, capacity or len(self.tokens) + _DEFAULT_HEADROOM)
        self.fed = self.reused = len(self.sequence.tokens)
        log.reused[name] = self.reused
        self.last_logits: torch.Tensor | None = None
        self._log = log
        self._name = name
        self._consistent = True  # False once a failed pass may have left the cache half-written

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pending(self) -> int:
        return len(self.tokens) - self.fed

    def append(self, ids: list[int]) -> None:
        self.tokens.extend(ids)

    def predict(self, n: int = 1) -> torch.Tensor:
        """Next-token logits after each of the last ``n`` tokens: ``[n, V]`` fp32.

        Feeds every pending token in one pass. The row before the first pending
        token comes from ``last_logits``, so ``n`` may be at most ``pending + 1``.
        """
        if n > self.pending + 1:
            raise ValueError(f"asked for {n} rows with only {self.pending} pending tokens")
        rows: list[torch.Tensor] = []
        if n > self.pending:
            assert self.last_logits is not None, "no row before the pending tokens"  # set by every pass and truncate
            rows.append(self.last_logits[None])
        if self.pending:
            fresh = self._feed(keep=min(n, self.pending))
            rows.append(fresh)
        return torch.cat(rows) if len(rows) > 1 else rows[0]

    def read_ahead(self) -> None:
        """Read every token but the last now, in one pass, before anything asks for logits (a Cloud reads its
        prompt while the Edge reads its own). The stream is then as a prefix-cache hit leaves it: the last
        prompt token is read with whatever follows it by the next pass, so every row after is the same."""
        if self.pending <= 1:
            return
        started = time.perf_counter()
        fresh = self.tokens[self.fed : -1]
        self._consistent = False
        self.sequence.extend(fresh, 1)
        self._consistent = True
        self.fed = len(self.tokens) - 1
        self._log.record(self._name, time.perf_counter() - started, len(fresh))
        self.last_logits = None

    def truncate(self, length: int, last_logits: torch.Tensor | None = None) -> None:
        """Forget every token from ``length`` on; drop their keys and values from the cache.

        ``last_logits`` must be the logits after ``tokens[length - 1]`` whenever the
        cache is cut back, because the pass that produced them is gone.
        """
        del self.tokens[length:]
        if self.fed > length:
            self.sequence.crop(length)
            self.fed = length
            self.last_logits = last_logits

    def close(self) -> None:
        """Give the cache back to the model's prefix cache (once; a broken cache is dropped)."""
        sequence, self.sequence = self.sequence, None  # type: ignore[assignment]  # closed: no sequence
        if sequence is None:
            return
        if self._consistent:
            self.model.release(sequence)
        else:
            sequence.close()

    def _feed(self, keep: int) -> torch.Tensor:
        started = time.perf_counter()
        fresh = self.tokens[self.fed :]
        self._consistent = False
        rows = self.sequence.extend(fresh, keep)[:, : self.vocab_size]  # [keep, V]
        self._consistent = True
        self.fed = len(self.tokens)
        self._log.record(self._name, time.perf_counter() - started, len(fresh))
        self.last_logits = rows[-1]
        return rows


# --------------------------------------------------------------------------- text


class Detokenizer:
    """Turns ids into text pieces that concatenate to ``tokenizer.decode(all ids)``.

    Byte-level tokenizers split multi-byte characters across tokens; decoding
    such a token alone yields U+FFFD. Its piece is held back (empty) until a
    later token completes the character, and decoding restarts from a recent
    offset so the cost per token stays constant.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix_offset = 0  # where the decoding window starts
        self._read_offset = 0  # ids before this are fully shown

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def _window_texts(self, extra: list[int]) -> tuple[str, str]:
        shown = self._decode(self.ids[self._prefix_offset : self._read_offset])
        full = self._decode(self.ids[self._prefix_offset :] + extra)
        return shown, full

    def push(self, token: int, final: bool = False) -> str:
        """Add an emitted token; return its piece. ``final`` flushes incomplete bytes as decode() would."""
        self.ids.append(token)
        shown, full = self._window_texts([])
        if not final and (full.endswith("\ufffd") or len(full) <= len(shown)):
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.ids)
        return full[len(shown) :]

    def peek(self, tokens: list[int]) -> str:
        """The text ``tokens`` would add after what has been emitted, without emitting them."""
        shown, full = self._window_texts(tokens)
        return full[len(shown) :].rstrip("\ufffd") if full.startswith(shown) else ""
