"""Who decides how many of a round's drafts the Cloud keeps: the acceptance policy, one typed value at the Cloud's seam.

Under SpecSteer's rule the Cloud scores a round's ``k`` drafts with both of its models (one pass each) and
keeps the first ``accepted``. A policy makes that decision from what the Cloud holds then
(:class:`RoundScores`: both models' rows, the drafts, α, the session's sampler):

* :class:`RatioTest`, the default: the paper's ratio test (Eq. 7, ``verification.ratio_test``), exactly as the
  Cloud always ran it.
* :class:`ScriptedRate` and :class:`ReplayedRounds` measure the engine rather than generate: they run the
  ratio test all the same (its cost is paid, its ratios reported) and replace its verdict, with each draft
  kept at a fixed rate (seeded) until the first refusal, or with the ``(k, accepted)`` of a stored
  generation's rounds (``GenerationStats.round_log``) round by round. On random weights (the engine
  benchmark) the test's own verdicts say nothing; these give the acceptance the measurement asks for.

* :class:`DivergenceAdaptive` (CDA), an acceptance rule a session asks for (``Open.cda_lambda``): the ratio
  test with α adapted per draft to how far the Cloud's two distributions diverge there (below).

A policy is a frozen value; each session starts its own decider (:meth:`start`), so every generation draws
from its own seed and replays from its first round. The Cloud service holds the scripted ones (a measurement's);
a session whose Open names CDA gets a :class:`DivergenceAdaptive` of its λ instead.

Divergence-adaptive acceptance (CDA)
------------------------------------
Per draft y at position i of a round, with p_L and p_S0 the Generalist's and the generic copy's next-token
distributions there (the rows the ratio test reads: temperature 1 in greedy mode, the sampler's otherwise)::

    α_i = α · exp(−λ · JSD(p_L, p_S0))        JSD in nats, in [0, ln 2]; exactly 0 where the rows are equal
    accept y  with probability  min(1, p_L(y) / (α_i p_S0(y)))   (greedy: iff p_L(y) >= α_i p_S0(y))

So α_i lies in [α·2^−λ, α]: where the two Cloud models agree the test is the paper's at α, and where they
disagree it is relaxed, down to half of α at λ = 1. λ = 0, or rows that are equal (a generic copy with the Generalist's
weights), give the fixed α exactly. Nothing crosses the link for it: both distributions are the Cloud's, and
the Open carries λ. CDA claims no exactness: like the fixed-α rule it is a speed/quality knob, not a sampler of
Q (the exact-target variant, which uses the true partition function instead of α, has no α to adapt and is not
offered with it).

What was read: the AsymSpec release (the SpecSteer authors' follow-up, "AsymSpec: Context-Asymmetric Speculative
Decoding for Agentic LLMs"), github.com/USTC-StarTeam/AsymSpec: ``README.md`` (commit 15582b2), which names it
Context-Divergence Acceptance, ``gamma_eff = gamma * exp(-JSD)``; ``configs/paper.yaml`` and
``tests/test_cda_math.py`` (commit 36bc621; defaults γ = 0.5, β = 1, greedy, method ``jsd``); and its sampler,
``vllm_specsteer/v0.10.mm/specsteer_sampler.py`` (commit ec7a493). There the threshold is computed per drafted
position from log-softmax rows at temperature 1 in fp32, the JSD in nats clamped at 0, scaled by λ
(``JSD_LAMBDA``, default 1), and a draft is kept while ``p_target > γ_eff · p_base``; on the first refusal the
argmax of the fused logits is emitted, after a fully kept round a bonus token. Its γ is SpecSteer's α (the same
rule, ``p_L > γ · p_S0``), so α here plays γ's part and λ is the one new parameter.

Where this differs from AsymSpec:

* **Which two distributions.** AsymSpec measures the divergence between its drafter's two context views, the
  small model reading the full context and the same model reading the compressed one (SpecSteer's p_S+ and p_S0).
  Here p_S+ is private and stays on the device, and a divergence computed from it is derived from the history,
  which must not reach the Cloud. So CDA here measures JSD(p_L, p_S0), the two distributions the Cloud already
  holds: the same formula over another pair, so it relaxes where the Cloud's two models disagree, not where the
  history changes the drafter. Whether that helps is an empirical question (``docs/research/CDA_PLAN.md``).
* **The boundary.** A draft at exactly the threshold is kept here (SpecSteer's ``>=``, so that λ = 0 is the fixed
  rule bit for bit); AsymSpec refuses it (``>``).
* **Sampling.** AsymSpec's rule is greedy only; here the same α_i enters the sampling form of the ratio test,
  with the divergence read at the sampler's temperature.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specsteer.method.catalog import acceptance_label
from specsteer.method.decoding import Sampler
from specsteer.method.events import GenerationStats, RoundStep
from specsteer.method.verification import of_drafts, ratio_decisions, ratio_test, tested_log_probs


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


# --------------------------------------------------------------------------- divergence-adaptive acceptance (CDA)


def jensen_shannon(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """JSD(p, q) in nats for each row of two ``[n, V]`` log-distributions: ``[n]`` in [0, ln 2], exactly 0 for
    equal rows (a token one side gives no mass adds only the other side's term)."""
    log_m = torch.logaddexp(log_p, log_q) - math.log(2.0)

    def kl_to_middle(log_a: torch.Tensor) -> torch.Tensor:
        mass = log_a.exp()
        return torch.where(mass > 0, mass * (log_a - log_m), torch.zeros_like(mass)).sum(-1)

    divergence = (0.5 * (kl_to_middle(log_p) + kl_to_middle(log_q))).clamp(0.0, math.log(2.0))
    return torch.where((log_p == log_q).all(-1), torch.zeros_like(divergence), divergence)


def cda_log_thresholds(alpha: float, divergence: torch.Tensor, strength: float) -> torch.Tensor:
    """log α_i = log α − λ·JSD_i (module doc), for α in [0, inf]: α = 0 gives −inf (every draft kept), α = inf
    gives +inf (every draft refused), λ = 0 gives log α."""
    log_alpha = math.log(alpha) if alpha > 0 else -math.inf
    if strength == 0 or math.isinf(log_alpha):
        return torch.full_like(divergence, log_alpha)
    return log_alpha - strength * divergence


def cda_test(scores: RoundScores, strength: float) -> tuple[int, list[float], list[float]]:
    """The ratio test with α adapted per draft (module doc): drafts kept, the ratios p_L / (α_i p_S0) of the drafts
    decided, and the divergence JSD_i of every draft (nats)."""
    drafts = list(scores.drafts)
    k = len(drafts)
    if k == 0:
        return 0, [], []
    log_large = tested_log_probs(scores.large_rows[:k], scores.sampler)
    log_generic = tested_log_probs(scores.generic_rows[:k], scores.sampler)
    divergence = jensen_shannon(log_large, log_generic)
    log_ratio = of_drafts(log_large, drafts) - of_drafts(log_generic, drafts)
    log_ratios = (log_ratio - cda_log_thresholds(scores.alpha, divergence, strength)).tolist()
    accepted, ratios = ratio_decisions(log_ratios, scores.sampler)
    return accepted, ratios, divergence.tolist()


class _CdaDecider:
    def __init__(self, strength: float) -> None:
        self._strength = strength

    def decide(self, scores: RoundScores) -> tuple[int, list[float]]:
        accepted, ratios, _ = cda_test(scores, self._strength)
        return accepted, ratios


@dataclass(frozen=True)
class DivergenceAdaptive:
    """CDA (module doc): the ratio test at α·exp(−λ·JSD(p_L, p_S0)) per draft; ``strength`` is λ (>= 0)."""

    strength: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.strength) and self.strength >= 0):
            raise ValueError(f"CDA's λ is a finite number >= 0, not {self.strength!r}")

    @property
    def label(self) -> str:
        return acceptance_label(self.strength)

    def start(self, seed: int) -> RoundDecider:
        return _CdaDecider(self.strength)
