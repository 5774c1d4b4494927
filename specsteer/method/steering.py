"""Choosing a token from steered logits: the Cloud's share on its candidates, the Edge's private term, and
CoSteer's per-token refinement.

Shapes: ``V`` is the vocabulary both models share, ``m`` the candidates the Cloud sends; rows are fp32.
"""

from __future__ import annotations

import torch

from specsteer.method.decoding import Sampler


def steering_entries(
    generalist_row: torch.Tensor, generic_row: torch.Tensor | None, beta: float, top_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Cloud's share of the steered logits, ``z_L - beta * z_S0``, on at most ``top_k`` candidates.

    Candidates are the Generalist's ``top_k`` most likely tokens. (The paper cuts
    ``z_L - beta z_S0`` to its own top-k; on real models that ranking is led by
    tokens the generic Specialist finds implausible rather than tokens the
    Generalist likes, and recovery then emits junk. Q = p_L (p_S+ / p_S0)^beta is
    small wherever p_L is, so the Generalist's top-k holds its mass.)
    ``top_k <= 0`` keeps the whole vocabulary. Returns (ids [m], values [m]).
    """
    if top_k <= 0 or top_k >= generalist_row.numel():
        ids = torch.arange(generalist_row.numel())
    else:
        ids = generalist_row.topk(top_k).indices
    values = generalist_row[ids]
    if beta and generic_row is not None:
        values = values - beta * generic_row[ids]
    return ids, values


def recover(
    ids: torch.Tensor, public_values: torch.Tensor, private_row: torch.Tensor | None, beta: float, sampler: Sampler
) -> int:
    """Choose a token from the steered logits ``z = (z_L - beta z_S0) + beta z_S+`` (paper Eq. 8).

    Only the candidates the Cloud sent are eligible; the private term is added
    on the Edge, so the Specialist's logits never leave the device. ``private_row`` may be None only
    with beta = 0 (the Edge then does not read it).
    """
    if not beta:
        return int(ids[sampler.choose(public_values)])
    if private_row is None:
        raise ValueError("steering with beta != 0 needs the Specialist's private logits row")
    return int(ids[sampler.choose(public_values + beta * private_row[ids])])


def costeer_refine(
    log_p_large: torch.Tensor,  # [m] Generalist log-probs on the candidate ids
    log_p_generic: torch.Tensor,  # [m] generic Specialist log-probs on the same ids
    log_p_private: torch.Tensor,  # [m] personalized Specialist log-probs on the same ids
    iterations: int,
    step: float,
    regularization: float,
) -> torch.Tensor:
    """CoSteer's per-token online refinement of the Generalist's distribution.

    Our reading of the CoSteer release (FTRL-style, fp32): mirror ascent on
    ``E_pi[r] - lambda * KL(pi || p_L)`` with the local delta ``r = log p_S+ - log p_S0``
    as the reward and a ``step / (1 + step * lambda * t)`` schedule. It converges
    towards ``p_L * exp(r / lambda)``, i.e. Eq. 4 with beta = 1 / lambda. Returns
    the refined logits ``[m]``.
    """
    reward = log_p_private - log_p_generic
    log_pi = log_p_large.clone()
    for t in range(1, iterations + 1):
        gradient = reward - regularization * (log_pi - log_p_large)
        log_pi = torch.log_softmax(log_pi + step / (1.0 + step * regularization * t) * gradient, -1)
    return log_pi
