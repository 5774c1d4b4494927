"""The Edge's side of P³ (specsteer.method.p3): the Specialist, reading the private prompt, checks the Cloud's drafts.

Each round the Cloud sends up to ``k`` drafts; :meth:`P3Edge.check` reads them in one pass of the Specialist
and applies the P³ test (``method.p3.p3_check``): the drafts kept stay in the Specialist's stream, the
first refused one and those after it are cut, and the correction is appended in its place. What the Edge
sends back is the kept drafts and the correction (the engine puts them in the next round's ``Draft.append``).
"""

from __future__ import annotations

from dataclasses import replace

from specsteer.edge.session import specialist_stream
from specsteer.method.decoding import ForwardLog
from specsteer.method.drafting import PrivateSpanGuard
from specsteer.method.events import EDGE_STREAM
from specsteer.method.p3 import P3Check, p3_check
from specsteer.runtimes.base import ModelRuntime


class P3Edge:
    """The Specialist reading the private prompt, checking Cloud drafts against ``tau``."""

    def __init__(
        self,
        specialist: ModelRuntime,
        private_prompt: list[int],
        vocab_size: int,
        forward_log: ForwardLog,
        tau: float,
        max_new_tokens: int,
        guard: PrivateSpanGuard | None = None,
    ):
        self.tau = tau
        self.guard = guard  # a correction never completes a private n-gram (the Cloud's own drafts pass)
        self.stream = specialist_stream(
            specialist, private_prompt, vocab_size, forward_log, EDGE_STREAM, max_new_tokens
        )

    def check(self, drafts: list[int]) -> P3Check:
        """Read ``drafts`` (one pass) and decide; the stream then ends at the kept drafts and the correction."""
        if not drafts:
            return P3Check(0, None, ())
        self.stream.append(list(drafts))
        rows = self.stream.predict(len(drafts) + 1)  # [m+1, V]: row i is the logits before draft i
        decision = p3_check(rows[:-1], drafts, self.tau)
        if decision.correction is not None:
            cut = len(drafts) - decision.accepted
            self.stream.truncate(len(self.stream) - cut, rows[decision.accepted])
            correction = decision.correction
            if self.guard is not None:
                correction = int(self.guard.mask(rows[decision.accepted], self.stream.tokens).argmax())
                decision = replace(decision, correction=correction)
            self.stream.append([correction])
        return decision

    def close(self) -> None:
        self.stream.close()
