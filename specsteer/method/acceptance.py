"""Who decides how many of a round's drafts the Cloud keeps: the acceptance policy, one typed value at the Cloud's seam.

Under SpecSteer's rule the Cloud scores a round's ``k`` drafts with both of its models (one pass each) and
keeps the first ``accepted``. A policy makes that decision from what the Cloud holds then
(:class:`RoundScores`: both models' rows, the drafts, α, the session's sampler):

* :class:`RatioTest`, the default: the paper's ratio test (Eq. 7, ``decoding.ratio_test``), exactly as the
  Cloud always ran it.
* :class:`ScriptedRate` and :class:`ReplayedRounds` measure the engine rather than generate: they run the
  ratio test all the same (its cost is paid, its ratios reported) and replace its verdict, with each draft
  kept at a fixed rate (seeded) until the first refusal, or with the ``(k, accepted)`` of a stored
  generation's rounds (``GenerationStats.round_log``) round by round. On random weights (the engine
  benchmark) the test's own verdicts say nothing; these give the acceptance the measurement asks for.

A policy is a frozen value the Cloud service holds; each session starts its own decider (:meth:`start`), so
every generation draws from its own seed and replays from its first round. A rule that computes its
threshold at the Cloud (from how far p_L and p_S0 diverge, say) is another policy whose decider reads the
same rows; the Edge, the wire and the engine's loop do not change.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specsteer.method.decoding import Sampler, ratio_test
from specsteer.method.events import GenerationStats, RoundStep


@dataclass(frozen=True, eq=False)
class RoundScores:
    """What the Cloud holds when it decides a round: ``large_rows`` and ``generic_rows`` ``[k+1, V]`` (z_L and
    z_S0 after the committed prefix and after each draft), the ``drafts`` (k ids), the session's α and sampler."""

    large_rows: torch.Tensor
    generic_rows: torch.Tensor
    drafts: Sequence[int]
    alpha: float
    sampler: Sampler


class RoundDecider(Protocol):
    """One session's decisions, round after round."""

    def decide(self, scores: RoundScores) -> tuple[int, list[float]]:
        """How many drafts are kept (0..k), and the ratios of the drafts the ratio test scored (for display)."""
        ...


class AcceptancePolicy(Protocol):
    """How a Cloud decides its rounds (see the module); ``label`` names it in outputs."""

    @property
    def label(self) -> str: ...

    def start(self, seed: int) -> RoundDecider:
        """The decider of a new session (``seed``: the session's, from its Open)."""
        ...


def _ratio_test(scores: RoundScores) -> tuple[int, list[float]]:
    return ratio_test(scores.large_rows, scores.generic_rows, list(scores.drafts), scores.alpha, scores.sampler)


class _RatioDecider:
    def decide(self, scores: RoundScores) -> tuple[int, list[float]]:
        return _ratio_test(scores)


@dataclass(frozen=True)
class RatioTest:
    """The paper's ratio test: accept draft y with probability min(1, p_L(y) / (α p_S0(y)))."""

    @property
    def label(self) -> str:
        return "ratio test"

    def start(self, seed: int) -> RoundDecider:
        return _RatioDecider()


RATIO_TEST = RatioTest()  # the default everywhere


class _RateDecider:
    def __init__(self, rate: float, seed: int) -> None:
        self._rate = rate
        self._random = random.Random(seed)

    def decide(self, scores: RoundScores) -> tuple[int, list[float]]:
        _, ratios = _ratio_test(scores)  # run and paid for; its verdict is replaced
        accepted = 0
        while accepted < len(scores.drafts) and self._random.random() < self._rate:
            accepted += 1
        return accepted, ratios


@dataclass(frozen=True)
class ScriptedRate:
    """Each draft kept with probability ``rate``, independently, until the first refusal (drawn from ``seed``
    and the session's own seed): kept drafts per drafts decided (``stats.accepted / stats.verified``) is
    ``rate`` within binomial error."""

    rate: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"an acceptance rate is in [0, 1], not {self.rate!r}")

    @property
    def label(self) -> str:
        return f"scripted rate {self.rate:g} (seed {self.seed})"

    def start(self, seed: int) -> RoundDecider:
        return _RateDecider(self.rate, self.seed * 1_000_003 + seed)


class _ReplayDecider:
    def __init__(self, rounds: tuple[tuple[int, int], ...]) -> None:
        self._rounds = rounds
        self._next = 0

    def decide(self, scores: RoundScores) -> tuple[int, list[float]]:
        _, ratios = _ratio_test(scores)  # run and paid for; its verdict is replaced
        _, accepted = self._rounds[self._next % len(self._rounds)]
        self._next += 1
        return min(accepted, len(scores.drafts)), ratios


@dataclass(frozen=True)
class ReplayedRounds:
    """The rounds of a stored generation, ``(k, accepted)`` each, replayed in order: round ``i`` keeps the
    ``accepted`` of stored round ``i`` (at most the drafts it has: the Edge drafts its own ``k``, which equals
    the stored one where both run the same draft length and token budget). A generation with more rounds than
    the store starts it again from its first. ``source`` says where the rounds come from."""

    rounds: tuple[tuple[int, int], ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not self.rounds:
            raise ValueError("a replayed trace needs at least one round with drafts")
        for k, accepted in self.rounds:
            if not 0 <= accepted <= k:
                raise ValueError(f"a round keeps 0 to k of its k drafts, not {accepted} of {k}")

    @property
    def label(self) -> str:
        return f"replayed rounds ({len(self.rounds)} rounds{', ' + self.source if self.source else ''})"

    def start(self, seed: int) -> RoundDecider:
        return _ReplayDecider(self.rounds)

    @classmethod
    def of_round_log(cls, steps: Iterable[RoundStep], source: str = "") -> ReplayedRounds:
        """The rounds that sent drafts, from a generation's round log."""
        return cls(tuple((step.drafted, step.accepted) for step in steps if step.drafted > 0), source)

    @classmethod
    def of_stats(cls, stats: GenerationStats, source: str = "") -> ReplayedRounds:
        if not stats.round_log:
            raise ValueError("these statistics have no round log to replay (stored before rounds were logged?)")
        return cls.of_round_log(stats.round_log, source)

    @property
    def acceptance(self) -> float:
        """Kept drafts per draft decided, as ``stats.accepted / stats.verified`` counts it."""
        kept = sum(accepted for _, accepted in self.rounds)
        decided = sum(min(accepted + 1, k) for k, accepted in self.rounds)
        return kept / decided
