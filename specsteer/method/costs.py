"""What passes cost: the cost of one forward pass as a line in its tokens, fitted on measured passes, and
the speed bound of a speculative round (DESIGN §6). Pure arithmetic, shared by the engine's adaptive draft
length, the calibration and the deployment projection."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple


def check_number(name: str, value: float, *, positive: bool = False, allow_inf: bool = False) -> None:
    """Raise ValueError unless ``value`` is a number >= 0 (> 0 if ``positive``; infinite only if ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if math.isinf(value) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class PassCost:
    """Seconds of one forward pass over ``tokens`` tokens: ``base_s + per_token_s * tokens``."""

    base_s: float
    per_token_s: float

    def __post_init__(self) -> None:
        check_number("base_s", self.base_s)
        check_number("per_token_s", self.per_token_s)

    def seconds(self, tokens: int) -> float:
        return self.base_s + self.per_token_s * tokens


class PassSample(NamedTuple):
    tokens: int
    seconds: float


def flat_cost(samples: Sequence[PassSample]) -> PassCost:
    return PassCost(sum(s.seconds for s in samples) / len(samples), 0.0)


def proportional_cost(samples: Sequence[PassSample]) -> PassCost:
    tokens = sum(s.tokens for s in samples)
    if tokens == 0:
        return flat_cost(samples)
    return PassCost(0.0, sum(s.seconds for s in samples) / tokens)


def fit_pass_cost(samples: Sequence[PassSample], single_size: Callable[[Sequence[PassSample]], PassCost]) -> PassCost:
    """Least squares ``seconds = base + per_token * tokens`` over measured passes.

    Every fit here keeps the samples' total time (least squares with an intercept does, and so do
    the fallbacks), which is what makes a trace's own profile reproduce its measured time. With one
    pass size only, ``single_size`` decides (``flat_cost`` for decode steps, ``proportional_cost`` for
    prompts); a negative slope (noise) falls back to flat, a negative base to proportional.
    """
    if not samples:
        raise ValueError("no passes to fit")
    sizes = {s.tokens for s in samples}
    if len(sizes) < 2:
        return single_size(samples)
    n = len(samples)
    mean_tokens = sum(s.tokens for s in samples) / n
    mean_seconds = sum(s.seconds for s in samples) / n
    spread = sum((s.tokens - mean_tokens) ** 2 for s in samples)
    slope = sum((s.tokens - mean_tokens) * (s.seconds - mean_seconds) for s in samples) / spread
    if slope < 0:
        return flat_cost(samples)
    base = mean_seconds - slope * mean_tokens
    if base < 0:
        return proportional_cost(samples)
    return PassCost(base, slope)


def speculative_bound(
    acceptance: float, k: float, t_draft: float, t_large: float, t_generic: float, device_steps: float | None = None
) -> float:
    """DESIGN §6: tokens per second of a round of k drafts with per-token acceptance ``acceptance``.

    E = (1 - a^(k+1)) / (1 - a) tokens (the bonus token included) per
    T = k t_S + t_L(k+1) + t_S0(k+1) seconds. ``device_steps`` replaces the k of the t_S term
    with the Specialist steps a round really took: a steered bonus token needs the Specialist's
    logits after the last draft, one step more than DESIGN charges.
    """
    tokens_per_round = k + 1 if acceptance >= 1 else (1 - acceptance ** (k + 1)) / (1 - acceptance)
    steps = k if device_steps is None else device_steps
    return tokens_per_round / (steps * t_draft + t_large + t_generic)
