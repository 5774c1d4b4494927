"""Verifying a round's drafts: the paper's ratio test, the standard match test and exact speculative sampling.

Shapes: ``V`` is the vocabulary both models share, ``k`` the draft length; rows are fp32 ``[k, V]`` (or
``[k+1, V]`` when the row after the last draft comes too), one before each draft.
"""

from __future__ import annotations

import math

import torch

from specsteer.method.decoding import Sampler


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


def _safe_exp(x: float) -> float:
    return math.inf if x > 700 else math.exp(x)
