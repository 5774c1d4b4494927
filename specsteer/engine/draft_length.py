"""How many tokens each round drafts: the configured k, or (adaptive) the k the DESIGN §6 bound favours now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specsteer.method.costs import PassCost, PassSample, fit_pass_cost, flat_cost, speculative_bound
from specsteer.method.events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM, GenerationStats

if TYPE_CHECKING:  # the forward log's module loads torch; this one reads only its trace
    from specsteer.method.decoding import ForwardLog


class DraftLength:
    """The draft length of each round: fixed, or the k that maximises the bound right now.

    Adaptive mode uses this generation's own measurements: the per-token
    acceptance so far, a Specialist step's mean time, and each Cloud model's
    pass time as a function of the tokens in the pass (fitted on this
    generation's passes). A transformers pass over a few tokens costs about
    one step; a llama.cpp pass on a CPU grows with its tokens, which makes
    long drafts expensive there. It starts at the maximum until there is data.
    """

    MIN_VERIFIED = 8

    def __init__(self, maximum: int, adaptive: bool):
        self.maximum = maximum
        self.adaptive = adaptive

    def choose(self, stats: GenerationStats, log: ForwardLog) -> int:
        if not self.adaptive or stats.verified < self.MIN_VERIFIED:
            return self.maximum
        draft_cost, large_cost = pass_cost(log.trace, EDGE_STREAM), pass_cost(log.trace, GENERALIST_STREAM)
        if draft_cost is None or large_cost is None:
            return self.maximum
        if len({sample.tokens for sample in _passes(log.trace, GENERALIST_STREAM)}) < 2:
            # Every verification so far read as many tokens, so how a pass's time grows with its
            # tokens is unknown: probe a shorter round once to learn it.
            return max(1, self.maximum // 2)
        generic_cost = pass_cost(log.trace, GENERIC_STREAM) or PassCost(0.0, 0.0)
        acceptance = min(max(stats.accepted / stats.verified, 0.01), 0.99)
        return max(
            range(1, self.maximum + 1),
            key=lambda k: speculative_bound(
                acceptance, k, draft_cost.seconds(1), large_cost.seconds(k + 1), generic_cost.seconds(k + 1)
            ),
        )


def _passes(trace: Sequence, stream: str) -> list[PassSample]:
    """A stream's passes after its first (the prefill)."""
    return [PassSample(step.size, step.seconds) for step in trace if step.kind == "forward" and step.who == stream][1:]


def pass_cost(trace: Sequence, stream: str) -> PassCost | None:
    """The deployment projection's least-squares line through a stream's passes after its prefill (flat
    when they all read as many tokens); None before the stream has had two passes."""
    points = _passes(trace, stream)
    return fit_pass_cost(points, flat_cost) if points else None
