"""P³, the reverse protocol (Salemi & Zamani, SIGIR 2026), as pure functions over logit rows.

The roles are SpecSteer's reversed. The Cloud's Generalist reads the plain prompt (the task alone) and
drafts ``k`` tokens; the Edge's Specialist reads the private prompt and checks them in order, keeping each
draft ``y`` while

    p_S+(y) / max_v p_S+(v)  >=  tau                                              (the P³ test)

and replacing the first draft below ``tau`` with its own best token, ``argmax_v p_S+(v)``; the drafts
after it are dropped unread. The kept drafts and the correction go back to the Cloud, which drafts on
from them. In this project's vocabulary (the same words as SpecSteer's stream, with the roles swapped):

* **accepted** -- a Cloud draft the Edge kept (its ratio was >= tau);
* **rejected** -- the first Cloud draft the Edge refused, and the Cloud's drafts after it in that round;
* **recovered** -- the Edge's correction: its argmax in place of the refused draft.

There is no bonus token: a round whose drafts were all kept ends there and the Cloud drafts the next
``k`` (as in the public code).

What this follows in the public code (``alirezasalemi7/PPP``, ``PPP.py``), and where it had to choose:

* The test is the ratio of the client's probability of the draft to its best token's probability, per
  position, stopping at the first ratio below ``tau``; the correction is the client's most likely token
  (``local_best_id``). Defaults ``k = 10`` and ``tau = 0.05`` are the public code's.
* The client's probabilities there are vLLM prompt log-probabilities, which are the model's own
  (softmax at temperature 1, whatever the sampling temperature); the ratio to the best token is
  then ``exp(z_y - max z)``, independent of the normaliser. Here the same, from the Specialist's raw logits.
* The public code's Cloud drafts by sampling at temperature 0.1 (nearly greedy). Here the Cloud drafts
  greedily (the temperature-0 limit, deterministic), or, when a generation samples, at its temperature.
* The public code re-reads the whole text each round (drafts decoded to text and re-encoded on the
  client; the block of kept tokens appended to the Cloud's text after a regex masking of e-mail
  addresses, phone numbers and similar patterns found in the profile). Here both sides share one
  tokenizer and exchange token ids (no re-tokenization, no masking: a cross-tokenizer pairing is refused),
  and the Edge sends the kept drafts and the correction as ids: exactly what the Cloud continues from.
* Its loop ends at an end token or after ``max_steps`` rounds; here at an end token or the token budget.

Shapes: ``V`` the vocabulary both models share, ``m`` the drafts checked in a round (``m <= k``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light at import: settings (no torch) reads P3Params from here
    import torch

DEFAULT_DRAFT_LEN = 10  # the public code's k
DEFAULT_TAU = 0.05  # the public code's tau


@dataclass(frozen=True)
class P3Params:
    """P³'s settings: the Cloud's draft length ``k`` and the Edge's acceptance threshold ``tau``."""

    draft_len: int = DEFAULT_DRAFT_LEN
    tau: float = DEFAULT_TAU

    def problems(self, max_draft_len: int) -> list[str]:
        """What is wrong with these settings (empty when they can run), one phrase each."""
        problems = []
        if not 1 <= self.draft_len <= max_draft_len:
            problems.append(f"P³'s draft length must be between 1 and {max_draft_len}")
        if not 0 <= self.tau <= 1:  # also rejects NaN
            problems.append("P³'s tau must be between 0 (keeps every Cloud draft) and 1 (keeps only the Edge's best)")
        return problems


@dataclass(frozen=True)
class P3Check:
    """The Edge's decision on one round of Cloud drafts.

    ``accepted`` drafts are kept; when ``correction`` is set, the draft at index ``accepted`` was refused
    and ``correction`` replaces it (the drafts after it are dropped). ``ratios`` are the ratios computed,
    one per draft up to and including the refused one.
    """

    accepted: int
    correction: int | None
    ratios: tuple[float, ...]


def log_ratios(rows: torch.Tensor, drafts: list[int]) -> torch.Tensor:
    """``log p(y_i) - log max_v p(v)`` at each draft: rows ``[m, V]`` (row i scores draft i), ``[m]``.

    At temperature 1 the normaliser cancels, so this is ``z_i[y_i] - max_v z_i[v]`` (<= 0)."""
    import torch  # here: this module is read by the light settings at import

    if not drafts:
        return rows.new_zeros(0)
    index = torch.tensor(drafts, dtype=torch.long, device=rows.device)[:, None]  # [m, 1]
    return rows.gather(-1, index)[:, 0] - rows.max(-1).values  # [m]


def p3_check(rows: torch.Tensor, drafts: list[int], tau: float) -> P3Check:
    """The P³ test on ``drafts`` with the Specialist's rows ``[m, V]`` (row i: the logits before draft i).

    Keeps drafts while their ratio to the best token is >= ``tau``; the first one below is replaced by
    the row's argmax. ``tau = 0`` keeps every draft; ``tau = 1`` keeps only a draft that is the argmax."""
    values = log_ratios(rows, drafts).tolist()  # [m]
    threshold = math.log(tau) if tau > 0 else -math.inf
    ratios: list[float] = []
    for index, value in enumerate(values):
        ratios.append(math.exp(value))
        if not value >= threshold:
            return P3Check(index, int(rows[index].argmax()), tuple(ratios))
    return P3Check(len(drafts), None, tuple(ratios))
