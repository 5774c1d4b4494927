"""The Cloud service whose sessions are verified by vLLM engines: what it admits and what it refuses at Open.

:class:`VllmCloudService` is a :class:`~specsteer.cloud.service.CloudService` (the same sessions, limits,
secret and HTTP server) whose sessions are :class:`~specsteer.cloud.vllm.session.VllmCloud`. The engines
batch the requests of every session; no lock serializes the sessions' passes here (a session's own
requests stay one at a time).

Admission by memory: the models' memory lives in the engines, outside this process. The budget is the
engines' KV caches (``--kv-cache-memory-bytes`` of each launched engine, or ``--memory-budget-mb`` for
engines at URLs) and a session reserves what its tokens' keys and values may come to hold in both
engines (``capacity * kv_bytes_per_token``), so admitted sessions never make an engine preempt.
"""

from __future__ import annotations

import contextlib

from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.service import CloudService
from specsteer.cloud.vllm.pair import ENGINE_NAME, EngineStats, VllmPair
from specsteer.cloud.vllm.session import VllmCloud
from specsteer.method.decoding import ForwardLog
from specsteer.protocol.cloud_reports import CloudInfo
from specsteer.protocol.rules import FIXED, RULE_SPECS
from specsteer.protocol.wire import DRAFT_HEADROOM, Open

VLLM_RULES = ("ratio", "match", "generate")


class VllmCloudService(CloudService):
    """A :class:`CloudService` whose sessions are verified by vLLM engines (admission: see the module docstring)."""

    def __init__(self, pair: VllmPair, limits: ServiceLimits | None = None, **kwargs):
        # The engines hold the models; the base class reads only the pair's id and vocabulary of it.
        super().__init__(pair, limits or ServiceLimits(), reuse_prefixes=True, **kwargs)  # type: ignore[arg-type]
        self.engines = pair

    def info(self) -> CloudInfo:
        info = super().info()
        return CloudInfo(
            info.pairing, info.vocab_size, info.protocol, info.instance, ENGINE_NAME, info.limits, info.acceptance
        )

    @property
    def acceptance_rules(self) -> tuple[str, ...]:
        return (FIXED,)

    def _fixed_only_reason(self) -> str:
        return "CDA reads both models' whole next-token rows; the engines give log-probabilities of chosen tokens only"

    def engine_stats(self) -> EngineStats:
        return self.engines.stats()

    def session_bytes(self, message: Open) -> int:
        # Both engines' keys and values for every token the session may hold (whatever its rule).
        capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        return capacity * self.engines.kv_bytes_per_token

    def _new_cloud(self, log: ForwardLog):
        return VllmCloud(self.engines, log)

    def _free_idle_caches(self, wanted: int) -> None:
        """The engines manage their own prefix caches (evicted least recently used when blocks run out)."""

    @contextlib.contextmanager
    def _computing(self):
        yield  # the engines batch concurrent requests: sessions do not wait for each other here

    def _open_problem(self, message: Open) -> str | None:
        problem = super()._open_problem(message)
        if problem:
            return problem
        if RULE_SPECS[message.rule].cloud_drafts:
            return f"A vLLM Cloud does not draft for P³ (the cloud-draft rule); it offers {', '.join(VLLM_RULES)}."
        if message.rule not in VLLM_RULES:
            return (
                f"The {message.rule!r} rule needs full logit rows, which a vLLM Cloud does not send; "
                f"it offers {', '.join(VLLM_RULES)}."
            )
        if message.rule == "ratio" and message.temperature > 0 and message.temperature != 1:
            return (
                "A vLLM Cloud runs the ratio test at temperature 1 (or greedy) only: the engines give "
                "log-probabilities at temperature 1."
            )
        limit = self.engines.max_candidates
        if message.rule != "generate" and not 1 <= message.top_k <= limit:
            return f"A vLLM Cloud sends at most {limit} candidates per verdict: top_k must be between 1 and {limit}."
        longest = self.engines.max_model_len
        capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        if longest is not None and capacity > longest:
            return f"The prompt and the token budget need {capacity} tokens; this Cloud's engines hold {longest}."
        return None
