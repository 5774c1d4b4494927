"""Each token's numbers, for display: what the Edge and the Cloud computed when they decided it.

Nothing here decides anything and nothing here crosses the link. Each number is read off the side that
computed it anyway, only when a generation asks for details (``DecodeConfig.details``):

* **Cloud** (:class:`CloudScores`, per draft): p_L(y) and p_S0(y), the probabilities of the draft under the
  Generalist and the generic Specialist copy, read from the very log-probabilities the ratio test compares
  (:func:`specsteer.method.verification.draft_log_probs`), and each model's top 3 at that position. An in-process
  Cloud hands them back with its instrumentation (``CloudReport.details``: never a protocol message, never
  counted in the link's bytes); a remote Cloud is never asked, and its drafts show no Cloud numbers.
* **Edge**: p_S+(y), the Specialist's probability of its own draft (the row it drafted from), with its top 3;
  for a recovered or bonus token, the steered distribution it was drawn from: the Cloud's share
  z_L - β·z_S0 on the candidates the downlink carries (the Verdict's top-k) plus β·z_S+ added on the Edge.
* **The downlink** carries only the Verdict: how many drafts were kept and those steered candidates.

Probabilities are at the temperature the ratio test uses (1 when greedy, the sampling temperature otherwise).
These are the values (light: no torch); :mod:`specsteer.method.token_numbers` computes them from logits rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TOP_ALTERNATIVES = 3


@dataclass(frozen=True)
class Alternative:
    """One of a distribution's most likely tokens: its id, its text (filled in by the engine) and probability."""

    id: int
    probability: float
    text: str = ""


@dataclass(frozen=True)
class CloudScores:
    """The Cloud's numbers for one draft: p_L(y), p_S0(y) and both models' top alternatives there."""

    p_large: float
    p_generic: float
    top_large: tuple[Alternative, ...]
    top_generic: tuple[Alternative, ...]
    alpha: float | None = None  # this draft's own α where the test adapts it (CDA: α·exp(−λ·JSD)); None: the set α


@dataclass(frozen=True)
class TokenDetails:
    """What a token popover shows. Drafts: ``cloud`` (None when the Cloud gave no numbers: remote, or a rule
    without the ratio test), ``p_private`` and ``top_private`` (the Edge's). ``alpha`` and ``accepted`` say how
    the test read them. Recovered and bonus tokens: ``drawn_from`` names the distribution, ``top_drawn`` its
    most likely tokens and ``p_drawn`` the chosen token's probability under it."""

    alpha: float | None = None
    cloud: CloudScores | None = None
    p_private: float | None = None
    top_private: tuple[Alternative, ...] = ()
    drawn_from: str = ""
    p_drawn: float | None = None
    top_drawn: tuple[Alternative, ...] = ()

    @property
    def threshold(self) -> float | None:
        """α·p_S0(y): what p_L(y) must reach for a greedy ratio test to keep the draft (under CDA with the
        draft's own α)."""
        if self.cloud is None:
            return None
        alpha = self.cloud.alpha if self.cloud.alpha is not None else self.alpha
        return None if alpha is None else alpha * self.cloud.p_generic

    @property
    def margin(self) -> float | None:
        """log(p_L / (α·p_S0)): positive when p_L clears the bar (the test keeps the draft), negative when not."""
        threshold = self.threshold
        if threshold is None or self.cloud is None:
            return None
        if threshold <= 0:
            return math.inf
        if self.cloud.p_large <= 0:
            return -math.inf
        return math.log(self.cloud.p_large / threshold)


def named(alternatives: tuple[Alternative, ...], decode) -> tuple[Alternative, ...]:
    """The alternatives with their text (``decode``: one id to its text)."""
    return tuple(Alternative(a.id, a.probability, decode(a.id)) for a in alternatives)
