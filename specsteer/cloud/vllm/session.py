"""One session verified by a vLLM pair's engines: a round's verdict computed from their log-probabilities.

:class:`VllmCloud` has the interface of :class:`~specsteer.cloud.verifier.Cloud` that
:class:`~specsteer.cloud.service.CloudService` uses, over engines that give log-probabilities of chosen
tokens instead of logits rows.

How a round is verified from an engine's log-probabilities
---------------------------------------------------------
vLLM gives no logits rows, only log-probabilities of chosen tokens. ``prompt_logprobs`` would give the
drafts' log-probabilities in one request, but vLLM then recomputes the whole prompt (no prefix cache).
So a round of ``k`` drafts is ``k + 1`` requests to each engine, sent together: the committed prefix,
the prefix plus the first draft, ..., each with ``max_tokens=1``; request ``i`` forces draft ``i``
(``allowed_token_ids=[draft]``), and with the server's ``--logprobs-mode raw_logprobs`` the forced
token's log-probability is the model's own ``log softmax(z)[draft]`` (computed before the mask). With
``--enable-prefix-caching`` every request finds the prefix in the cache and computes only the tokens
after the last full cache block (``--block-size``): the tokens computed per round are counted from each
response's ``usage.prompt_tokens_details.cached_tokens`` and reported as the session's passes.

* The ratio test (``rule="ratio"``, DESIGN §2) needs only ``log p_L(draft)`` and ``log p_S0(draft)``:
  exact, at temperature 1 (greedy decisions, and sampling at temperature 1). Sampling at another
  temperature needs ``log softmax(z / T)``, whose normalizer no log-probability at temperature 1 gives:
  such an Open is refused. ``rule="match"`` reads the Generalist's top-1: exact up to ties.
* The recovery (and bonus) sends ``z_L - beta z_S0`` on the Generalist's ``top_k`` likeliest tokens, as
  :func:`~specsteer.method.steering.steering_entries` does in process. Here the candidates are the Generalist
  engine's top ``top_k`` log-probabilities at the recovery position (``logprobs=top_k``: the same set as
  the full-vocabulary top-k, up to ties and the engines' rounding), and the generic copy's values on
  exactly those ids come from one more request to its engine (``logprob_token_ids``: the prefix is
  cached, so about one token is computed). The values sent are ``log p_L - beta log p_S0`` instead of
  ``z_L - beta z_S0``: per row they differ by the constant ``logsumexp z_L - beta logsumexp z_S0``, and
  the Edge's recovery (argmax, or softmax sampling over the candidates with the private term added) is
  unchanged by a constant, so the recovered token is the same. What is NOT available: ``top_k = 0``
  (the whole vocabulary) or a ``top_k`` above the engines' ``--max-logprobs``; the ``exact`` and
  ``costeer`` rules, which send full rows or need the Edge's choice of candidates (both refused at
  Open with a clear message).
* ``rule="generate"`` (the ``llm`` baseline) lets the Generalist's engine choose each token: greedy is
  its argmax; sampling uses vLLM's own sampler (temperature, top_p, a per-position seed from the Open's
  seed), a valid sample but not the in-process Cloud's random stream.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future

import torch

from specsteer.cloud.verifier import _CloudStreams
from specsteer.cloud.vllm.client import Completion, EngineUnavailable
from specsteer.cloud.vllm.pair import VllmPair
from specsteer.method.decoding import ForwardLog, Sampler
from specsteer.method.events import GENERALIST_STREAM, GENERIC_STREAM
from specsteer.method.verification import log_ratio_values, ratio_decisions
from specsteer.protocol.rules import RULE_SPECS, Rule
from specsteer.protocol.wire import DRAFT_HEADROOM, Draft, Open, Tokens, Verdict


class VllmCloud:
    """One session verified by the engines of ``pair``: the interface of :class:`~specsteer.cloud.verifier.Cloud`
    that :class:`~specsteer.cloud.service.CloudService` uses (``open``, ``problem``, ``verify``,
    ``next_tokens``, ``close``, ``capacity``, ``last_ratios``). See the module docstring for what it computes."""

    def __init__(self, pair: VllmPair, log: ForwardLog):
        self._pair = pair
        self._log = log
        self._settings: Open | None = None
        self.tokens: list[int] = []  # the committed sequence both engines are asked about
        self.capacity = 0
        self.last_ratios: list[float] = []
        self._sampler = Sampler()
        self._generic = False
        self._emitted = 0

    # The same choice of sampler as the in-process Cloud: the ratio test's uniforms come from the same seed.
    _session_sampler = staticmethod(_CloudStreams._session_sampler)

    def open(self, message: Open) -> None:
        self._settings = message
        self.capacity = len(message.prompt) + message.max_new_tokens + DRAFT_HEADROOM
        self.tokens = list(message.prompt)
        self._generic = RULE_SPECS[Rule(message.rule)].needs_generic(message.beta)
        self._sampler = self._session_sampler(message)
        if message.streams:
            return  # the first next_tokens reads the prompt
        # Read the prompt now, once per engine, so that the first round's k + 1 requests find it cached
        # (requests sent together do not share what none of them has computed yet).
        engines = [(GENERALIST_STREAM, self._pair.generalist)]
        if self._generic:
            engines.append((GENERIC_STREAM, self._pair.specialist))
        jobs = [(name, self._pair.submit(engine.complete, self.tokens)) for name, engine in engines]
        for name, job in jobs:
            started = time.perf_counter()
            reply = job.result()
            self._record(name, [reply], time.perf_counter() - started)
            self._log.reused[name] = reply.cached_tokens

    def problem(self, message: Draft) -> str | None:
        settings = self._settings
        if settings is None or settings.streams:
            return "this session does not take drafts"
        if message.keep != -1:
            return "only exact mode reports kept drafts"
        if len(self.tokens) + len(message.append) + len(message.draft) > self.capacity:
            return "the drafts run past the token budget the session was opened with"
        return None

    def verify(self, message: Draft) -> Verdict:
        settings = _opened(self._settings)
        pair = self._pair
        base = self.tokens + list(message.append)
        drafts = list(message.draft)
        k = len(drafts)
        started = time.perf_counter()
        large_jobs = [
            pair.submit(pair.generalist.complete, base + drafts[:i], drafts[i] if i < k else None, settings.top_k)
            for i in range(k + 1)
        ]
        # The generic copy's log-probabilities of the drafts (the ratio test); its row at the recovery
        # position comes later, on the Generalist's candidates.
        generic_jobs = (
            [pair.submit(pair.specialist.complete, base + drafts[:i], drafts[i]) for i in range(k)]
            if settings.rule == "ratio"
            else []
        )
        large = _results(large_jobs)
        generic = _results(generic_jobs)
        elapsed = time.perf_counter() - started
        self._record(GENERALIST_STREAM, large, elapsed)
        if generic:
            self._record(GENERIC_STREAM, generic, elapsed)

        self.last_ratios = []
        if settings.rule == "ratio":
            log_ratios = log_ratio_values(
                torch.tensor([r.logprob for r in large[:k]], dtype=torch.float32),
                torch.tensor([r.logprob for r in generic], dtype=torch.float32),
                settings.alpha,
            )
            accepted, self.last_ratios = ratio_decisions(log_ratios, self._sampler)
        else:
            accepted = _matched(large, drafts)
        self.tokens = base + drafts[:accepted]
        if accepted == k and not settings.bonus:
            pair.count(GENERALIST_STREAM, (), round_done=True)
            return Verdict(accepted)
        ids, values = self._steering_entries(large[accepted].candidates, settings)
        pair.count(GENERALIST_STREAM, (), round_done=True)
        return Verdict(accepted, tuple(ids), values.numpy())

    def _steering_entries(self, large: dict[int, float], settings: Open) -> tuple[list[int], torch.Tensor]:
        """``log p_L - beta log p_S0`` on the Generalist's ``top_k`` likeliest ids, likeliest first."""
        ranked = sorted((i for i in large if i < self._pair.vocab_size), key=lambda i: -large[i])
        ids = ranked[: settings.top_k]
        values = torch.tensor([large[i] for i in ids], dtype=torch.float32)
        if self._generic and settings.beta:
            started = time.perf_counter()
            reply = self._pair.specialist.complete(self.tokens, ids=ids)
            self._record(GENERIC_STREAM, [reply], time.perf_counter() - started)
            missing = [i for i in ids if i not in reply.candidates]
            if missing:
                raise EngineUnavailable(self._pair.specialist, f"no log-probability for {len(missing)} candidate(s)")
            generic = torch.tensor([reply.candidates[i] for i in ids], dtype=torch.float32)
            values = values - settings.beta * generic
        return ids, values

    def next_tokens(self, count: int = 1) -> Tokens:
        """The ``generate`` rule: the Generalist's engine chooses each token."""
        settings = _opened(self._settings)
        ids = []
        for _ in range(count):
            started = time.perf_counter()
            reply = self._pair.generalist.complete(
                self.tokens,
                temperature=settings.temperature,
                top_p=settings.top_p,
                seed=None if settings.temperature <= 0 else (settings.seed * 1_000_003 + self._emitted) % 2**63,
            )
            self._record(GENERALIST_STREAM, [reply], time.perf_counter() - started)
            self.tokens.append(reply.token)
            self._emitted += 1
            ids.append(reply.token)
        return Tokens(tuple(ids))

    def close(self) -> None:
        """Nothing to give back: what the engines cached stays in their prefix caches for later sessions."""

    def _record(self, name: str, replies: Sequence[Completion], seconds: float) -> None:
        """One pass of a stream in the session's log: the tokens the engine computed for these requests."""
        self._log.record(name, seconds, sum(r.computed_tokens for r in replies))
        self._pair.count(name, replies)


def _opened(settings: Open | None) -> Open:
    if settings is None:
        raise RuntimeError("the Cloud session has not been opened")
    return settings


def _results(jobs: Sequence[Future]) -> list[Completion]:
    """Every job's answer; the first failure is raised once all have ended (none is left running)."""
    failure: BaseException | None = None
    results: list[Completion] = []
    for job in jobs:
        try:
            results.append(job.result())
        except BaseException as error:  # noqa: BLE001  re-raised below
            failure = failure or error
    if failure is not None:
        raise failure
    return results


def _matched(large: Sequence[Completion], drafts: Sequence[int]) -> int:
    """Greedy speculative decoding's test on the Generalist's top candidates: accept while draft == argmax."""
    accepted = 0
    for reply, token in zip(large, drafts):
        if not reply.candidates or max(reply.candidates, key=lambda i: reply.candidates[i]) != token:
            break
        accepted += 1
    return accepted
