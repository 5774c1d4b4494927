"""SpecSteer in one screen: the paper's algorithm (greedy), with no cache, no runtime and no link.

``z_large``, ``z_private`` and ``z_generic`` each map a token sequence to the next token's logits [V]:
the Generalist and the generic Specialist read the task alone (``plain``), the Specialist reads it
with the user's history (``private``). Every call recomputes from the whole sequence. The engine
(specsteer.engine.generate) does the same with KV caches, rollback, two processes and a wire format between
them; tests/test_reference.py holds it to emitting exactly these tokens on tiny fp32 models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

import torch

Logits = Callable[[list[int]], torch.Tensor]  # token ids -> [V] logits of the next token


def specsteer(
    z_large: Logits,
    z_private: Logits,
    z_generic: Logits,
    plain: list[int],
    private: list[int],
    alpha: float,
    beta: float,
    k: int,
    max_new: int,
    stop: Collection[int],
    top_k: int = 0,
    cda_lambda: float | None = None,
) -> list[int]:
    out: list[int] = []
    while len(out) < max_new:
        drafts: list[int] = []  # 1. draft: k greedy tokens from p_S+ (fewer at a stop token)
        while len(drafts) < k and not (drafts and drafts[-1] in stop):
            drafts.append(int(z_private(private + out + drafts).argmax()))
        accepted = 0  # 2. verify (Eq. 7): accept y while p_L(y) >= alpha * p_S0(y)
        for y in drafts:
            prefix = plain + out + drafts[:accepted]
            log_large, log_generic = torch.log_softmax(z_large(prefix), -1), torch.log_softmax(z_generic(prefix), -1)
            log_alpha = math.log(alpha) if alpha > 0 else -math.inf
            if cda_lambda is not None and math.isfinite(log_alpha):
                # CDA (specsteer.method.acceptance): alpha * exp(-lambda * JSD(p_L, p_S0)), JSD in nats.
                log_alpha -= cda_lambda * _jsd(log_large.double(), log_generic.double())
            if not float(log_large[y] - log_generic[y]) >= log_alpha:
                break
            accepted += 1
        out += drafts[:accepted]
        if len(out) >= max_new or (out and out[-1] in stop):
            break
        # 3. recover after a rejection, or a bonus token after a fully accepted round (Eq. 8): the argmax of
        # z_L + beta (z_S+ - z_S0) among the Generalist's top_k candidates (0: every token).
        large, generic = z_large(plain + out), z_generic(plain + out)
        steered = large - beta * generic + beta * z_private(private + out)
        candidates = large.topk(top_k).indices if 0 < top_k < large.numel() else torch.arange(large.numel())
        out.append(int(candidates[steered[candidates].argmax()]))
        if out[-1] in stop:
            break
    return out[:max_new]


def _jsd(log_p: torch.Tensor, log_q: torch.Tensor) -> float:
    """Jensen-Shannon divergence in nats, 0.5 KL(p || m) + 0.5 KL(q || m) with m the mixture."""
    p, q = log_p.exp(), log_q.exp()
    m = (p + q) / 2
    return float(0.5 * (p * (p / m).log()).nansum() + 0.5 * (q * (q / m).log()).nansum())


def p3(
    z_large: Logits,
    z_private: Logits,
    plain: list[int],
    private: list[int],
    k: int,
    tau: float,
    max_new: int,
    stop: Collection[int],
) -> list[int]:
    """P³ (specsteer.method.p3) in one screen, greedy: the Generalist drafts k tokens from the plain prompt;
    the Specialist keeps each while p_S+(y) / max p_S+ >= tau and replaces the first one below by its argmax."""
    out: list[int] = []
    while len(out) < max_new and not (out and out[-1] in stop):
        drafts: list[int] = []  # 1. the Cloud drafts k greedy tokens from p_L (fewer at a stop token)
        while len(drafts) < k and not (drafts and drafts[-1] in stop):
            drafts.append(int(z_large(plain + out + drafts).argmax()))
        for y in drafts:  # 2. the Edge checks them in order
            if len(out) >= max_new:
                break
            p = torch.softmax(z_private(private + out), -1)
            if float(p[y] / p.max()) >= tau:
                out.append(y)
                continue
            out.append(int(p.argmax()))  # 3. the correction; the drafts after it are dropped
            break
    return out[:max_new]
