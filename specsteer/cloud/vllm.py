"""The Cloud with its two models served by vLLM: ``python -m specsteer cloud --engine vllm``.

The Generalist and the generic Specialist copy each live in a vLLM OpenAI-compatible server (started
here as child processes from ``.venv-vllm``, vLLM's own environment made by ``scripts/setup_vllm.sh``,
or already running at URLs the operator gives). The wire protocol, the Edge and the CloudService's
sessions, limits, secret and HTTP server are unchanged: :class:`VllmCloudService` is a
:class:`~specsteer.cloud.service.CloudService` whose sessions are :class:`VllmCloud` instead of
in-process :class:`~specsteer.cloud.verifier.Cloud`. The engine batches the requests of every session; no
lock serializes the sessions' passes here (a session's own requests stay one at a time).

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
  :func:`~specsteer.method.decoding.steering_entries` does in process. Here the candidates are the Generalist
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

Admission by memory: the models' memory lives in the engines, outside this process. The budget is the
engines' KV caches (``--kv-cache-memory-bytes`` of each launched engine, or ``--memory-budget-mb`` for
engines at URLs) and a session reserves what its tokens' keys and values may come to hold in both
engines (``capacity * kv_bytes_per_token``), so admitted sessions never make an engine preempt.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specsteer.cloud.service import CloudService, ServiceError, ServiceLimits
from specsteer.cloud.verifier import _CloudStreams
from specsteer.method.decoding import ForwardLog, Sampler, log_ratio_values, ratio_decisions
from specsteer.method.events import GENERALIST_STREAM, GENERIC_STREAM
from specsteer.protocol.rules import RULE_SPECS, Rule
from specsteer.protocol.wire import DRAFT_HEADROOM, CloudInfo, Draft, Open, Tokens, Verdict

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = REPO_ROOT / ".venv-vllm"
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
ENGINE_NAME = "vllm"
# The candidates a Verdict may carry: the engines' --max-logprobs. The Open's default top_k is 64.
DEFAULT_MAX_CANDIDATES = 64
VLLM_RULES = ("ratio", "match", "generate")
_ENGINE_ERROR_CHARS = 300  # of an engine's error message relayed to the Edge


def vllm_available() -> str | None:
    """Why vLLM's own environment cannot run here (``scripts/setup_vllm.sh`` makes it), or None."""
    if not VLLM_PYTHON.exists():
        return f"{VLLM_VENV} is missing: run scripts/setup_vllm.sh"
    return None


# --------------------------------------------------------------------------- one engine's answers


@dataclass(frozen=True)
class Completion:
    """One ``max_tokens=1`` completion: the token the engine chose (the forced one when forced), its raw
    log-probability, the raw log-probabilities of the candidates asked for, and what it computed."""

    token: int
    logprob: float
    candidates: dict[int, float]
    prompt_tokens: int
    cached_tokens: int

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens the engine ran through the model (not found in its prefix cache)."""
        return self.prompt_tokens - self.cached_tokens


class EngineUnavailable(ServiceError):
    """A vLLM engine did not answer, or answered with an error: the Edge gets code ``engine-unavailable``."""

    def __init__(self, engine: VllmEngine, reason: str):
        super().__init__(
            502, "engine-unavailable", f"The Cloud's vLLM engine for the {engine.role} ({engine.url}) failed: {reason}"
        )


class VllmEngine:
    """A client of one vLLM OpenAI-compatible server (``/v1/completions`` with token-id prompts).

    ``role`` names the model it serves (``generalist`` or ``generic specialist``) in every error.
    Thread-safe: httpx's Client may be shared by the threads sending a round's requests.
    """

    def __init__(self, role: str, url: str, model: str | None = None, timeout_s: float = 120.0):
        import httpx

        self.role = role
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s)
        self.model = model or self._served_model()

    def close(self) -> None:
        self._client.close()

    def healthy(self) -> bool:
        try:
            return self._client.get("/health", timeout=5.0).status_code == 200
        except Exception:
            return False

    def _served_model(self) -> str:
        body = self._get("/v1/models")
        try:
            return str(body["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise EngineUnavailable(self, "/v1/models named no model") from None

    def max_model_len(self) -> int | None:
        body = self._get("/v1/models")
        try:
            return int(body["data"][0]["max_model_len"])
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def _get(self, path: str) -> dict:
        try:
            response = self._client.get(path)
        except Exception as error:
            raise EngineUnavailable(self, _reason(error)) from None
        if response.status_code != 200:
            raise EngineUnavailable(self, f"HTTP {response.status_code} for {path}")
        return response.json()

    def complete(
        self,
        prompt: Sequence[int],
        force: int | None = None,
        top: int | None = None,
        ids: Sequence[int] | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Completion:
        """One token after ``prompt``: ``force`` makes it that token; ``top`` asks for the ``top`` likeliest
        tokens' log-probabilities, ``ids`` for those tokens' (one of the two, or neither)."""
        body: dict = {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": 1,
            "temperature": temperature,
            "top_p": top_p,
            "logprobs": top or 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if seed is not None:
            body["seed"] = seed
        if force is not None:
            body["allowed_token_ids"] = [force]
        if ids:
            body["logprob_token_ids"] = list(ids)
        try:
            response = self._client.post("/v1/completions", json=body)
        except Exception as error:
            raise EngineUnavailable(self, _reason(error)) from None
        if response.status_code == 400:  # the engine refused what the Edge sent (a token id it has no row for)
            raise ServiceError(
                400, "invalid", f"The Cloud's {self.role} engine refused the request: {_error_message(response)}"
            )
        if response.status_code != 200:
            raise EngineUnavailable(self, f"HTTP {response.status_code}: {_error_message(response)}")
        return _completion(self, response.json())


def _completion(engine: VllmEngine, body: dict) -> Completion:
    try:
        choice = body["choices"][0]
        token = int(choice["token_ids"][0])
        logprobs = choice["logprobs"]
        logprob = float(logprobs["token_logprobs"][0])
        candidates = {_token_id(key): float(value) for key, value in (logprobs["top_logprobs"][0] or {}).items()}
        usage = body["usage"]
        details = usage.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0)
        return Completion(token, logprob, candidates, int(usage["prompt_tokens"]), cached)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise EngineUnavailable(engine, f"an answer this Cloud cannot read ({type(error).__name__})") from None


def _token_id(key: str) -> int:
    """``token_id:123`` (the server's ``return_tokens_as_token_ids``) -> 123."""
    prefix, _, number = key.partition(":")
    if prefix != "token_id":
        raise ValueError(f"not a token id key: {key[:40]!r}")
    return int(number)


def _error_message(response) -> str:
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body.get("message")
        return str(message)[:_ENGINE_ERROR_CHARS]
    except Exception:
        return f"{len(response.content)} bytes"


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:_ENGINE_ERROR_CHARS]


# --------------------------------------------------------------------------- the engines of one Cloud


@dataclass(frozen=True)
class EngineStats:
    """What the engines computed for this Cloud so far (every session): prompt tokens sent, and of them
    the tokens computed (not found in the prefix cache), per engine; and the verification rounds."""

    rounds: int
    prompt_tokens: dict[str, int]
    computed_tokens: dict[str, int]


@dataclass
class VllmPair:
    """What a vLLM Cloud serves: the pairing's id and shared vocabulary, the Generalist's and the generic
    Specialist's engines, and the bytes one token's keys and values take in both (admission)."""

    pairing_id: str
    vocab_size: int
    generalist: VllmEngine
    specialist: VllmEngine
    kv_bytes_per_token: int = 0  # 0: unknown (no admission by memory unless a budget is given)
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    max_model_len: int | None = None
    cross = None  # a same-tokenizer pairing only
    runtime = ENGINE_NAME
    _counts: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(64, "vllm-request"))

    def submit(self, call: Callable, *args, **kwargs) -> Future:
        return self._pool.submit(call, *args, **kwargs)

    def cloud_side(self) -> VllmPair:
        """Itself: the engines serve the base models, so there is no Edge adapter to keep out (as
        :meth:`LoadedPair.cloud_side` does for an in-process pair)."""
        return self

    def count(self, role: str, replies: Sequence[Completion], round_done: bool = False) -> None:
        with self._lock:
            self._counts[("prompt", role)] = self._counts.get(("prompt", role), 0) + sum(
                r.prompt_tokens for r in replies
            )
            self._counts[("computed", role)] = self._counts.get(("computed", role), 0) + sum(
                r.computed_tokens for r in replies
            )
            if round_done:
                self._counts["rounds"] = self._counts.get("rounds", 0) + 1

    def stats(self) -> EngineStats:
        with self._lock:
            roles = (GENERALIST_STREAM, GENERIC_STREAM)
            return EngineStats(
                self._counts.get("rounds", 0),
                {role: self._counts.get(("prompt", role), 0) for role in roles},
                {role: self._counts.get(("computed", role), 0) for role in roles},
            )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.generalist.close()
        self.specialist.close()


# --------------------------------------------------------------------------- one session


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


# --------------------------------------------------------------------------- the service


class VllmCloudService(CloudService):
    """A :class:`CloudService` whose sessions are verified by vLLM engines (see the module docstring)."""

    def __init__(self, pair: VllmPair, limits: ServiceLimits | None = None, **kwargs):
        # The engines hold the models; the base class reads only the pair's id and vocabulary of it.
        super().__init__(pair, limits or ServiceLimits(), reuse_prefixes=True, **kwargs)  # type: ignore[arg-type]
        self.engines = pair

    def info(self) -> CloudInfo:
        info = super().info()
        return CloudInfo(info.pairing, info.vocab_size, info.protocol, info.instance, ENGINE_NAME, info.limits)

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


# --------------------------------------------------------------------------- engine processes


@dataclass(frozen=True)
class EngineSettings:
    """How a launched vLLM server runs one model. ``kv_cache_bytes`` is its KV cache (the memory admission
    counts on); ``block_size`` the prefix cache's granularity: a request recomputes the tokens after the
    last full block it shares with an earlier one, so small blocks keep a round near k + 1 tokens."""

    dtype: str = "float32"
    max_model_len: int = 4096
    block_size: int = 32
    kv_cache_bytes: int = 256 * 2**20
    max_logprobs: int = DEFAULT_MAX_CANDIDATES
    enforce_eager: bool = True  # no torch.compile: start-up in seconds instead of a minute, slower steps
    threads: int | None = None  # OpenMP threads of the engine (None: vLLM's choice)
    extra: tuple[str, ...] = ()


@dataclass
class EngineProcess:
    """A vLLM server this process started: its process (a new process group, stopped by its id), URL and log."""

    role: str
    process: subprocess.Popen
    url: str
    log_path: Path

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to its process group (the server and the engine core it spawned), then SIGKILL."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def engine_command(model: str | Path, name: str, port: int, settings: EngineSettings) -> list[str]:
    command = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        settings.dtype,
        "--max-model-len",
        str(settings.max_model_len),
        "--enable-prefix-caching",
        "--block-size",
        str(settings.block_size),
        "--logprobs-mode",
        "raw_logprobs",
        "--max-logprobs",
        str(settings.max_logprobs),
        "--enable-prompt-tokens-details",
        "--kv-cache-memory-bytes",
        str(settings.kv_cache_bytes),
        "--generation-config",
        "vllm",  # the request's own sampling settings, not the model directory's defaults
    ]
    if settings.enforce_eager:
        command.append("--enforce-eager")
    return command + list(settings.extra)


def launch_engine(
    role: str, model: str | Path, settings: EngineSettings, log_dir: Path, port: int | None = None
) -> EngineProcess:
    """Start a vLLM OpenAI-compatible server for ``model`` on a free loopback port (not yet ready)."""
    problem = vllm_available()
    if problem:
        raise RuntimeError(problem)
    port = port or free_port()
    name = role.replace(" ", "-")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{name}-{port}.log"
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("VIRTUAL_ENV", None)
    if settings.threads:
        env["OMP_NUM_THREADS"] = str(settings.threads)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            engine_command(model, name, port, settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: stop() ends the engine core it spawns too
            preexec_fn=_end_with_parent,
        )
    return EngineProcess(role, process, f"http://127.0.0.1:{port}", log_path)


def _end_with_parent() -> None:
    """In the engine's child, before it runs vLLM: Linux sends it SIGTERM when the thread that started it
    ends, so a Cloud that is killed leaves no engine behind (launch from a thread that lives as long)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_ready(
    engines: Sequence[EngineProcess], timeout_s: float = 600.0, progress: Callable[[str], None] | None = None
) -> None:
    """Wait until every engine answers /health; raises RuntimeError (with its log's tail) when one exits
    or the time runs out. ``progress`` hears a line every ~15 s."""
    import httpx

    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    waiting = list(engines)
    last_said = started
    while waiting:
        for engine in list(waiting):
            code = engine.process.poll()
            if code is not None:
                raise RuntimeError(
                    f"the vLLM engine for the {engine.role} exited with code {code} while starting; "
                    f"its log ({engine.log_path}) ends:\n{engine.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(engine.url + "/health", timeout=2.0).status_code == 200:
                    waiting.remove(engine)
        if not waiting:
            break
        now = time.monotonic()
        if now > deadline:
            names = ", ".join(e.role for e in waiting)
            raise RuntimeError(f"the vLLM engine(s) for the {names} did not start within {timeout_s:g} s")
        if progress and now - last_said >= 15:
            last_said = now
            progress(f"waiting for vLLM ({', '.join(e.role for e in waiting)}): {now - started:.0f} s")
        time.sleep(0.5)


def kv_bytes_per_token(model_dir: str | Path, dtype: str) -> int:
    """One token's keys and values in a model served at ``dtype``, from its config.json."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    config = config.get("text_config", config)
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    itemsize = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}.get(dtype, 2)
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * itemsize


def save_pair(pair, directory: Path) -> tuple[Path, Path]:
    """Write a transformers pair's Generalist and Specialist (config, safetensors, tokenizer) where vLLM can
    load them: ``directory/generalist`` and ``directory/specialist``."""
    written = []
    for role, runtime in (("generalist", pair.generalist), ("specialist", pair.specialist)):
        target = directory / role
        model = getattr(runtime, "model", None)
        if model is None or not hasattr(model, "save_pretrained"):
            raise ValueError(f"the {role} of {pair.pairing_id} is not a transformers model; give its directory")
        model.save_pretrained(target, safe_serialization=True)
        pair.tokenizer.save_pretrained(target)
        written.append(target)
    return written[0], written[1]


def pairing_model_dirs(pairing_id: str) -> tuple[Path, Path] | str:
    """The transformers directories launched engines serve for a listed pairing (Generalist, Specialist):
    an offline model's converted cache (``specsteer models prepare --runtime transformers`` makes it), a
    local model's own directory. A message saying why not where a model has none."""
    from specsteer.models.registry import UnknownPairingError, converted_cache_ready, converted_model_dir, get_pairing

    try:
        pairing = get_pairing(pairing_id)
    except UnknownPairingError as error:
        return str(error)
    dirs = []
    for role, spec in (("Generalist", pairing.generalist), ("Specialist", pairing.specialist)):
        if spec.kind == "offline" and converted_cache_ready(spec):
            dirs.append(converted_model_dir(spec))
        elif spec.kind == "local" and (Path(spec.ref) / "config.json").is_file():
            dirs.append(Path(spec.ref))
        elif spec.kind == "offline":
            return (
                f"the {role} of {pairing_id} ({spec.name}) has no converted weights yet: run "
                f"`specsteer models prepare --pairing {pairing_id} --runtime transformers`, or give "
                "--vllm-generalist-model and --vllm-specialist-model"
            )
        else:
            return (
                f"the {role} of {pairing_id} is a {spec.kind} model: give --vllm-generalist-model and "
                "--vllm-specialist-model (model directories vLLM loads)"
            )
    return dirs[0], dirs[1]


@dataclass
class LaunchedCloud:
    """The engines a vLLM Cloud started, and the pair over them; ``stop`` ends both servers."""

    pair: VllmPair
    processes: list[EngineProcess]

    def stop(self) -> None:
        self.pair.close()
        for process in self.processes:
            process.stop()


def launch_cloud(
    pairing_id: str,
    vocab_size: int,
    generalist_dir: Path,
    specialist_dir: Path,
    settings: EngineSettings,
    log_dir: Path,
    timeout_s: float = 600.0,
    progress: Callable[[str], None] | None = None,
) -> LaunchedCloud:
    """Start both engines, wait for them, and return the pair a :class:`VllmCloudService` serves."""
    processes = [
        launch_engine("generalist", generalist_dir, settings, log_dir),
        launch_engine("generic specialist", specialist_dir, settings, log_dir),
    ]
    try:
        wait_ready(processes, timeout_s, progress)
        per_token = kv_bytes_per_token(generalist_dir, settings.dtype) + kv_bytes_per_token(
            specialist_dir, settings.dtype
        )
        pair = VllmPair(
            pairing_id,
            vocab_size,
            VllmEngine("generalist", processes[0].url),
            VllmEngine("generic specialist", processes[1].url),
            kv_bytes_per_token=per_token,
            max_candidates=settings.max_logprobs,
            max_model_len=settings.max_model_len,
        )
    except BaseException:
        for process in processes:
            process.stop()
        raise
    return LaunchedCloud(pair, processes)


def connect_cloud(
    pairing_id: str, vocab_size: int, generalist_url: str, specialist_url: str, max_candidates: int
) -> VllmPair:
    """The pair over two vLLM servers already running at these URLs (started with the options of
    :func:`engine_command`: raw log-probabilities, prefix caching, ``--max-logprobs``, prompt token details)."""
    generalist = VllmEngine("generalist", generalist_url)
    specialist = VllmEngine("generic specialist", specialist_url)
    lengths = [n for n in (generalist.max_model_len(), specialist.max_model_len()) if n is not None]
    return VllmPair(
        pairing_id,
        vocab_size,
        generalist,
        specialist,
        max_candidates=max_candidates,
        max_model_len=min(lengths) if lengths else None,
    )


def admission_budget(generalist_dir: Path, specialist_dir: Path, settings: EngineSettings) -> int:
    """The sessions' budget, in the bytes :meth:`VllmCloudService.session_bytes` reserves, for two launched
    engines of ``settings.kv_cache_bytes`` each: the tokens the fuller engine can hold, times both engines'
    bytes per token, less a tenth for the partial blocks a round's k + 1 requests hold side by side."""
    per_engine = [kv_bytes_per_token(d, settings.dtype) for d in (generalist_dir, specialist_dir)]
    tokens = settings.kv_cache_bytes // max(per_engine)
    return max(1, int(tokens * sum(per_engine) * 0.9))


# --------------------------------------------------------------------------- the cloud command's options


def add_arguments(parser) -> None:
    """The ``cloud`` command's options for ``--engine vllm``."""
    defaults = EngineSettings()
    parser.add_argument(
        "--engine",
        choices=("local", ENGINE_NAME),
        default="local",
        help="where the Cloud's models run: in this process (local), or in vLLM servers (vllm; "
        "scripts/setup_vllm.sh installs vLLM's own environment)",
    )
    parser.add_argument("--vllm-generalist-url", default=None, help="a running vLLM server of the Generalist")
    parser.add_argument("--vllm-specialist-url", default=None, help="a running vLLM server of the generic Specialist")
    parser.add_argument(
        "--vllm-generalist-model", default=None, help="model directory the launched Generalist engine serves"
    )
    parser.add_argument(
        "--vllm-specialist-model", default=None, help="model directory the launched generic Specialist engine serves"
    )
    parser.add_argument("--vllm-vocab-size", type=int, default=None, help="the pairing's shared vocabulary (URLs)")
    parser.add_argument("--vllm-dtype", default=defaults.dtype, help="launched engines' dtype (float32, bfloat16)")
    parser.add_argument("--vllm-kv-cache-mb", type=float, default=defaults.kv_cache_bytes / 2**20)
    parser.add_argument("--vllm-block-size", type=int, default=defaults.block_size)
    parser.add_argument("--vllm-max-model-len", type=int, default=defaults.max_model_len)
    parser.add_argument(
        "--vllm-max-candidates",
        type=int,
        default=defaults.max_logprobs,
        help="the most candidates a verdict carries (the engines' --max-logprobs; the Edge's top_k may not exceed it)",
    )
    parser.add_argument("--vllm-threads", type=int, default=None, help="OpenMP threads of each launched engine")
    parser.add_argument(
        "--vllm-compile", action="store_true", help="let vLLM compile the models (slower start, faster steps)"
    )
    parser.add_argument("--vllm-start-timeout-s", type=float, default=900.0)


def serve_from_arguments(args, limits: ServiceLimits, secret: str | None, header_timeout_s, body_timeout_s) -> int:
    """``python -m specsteer cloud --engine vllm``: connect to or launch the engines, then serve."""
    import tempfile
    from dataclasses import replace

    from specsteer.cloud.server import serve
    from specsteer.models.tiny import shared_test_pair

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    pairing = args.pairing
    if not pairing:
        return fail("--engine vllm needs --pairing (the id the Edges run)")
    test_pair = shared_test_pair(pairing)
    urls = (args.vllm_generalist_url, args.vllm_specialist_url)
    launched: LaunchedCloud | None = None
    if any(urls):
        if not all(urls):
            return fail("give both --vllm-generalist-url and --vllm-specialist-url, or neither")
        vocab = test_pair.vocab_size if test_pair is not None else args.vllm_vocab_size
        if vocab is None:
            return fail("--vllm-vocab-size is needed with engines at URLs for a pairing that is not a test pairing")
        try:
            pair = connect_cloud(pairing, vocab, urls[0], urls[1], args.vllm_max_candidates)
        except ServiceError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        # The engines' memory is theirs: without --memory-budget-mb, admission by memory is off and the
        # session limits alone hold (an engine queues what its KV cache cannot take).
    else:
        problem = vllm_available()
        if problem:
            return fail(problem)
        work = Path(tempfile.mkdtemp(prefix="specsteer-vllm-"))
        if args.vllm_generalist_model and args.vllm_specialist_model:
            dirs = (Path(args.vllm_generalist_model), Path(args.vllm_specialist_model))
        elif test_pair is not None:
            dirs = save_pair(test_pair, work / "models")
        else:
            found = pairing_model_dirs(pairing)
            if isinstance(found, str):
                return fail(found)
            dirs = found
        vocab = min(json.loads((d / "config.json").read_text()).get("vocab_size", 0) for d in dirs)
        if test_pair is not None:
            vocab = test_pair.vocab_size
        settings = EngineSettings(
            dtype=args.vllm_dtype,
            max_model_len=args.vllm_max_model_len,
            block_size=args.vllm_block_size,
            kv_cache_bytes=int(args.vllm_kv_cache_mb * 2**20),
            max_logprobs=args.vllm_max_candidates,
            enforce_eager=not args.vllm_compile,
            threads=args.vllm_threads,
        )
        _progress_to_stderr(f"starting two vLLM engines (logs in {work / 'logs'})")
        try:
            launched = launch_cloud(
                pairing,
                vocab,
                dirs[0],
                dirs[1],
                settings,
                work / "logs",
                args.vllm_start_timeout_s,
                _progress_to_stderr,
            )
        except RuntimeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        pair = launched.pair
        if limits.memory_budget_bytes is None:
            limits = replace(limits, memory_budget_bytes=admission_budget(dirs[0], dirs[1], settings))
    service = VllmCloudService(pair, limits)
    try:
        serve(
            service,
            args.host,
            args.port,
            secret,
            args.capture,
            announce=lambda line: print(
                f"[cloud] {line} on http://{args.host}:{args.port}", file=sys.stderr, flush=True
            ),
            header_timeout_s=header_timeout_s,
            body_timeout_s=body_timeout_s,
        )
    finally:
        stats = pair.stats()
        _progress_to_stderr(
            f"engines computed {stats.computed_tokens} of {stats.prompt_tokens} prompt tokens in {stats.rounds} rounds"
        )
        if launched is not None:
            launched.stop()
            shutil.rmtree(work / "models", ignore_errors=True)  # a test pairing's models written here (logs stay)
        else:
            pair.close()
    return 0


def _progress_to_stderr(line: str) -> None:
    print(f"[cloud] {line}", file=sys.stderr, flush=True)
