"""The numbers of :mod:`specsteer.method.token_details`, computed from the logits rows each side already holds."""

from __future__ import annotations

import math

import torch

from specsteer.method.token_details import TOP_ALTERNATIVES, Alternative, CloudScores


def top_alternatives(row: torch.Tensor, temperature: float, n: int = TOP_ALTERNATIVES) -> tuple[Alternative, ...]:
    """The ``n`` most likely tokens of softmax(row / temperature) (``row`` ``[V]`` logits)."""
    probs = torch.softmax(row.float() / temperature, -1)
    values, ids = probs.topk(min(n, probs.numel()))
    return tuple(Alternative(int(i), float(p)) for i, p in zip(ids, values))


def probability(row: torch.Tensor, token: int, temperature: float) -> float:
    """p(token) under softmax(row / temperature)."""
    return math.exp(float(torch.log_softmax(row.float() / temperature, -1)[token]))


def cloud_scores(
    log_p_large: torch.Tensor,
    log_p_generic: torch.Tensor,
    large_rows: torch.Tensor,
    generic_rows: torch.Tensor,
    alphas: list[float] | None = None,
) -> list[CloudScores]:
    """Per draft, the Cloud's numbers: ``log_p_*`` ``[k]`` are the ratio test's own inputs, ``*_rows`` the
    rows they came from (``[k, V]``, already divided by the test's temperature); ``alphas``: each draft's own α
    where the test adapts it (CDA), None where it is the configured one."""
    return [
        CloudScores(
            math.exp(float(log_p_large[i])),
            math.exp(float(log_p_generic[i])),
            top_alternatives(large_rows[i], 1.0),
            top_alternatives(generic_rows[i], 1.0),
            None if alphas is None else alphas[i],
        )
        for i in range(len(log_p_large))
    ]


def steered_choice(ids: torch.Tensor, values: torch.Tensor, chosen: int, temperature: float) -> tuple[float, tuple]:
    """The chosen token's probability and the top alternatives of softmax(values / temperature) over the
    candidate ``ids`` (the steered logits a recovered or bonus token is drawn from)."""
    probs = torch.softmax(values.float() / temperature, -1)
    top, order = probs.topk(min(TOP_ALTERNATIVES, probs.numel()))
    alternatives = tuple(Alternative(int(ids[j]), float(p)) for j, p in zip(order, top))
    hits = (ids == chosen).nonzero()
    chosen_p = float(probs[int(hits[0])]) if len(hits) else 0.0
    return chosen_p, alternatives
