"""How a generation decodes: its method and settings (:class:`DecodeConfig`), validated, and whether they can
run on a pair whose two models use different tokenizers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specsteer.method.catalog import METHOD_INFO, METHODS
from specsteer.method.p3 import P3Params
from specsteer.protocol.rules import cda_problem
from specsteer.protocol.wire import MAX_DRAFT_LEN, MAX_NEW_TOKENS

if TYPE_CHECKING:  # loading a pair loads torch; the config only reads one's tokenizer facts
    from specsteer.models.pair import LoadedPair

# What runs on a cross-tokenizer pair (specsteer.method.crosstok): SpecSteer's ratio rule and LightCoSteer
# (rounds of no drafts) over the common byte space, the device-only baselines and the Generalist alone
# (given the plain prompt, or for llm+ the private one, each rendered by its own tokenizer).
CROSS_TOKENIZER_METHODS = ("slm", "slm+", "llm", "llm+", "lightcosteer", "specsteer")
# Why the others do not.
_ONE_VOCABULARY_ONLY = {
    "sd": "its test asks whether the Generalist would choose the very token id drafted (or, sampling, resamples "
    "from p_L's residual), which needs one vocabulary",
    "costeer": "its iterative refinement runs on the three models' distributions over one shared vocabulary",
    "p3": "the Specialist tests the Generalist's very token ids, which needs one vocabulary",
}


@dataclass
class DecodeConfig:
    method: str = "specsteer"
    alpha: float = 0.1
    beta: float = 1.0
    draft_len: int = 4
    adaptive_draft: bool = False  # choose k <= draft_len each round from the DESIGN §6 bound
    draft_confidence: float = 0.0  # end a round's drafting after a draft the Specialist gave p < this; 0 = off
    downlink_top_k: int = 64  # 0 sends the whole vocabulary
    bonus: bool = True
    max_new_tokens: int = 256
    sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    exact: bool = False
    costeer_iters: int = 20
    costeer_eta: float = 10.0
    costeer_lambda: float = 2.0
    # The private-span guard (beyond the paper): no token the Edge sends completes a run of this many
    # token ids found in the private prompt and not in the plain one (drafting.PrivateSpanGuard); 0 = off.
    private_guard: int = 0
    p3: P3Params = P3Params()  # P³'s Cloud draft length and threshold (method p3 only)
    # The ratio test's threshold: None, the fixed α (the paper); a number, CDA's λ (the Cloud adapts α per draft to
    # the divergence of p_L and p_S0: specsteer.method.acceptance). SpecSteer's (not exact) only.
    cda_lambda: float | None = None
    # Display only: each token's event carries its numbers (method.token_details; what the Edge and an
    # in-process Cloud computed anyway). Off, the loop computes nothing extra; it never changes a decision.
    details: bool = False

    def validate(self) -> DecodeConfig:
        problems = []
        if self.method not in METHODS:
            problems.append(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not (self.alpha >= 0):  # also rejects NaN
            problems.append("alpha must be >= 0 (0 accepts every draft, inf rejects every draft)")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            problems.append("beta must be a finite number >= 0")
        if not 1 <= self.draft_len <= MAX_DRAFT_LEN:
            problems.append(f"draft length must be between 1 and {MAX_DRAFT_LEN}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            problems.append(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}")
        if not 0 <= self.draft_confidence < 1:
            problems.append("draft confidence must be in [0, 1) (0 switches the early stop off)")
        if self.downlink_top_k < 0:
            problems.append("downlink top-k must be >= 0 (0 = whole vocabulary)")
        if self.sample and not (self.temperature > 0 and 0 < self.top_p <= 1):
            problems.append("sampling needs temperature > 0 and 0 < top_p <= 1")
        if self.costeer_iters < 1:
            problems.append("CoSteer needs at least one iteration")
        if self.private_guard and not 2 <= self.private_guard <= 64:
            problems.append("the private-span guard's n must be between 2 and 64 tokens (0 switches it off)")
        if self.private_guard and self.exact:
            problems.append("the private-span guard does not cover the exact-target variant (its residual draw)")
        if self.method == "p3":
            problems += self.p3.problems(MAX_DRAFT_LEN)
        problems += self._acceptance_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _acceptance_problems(self) -> list[str]:
        if self.cda_lambda is None:
            return []
        problem = cda_problem(self.cda_lambda)
        if problem:
            return [problem]
        if self.method in METHOD_INFO and not METHOD_INFO[self.method].takes_alpha:
            return [f"CDA adapts SpecSteer's α: {METHOD_INFO[self.method].label} has none (use the fixed acceptance)"]
        if self.exact:
            return [
                "CDA and the exact-target variant exclude each other: the exact variant uses the true partition "
                "function, not an α to adapt"
            ]
        return []


def cross_tokenizer_problem(pair: LoadedPair, config: DecodeConfig) -> str | None:
    """Why ``config`` cannot run on ``pair`` because its two models use different tokenizers, or None."""
    if pair.cross is None:
        return None
    if config.method not in CROSS_TOKENIZER_METHODS:
        reason = _ONE_VOCABULARY_ONLY.get(config.method, "it compares the two models token id by token id")
        return (
            f"{METHOD_INFO[config.method].label} is not available on a cross-tokenizer pairing "
            f"({pair.pairing_id}): {reason}. "
            f"Available here: {', '.join(METHOD_INFO[m].label for m in CROSS_TOKENIZER_METHODS)}."
        )
    if config.method == "specsteer" and config.exact:
        return (
            "SpecSteer's exact-target variant is not available on a cross-tokenizer pairing: its residual "
            "resampling needs the three distributions over one vocabulary."
        )
    if config.cda_lambda is not None:
        return (
            "SpecSteer's CDA acceptance is not available on a cross-tokenizer pairing: it measures how far p_L and "
            "p_S0 diverge over one vocabulary."
        )
    return None
