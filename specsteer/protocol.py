"""The device-cloud protocol (DESIGN §2, paper Appendix D).

The Edge holds the Specialist and the user's private prompt; the Cloud holds
the Generalist and a generic copy of the Specialist and never sees the
history. They exchange only the messages below, serialized to bytes by
:class:`Link`, which records every message with its exact wire size.

Uplink (Edge -> Cloud)
  ``open``   once: the plain prompt ids (the task input, not private) and the
             decoding settings the Cloud needs.
  ``draft``  per round: ``keep`` (how many of the previous round's drafts the
             Edge kept, exact mode only), ``append`` (tokens the Edge chose since:
             the recovered or bonus token) and the new ``draft`` ids.
Downlink (Cloud -> Edge)
  ``verdict`` per round: the number of drafts accepted and, where a token must
             be chosen, the Cloud's share of the steered logits truncated to the
             top-k entries (ids + values). In exact mode: full rows instead, and
             the Edge decides.
  ``tokens`` the Generalist's own tokens (the ``llm`` baseline).

Nothing computed from the private history crosses the link except the ids of
tokens the Edge chose to emit (or proposes as drafts).
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from .decoding import (
    ForwardLog,
    Sampler,
    Stream,
    costeer_refine,
    draft,
    match_test,
    ratio_test,
    recover,
    residual_test,
    steering_entries,
)
from .deployment import LinkConditions, LinkEmulator
from .events import LinkMessage, TraceStep

# --------------------------------------------------------------------------- wire format
#
# Every message: 1 byte kind, then fields. Integers are little-endian; token ids
# are uint32, counts uint32, logit values float32 (exact, so the Edge recovers
# the same token an all-in-one implementation would).

_KINDS = {"open": 1, "draft": 2, "verdict": 3, "tokens": 4}
MAX_DRAFT_LEN = 16
# Tokens a stream may hold past its prompt and token budget: a round's drafts and the token chosen
# after them are read before the budget check ends the generation.
DRAFT_HEADROOM = MAX_DRAFT_LEN + 2
_KIND_NAMES = {code: name for name, code in _KINDS.items()}
_VERIFY_RULES = ("ratio", "match", "exact", "costeer")


def _ids(values) -> bytes:
    array = np.asarray(values, dtype="<u4")
    return struct.pack("<I", array.size) + array.tobytes()


def _floats(values) -> bytes:
    array = np.asarray(values, dtype="<f4")
    return struct.pack("<I", array.size) + array.tobytes()


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.offset = 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return values

    def ids(self) -> list[int]:
        (count,) = self.take("<I")
        array = np.frombuffer(self.data, dtype="<u4", count=count, offset=self.offset)
        self.offset += 4 * count
        return array.tolist()

    def floats(self) -> np.ndarray:
        (count,) = self.take("<I")
        array = np.frombuffer(self.data, dtype="<f4", count=count, offset=self.offset).copy()
        self.offset += 4 * count
        return array


def encode(kind: str, payload: dict) -> bytes:
    head = struct.pack("<B", _KINDS[kind])
    if kind == "open":
        rule = _VERIFY_RULES.index(payload["rule"])
        settings = struct.pack(
            "<Bdddi?", rule, payload["alpha"], payload["beta"], payload["temperature"], payload["top_k"], payload["bonus"]
        )
        budget = struct.pack("<dqI", payload["top_p"], payload["seed"], payload["max_new_tokens"])
        return head + settings + budget + _ids(payload["prompt"])
    if kind == "draft":
        return head + struct.pack("<i", payload["keep"]) + _ids(payload["append"]) + _ids(payload["draft"])
    if kind == "verdict":
        body = struct.pack("<I", payload["accepted"]) + _ids(payload["ids"])
        return head + body + _floats(payload["values"]) + _floats(payload["extra"])
    if kind == "tokens":
        return head + _ids(payload["ids"])
    raise ValueError(f"unknown message kind {kind!r}")


def decode(data: bytes) -> tuple[str, dict]:
    reader = _Reader(data)
    (code,) = reader.take("<B")
    kind = _KIND_NAMES[code]
    if kind == "open":
        rule, alpha, beta, temperature, top_k, bonus = reader.take("<Bdddi?")
        top_p, seed, max_new_tokens = reader.take("<dqI")
        payload = {"rule": _VERIFY_RULES[rule], "alpha": alpha, "beta": beta, "temperature": temperature,
                   "top_k": top_k, "bonus": bonus, "top_p": top_p, "seed": seed, "max_new_tokens": max_new_tokens,
                   "prompt": reader.ids()}
    elif kind == "draft":
        (keep,) = reader.take("<i")
        payload = {"keep": keep, "append": reader.ids(), "draft": reader.ids()}
    elif kind == "verdict":
        (accepted,) = reader.take("<I")
        payload = {"accepted": accepted, "ids": reader.ids(), "values": reader.floats(), "extra": reader.floats()}
    else:
        payload = {"ids": reader.ids()}
    return kind, payload


def _summary(kind: str, payload: dict) -> dict:
    """What the transcript keeps: ids in full, long float arrays only by size."""
    shown = {}
    for key, value in payload.items():
        if isinstance(value, np.ndarray):
            shown[key] = value.tolist() if value.size <= 64 else f"<{value.size} float32>"
        elif isinstance(value, list) and len(value) > 256 and key == "ids" and kind == "verdict":
            shown[key] = f"<{len(value)} ids>"
        else:
            shown[key] = value
    return shown


@dataclass
class Link:
    """The channel between Edge and Cloud: bytes only, every message recorded.

    ``conditions`` (None: in process, no delay) makes ``send`` hold the caller as a network with that
    round-trip time and bandwidth would, pipelining one-direction streams (specsteer.deployment
    explains the rule); the time waited is the message's ``seconds`` in the trace. ``emulator``
    replaces the default one built from ``conditions`` (tests pass one on a virtual clock).
    """

    transcript: list[LinkMessage] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=lambda: {"uplink": 0, "downlink": 0})
    trace: list[TraceStep] = field(default_factory=list)  # shared with the ForwardLog: one timeline
    conditions: LinkConditions | None = None
    emulator: LinkEmulator | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.emulator is None and self.conditions is not None:
            self.emulator = LinkEmulator(self.conditions)
        elif self.emulator is not None:
            self.conditions = self.emulator.conditions

    def send(self, direction: str, kind: str, payload: dict) -> dict:
        data = encode(kind, payload)
        waited = self.emulator.carry(direction, len(data)) if self.emulator is not None else 0.0
        received_kind, received = decode(data)  # the other side sees only what the bytes carry
        self.transcript.append(LinkMessage(direction, received_kind, _summary(received_kind, received), len(data)))
        self.totals[direction] += len(data)
        self.trace.append(TraceStep("message", direction, len(data), waited))
        return received


# --------------------------------------------------------------------------- Cloud


def needs_generic(rule: str, beta: float) -> bool:
    """Whether the generic Specialist copy must run: the ratio test and CoSteer always use it, steering only when beta != 0."""
    return rule in ("ratio", "costeer") or (rule == "exact" and beta != 0)


class Cloud:
    """The Generalist and the generic Specialist copy. Knows nothing of the user's history."""

    def __init__(self, generalist, generic_specialist, vocab_size: int, forward_log: ForwardLog):
        self._generalist = generalist
        self._generic = generic_specialist
        self._vocab_size = vocab_size
        self._forward_log = forward_log
        self._settings: dict = {}
        self.large: Stream | None = None
        self.generic: Stream | None = None
        self._rows: tuple[torch.Tensor, torch.Tensor] | None = None  # last verify rows, exact mode
        self._sampler = Sampler()
        self.last_ratios: list[float] = []  # instrumentation for display; never sent

    def open(self, message: dict) -> None:
        self._settings = message
        capacity = len(message["prompt"]) + message["max_new_tokens"] + DRAFT_HEADROOM
        self.large = Stream(self._generalist, message["prompt"], self._vocab_size, self._forward_log, "generalist",
                            capacity)
        if needs_generic(message["rule"], message["beta"]):
            self.generic = Stream(self._generic, message["prompt"], self._vocab_size, self._forward_log,
                                  "specialist0", capacity)
        if message["temperature"] > 0:
            self._sampler = Sampler.make(True, message["temperature"], message["top_p"], message["seed"] + 1)

    def verify(self, message: dict) -> dict:
        """One round: score the drafts with both Cloud models in one pass each, then decide."""
        settings = self._settings
        if settings["rule"] == "exact":
            self._keep(message["keep"])
        streams = [s for s in (self.large, self.generic) if s is not None]
        for stream in streams:
            stream.append(message["append"] + message["draft"])
        k = len(message["draft"])
        large_rows = self.large.predict(k + 1)  # [k+1, V]
        generic_rows = self.generic.predict(k + 1) if self.generic else None

        if settings["rule"] in ("exact", "costeer"):
            return self._send_rows(large_rows, generic_rows)

        self.last_ratios = []
        if settings["rule"] == "ratio":
            accepted, self.last_ratios = ratio_test(large_rows, generic_rows, message["draft"], settings["alpha"], self._sampler)
        else:
            accepted = match_test(large_rows, message["draft"])
        self._rewind(accepted, k, large_rows, generic_rows)
        if accepted == k and not settings["bonus"]:
            return _verdict(accepted)
        generic_row = generic_rows[accepted] if generic_rows is not None else None
        beta = settings["beta"] if generic_row is not None else 0.0
        ids, values = steering_entries(large_rows[accepted], generic_row, beta, settings["top_k"])
        return _verdict(accepted, ids.tolist(), values.numpy())

    def close(self) -> None:
        """Give the streams' caches back for reuse by a later request with the same prompt."""
        for stream in (self.large, self.generic):
            if stream is not None:
                stream.close()

    def generate(self, count: int, sampler: Sampler) -> dict:
        """The ``llm`` baseline: the Generalist decodes alone and sends its tokens down."""
        ids = []
        for _ in range(count):
            token = sampler.choose(self.large.predict(1)[0])
            self.large.append([token])
            ids.append(token)
        return {"ids": ids}

    def _send_rows(self, large_rows: torch.Tensor, generic_rows: torch.Tensor | None) -> dict:
        """Exact and CoSteer modes: the Edge decides, so it needs the Cloud's rows (no truncation for exact)."""
        self._rows = (large_rows, generic_rows)
        settings = self._settings
        if settings["rule"] == "costeer":
            # Candidates: the Generalist's top-k; both Cloud log-probs on them.
            log_large = torch.log_softmax(large_rows[-1], -1)
            log_generic = torch.log_softmax(generic_rows[-1], -1)
            ids, values = steering_entries(log_large, None, 0.0, settings["top_k"])  # log p_L on its top-k
            return _verdict(0, ids.tolist(), values.numpy(), log_generic[ids].numpy())
        public = large_rows - settings["beta"] * generic_rows if generic_rows is not None else large_rows
        return _verdict(0, values=public.reshape(-1).numpy())

    def _keep(self, kept: int) -> None:
        """Exact mode: the Edge reports how many of the last round's drafts it kept."""
        if kept >= 0 and self._rows is not None:
            large_rows, generic_rows = self._rows
            self._rewind(kept, large_rows.shape[0] - 1, large_rows, generic_rows)
        self._rows = None

    def _rewind(self, kept: int, drafted: int, large_rows: torch.Tensor, generic_rows: torch.Tensor | None) -> None:
        """Forget the drafts after the first ``kept`` of ``drafted``; their rows replace the cut cache's logits."""
        if kept >= drafted:
            return
        length = len(self.large) - (drafted - kept)
        self.large.truncate(length, large_rows[kept])
        if self.generic is not None:
            self.generic.truncate(length, generic_rows[kept])


def _verdict(accepted: int, ids: list[int] = (), values: np.ndarray | None = None, extra: np.ndarray | None = None) -> dict:
    empty = np.zeros(0, np.float32)
    return {"accepted": accepted, "ids": list(ids), "values": empty if values is None else values,
            "extra": empty if extra is None else extra}


# --------------------------------------------------------------------------- Edge


@dataclass
class Settlement:
    """What the Edge makes of a verdict: drafts kept, the token it chose (if any), ratios."""

    accepted: int
    chosen: int | None
    ratios: list[float]


class Edge:
    """The Specialist reading the private prompt. The only holder of the user's history."""

    def __init__(self, specialist, private_prompt: list[int], vocab_size: int, forward_log: ForwardLog,
                 sampler: Sampler, stop_ids: frozenset[int], rule: str, beta: float,
                 costeer: tuple[int, float, float] = (20, 10.0, 2.0), stream_name: str = "specialist+",
                 draft_confidence: float = 0.0, max_new_tokens: int = 1024):
        self.costeer = costeer  # iterations, step, regularization
        self.draft_confidence = draft_confidence
        self.stream = Stream(specialist, private_prompt, vocab_size, forward_log, stream_name,
                             len(private_prompt) + max_new_tokens + DRAFT_HEADROOM)
        self.sampler = sampler
        self.stop_ids = stop_ids
        self.rule = rule
        self.beta = beta
        self._draft_rows: list[torch.Tensor] = []

    def close(self) -> None:
        self.stream.close()

    def draft(self, k: int, cancel: threading.Event | None = None) -> list[int]:
        """Up to ``k`` drafts; fewer when ``cancel`` is set meanwhile (the caller must not send them then)."""
        ids, self._draft_rows = draft(self.stream, k, self.sampler, self.stop_ids, self.draft_confidence, cancel)
        return ids

    def next_token(self) -> int:
        """Plain decoding on the device (the ``slm`` and ``slm+`` baselines)."""
        token = self.sampler.choose(self.stream.predict(1)[0])
        self.stream.append([token])
        return token

    def settle(self, verdict: dict, drafts: list[int], may_extend: bool) -> Settlement:
        """Apply the Cloud's verdict; choose the recovered or bonus token.

        ``may_extend`` is False when nothing may follow the accepted drafts (token
        budget spent, or the last draft ended the text), so no bonus is chosen.
        """
        if self.rule == "exact":
            return self._settle_exact(verdict, drafts, may_extend)
        if self.rule == "costeer":
            return Settlement(0, self._costeer_token(verdict), [])
        accepted = verdict["accepted"]
        if accepted < len(drafts):
            private_row = self._rewind(accepted)
        elif verdict["ids"] and may_extend:
            private_row = self._private_row_after_drafts()
        else:
            return Settlement(accepted, None, [])
        ids = torch.tensor(verdict["ids"])
        chosen = recover(ids, torch.from_numpy(verdict["values"]), private_row, self.beta, self.sampler)
        self.stream.append([chosen])
        return Settlement(accepted, chosen, [])

    def _private_row_after_drafts(self) -> torch.Tensor | None:
        """The Specialist's logits after the last draft, for a bonus token.

        With beta = 0 (standard SD) the bonus comes from the Cloud's logits alone, so
        the last draft stays pending and is fed together with the bonus token in the
        next round's first pass (two tokens cost about one step).
        """
        return self.stream.predict(1)[0] if self.beta else None

    def _rewind(self, accepted: int) -> torch.Tensor:
        """Drop the drafts after the accepted ones; return the private logits at the rejected position."""
        rejected_at = len(self.stream) - len(self._draft_rows) + accepted
        private_row = self._draft_rows[accepted]
        self.stream.truncate(rejected_at, private_row)
        return private_row

    def _settle_exact(self, verdict: dict, drafts: list[int], may_extend: bool) -> Settlement:
        public = torch.from_numpy(verdict["values"]).view(len(drafts) + 1, -1)  # [k+1, V]
        k = len(drafts)
        targets = public[:k] + self.beta * torch.stack(self._draft_rows) if k else public[:0]
        accepted, replacement, ratios = residual_test(targets, self._draft_rows, drafts, self.sampler)
        if accepted < k:
            self._rewind(accepted)
            chosen = replacement
        elif may_extend:
            private_row = self._private_row_after_drafts()
            chosen = self.sampler.choose(public[k] + self.beta * private_row if self.beta else public[k])
        else:
            return Settlement(accepted, None, ratios)
        self.stream.append([chosen])
        return Settlement(accepted, chosen, ratios)

    def _costeer_token(self, verdict: dict) -> int:
        ids = torch.tensor(verdict["ids"])
        log_private = torch.log_softmax(self.stream.predict(1)[0], -1)[ids]
        refined = costeer_refine(
            torch.from_numpy(verdict["values"]), torch.from_numpy(verdict["extra"]), log_private,
            *self.costeer,
        )
        chosen = int(ids[self.sampler.choose(refined)])
        self.stream.append([chosen])
        return chosen
