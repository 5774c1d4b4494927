"""What configures an Edge: one frozen value (``EdgeParams``), CoSteer's refinement settings among it."""

from __future__ import annotations

from dataclasses import dataclass, field

from specsteer.method.decoding import Sampler
from specsteer.method.drafting import PrivateSpanGuard
from specsteer.method.events import EDGE_STREAM
from specsteer.protocol.rules import Rule


@dataclass(frozen=True)
class CoSteerParams:
    """CoSteer's per-token refinement on the Edge (``steering.costeer_refine``)."""

    iterations: int = 20
    step: float = 10.0  # eta
    regularization: float = 2.0  # lambda: the refinement converges to beta = 1 / lambda


@dataclass(frozen=True)
class EdgeParams:
    """How an Edge drafts and settles a session's verdicts.

    ``temperature`` 0 is greedy; otherwise the Edge samples with ``top_p`` from its own generator seeded
    with ``seed`` (each Edge makes its own: a params value holds no state). ``guard``, when set, keeps
    drafts and chosen tokens from completing a private n-gram (drafting.PrivateSpanGuard; read-only).
    """

    rule: Rule  # the session's verification rule: which payload its verdicts carry
    beta: float  # steering strength (0: standard SD, the Cloud's logits alone)
    stop_ids: frozenset[int]  # the ids that end a text: a draft that is one ends the round
    max_new_tokens: int = 1024  # the token budget (sizes the Specialist's cache)
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    draft_confidence: float = 0.0  # end drafting after a draft the Specialist gave p < this; 0 = off
    costeer: CoSteerParams = field(default_factory=CoSteerParams)
    stream_name: str = EDGE_STREAM  # how the Specialist's passes are named in the forward log
    guard: PrivateSpanGuard | None = None
    details: bool = False  # keep each token's Edge numbers for display (method.token_details); decides nothing

    def sampler(self) -> Sampler:
        """A fresh sampler of these settings (its generator starts at ``seed``)."""
        return Sampler.make(self.temperature > 0, self.temperature, self.top_p, self.seed)
