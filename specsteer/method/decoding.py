"""The pieces every decoding method is built from.

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

import math
import threading
import time
from collections.abc import Iterator, Sequence
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


# --------------------------------------------------------------------------- draft / verify / recover


class PrivateSpanGuard:
    """Keeps the Edge from sending a token that would copy a private span verbatim.

    A *private n-gram* is a run of ``n`` token ids found in the Specialist's private prompt (profile,
    history) and not in the plain prompt (the task and the chat template, which the Cloud gets
    anyway). :meth:`mask` gives a logits row in which every token that would complete a private
    n-gram after ``context`` (the stream's tokens so far) is impossible, so the Edge drafts and
    chooses around it: the copy is recovered locally and never crosses the link. It guards verbatim
    copies only; a paraphrase of a private fact passes.
    """

    def __init__(self, private_ids: Sequence[int], plain_ids: Sequence[int], n: int):
        if n < 2:
            raise ValueError("the private-span guard needs n >= 2 tokens")
        self.n = n
        public = set(_ngrams(plain_ids, n))
        self._next: dict[tuple[int, ...], set[int]] = {}
        for gram in _ngrams(private_ids, n):
            if gram not in public:
                self._next.setdefault(gram[:-1], set()).add(gram[-1])

    def blocked(self, context: Sequence[int]) -> set[int]:
        """The tokens that would complete a private n-gram after ``context``."""
        if len(context) < self.n - 1:
            return set()
        return self._next.get(tuple(context[len(context) - self.n + 1 :]), set())

    def mask(self, row: torch.Tensor, context: Sequence[int]) -> torch.Tensor:
        """``row`` with the blocked tokens at -inf (a copy; the row itself when nothing is blocked).
        A row whose every finite entry would be blocked is returned as it is: something must be chosen."""
        blocked = [token for token in self.blocked(context) if token < row.shape[-1]]
        if not blocked:
            return row
        masked = row.clone()
        masked[blocked] = -math.inf
        return masked if bool(torch.isfinite(masked).any()) else row


def _ngrams(ids: Sequence[int], n: int) -> Iterator[tuple[int, ...]]:
    return (tuple(ids[start : start + n]) for start in range(len(ids) - n + 1))


def draft(
    stream: Stream,
    k: int,
    sampler: Sampler,
    stop_ids: frozenset[int],
    min_confidence: float = 0.0,
    cancel: threading.Event | None = None,
    allowed: torch.Tensor | None = None,
    guard: PrivateSpanGuard | None = None,
) -> tuple[list[int], list[torch.Tensor]]:
    """The Specialist proposes up to ``k`` tokens; returns ids and the logits row each came from.

    Drafting stops early at an end token (nothing after it could be emitted) and,
    when ``min_confidence > 0``, after a token the Specialist itself gave less
    than that probability: the drafts after an unsure one are the likeliest to be
    refused, and each costs a device step whether or not it is kept.
    The last draft is appended to the stream but not fed (it is pending).
    ``allowed`` (``[V]`` bool) masks the ids that may be drafted, and the rows returned are masked:
    on a cross-tokenizer pair an id that spells no text cannot be told to the Generalist.
    A set ``cancel`` ends drafting before the next step, so that a stop waits for one step at most
    (a round of 16 drafts takes seconds on a CPU); the caller then sends nothing.
    ``guard``: each row is masked first, so no draft copies a private span (the masked row is returned).
    """
    ids: list[int] = []
    rows: list[torch.Tensor] = []
    for token, row in drafting(stream, k, sampler, stop_ids, min_confidence, cancel, allowed, guard):
        ids.append(token)
        rows.append(row)
    return ids, rows


def drafting(
    stream: Stream,
    k: int,
    sampler: Sampler,
    stop_ids: frozenset[int],
    min_confidence: float = 0.0,
    cancel: threading.Event | None = None,
    allowed: torch.Tensor | None = None,
    guard: PrivateSpanGuard | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """:func:`draft` one token at a time: each ``(id, row)`` as soon as it is drafted (a display shows it
    at once). Read it to the end: the stopping rules are :func:`draft`'s."""
    for _ in range(k):
        if cancel is not None and cancel.is_set():
            return
        row = stream.predict(1)[0]  # [V]
        if allowed is not None:
            row = row.masked_fill(~allowed, -math.inf)
        if guard is not None:
            row = guard.mask(row, stream.tokens)
        token = sampler.choose(row)
        stream.append([token])
        yield token, row
        if token in stop_ids or (min_confidence > 0 and _probability(row, token) < min_confidence):
            return


def _probability(row: torch.Tensor, token: int) -> float:
    """p(token) under softmax(row), at temperature 1 whatever the sampler's."""
    return math.exp(float(row[token] - torch.logsumexp(row, -1)))


def ratio_test(
    generalist_rows: torch.Tensor,  # [k+1, V] z_L after the committed prefix and after each draft
    generic_rows: torch.Tensor,  # [k+1, V] z_S0 likewise
    draft_ids: list[int],
    alpha: float,
    sampler: Sampler,
) -> tuple[int, list[float]]:
    """SpecSteer's verification (paper Eq. 7): accept y with probability min(1, p_L(y) / (alpha p_S0(y))).

    Greedy mode accepts iff ``p_L(y) >= alpha * p_S0(y)``. Works in log space
    so that alpha = 0 (accept all) and alpha = inf (reject all) are exact.
    Returns the number accepted before the first rejection, and the ratio of
    every draft tested (the accepted ones and the rejected one).
    """
    if not draft_ids:
        return 0, []
    log_p_large, log_p_generic = draft_log_probs(generalist_rows, generic_rows, draft_ids, sampler)
    return ratio_decisions(log_ratio_values(log_p_large, log_p_generic, alpha), sampler)


def ratio_temperature(sampler: Sampler) -> float:
    """The temperature the ratio test reads probabilities at: 1 when greedy, the sampling one otherwise."""
    return 1.0 if sampler.greedy else sampler.temperature


def draft_log_probs(
    generalist_rows: torch.Tensor, generic_rows: torch.Tensor, draft_ids: list[int], sampler: Sampler
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p_L(y) and log p_S0(y) of each draft (``[k]`` each), from the rows before it (:func:`tested_log_probs`):
    what the ratio test compares (and what a token's details show)."""
    k = len(draft_ids)
    large, generic = tested_log_probs(generalist_rows[:k], sampler), tested_log_probs(generic_rows[:k], sampler)
    return of_drafts(large, draft_ids), of_drafts(generic, draft_ids)


def of_drafts(log_rows: torch.Tensor, draft_ids: list[int]) -> torch.Tensor:
    """``[k]``: each row's log-probability of its draft (``log_rows`` ``[k, V]``, one row before each draft)."""
    return log_rows.gather(-1, torch.tensor(draft_ids, dtype=torch.long)[:, None])[:, 0]


def tested_log_probs(rows: torch.Tensor, sampler: Sampler) -> torch.Tensor:
    """The log-distributions the ratio test compares, ``[n, V]``: log softmax of the rows at the sampler's
    temperature (1 in greedy mode; no nucleus cut: the test reads the models' own probabilities)."""
    return torch.log_softmax(rows / ratio_temperature(sampler), -1)


def log_ratio_values(log_p_large: torch.Tensor, log_p_generic: torch.Tensor, alpha: float) -> list[float]:
    """``log p_L(y) - log p_S0(y) - log alpha`` per draft, from each draft's log-probability under both Cloud
    models (``[k]`` fp32 each); alpha = 0 gives +inf and alpha = inf gives -inf, exactly."""
    log_alpha = math.log(alpha) if alpha > 0 else -math.inf
    return (log_p_large - log_p_generic - log_alpha).tolist()


def ratio_decisions(log_ratios: list[float], sampler: Sampler) -> tuple[int, list[float]]:
    """The ratio test's decisions from the drafts' log ratios: what :func:`ratio_test` decides from full
    rows, and what a Cloud that only has the drafts' log-probabilities (a serving engine's) decides."""
    ratios: list[float] = []
    for log_ratio in log_ratios:
        ratios.append(_safe_exp(log_ratio))
        threshold = 0.0 if sampler.greedy else math.log(max(sampler.uniform(), 1e-300))
        if not log_ratio >= threshold:
            return len(ratios) - 1, ratios
    return len(log_ratios), ratios


def match_test(generalist_rows: torch.Tensor, draft_ids: list[int]) -> int:
    """Standard greedy speculative decoding: accept while the draft equals the Generalist's argmax."""
    accepted = 0
    for row, token in zip(generalist_rows, draft_ids):
        if int(row.argmax()) != token:
            break
        accepted += 1
    return accepted


def residual_test(
    target_rows: torch.Tensor,  # [k, V] steered logits at each draft position, combined on the Edge
    draft_rows: list[torch.Tensor],  # k x [V] the Specialist's logits each draft came from
    draft_ids: list[int],
    sampler: Sampler,
) -> tuple[int, int | None, list[float]]:
    """Exact speculative sampling towards Q = sampler.probs(target).

    Accept draft y with probability min(1, Q(y) / q(y)), q being the draft
    distribution; at the first rejection draw the replacement from
    norm(max(0, Q - q)). Every emitted token is then distributed exactly as Q
    (the caller draws the bonus from Q itself after k acceptances). Returns
    (accepted count, replacement or None, ratios).
    """
    ratios: list[float] = []
    for position, (token, draft_row) in enumerate(zip(draft_ids, draft_rows)):
        target = sampler.probs(target_rows[position])
        proposal = sampler.probs(draft_row)
        ratio = float(target[token] / proposal[token]) if proposal[token] > 0 else math.inf
        ratios.append(ratio)
        if sampler.uniform() < min(1.0, ratio):
            continue
        residual = (target - proposal).clamp_min(0.0)
        if float(residual.sum()) <= 0.0:  # Q == q up to rounding: a draw from Q is exact
            residual = target
        return position, sampler.draw(residual / residual.sum()), ratios
    return len(draft_ids), None, ratios


def steering_entries(
    generalist_row: torch.Tensor, generic_row: torch.Tensor | None, beta: float, top_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Cloud's share of the steered logits, ``z_L - beta * z_S0``, on at most ``top_k`` candidates.

    Candidates are the Generalist's ``top_k`` most likely tokens. (The paper cuts
    ``z_L - beta z_S0`` to its own top-k; on real models that ranking is led by
    tokens the generic Specialist finds implausible rather than tokens the
    Generalist likes, and recovery then emits junk. Q = p_L (p_S+ / p_S0)^beta is
    small wherever p_L is, so the Generalist's top-k holds its mass.)
    ``top_k <= 0`` keeps the whole vocabulary. Returns (ids [m], values [m]).
    """
    if top_k <= 0 or top_k >= generalist_row.numel():
        ids = torch.arange(generalist_row.numel())
    else:
        ids = generalist_row.topk(top_k).indices
    values = generalist_row[ids]
    if beta and generic_row is not None:
        values = values - beta * generic_row[ids]
    return ids, values


def recover(
    ids: torch.Tensor, public_values: torch.Tensor, private_row: torch.Tensor | None, beta: float, sampler: Sampler
) -> int:
    """Choose a token from the steered logits ``z = (z_L - beta z_S0) + beta z_S+`` (paper Eq. 8).

    Only the candidates the Cloud sent are eligible; the private term is added
    on the Edge, so the Specialist's logits never leave the device. ``private_row`` may be None only
    with beta = 0 (the Edge then does not read it).
    """
    if not beta:
        return int(ids[sampler.choose(public_values)])
    if private_row is None:
        raise ValueError("steering with beta != 0 needs the Specialist's private logits row")
    return int(ids[sampler.choose(public_values + beta * private_row[ids])])


def costeer_refine(
    log_p_large: torch.Tensor,  # [m] Generalist log-probs on the candidate ids
    log_p_generic: torch.Tensor,  # [m] generic Specialist log-probs on the same ids
    log_p_private: torch.Tensor,  # [m] personalized Specialist log-probs on the same ids
    iterations: int,
    step: float,
    regularization: float,
) -> torch.Tensor:
    """CoSteer's per-token online refinement of the Generalist's distribution.

    Our reading of the CoSteer release (FTRL-style, fp32): mirror ascent on
    ``E_pi[r] - lambda * KL(pi || p_L)`` with the local delta ``r = log p_S+ - log p_S0``
    as the reward and a ``step / (1 + step * lambda * t)`` schedule. It converges
    towards ``p_L * exp(r / lambda)``, i.e. Eq. 4 with beta = 1 / lambda. Returns
    the refined logits ``[m]``.
    """
    reward = log_p_private - log_p_generic
    log_pi = log_p_large.clone()
    for t in range(1, iterations + 1):
        gradient = reward - regularization * (log_pi - log_p_large)
        log_pi = torch.log_softmax(log_pi + step / (1.0 + step * regularization * t) * gradient, -1)
    return log_pi


def _safe_exp(x: float) -> float:
    return math.inf if x > 700 else math.exp(x)


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
